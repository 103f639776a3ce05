#include "protocol/frame.h"

#include <cstring>

namespace basal::protocol {

void AppendFrame(std::string& out, std::string_view payload) {
  const auto n = static_cast<uint32_t>(payload.size());
  const char header[kFrameHeaderBytes] = {static_cast<char>(n & 0xff), static_cast<char>((n >> 8) & 0xff),
                                          static_cast<char>((n >> 16) & 0xff), static_cast<char>((n >> 24) & 0xff)};
  out.append(header, kFrameHeaderBytes);
  out.append(payload);
}

std::string EncodeFrame(std::string_view payload) {
  std::string out;
  out.reserve(kFrameHeaderBytes + payload.size());
  AppendFrame(out, payload);
  return out;
}

void FrameDecoder::Feed(const char* data, size_t size) {
  if (!error_.empty()) return;
  // Compact once the consumed prefix dominates, so a long stream does not grow the buffer.
  if (pos_ > 0 && pos_ >= buf_.size() / 2) {
    buf_.erase(0, pos_);
    pos_ = 0;
  }
  buf_.append(data, size);
}

FrameDecoder::Status FrameDecoder::Next(std::string& payload) {
  if (!error_.empty()) return Status::kError;
  const size_t avail = buf_.size() - pos_;
  if (avail < kFrameHeaderBytes) return Status::kNeedMore;
  const auto* p = reinterpret_cast<const unsigned char*>(buf_.data() + pos_);
  const uint32_t n = static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
                     (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
  if (n > max_) {
    error_ = "frame of " + std::to_string(n) + " bytes exceeds the limit of " + std::to_string(max_) + " bytes";
    return Status::kError;
  }
  if (n == 0) {
    error_ = "empty frame (a frame must hold one JSON object)";
    return Status::kError;
  }
  if (avail - kFrameHeaderBytes < n) return Status::kNeedMore;
  payload.assign(buf_, pos_ + kFrameHeaderBytes, n);
  pos_ += kFrameHeaderBytes + n;
  if (pos_ == buf_.size()) {
    buf_.clear();
    pos_ = 0;
  }
  return Status::kFrame;
}

}  // namespace basal::protocol
