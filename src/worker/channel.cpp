#include "worker/channel.h"

#include <cerrno>
#include <unistd.h>

namespace basal::worker {
namespace {

// A buffer that grew past this for one frame is given back once empty.
constexpr size_t kKeepBufferBytes = 1024 * 1024;

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
    char buf[64 * 1024];
    const ssize_t n = ::read(0, buf, sizeof buf);
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
