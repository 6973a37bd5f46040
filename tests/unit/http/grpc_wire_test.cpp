// gRPC's own framing (grpc_wire.h): a unary call's message, its deadline,
// its status message, as gRPC's PROTOCOL-HTTP2.md defines them.
#include "http/grpc_wire.h"

#include <gtest/gtest.h>

#include <string>

namespace numaserve::http::grpc {
namespace {

using namespace std::chrono_literals;

TEST(GrpcWire, OneMessageFramesAndUnframes) {
  const std::string body = frame("hello");
  EXPECT_EQ(body, std::string("\0\0\0\0\5hello", 10));
  const auto got = unframe(body, 5);
  EXPECT_EQ(got.code, kOk) << got.error;
  EXPECT_EQ(got.message, "hello");
  EXPECT_EQ(unframe(frame(""), 0).code, kOk);  // an empty message is a message
}

TEST(GrpcWire, AnythingButOneWholeMessageIsRefusedWithItsStatus) {
  struct Case {
    std::string body;
    int code;
  };
  const std::vector<Case> cases = {
      {"", kInternal},                                     // no message at all
      {std::string("\0\0\0\0", 4), kInternal},              // a prefix cut short
      {std::string("\0\0\0\0\6hello", 10), kInternal},      // a message cut short
      {frame("a") + frame("b"), kInternal},                 // two messages for a unary call
      {std::string("\1\0\0\0\5hello", 10), kUnimplemented},  // compressed: none was offered
      {std::string("\2\0\0\0\5hello", 10), kInternal},      // no such flag
      {frame("too long!"), kResourceExhausted},             // over the limit, refused by its prefix
  };
  for (const auto& c : cases) {
    const auto got = unframe(c.body, 8);
    EXPECT_EQ(got.code, c.code) << c.body.size() << " bytes: " << got.error;
    EXPECT_FALSE(got.error.empty());
  }
}

TEST(GrpcWire, TimeoutsInEveryUnitAndNothingForAnythingElse) {
  EXPECT_EQ(parse_timeout("1H"), 1h);
  EXPECT_EQ(parse_timeout("2M"), 2min);
  EXPECT_EQ(parse_timeout("3S"), 3s);
  EXPECT_EQ(parse_timeout("250m"), 250ms);
  EXPECT_EQ(parse_timeout("7u"), 7us);
  EXPECT_EQ(parse_timeout("99999999n"), 99999999ns);
  for (const char* bad : {"", "m", "1", "1x", "-1S", "123456789S", "1.5S", " 1S"}) {
    EXPECT_FALSE(parse_timeout(bad).has_value()) << bad;
  }
}

TEST(GrpcWire, StatusMessagesArePercentEncoded) {
  EXPECT_EQ(percent_encode("items[3].id: required"), "items[3].id: required");
  EXPECT_EQ(percent_encode("100%\n\xc3\xa9"), "100%25%0A%C3%A9");
}

TEST(GrpcWire, TransportStatusesMapToCodes) {
  EXPECT_EQ(code_of_status(200), kOk);
  EXPECT_EQ(code_of_status(503), kUnavailable);
  EXPECT_EQ(code_of_status(413), kResourceExhausted);
  EXPECT_EQ(code_of_status(500), kInternal);
  EXPECT_STREQ(code_name(kDeadlineExceeded), "DEADLINE_EXCEEDED");
}

}  // namespace
}  // namespace numaserve::http::grpc
