// One worker's conversation: frames in and out over its stdin/stdout, and the tail of its stderr.
// The pool reads without blocking (ReadAvailable, from the loop); doctor, the benchmarks and the
// probe harness read one message at a time (ReadMessage, blocking up to a deadline). Both share
// one decoder and one parser, so every reader validates frames the same way.
//
//   WorkerSession s(std::move(proc));
//   auto welcome = s.ReadMessage(std::chrono::steady_clock::now() + 5s);   // Result<WorkerMessage>
//   s.Send(protocol::BuildLoad(load));
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "basal/result.h"
#include "parent/platform/worker_launcher.h"
#include "protocol/frame.h"
#include "protocol/messages.h"

namespace basal {

class WorkerSession {
 public:
  static constexpr size_t kStderrTailBytes = 2048;
  static constexpr size_t kReadPerPassBytes = 1u << 20;  // ReadAvailable without until_empty
  explicit WorkerSession(std::unique_ptr<WorkerProcess> process);

  WorkerProcess& process() { return *process_; }
  const WorkerProcess& process() const { return *process_; }
  pid_t pid() const { return process_->pid(); }

  // Blocking: the next message, or an error naming what happened instead (deadline passed, the
  // worker closed its stdout and how it ended, an invalid frame or message).
  Result<protocol::WorkerMessage> ReadMessage(std::chrono::steady_clock::time_point deadline);

  enum class ReadStatus { kMore, kEof, kBroken };
  // Non-blocking: reads what is there and hands each complete, valid message to `on_message`
  // (which may return false to stop: the worker was killed). kBroken: the stream is unusable and
  // broken_reason() says why. With `until_empty` false it stops after a short read, sparing the
  // read that would only say EAGAIN (epoll is level-triggered, so anything left wakes it again).
  ReadStatus ReadAvailable(const std::function<bool(protocol::WorkerMessage&)>& on_message, bool until_empty);
  const std::string& broken_reason() const { return broken_; }
  // The stream ended inside a frame: the process may have died while it wrote (how it died says
  // more than the cut frame).
  bool broken_at_eof() const { return broken_at_eof_; }

  // Queues a frame and writes as much as the pipe takes. Returns false if the worker is gone.
  bool Send(std::string_view payload);
  // The same for an `activate` frame, built in place (protocol::AppendActivateFrame).
  bool SendActivate(int64_t activation, std::string_view input_json, bool poll = false);
  bool Flush();
  bool has_pending_output() const { return !out_.empty(); }
  size_t pending_output_bytes() const { return out_.size() - out_pos_; }
  // Bytes the worker's stdin has taken so far: it moves only when the worker reads.
  uint64_t written_bytes() const { return written_; }

  void DrainStderr();
  // "; stderr: <last line>" or "".
  std::string StderrNote() const;
  bool stderr_open() const { return stderr_open_; }

 private:
  bool Decode(const std::function<bool(protocol::WorkerMessage&)>& on_message);

  std::unique_ptr<WorkerProcess> process_;
  protocol::FrameDecoder decoder_;
  std::string frame_;  // the frame being parsed: kept between frames (one allocation less each)
  std::string out_;
  size_t out_pos_ = 0;
  uint64_t written_ = 0;
  std::string stderr_tail_;
  std::string broken_;
  bool stderr_open_ = true;
  bool broken_at_eof_ = false;
};

}  // namespace basal
