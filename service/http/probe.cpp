#include "http/probe.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>

#include "numaserve/common/duration.h"

namespace numaserve::http {
namespace {

using Clock = std::chrono::steady_clock;

struct Socket {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  ~Socket() {
    if (fd >= 0) ::close(fd);
  }
};

// Waits for `events` until `deadline`; false on timeout or error.
bool wait(int fd, short events, Clock::time_point deadline) {
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) return false;
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(left));
    if (ready > 0) return true;
    if (ready < 0 && errno != EINTR) return false;
  }
}

}  // namespace

Result<int> probe(int port, const std::string& path, double timeout_seconds) {
  const std::string where = "127.0.0.1:" + std::to_string(port) + path;
  auto failed = [&](const std::string& why) { return make_error(Error::Code::kUnavailable, where + ": " + why); };
  const auto deadline =
      Clock::now() + to_duration(timeout_seconds);
  Socket s;
  if (s.fd < 0) return failed(std::string("socket: ") + std::strerror(errno));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<std::uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(s.fd, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 && errno != EINPROGRESS) {
    return failed(std::string("connect: ") + std::strerror(errno));
  }
  if (!wait(s.fd, POLLOUT, deadline)) return failed("no connection within the timeout");
  int error = 0;
  socklen_t length = sizeof error;
  ::getsockopt(s.fd, SOL_SOCKET, SO_ERROR, &error, &length);
  if (error != 0) return failed(std::string("connect: ") + std::strerror(error));
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  if (::send(s.fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    return failed("cannot send the request");
  }
  // "HTTP/1.1 200 OK": the status line's first 12 bytes are enough.
  std::string reply;
  char buffer[256];
  while (reply.size() < 12) {
    if (!wait(s.fd, POLLIN, deadline)) return failed("no reply within the timeout");
    const ssize_t n = ::recv(s.fd, buffer, sizeof buffer, 0);
    if (n <= 0) return failed("connection closed before a status line");
    reply.append(buffer, static_cast<std::size_t>(n));
  }
  if (reply.compare(0, 5, "HTTP/") != 0 || reply[8] != ' ') return failed("not an HTTP reply");
  return std::atoi(reply.substr(9, 3).c_str());
}

}  // namespace numaserve::http
