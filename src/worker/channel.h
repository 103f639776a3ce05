// The worker's only channel: frames read from fd 0 and written to fd 1 with raw read(2) and
// write(2) (glibc stdio would fstat, which the seccomp filter kills).
#pragma once

#include <string>
#include <string_view>

#include "protocol/frame.h"

namespace basal::worker {

class Channel {
 public:
  enum class ReadStatus { kFrame, kEof, kError };

  Channel() : decoder_(protocol::kDefaultMaxFrameBytes) {}

  // Queues a frame; Flush() writes everything queued.
  void Send(std::string_view payload) { protocol::AppendFrame(out_, payload); }
  // Returns false if the parent is gone (EPIPE): the worker then exits quietly.
  bool Flush();
  // Blocks for the next frame. kError: error() names the fault in the parent's stream.
  ReadStatus Read(std::string& payload);
  const std::string& error() const { return error_; }

 private:
  protocol::FrameDecoder decoder_;
  std::string out_;
  std::string error_;
};

// Writes a line to stderr with raw write(2); used for the worker's own fatal diagnostics.
void WriteStderr(std::string_view line);

}  // namespace basal::worker
