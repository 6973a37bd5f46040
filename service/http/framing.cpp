#include "http/framing.h"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <limits>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/string.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "http/chunk_line.h"

namespace numaserve::http {
namespace {

namespace bhttp = boost::beast::http;
using boost::system::error_code;

std::string decode_path(std::string_view target) {
  target = target.substr(0, target.find('?'));
  std::string path;
  path.reserve(target.size());
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  for (std::size_t i = 0; i < target.size(); ++i) {
    if (target[i] == '%' && i + 2 < target.size() && hex(target[i + 1]) >= 0 && hex(target[i + 2]) >= 0) {
      path += static_cast<char>(hex(target[i + 1]) * 16 + hex(target[i + 2]));
      i += 2;
    } else {
      path += target[i];
    }
  }
  return path;
}

}  // namespace

struct RequestFramer::Impl {
  using Step = RequestFramer::Step;

  explicit Impl(const ServerConfig& c) : config(c) {}

  std::string_view bytes() const { return {static_cast<const char*>(buffer.data().data()), buffer.size()}; }

  void begin() {
    parser.emplace();
    // The framer enforces the header limit itself (await_header): Beast
    // counts it from where a put() starts, so its own limit depends on the cuts.
    parser->header_limit(std::numeric_limits<std::uint32_t>::max());
    parser->body_limit(config.max_body_bytes);
    header_reported = false;
    scanned = 0;
    chunk_left = 0;
    chunk_taken = false;
  }

  // A header goes to Beast whole: given the part that has arrived, Beast
  // refuses a malformed line at once, but once it has asked for more it
  // waits for the end of the header before it looks again — so the same
  // bytes were a 400 or a wait for the deadline depending on how they were
  // cut (fuzz_http_framing). The limit counts the whole header, request
  // line and final blank line included. Empty: the header is whole.
  std::optional<Step> await_header() {
    const auto view = bytes();
    const auto end = view.find("\r\n\r\n", scanned >= 3 ? scanned - 3 : 0);
    const std::size_t header_bytes = end == std::string_view::npos ? view.size() : end + 4;
    if (header_bytes > config.max_header_bytes) {
      return refuse(431, "request header larger than the limit of " + std::to_string(config.max_header_bytes) + " bytes",
                    "headers");
    }
    if (end == std::string_view::npos) {
      scanned = view.size();
      return Step::kNeedMore;
    }
    return std::nullopt;
  }

  // A chunked body's framing lines likewise go to Beast only whole and
  // checked (chunk_line.h says why). Empty: the line may go to Beast.
  std::optional<Step> check(const ChunkLine& line) {
    switch (line.state) {
      case ChunkLine::State::kNeedMore: return Step::kNeedMore;
      case ChunkLine::State::kMalformed: return refuse(400, "malformed HTTP request: " + line.reason, "");
      case ChunkLine::State::kTrailersTooLarge:
        return refuse(431,
                      "request trailers larger than the limit of " + std::to_string(config.max_header_bytes) + " bytes",
                      "headers");
      case ChunkLine::State::kReady: break;
    }
    return std::nullopt;
  }

  Step step() {
    if (!parser) begin();
    if (!header_reported) {
      if (auto waiting = await_header()) return *waiting;
    }
    std::optional<ChunkLine> line;
    if (header_reported && parser->chunked() && chunk_left == 0) {
      line = scan_chunk_line(bytes(), chunk_taken, config.max_header_bytes);
      if (auto checked = check(*line)) return *checked;
    }
    error_code ec;
    const std::size_t used = parser->put(buffer.data(), ec);
    buffer.consume(used);
    if (!ec && line) {
      chunk_left = line->size;
      chunk_taken = true;
    } else if (!ec && chunk_left > 0) {
      chunk_left -= std::min<std::uint64_t>(chunk_left, used);
    }
    return outcome(ec, used);
  }

  // What Beast's put() of `used` bytes ending in `ec` means for the connection.
  Step outcome(error_code ec, std::size_t used) {
    // The whole header is here and Beast wants more of it: it is malformed
    // in a way Beast cannot tell before more bytes come (a request line
    // ending in a version shorter than "HTTP/1.1"), and would wait for the
    // deadline for a header end that has already passed.
    if (ec == bhttp::error::need_more && !header_reported && !parser->is_header_done()) {
      ec = bhttp::error::bad_version;
    }
    if (ec == bhttp::error::need_more) return Step::kNeedMore;
    if (ec == bhttp::error::body_limit) {
      return refuse(413, "request body larger than the limit of " + std::to_string(config.max_body_bytes) + " bytes",
                    "body");
    }
    if (ec) return refuse(400, "malformed HTTP request: " + ec.message(), "");
    if (parser->is_done()) return Step::kRequest;
    if (parser->is_header_done() && !header_reported) {
      header_reported = true;
      return Step::kHeaderDone;
    }
    return used == 0 ? Step::kNeedMore : Step::kProgress;
  }

  Step refuse(int status, std::string message, std::string field) {
    refusal = {status, std::move(message), std::move(field)};
    parser.reset();
    return Step::kRefused;
  }

