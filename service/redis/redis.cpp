#include <sys/time.h>

#include <charconv>
#include <fstream>

#include "redis/cluster.h"
#include "redis/hiredis_reply.h"

namespace numaserve::redis {
namespace {

Error bad_url(const std::string& why) { return Error{Error::Code::kInvalidArgument, "feature store URL: " + why, "feature_store"}; }

std::optional<int> whole(std::string_view text, int low, int high) {
  int value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || value < low || value > high) return std::nullopt;
  return value;
}

// %XX escapes, as a password with '@' or ':' must be written.
std::optional<std::string> unescape(std::string_view text) {
  std::string out;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] != '%') {
      out.push_back(text[i]);
      continue;
    }
    int byte = 0;
    if (i + 2 >= text.size() || std::from_chars(text.data() + i + 1, text.data() + i + 3, byte, 16).ptr != text.data() + i + 3) {
      return std::nullopt;
    }
    out.push_back(static_cast<char>(byte));
    i += 2;
  }
  return out;
}

timeval to_timeval(double seconds) {
  const auto micros = static_cast<long long>(seconds * 1e6);
  return timeval{static_cast<time_t>(micros / 1000000), static_cast<suseconds_t>(micros % 1000000)};
}

}  // namespace

bool is_url(std::string_view text) {
  return text.starts_with("redis://") || text.starts_with("unix://") || text.starts_with(kClusterScheme);
}

Result<Url> parse_url(std::string_view text) {
  Url url;
  url.unix_socket = text.starts_with("unix://");
  if (!url.unix_socket && !text.starts_with("redis://")) {
    return tl::unexpected(bad_url("want redis://[user:password@]host[:port][/db] or unix:///path[?db=N]"));
  }
  std::string_view rest = text.substr(url.unix_socket ? 7 : 8);
  if (const auto at = rest.rfind('@'); at != std::string_view::npos) {
    const std::string_view userinfo = rest.substr(0, at);
    rest = rest.substr(at + 1);
    const auto colon = userinfo.find(':');
    auto user = unescape(userinfo.substr(0, colon));
    auto password = colon == std::string_view::npos ? std::optional<std::string>("") : unescape(userinfo.substr(colon + 1));
    if (!user || !password) return tl::unexpected(bad_url("a bad %-escape in the user or password"));
    url.user = *user;
    url.password = *password;
  }
  if (url.unix_socket) {
    const auto query = rest.find('?');
    url.host = std::string(rest.substr(0, query));
    if (url.host.empty() || url.host[0] != '/') return tl::unexpected(bad_url("want unix:///absolute/path/redis.sock"));
    if (query != std::string_view::npos) {
      const std::string_view q = rest.substr(query + 1);
      const auto db = q.starts_with("db=") ? whole(q.substr(3), 0, 1 << 20) : std::nullopt;
      if (!db) return tl::unexpected(bad_url("the only query is ?db=N"));
      url.db = *db;
    }
    return url;
  }
  const auto slash = rest.find('/');
  std::string_view authority = rest.substr(0, slash);
  if (slash != std::string_view::npos && slash + 1 < rest.size()) {
    const auto db = whole(rest.substr(slash + 1), 0, 1 << 20);
    if (!db) return tl::unexpected(bad_url("the path is the db number: /0, /1, ..."));
    url.db = *db;
  }
  const auto colon = authority.rfind(':');
  if (colon != std::string_view::npos) {
    const auto port = whole(authority.substr(colon + 1), 1, 65535);
    if (!port) return tl::unexpected(bad_url("want a port from 1 to 65535"));
    url.port = *port;
    authority = authority.substr(0, colon);
  }
  if (authority.empty()) return tl::unexpected(bad_url("no host"));
  url.host = std::string(authority);
  return url;
}

Result<Url> parse_url(std::string_view text, const std::string& password_file) {
  auto url = parse_url(text);
  if (!url || password_file.empty()) return url;
  std::ifstream in(password_file);
  std::string line;
  if (!in || !std::getline(in, line)) {
    return make_error(Error::Code::kInvalidArgument, password_file + ": cannot read the feature store's password",
                      "feature_store_password_file");
  }
  if (!line.empty() && line.back() == '\r') line.pop_back();
  url->password = std::move(line);
  return url;
}

std::string Url::redacted() const {
  std::string userinfo = user;
  if (!password.empty()) userinfo += ":****";
  if (!userinfo.empty()) userinfo += "@";
  if (unix_socket) return "unix://" + userinfo + host + (db != 0 ? "?db=" + std::to_string(db) : "");
  return "redis://" + userinfo + host + ":" + std::to_string(port) + (db != 0 ? "/" + std::to_string(db) : "");
}

struct Connection::Impl {
  redisContext* context = nullptr;
  std::string where;
  ~Impl() {
    if (context != nullptr) redisFree(context);
  }
};

Connection::Connection(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Connection::Connection(Connection&&) noexcept = default;
Connection& Connection::operator=(Connection&&) noexcept = default;
Connection::~Connection() = default;

Result<Connection> Connection::open(const Url& url, double timeout_seconds) {
  auto impl = std::make_unique<Impl>();
  impl->where = url.redacted();
  const timeval timeout = to_timeval(timeout_seconds);
  impl->context = url.unix_socket ? redisConnectUnixWithTimeout(url.host.c_str(), timeout)
                                  : redisConnectWithTimeout(url.host.c_str(), url.port, timeout);
  if (impl->context == nullptr || impl->context->err != 0) {
    return make_error(Error::Code::kIo, "feature store " + impl->where + ": cannot connect: " +
                                            (impl->context ? impl->context->errstr : "out of memory"));
  }
  redisSetTimeout(impl->context, timeout);
  Connection connection(std::move(impl));
  if (const auto handshake = detail::handshake(url); !handshake.empty()) {
    auto replies = connection.pipeline(handshake);
    if (!replies) return tl::unexpected(replies.error());
    for (std::size_t i = 0; i < replies->size(); ++i) {
      if ((*replies)[i].error) {
        return make_error(Error::Code::kInvalidArgument, "feature store " + url.redacted() + ": " + handshake[i][0] +
                                                             " refused: " + *(*replies)[i].error);
      }
    }
  }
  return connection;
}

Result<std::vector<Reply>> Connection::pipeline(const std::vector<Command>& commands) {
  redisContext* c = impl_->context;
  for (const auto& command : commands) {
    detail::Argv argv(command);
    if (redisAppendCommandArgv(c, argv.count(), argv.data(), argv.lengths.data()) != REDIS_OK) {
      return make_error(Error::Code::kIo, "feature store " + impl_->where + ": " + c->errstr);
    }
  }
  std::vector<Reply> out;
  out.reserve(commands.size());
  for (std::size_t i = 0; i < commands.size(); ++i) {
    void* raw = nullptr;
    if (redisGetReply(c, &raw) != REDIS_OK || raw == nullptr) {
      return make_error(Error::Code::kIo, "feature store " + impl_->where + ": " + (c->err ? c->errstr : "no reply"));
    }
    auto* reply = static_cast<redisReply*>(raw);
    out.push_back(detail::convert(reply));
    freeReplyObject(reply);
  }
  return out;
}

}  // namespace numaserve::redis
