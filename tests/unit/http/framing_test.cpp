// The transport's request framing without a socket (frame_requests): the
// same bytes frame into the same requests, or the same refusal, however a
// network cuts them; and a framer stops where a connection stops reading.
#include "http/framing.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "raw_http.h"

namespace numaserve::http {
namespace {

// The limits server_test's connections run with: small, so they are reached.
ServerConfig small() {
  ServerConfig c;
  c.max_header_bytes = 1024;
  c.max_body_bytes = 64;
  return c;
}

// Every cut of the same bytes: one byte at a time, and every split in two.
void expect_same_in_pieces(const std::string& bytes, const ServerConfig& config, const Framing& whole) {
  std::vector<std::size_t> every_byte;
  for (std::size_t i = 1; i < bytes.size(); ++i) every_byte.push_back(i);
  std::vector<std::vector<std::size_t>> cuts{every_byte};
  for (std::size_t i = 1; i < bytes.size(); ++i) cuts.push_back({i});
  for (const auto& at : cuts) {
    const Framing pieces = frame_requests(bytes, config, at);
    ASSERT_EQ(pieces.requests.size(), whole.requests.size()) << "cut at " << at.front();
    for (std::size_t i = 0; i < whole.requests.size(); ++i) EXPECT_EQ(pieces.requests[i].body, whole.requests[i].body);
    EXPECT_EQ(pieces.refusal, whole.refusal) << "cut at " << at.front() << ", " << at.size() << " cut(s)";
    EXPECT_EQ(pieces.incomplete, whole.incomplete);
  }
}

TEST(Framing, BytesInPiecesFrameAsTheWholeAndStopWhereAConnectionStops) {
  const std::string bytes = testing::post("/a%20b?x=1", "hello") +
                            "POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" +
                            "GET /d HTTP/1.0\r\n\r\n" + testing::get("/never-read");
  auto config = small();
  const Framing whole = frame_requests(bytes, config);
  ASSERT_EQ(whole.requests.size(), 3u);  // HTTP/1.0 without keep-alive: the connection closes after /d
  EXPECT_EQ(whole.requests[0].path, "/a b");
  EXPECT_EQ(whole.requests[0].body, "hello");
  EXPECT_EQ(whole.requests[1].body, "abc");
  EXPECT_EQ(whole.requests[2].method, "GET");
  EXPECT_EQ(whole.refusal, 0);
  expect_same_in_pieces(bytes, config, whole);

  const Framing refused = frame_requests(testing::get("/ok") + "POST /big HTTP/1.1\r\nContent-Length: 100\r\n\r\n", config);
  EXPECT_EQ(refused.requests.size(), 1u);
  EXPECT_EQ(refused.refusal, 413);
  EXPECT_EQ(refused.refusal_field, "body");
  EXPECT_TRUE(frame_requests("GET /half HTTP/1.1\r\nHo", config).incomplete);
}

// The application sees the fields the transport does not consume, named in
// lower case (Inference-Header-Content-Length tells the v2 codec where a
// body's JSON ends).
TEST(Framing, TheApplicationSeesTheHeaderFieldsTheTransportLeaves) {
  const Framing framed = frame_requests(
      "POST /v2 HTTP/1.1\r\nHost: t\r\nInference-Header-Content-Length: 2\r\nX-Trace: a\r\nContent-Length: 3\r\n\r\n{}x",
      small());
  ASSERT_EQ(framed.requests.size(), 1u);
  const Request& r = framed.requests[0];
  EXPECT_EQ(r.header("inference-header-content-length"), "2");
  EXPECT_EQ(r.header("x-trace"), "a");
  EXPECT_EQ(r.header("host"), "");
  EXPECT_EQ(r.header("content-length"), "");
  EXPECT_EQ(r.headers.size(), 2u);
}

TEST(Framing, ChunkExtensionsAndTrailersFrameTheSameInPieces) {
  const std::string head = "POST /c HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n";
  const auto config = small();
  // Extensions (a token, a quoted string with an escape and a CRLF-free
  // quote inside), and a trailer field: the body is the chunks' data.
  const std::string good = head + "3 ; a=b;c=\"x\\\"; y\"\r\nabc\r\n2;z\r\nde\r\n0;end=1\r\nX-Sum: 5\r\n\r\n" +
                           testing::get("/next");
  const Framing whole = frame_requests(good, config);
  ASSERT_EQ(whole.requests.size(), 2u);
  EXPECT_EQ(whole.requests[0].body, "abcde");
  EXPECT_EQ(whole.refusal, 0);
  expect_same_in_pieces(good, config, whole);

  // A quoted extension not closed on its line is malformed however the
  // bytes come; before the fix, in pieces, Beast took the chunk's size off
  // the body limit at every retry and answered 413.
  const std::string open_quote = head + "8;x=\"R\x1b\r\nabcdefgh\r\n\"\r\n0\r\n\r\n";
  const Framing bad = frame_requests(open_quote, config);
  EXPECT_EQ(bad.refusal, 400);
  expect_same_in_pieces(open_quote, config, bad);

  for (const char* line : {"x\r\n", "3;\r\n", "3;a=\r\n", "3 x\r\n", "3;a=\"\x01\"\r\n",
                                  "11111111111111111\r\n"}) {
    const Framing refused = frame_requests(head + line + "abc\r\n0\r\n\r\n", config);
    EXPECT_EQ(refused.refusal, 400) << line;
  }
  // Chunk data longer than its size.
  EXPECT_EQ(frame_requests(head + "2\r\nabc\r\n0\r\n\r\n", config).refusal, 400);
  // A chunk line, and the last chunk's trailers, over the header limit.
  const std::string long_line = head + "3;a=" + std::string(config.max_header_bytes, 'x') + "\r\nabc\r\n0\r\n\r\n";
  const Framing too_long = frame_requests(long_line, config);
  EXPECT_EQ(too_long.refusal, 400);
  expect_same_in_pieces(long_line, config, too_long);
  const std::string big_trailers = head + "0\r\nX: " + std::string(config.max_header_bytes, 'x') + "\r\n\r\n";
  const Framing trailers = frame_requests(big_trailers, config);
  EXPECT_EQ(trailers.refusal, 431);
  EXPECT_EQ(trailers.refusal_field, "headers");
  expect_same_in_pieces(big_trailers, config, trailers);
  // Still waiting for the rest: incomplete, not refused.
  EXPECT_TRUE(frame_requests(head + "3;a=\"op", config).incomplete);
  EXPECT_TRUE(frame_requests(head + "0\r\nX: 1\r\n", config).incomplete);
}

TEST(Framing, TheReplyHeadCarriesStatusLengthHeadersAndConnection) {
  Reply reply;
  reply.status = 503;
  reply.body = "{}";
  reply.headers.emplace_back("Retry-After", "1");
  EXPECT_EQ(reply_head(reply, false, false),
            "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: 2\r\n"
            "Retry-After: 1\r\nConnection: close\r\n\r\n");
  reply = Reply{};
  EXPECT_EQ(reply_head(reply, true, false), "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n");
  // HTTP/1.0 closes by default: a kept connection says so.
  EXPECT_NE(reply_head(reply, true, true).find("\r\nConnection: keep-alive\r\n"), std::string::npos);
}

}  // namespace
}  // namespace numaserve::http