  const ServerConfig& config;
  boost::beast::flat_buffer buffer;
  std::optional<bhttp::request_parser<bhttp::string_body>> parser;
  bool header_reported = false;
  std::size_t scanned = 0;  // bytes of the header searched for its end so far
  // A chunked body: data bytes of the current chunk Beast has yet to take
  // (0: a chunk-size line is due), and whether a chunk came before it (its
  // data then ends in a CRLF the next line's scan checks).
  std::uint64_t chunk_left = 0;
  bool chunk_taken = false;
  Refusal refusal;
};

RequestFramer::RequestFramer(const ServerConfig& config) : impl_(std::make_unique<Impl>(config)) {}

RequestFramer::~RequestFramer() = default;

std::span<char> RequestFramer::prepare(std::size_t bytes) {
  const auto room = impl_->buffer.prepare(bytes);
  return {static_cast<char*>(room.data()), room.size()};
}

void RequestFramer::commit(std::size_t bytes) { impl_->buffer.commit(bytes); }

std::size_t RequestFramer::buffered() const { return impl_->buffer.size(); }

bool RequestFramer::holds_buffer() const { return impl_->buffer.capacity() > 0; }

void RequestFramer::clear() { impl_->buffer.clear(); }

void RequestFramer::release_buffer() {
  if (impl_->buffer.size() == 0) impl_->buffer.shrink_to_fit();
}

RequestFramer::Step RequestFramer::step() { return impl_->step(); }

RequestFramer::Taken RequestFramer::take() {
  auto message = impl_->parser->release();
  impl_->parser.reset();
  Taken taken;
  taken.keep_alive = message.keep_alive();
  taken.head = message.method() == bhttp::verb::head;
  taken.http10 = message.version() < 11;
  taken.request.method = std::string(message.method_string());
  taken.request.path = decode_path(message.target());
  for (const auto& field : message) {
    switch (field.name()) {
      case bhttp::field::host:
      case bhttp::field::content_length:
      case bhttp::field::transfer_encoding:
      case bhttp::field::connection:
      case bhttp::field::expect:
        continue;  // the transport's own
      default:
        break;
    }
    std::string name(field.name_string());
    std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
    taken.request.headers.emplace_back(std::move(name), std::string(field.value()));
  }
  taken.request.body = std::move(message.body());
  return taken;
}

bool RequestFramer::expects_continue() const {
  const auto& message = impl_->parser->get();
  return message.version() >= 11 && boost::beast::iequals(message[bhttp::field::expect], "100-continue");
}

std::optional<std::uint64_t> RequestFramer::body_remaining() const {
  // Beast knows it (and asserts so) only once the header is done; before,
  // no Content-Length has been read anyway.
  if (!impl_->parser || !impl_->parser->is_header_done()) return std::nullopt;
  const auto remaining = impl_->parser->content_length_remaining();  // a boost::optional
  return remaining ? std::optional(*remaining) : std::nullopt;
}

bool RequestFramer::mid_request() const { return impl_->parser.has_value(); }

const RequestFramer::Refusal& RequestFramer::refusal() const { return impl_->refusal; }

void RequestFramer::reset() { impl_->parser.reset(); }

std::string reply_head(const Reply& reply, bool keep_alive, bool http10) {
  std::string head;
  head.reserve(160);
  head += "HTTP/1.1 ";
  head += std::to_string(reply.status);
  head += ' ';
  head += bhttp::obsolete_reason(bhttp::int_to_status(static_cast<unsigned>(reply.status)));
  head += "\r\nContent-Type: ";
  head += reply.content_type;
  head += "\r\nContent-Length: ";
  head += std::to_string(reply.body.size());
  head += "\r\n";
  for (const auto& [name, value] : reply.headers) {
    head += name;
    head += ": ";
    head += value;
    head += "\r\n";
  }
  if (!keep_alive) {
    head += "Connection: close\r\n";
  } else if (http10) {
    head += "Connection: keep-alive\r\n";
  }
  head += "\r\n";
  return head;
}

Framing frame_requests(std::string_view bytes, const ServerConfig& config, const std::vector<std::size_t>& cuts) {
  RequestFramer framer(config);
  Framing out;
  std::size_t from = 0;
  for (std::size_t piece = 0; piece <= cuts.size() && from < bytes.size(); ++piece) {
    const std::size_t to = piece < cuts.size() ? std::clamp(cuts[piece], from, bytes.size()) : bytes.size();
    const auto chunk = bytes.substr(from, to - from);
    from = to;
    std::memcpy(framer.prepare(chunk.size()).data(), chunk.data(), chunk.size());
    framer.commit(chunk.size());
    for (bool more = true; more;) {
      switch (framer.step()) {
        case RequestFramer::Step::kNeedMore: more = false; break;
        case RequestFramer::Step::kProgress:
        case RequestFramer::Step::kHeaderDone: break;
        case RequestFramer::Step::kRequest: {
          auto taken = framer.take();
          out.requests.push_back(std::move(taken.request));
          if (!taken.keep_alive) return out;  // the connection closes after its reply
          break;
        }
        case RequestFramer::Step::kRefused:
          out.refusal = framer.refusal().status;
          out.refusal_field = framer.refusal().field;
          return out;
      }
    }
  }
  out.incomplete = framer.mid_request() || framer.buffered() > 0;
  return out;
}

}  // namespace numaserve::http
