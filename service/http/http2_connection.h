#pragma once
// An HTTP/2 connection carrying gRPC calls (connection.h), on the worker
// that accepted it like any connection: its calls are parsed, batched and
// answered on that worker's thread, many at a time (one per stream), with
// no thread of gRPC's own. nghttp2 frames HTTP/2 (its only file is
// http2_connection.cpp); grpc_wire.h frames gRPC's messages. Unary calls
// only, which is all the services numaserve offers are.
//
// Bounds: SETTINGS_MAX_CONCURRENT_STREAMS streams at once (a client that
// opens more breaks the protocol: GOAWAY, PROTOCOL_ERROR, and the
// connection closes); each call's headers within max_header_bytes
// and its message within max_body_bytes (RESOURCE_EXHAUSTED beyond); a
// call must arrive whole within header + body timeout, and its reply be
// taken within body_timeout (else its stream is reset: a client that opens
// streams and never reads, or never opens its flow-control window); replies
// the socket does not take within body_timeout close the connection; without calls it closes after idle_timeout. The drain and
// max_connection_age end it with GOAWAY: calls already begun are answered,
// later ones go to the client's other connections. Private to http/.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include <boost/asio/ip/tcp.hpp>

#include "http/connection.h"
#include "http/handler.h"

struct nghttp2_session;

namespace numaserve::http {

class Http2Connection final : public Connection {
 public:
  // `admin`: on the admin port (its calls are Request::admin), where an
  // HTTP/1.1 connection that opened with HTTP/2's preface became this one.
  Http2Connection(Worker& owner, boost::asio::ip::tcp::socket socket, bool counted, bool admin = false);
  ~Http2Connection() override;

  void start() override;
  void refuse(const std::string& message) override;  // GOAWAY (REFUSED_STREAM), then close
  void expire() override;
  void park() override {}  // its read buffer is the worker's
  void drain() override;
  void close() override;
  bool idle() const override { return streams_.empty() && !writing_; }
  bool mid_request() const override { return !streams_.empty(); }
  const char* state() const override;

  // A call's reply, on the worker's own thread; nothing if the stream is gone.
  void answer(std::int32_t stream, Reply&& reply);

  // nghttp2's callbacks (http2_connection.cpp), through its user data.
  struct Callbacks;

 private:
  struct Stream {
    std::string path, method, content_type, encoding, timeout;
    Request request;
    std::size_t header_bytes = 0;
    Clock::time_point started = Clock::now();
    bool dispatched = false;  // handed to the application: its deadline is the application's
    Clock::time_point answered = Clock::time_point::max();  // its reply must be sent within body_timeout
    bool refused = false;     // answered before its end (too large): what follows is dropped
    std::string out;          // the framed reply message, then trailers
    std::size_t sent = 0;
    std::string status_code, status_message;
  };

  void arm_read();
  void on_read(const boost::system::error_code& ec, std::size_t bytes);
  void flush();
  void on_written(const boost::system::error_code& ec);
  void dispatch(std::int32_t id, Stream& stream);
  void respond(std::int32_t id, int code, const std::string& message, std::string body = {});
  void go_away(bool retiring);
  void update_deadline();
  void close_if_done();
  std::shared_ptr<Http2Connection> self() { return std::static_pointer_cast<Http2Connection>(shared_from_this()); }

  boost::asio::ip::tcp::socket socket_;
  const bool admin_;
  nghttp2_session* session_ = nullptr;
  std::map<std::int32_t, Stream> streams_;
  std::string in_;               // bytes read, handed to nghttp2
  std::string out_, writing_buf_;  // to write next; being written
  bool writing_ = false;
  bool reading_ = false;
  bool receiving_ = false;  // inside nghttp2_session_mem_recv
  bool closed_ = false;
  bool going_away_ = false;
  bool broken_ = false;  // nghttp2 ended the session for a protocol error
  bool retiring_ = false;
  Clock::time_point write_started_ = Clock::time_point::max();
  const Clock::time_point retire_at_;
};

}  // namespace numaserve::http
