#pragma once
// HTTP/1.1 on the wire: the requests a connection's bytes frame, and the
// head of a reply. framing.cpp is the service's only Boost.Beast file; this
// header shows none of it, so the rest of the transport sees plain bytes in
// and plain values (message.h) out.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "http/config.h"
#include "http/message.h"

namespace numaserve::http {

// Beast's request parser over one connection's bytes, with the transport's
// limits: what a Connection reads requests with, and what frame_requests()
// runs without a socket (the fuzz target's entry). It holds the bytes read
// and not yet framed: a read goes into prepare(), then commit().
class RequestFramer {
 public:
  enum class Step {
    kNeedMore,    // nothing more without more bytes
    kProgress,    // consumed some: step again
    kHeaderDone,  // a request's header is whole; its body follows
    kRequest,     // a whole request: take() it
    kRefused,     // refusal(): answer it, then close
  };
  struct Refusal {
    int status = 0;  // 400, 413 or 431
    std::string message, field;
  };
  struct Taken {
    Request request;
    bool keep_alive = true;
    bool head = false;
    bool http10 = false;
  };

  explicit RequestFramer(const ServerConfig& config);  // kept by reference
  ~RequestFramer();
  RequestFramer(const RequestFramer&) = delete;
  RequestFramer& operator=(const RequestFramer&) = delete;

  // The bytes: room for a read of `bytes`, the part of it a read filled,
  // how many wait, whether a buffer is held at all (an idle connection
  // holds none), and dropping them.
  std::span<char> prepare(std::size_t bytes);
  void commit(std::size_t bytes);
  std::size_t buffered() const;
  bool holds_buffer() const;
  void clear();
  void release_buffer();  // frees the buffer if no byte waits in it

  Step step();
  Taken take();  // after kRequest
  // After kHeaderDone: the client waits for "100 Continue" before its body.
  bool expects_continue() const;
  std::optional<std::uint64_t> body_remaining() const;  // of a body with a Content-Length
  bool mid_request() const;
  const Refusal& refusal() const;  // after kRefused
  void reset();                    // forget the request begun

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Status line and headers; the body goes out beside it in the same write.
std::string reply_head(const Reply& reply, bool keep_alive, bool http10);

// The transport's request framing without a socket, for tests and fuzzing:
// the requests a connection reads from `bytes` when they arrive in pieces
// ending at `cuts` (ascending offsets; none: all at once), with `config`'s
// limits. It stops where a connection stops reading: at a refusal, after a
// request that does not keep the connection alive, or where the bytes end.
struct Framing {
  std::vector<Request> requests;
  int refusal = 0;  // 400, 413 or 431: the reply before the close
  std::string refusal_field;
  bool incomplete = false;  // bytes of a request not yet whole
};
Framing frame_requests(std::string_view bytes, const ServerConfig& config, const std::vector<std::size_t>& cuts = {});

}  // namespace numaserve::http
