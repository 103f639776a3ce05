#include "worker/channel.h"

#include <cerrno>
#include <unistd.h>

#include <chrono>
#ifdef __linux__
#include <poll.h>
#include <sched.h>
#endif

namespace basal::worker {
namespace {

// A buffer that grew past this for one frame is given back once empty.
constexpr size_t kKeepBufferBytes = 1024 * 1024;

#ifdef __linux__
// Polls stdin without waiting until it is readable or `until` has passed; true when readable (or
// closed, or in error: the read that follows says which). poll(2) with one descriptor and a zero
// timeout is the only form the seccomp filter admits (OneFdNoWait). Between two looks it yields:
// when the scheduler has put the parent on this CPU (it packs a waker and its wakee together on
// these VMs), the parent, just woken by the frame the worker wrote, would otherwise wait for the
// whole window before it could write the answer (warm activations of about 85 us in runs of up to
// 44; docs/performance.md, "Issue 30: the polling worker yields, and the loop polls through a
// fetch"). With nothing else runnable here sched_yield returns at once.
bool PollStdinUntil(std::chrono::steady_clock::time_point until) {
  pollfd p{0, POLLIN, 0};
  do {
    if (::poll(&p, 1, 0) > 0) return true;
    ::sched_yield();
  } while (std::chrono::steady_clock::now() < until);
  return false;
}
#endif

}  // namespace

void Channel::Send(std::initializer_list<std::string_view> parts) {
  size_t n = 0;
  for (const std::string_view p : parts) n += p.size();
  out_.reserve(out_.size() + protocol::kFrameHeaderBytes + n);  // the only step that can fail
  const auto len = static_cast<uint32_t>(n);
  const char header[protocol::kFrameHeaderBytes] = {
      static_cast<char>(len & 0xff), static_cast<char>((len >> 8) & 0xff), static_cast<char>((len >> 16) & 0xff),
      static_cast<char>((len >> 24) & 0xff)};
  out_.append(header, protocol::kFrameHeaderBytes);
  for (const std::string_view p : parts) out_.append(p);
}

bool Channel::Flush() {
  size_t off = 0;
  while (off < out_.size()) {
    const ssize_t n = ::write(1, out_.data() + off, out_.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      out_.clear();
      return false;
    }
    off += static_cast<size_t>(n);
  }
  out_.clear();
  if (out_.capacity() > kKeepBufferBytes) std::string().swap(out_);
  return true;
}

Channel::ReadStatus Channel::Read(std::string& payload) {
  for (;;) {
    switch (decoder_->Next(payload)) {
      case protocol::FrameDecoder::Status::kFrame:
        // The decoder keeps its buffer's capacity; after a large frame, start a new one.
        if (payload.size() > kKeepBufferBytes && decoder_->buffered() == 0) decoder_.emplace(decoder_->max_frame_bytes());
        return ReadStatus::kFrame;
      case protocol::FrameDecoder::Status::kError:
        error_ = decoder_->error();
        return ReadStatus::kError;
      case protocol::FrameDecoder::Status::kNeedMore:
        break;
    }
#ifdef __linux__
    // A new frame: poll for it first (wait_spin.h), then block; the wait's length tunes the window.
    const bool new_frame = decoder_->buffered() == 0;
    std::chrono::steady_clock::time_point wait_start;
    bool caught = false;
    if (new_frame) {
      wait_start = std::chrono::steady_clock::now();
      const auto window = poll_next_ ? WaitSpin::kMax : spin_.window;
      poll_next_ = false;
      if (may_poll_ && window.count() > 0) caught = PollStdinUntil(wait_start + window);
    }
#endif
    char buf[64 * 1024];
    const ssize_t n = ::read(0, buf, sizeof buf);
#ifdef __linux__
    if (new_frame && n > 0) spin_.After(std::chrono::steady_clock::now() - wait_start, caught);
#endif
    if (n < 0) {
      if (errno == EINTR) continue;
      error_ = "read from stdin failed";
      return ReadStatus::kError;
    }
    if (n == 0) {
      if (decoder_->buffered() > 0) {
        error_ = "stdin closed in the middle of a frame";
        return ReadStatus::kError;
      }
      return ReadStatus::kEof;
    }
    decoder_->Feed(buf, static_cast<size_t>(n));
  }
}

void WriteStderr(std::string_view line) {
  size_t off = 0;
  while (off < line.size()) {
    const ssize_t n = ::write(2, line.data() + off, line.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    off += static_cast<size_t>(n);
  }
}

}  // namespace basal::worker
