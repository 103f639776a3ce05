#include "parent/session.h"

#include <poll.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace basal {

WorkerSession::WorkerSession(std::unique_ptr<WorkerProcess> process) : process_(std::move(process)) {}

bool WorkerSession::Decode(const std::function<bool(protocol::WorkerMessage&)>& on_message) {
  for (;;) {
    const auto st = decoder_.Next(frame_);
    if (st == protocol::FrameDecoder::Status::kNeedMore) return true;
    if (st == protocol::FrameDecoder::Status::kError) {
      broken_ = decoder_.error();
      return false;
    }
    protocol::WorkerMessage msg;
    std::string error;
    const bool parsed = protocol::ParseWorkerMessage(frame_, msg, error);
    if (frame_.capacity() > (1u << 20)) std::string().swap(frame_);  // a large frame's buffer is not kept
    if (!parsed) {
      broken_ = "invalid frame: " + error;
      return false;
    }
    if (!on_message(msg)) return true;
  }
}

WorkerSession::ReadStatus WorkerSession::ReadAvailable(const std::function<bool(protocol::WorkerMessage&)>& on_message,
                                                       bool until_empty) {
  char buf[64 * 1024];
  size_t read_now = 0;
  for (;;) {
    // One loop pass reads a bounded amount from one worker (the rest wakes the loop again): a
    // worker that writes as fast as the parent reads cannot stretch a pass, and with it the
    // journal batch the pass holds open.
    if (!until_empty && read_now >= kReadPerPassBytes) return ReadStatus::kMore;
    const ssize_t n = ::read(process_->stdout_fd(), buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ReadStatus::kMore;
    }
    read_now += static_cast<size_t>(n);
    if (n == 0) {
      if (decoder_.buffered() > 0) {
        broken_ = "stdout closed in the middle of a frame";
        broken_at_eof_ = true;
        return ReadStatus::kBroken;
      }
      return ReadStatus::kEof;
    }
    decoder_.Feed(buf, static_cast<size_t>(n));
    bool stopped = false;
    const bool ok = Decode([&](protocol::WorkerMessage& m) {
      if (!on_message(m)) stopped = true;
      return !stopped;
    });
    if (!ok) return ReadStatus::kBroken;
    if (stopped) return ReadStatus::kMore;
    if (!until_empty && static_cast<size_t>(n) < sizeof buf) return ReadStatus::kMore;
  }
}

Result<protocol::WorkerMessage> WorkerSession::ReadMessage(std::chrono::steady_clock::time_point deadline) {
  std::optional<protocol::WorkerMessage> got;
  auto take = [&](protocol::WorkerMessage& m) {
    got = std::move(m);
    return false;
  };
  for (;;) {
    if (!Decode(take)) return MakeError(ErrorCode::kInvalidArgument, broken_);
    if (got) return std::move(*got);
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now()).count();
    if (left <= 0) return MakeError(ErrorCode::kSpawn, "nothing arrived in time");
    pollfd p{process_->stdout_fd(), POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 60'000))) <= 0) continue;
    char buf[64 * 1024];
    const ssize_t n = ::read(process_->stdout_fd(), buf, sizeof buf);
    if (n < 0) continue;
    if (n == 0) {
      auto death = process_->WaitFor(std::chrono::milliseconds(1000));
      DrainStderr();
      std::string why = "worker " + (death ? death->Describe() : std::string("closed its stdout"));
      if (decoder_.buffered() > 0) why += " in the middle of a frame";
      return MakeError(ErrorCode::kSpawn, why + StderrNote());
    }
    decoder_.Feed(buf, static_cast<size_t>(n));
  }
}

bool WorkerSession::Send(std::string_view payload) {
  protocol::AppendFrame(out_, payload);
  return Flush();
}

bool WorkerSession::SendActivate(int64_t activation, std::string_view input_json, bool poll) {
  protocol::AppendActivateFrame(out_, activation, input_json, poll);
  return Flush();
}

bool WorkerSession::Flush() {
  while (out_pos_ < out_.size()) {
    if (process_->stdin_fd() < 0) return false;
    const ssize_t n = ::write(process_->stdin_fd(), out_.data() + out_pos_, out_.size() - out_pos_);
    if (n > 0) {
      out_pos_ += static_cast<size_t>(n);
      written_ += static_cast<uint64_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
    out_.clear();  // EPIPE: the worker is gone; its pidfd says how
    out_pos_ = 0;
    return false;
  }
  if (out_pos_ == out_.size()) {
    out_.clear();
    out_pos_ = 0;
    if (out_.capacity() > (1u << 20)) out_.shrink_to_fit();  // a big answer's buffer is not kept for life
  } else if (out_pos_ > (1u << 20)) {
    out_.erase(0, out_pos_);
    out_pos_ = 0;
  }
  return true;
}

void WorkerSession::DrainStderr() {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(process_->stderr_fd(), buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) stderr_open_ = false;
    if (n <= 0) return;
    stderr_tail_.append(buf, static_cast<size_t>(n));
    if (stderr_tail_.size() > kStderrTailBytes) stderr_tail_.erase(0, stderr_tail_.size() - kStderrTailBytes);
  }
}

std::string WorkerSession::StderrNote() const {
  std::string t = stderr_tail_;
  while (!t.empty() && (t.back() == '\n' || t.back() == '\r')) t.pop_back();
  if (t.empty()) return "";
  const size_t nl = t.rfind('\n');
  return "; stderr: " + (nl == std::string::npos ? t : t.substr(nl + 1));
}

}  // namespace basal
