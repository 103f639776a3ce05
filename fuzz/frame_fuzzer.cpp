// Fuzz target: the frame decoder (src/protocol/frame.h), fed the bytes a hostile worker writes to
// its stdout.
//
// Input: one byte of shape, then the stream. The shape's high bit picks the size limit (set: the
// real 16 MiB, clear: 1 + the low 7 bits, so frames above the limit are cheap to reach) and its low
// bits seed the chunk sizes of a second decoder that is fed the same stream piecewise, as reads
// from a pipe arrive.
//
// Invariants:
// - both decoders return the same frames, end in the same state and give the same error;
// - every frame holds 1 to limit bytes, and re-encoding the frames gives back exactly the bytes
//   they were decoded from;
// - the decoder stops only where it must: fewer than 4 bytes left, or a frame not yet complete
//   (kNeedMore), or a header of 0 or above the limit (kError, with the matching message);
// - an error is final: Next keeps failing and Feed is ignored.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/fuzz_check.h"
#include "protocol/frame.h"

namespace basal::protocol {
namespace {

struct Decoded {
  std::vector<std::string> frames;
  FrameDecoder::Status last = FrameDecoder::Status::kNeedMore;
  std::string error;
  size_t consumed = 0;  // bytes returned as frames
};

// Takes every frame the decoder has; stops at kNeedMore or kError.
FrameDecoder::Status Drain(FrameDecoder& decoder, std::vector<std::string>& frames) {
  for (;;) {
    std::string payload;
    const FrameDecoder::Status status = decoder.Next(payload);
    if (status != FrameDecoder::Status::kFrame) return status;
    frames.push_back(std::move(payload));
  }
}

Decoded AllAtOnce(std::string_view stream, uint32_t limit) {
  FrameDecoder decoder(limit);
  decoder.Feed(stream.data(), stream.size());
  Decoded d;
  d.last = Drain(decoder, d.frames);
  d.error = decoder.error();
  d.consumed = stream.size() - decoder.buffered();
  return d;
}

Decoded Piecewise(std::string_view stream, uint32_t limit, uint32_t seed) {
  FrameDecoder decoder(limit);
  Decoded d;
  uint32_t state = seed * 2654435761u + 1;
  size_t at = 0;
  size_t fed = 0;  // before the error: Feed ignores what comes after
  while (at < stream.size()) {
    state = state * 1103515245u + 12345u;
    const size_t chunk = std::min<size_t>(1 + (state >> 16) % 64, stream.size() - at);
    const size_t before = decoder.buffered();
    decoder.Feed(stream.data() + at, chunk);
    if (d.last == FrameDecoder::Status::kError) {
      FUZZ_CHECK(decoder.buffered() == before, "Feed after an error changed the buffer");
    }
    at += chunk;
    if (d.last != FrameDecoder::Status::kError) {
      fed = at;
      d.last = Drain(decoder, d.frames);
    }
  }
  if (stream.empty()) d.last = Drain(decoder, d.frames);
  d.error = decoder.error();
  d.consumed = fed - decoder.buffered();
  if (d.last == FrameDecoder::Status::kError) {
    std::string payload;
    FUZZ_CHECK(decoder.Next(payload) == FrameDecoder::Status::kError, "an error is not final");
  }
  return d;
}

uint32_t HeaderAt(std::string_view stream, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(stream.data() + at);
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}

}  // namespace
}  // namespace basal::protocol

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace basal::protocol;
  if (size < 1) return 0;
  const uint8_t shape = data[0];
  const std::string_view stream(reinterpret_cast<const char*>(data + 1), size - 1);
  const uint32_t limit = (shape & 0x80) != 0 ? kDefaultMaxFrameBytes : 1u + (shape & 0x7f);

  const Decoded whole = AllAtOnce(stream, limit);
  const Decoded pieces = Piecewise(stream, limit, shape);
  FUZZ_CHECK(whole.frames == pieces.frames, "the frames depend on how the stream was cut: " +
                                                std::to_string(whole.frames.size()) + " whole, " +
                                                std::to_string(pieces.frames.size()) + " piecewise");
  FUZZ_CHECK(whole.last == pieces.last, "the final state depends on how the stream was cut");
  FUZZ_CHECK(whole.error == pieces.error, "errors differ: \"" + whole.error + "\" vs \"" + pieces.error + "\"");
  FUZZ_CHECK(whole.consumed == pieces.consumed, "the frames end at different bytes");

  std::string reencoded;
  for (const std::string& frame : whole.frames) {
    FUZZ_CHECK(!frame.empty() && frame.size() <= limit, "a frame of " + std::to_string(frame.size()) +
                                                            " bytes passed with limit " + std::to_string(limit));
    const size_t before = reencoded.size();
    AppendFrame(reencoded, frame);
    FUZZ_CHECK(reencoded.compare(before, std::string::npos, EncodeFrame(frame)) == 0,
               "AppendFrame and EncodeFrame disagree");
  }
  const size_t consumed = whole.consumed;
  FUZZ_CHECK(reencoded == stream.substr(0, consumed), "re-encoded frames differ from the bytes they came from");

  const size_t left = stream.size() - consumed;
  if (whole.last == FrameDecoder::Status::kNeedMore) {
    FUZZ_CHECK(whole.error.empty(), "kNeedMore with an error: " + whole.error);
    if (left >= kFrameHeaderBytes) {
      const uint32_t n = HeaderAt(stream, consumed);
      FUZZ_CHECK(n >= 1 && n <= limit && left - kFrameHeaderBytes < n, "stopped before a complete, valid frame");
    }
  } else {
    FUZZ_CHECK(whole.last == FrameDecoder::Status::kError, "ended on kFrame");
    FUZZ_CHECK(left >= kFrameHeaderBytes, "an error without a header to blame");
    const uint32_t n = HeaderAt(stream, consumed);
    if (n == 0) {
      FUZZ_CHECK(whole.error.find("empty frame") == 0, "a zero header gave: " + whole.error);
    } else {
      FUZZ_CHECK(n > limit, "refused a header of " + std::to_string(n) + " within the limit: " + whole.error);
      FUZZ_CHECK(whole.error == "frame of " + std::to_string(n) + " bytes exceeds the limit of " +
                                    std::to_string(limit) + " bytes",
                 "the limit error does not name the sizes: " + whole.error);
    }
  }
  return 0;
}
