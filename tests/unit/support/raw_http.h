#pragma once
// A bare HTTP/1.1 client over one loopback socket, for tests that need what
// a client library hides: pipelined requests, half-sent requests, bytes
// dribbled slowly, interim 100 responses, and exactly when the server
// closes. Every wait has a timeout.

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace numaserve::testing {

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;  // names in lower case
  std::string body;
  std::string header(const std::string& name) const {
    auto it = headers.find(name);
    return it == headers.end() ? "" : it->second;
  }
};

class RawConnection {
 public:
  using Clock = std::chrono::steady_clock;

  explicit RawConnection(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<std::uint16_t>(port));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd_ < 0 || ::connect(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
      if (fd_ >= 0) ::close(fd_);
      fd_ = -1;
      return;
    }
    int one = 1;
    ::setsockopt(fd_, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  ~RawConnection() { close(); }
  RawConnection(RawConnection&& other) noexcept : fd_(other.fd_), buffer_(std::move(other.buffer_)) { other.fd_ = -1; }
  RawConnection& operator=(RawConnection&& other) noexcept {
    std::swap(fd_, other.fd_);
    std::swap(buffer_, other.buffer_);
    return *this;
  }

  bool connected() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

  bool send(std::string_view bytes) {
    while (!bytes.empty()) {
      const ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
      if (n <= 0) return false;
      bytes.remove_prefix(static_cast<std::size_t>(n));
    }
    return true;
  }

  // One response (an interim 100 Continue counts as one); nullopt when the
  // connection closed or nothing complete came within `timeout`. The reply
  // to a HEAD request has a Content-Length but no body.
  std::optional<RawResponse> read_response(std::chrono::milliseconds timeout = std::chrono::seconds(5),
                                           bool head = false) {
    const auto deadline = Clock::now() + timeout;
    while (true) {
      if (auto response = take_response(head)) return response;
      if (!fill(deadline)) return std::nullopt;
    }
  }

  // Bytes received and not yet taken as a response.
  const std::string& unread() const { return buffer_; }

  // True when the server closes (or resets) the connection within `timeout`.
  bool wait_closed(std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (fill(deadline)) {
    }
    return closed_;
  }

 private:
  // Reads what arrives before `deadline`; false on timeout or close.
  bool fill(Clock::time_point deadline) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0 || fd_ < 0) return false;
    pollfd p{fd_, POLLIN, 0};
    if (::poll(&p, 1, static_cast<int>(left)) <= 0) return false;
    char chunk[16384];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n <= 0) {
      closed_ = true;
      return false;
    }
    buffer_.append(chunk, static_cast<std::size_t>(n));
    return true;
  }

  std::optional<RawResponse> take_response(bool head_request) {
    const auto end = buffer_.find("\r\n\r\n");
    if (end == std::string::npos) return std::nullopt;
    RawResponse r;
    const std::string head = buffer_.substr(0, end);
    std::size_t line_end = head.find("\r\n");
    const std::string status_line = head.substr(0, line_end);
    if (status_line.size() < 12) return std::nullopt;
    r.status = std::stoi(status_line.substr(9, 3));
    while (line_end != std::string::npos && line_end < head.size()) {
      const std::size_t start = line_end + 2;
      line_end = head.find("\r\n", start);
      const std::string line = head.substr(start, line_end == std::string::npos ? std::string::npos : line_end - start);
      const auto colon = line.find(':');
      if (colon == std::string::npos) continue;
      std::string name = line.substr(0, colon);
      std::transform(name.begin(), name.end(), name.begin(), [](unsigned char c) { return std::tolower(c); });
      r.headers[name] = line.substr(line.find_first_not_of(' ', colon + 1));
    }
    const std::size_t length = !head_request && r.headers.count("content-length") ? std::stoul(r.headers["content-length"]) : 0;
    if (buffer_.size() < end + 4 + length) return std::nullopt;
    r.body = buffer_.substr(end + 4, length);
    buffer_.erase(0, end + 4 + length);
    return r;
  }

  int fd_ = -1;
  std::string buffer_;
  bool closed_ = false;
};

// A request with a body and its Content-Length.
inline std::string post(const std::string& path, const std::string& body, const std::string& extra_headers = "") {
  return "POST " + path + " HTTP/1.1\r\nHost: test\r\nContent-Length: " + std::to_string(body.size()) + "\r\n" +
         extra_headers + "\r\n" + body;
}

inline std::string get(const std::string& path) { return "GET " + path + " HTTP/1.1\r\nHost: test\r\n\r\n"; }

}  // namespace numaserve::testing
