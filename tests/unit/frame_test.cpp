#include "protocol/frame.h"

#include <gtest/gtest.h>

namespace basal::protocol {
namespace {

TEST(FrameTest, RoundTripsSeveralFramesFedByteByByte) {
  std::string wire;
  AppendFrame(wire, R"({"type":"a"})");
  AppendFrame(wire, R"({"type":"bb"})");
  FrameDecoder d(1024);
  std::vector<std::string> got;
  std::string payload;
  for (char c : wire) {
    d.Feed(&c, 1);
    while (d.Next(payload) == FrameDecoder::Status::kFrame) got.push_back(payload);
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0], R"({"type":"a"})");
  EXPECT_EQ(got[1], R"({"type":"bb"})");
  EXPECT_EQ(d.buffered(), 0u);
}

TEST(FrameTest, LengthIsLittleEndian) {
  const std::string wire = EncodeFrame(std::string(258, 'x'));
  ASSERT_EQ(wire.size(), 262u);
  EXPECT_EQ(static_cast<unsigned char>(wire[0]), 2);
  EXPECT_EQ(static_cast<unsigned char>(wire[1]), 1);
  EXPECT_EQ(wire[2], 0);
  EXPECT_EQ(wire[3], 0);
}

TEST(FrameTest, OversizedFrameIsRefusedFromItsHeaderAlone) {
  FrameDecoder d(100);
  const char header[4] = {101, 0, 0, 0};
  d.Feed(header, 4);
  std::string payload;
  EXPECT_EQ(d.Next(payload), FrameDecoder::Status::kError);
  EXPECT_NE(d.error().find("101 bytes exceeds the limit of 100"), std::string::npos) << d.error();
  // The stream stays broken: a later valid frame is not accepted.
  const std::string ok = EncodeFrame("{}");
  d.Feed(ok.data(), ok.size());
  EXPECT_EQ(d.Next(payload), FrameDecoder::Status::kError);
}

TEST(FrameTest, FrameAtTheLimitIsAccepted) {
  FrameDecoder d(100);
  const std::string wire = EncodeFrame(std::string(100, 'y'));
  d.Feed(wire.data(), wire.size());
  std::string payload;
  EXPECT_EQ(d.Next(payload), FrameDecoder::Status::kFrame);
  EXPECT_EQ(payload.size(), 100u);
}

TEST(FrameTest, EmptyFrameIsAnError) {
  FrameDecoder d;
  const char header[4] = {0, 0, 0, 0};
  d.Feed(header, 4);
  std::string payload;
  EXPECT_EQ(d.Next(payload), FrameDecoder::Status::kError);
}

TEST(FrameTest, PartialFrameWaitsAndCountsBufferedBytes) {
  FrameDecoder d;
  const std::string wire = EncodeFrame(R"({"type":"x"})");
  d.Feed(wire.data(), 6);
  std::string payload;
  EXPECT_EQ(d.Next(payload), FrameDecoder::Status::kNeedMore);
  EXPECT_EQ(d.buffered(), 6u);
}

}  // namespace
}  // namespace basal::protocol
