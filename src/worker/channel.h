// The worker's only channel: frames read from fd 0 and written to fd 1 with raw read(2) and
// write(2) (glibc stdio would fstat, which the seccomp filter kills). Its buffers give back their
// memory after a large frame, so one large frame does not stay charged to later activations.
#pragma once

#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>

#include "protocol/frame.h"
#include "worker/wait_spin.h"

namespace basal::worker {

class Channel {
 public:
  enum class ReadStatus { kFrame, kEof, kError };

  Channel() { decoder_.emplace(protocol::kDefaultMaxFrameBytes); }

  // Queues a frame whose payload is `parts` joined, copied once, straight into the queue. All or
  // nothing: if the queue cannot grow (std::bad_alloc), nothing of the frame is queued.
  void Send(std::initializer_list<std::string_view> parts);
  void Send(std::string_view payload) { Send({payload}); }
  // Bytes queued and not yet written.
  size_t queued_bytes() const { return out_.size(); }
  // Writes everything queued; blocks until the parent has taken it. Returns false if the parent is
  // gone (EPIPE): the worker then exits quietly.
  bool Flush();
  // Blocks for the next frame. kError: error() names the fault in the parent's stream. On Linux a
  // wait for a new frame polls first, for up to spin_.window (wait_spin.h), if the parent's last
  // activate or result said it may (`poll`, protocol/messages.h).
  ReadStatus Read(std::string& payload);
  void set_may_poll(bool may) { may_poll_ = may; }
  // The parent's `poll` message: a frame is coming soon, so the next wait polls for the longest
  // window (WaitSpin::kMax) whatever the window has shrunk to.
  void PollNextWait() {
    may_poll_ = true;
    poll_next_ = true;
  }
  const std::string& error() const { return error_; }

 private:
  std::optional<protocol::FrameDecoder> decoder_;  // replaced (emplace frees the old buffer) after a large frame
  std::string out_;
  std::string error_;
  WaitSpin spin_;
  bool may_poll_ = false;
  bool poll_next_ = false;
};

// Writes a line to stderr with raw write(2); used for the worker's own fatal diagnostics.
void WriteStderr(std::string_view line);

}  // namespace basal::worker
