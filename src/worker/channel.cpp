#include "worker/channel.h"

#include <cerrno>
#include <unistd.h>

namespace basal::worker {

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
  return true;
}

Channel::ReadStatus Channel::Read(std::string& payload) {
  for (;;) {
    switch (decoder_.Next(payload)) {
      case protocol::FrameDecoder::Status::kFrame:
        return ReadStatus::kFrame;
      case protocol::FrameDecoder::Status::kError:
        error_ = decoder_.error();
        return ReadStatus::kError;
      case protocol::FrameDecoder::Status::kNeedMore:
        break;
    }
    char buf[64 * 1024];
    const ssize_t n = ::read(0, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      error_ = "read from stdin failed";
      return ReadStatus::kError;
    }
    if (n == 0) {
      if (decoder_.buffered() > 0) {
        error_ = "stdin closed in the middle of a frame";
        return ReadStatus::kError;
      }
      return ReadStatus::kEof;
    }
    decoder_.Feed(buf, static_cast<size_t>(n));
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
