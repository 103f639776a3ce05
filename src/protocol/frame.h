// Frames: the only thing that crosses the worker's stdin and stdout. A frame is a 4-byte
// little-endian payload length followed by that many bytes of UTF-8 JSON. Both sides refuse a
// frame above their size limit before buffering it.
//
//   FrameDecoder d(kMaxFrameBytes);
//   d.Feed(buf, n);
//   std::string payload;
//   while (d.Next(payload) == FrameDecoder::Status::kFrame) Handle(payload);
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace basal::protocol {

inline constexpr uint32_t kDefaultMaxFrameBytes = 16u * 1024 * 1024;
inline constexpr size_t kFrameHeaderBytes = 4;

// Appends header + payload to `out`.
void AppendFrame(std::string& out, std::string_view payload);
std::string EncodeFrame(std::string_view payload);

class FrameDecoder {
 public:
  enum class Status { kNeedMore, kFrame, kError };

  explicit FrameDecoder(uint32_t max_frame_bytes = kDefaultMaxFrameBytes) : max_(max_frame_bytes) {}

  void Feed(const char* data, size_t size);
  // kFrame: `payload` holds the next frame. kError: error() says why; the stream is unusable.
  Status Next(std::string& payload);
  const std::string& error() const { return error_; }
  // Bytes received but not yet returned as frames (a partial frame at EOF means truncation).
  size_t buffered() const { return buf_.size() - pos_; }
  uint32_t max_frame_bytes() const { return max_; }

 private:
  std::string buf_;
  size_t pos_ = 0;
  uint32_t max_;
  std::string error_;
};

}  // namespace basal::protocol
