#pragma once
// Inside redis/ only: hiredis's replies and argument vectors, shared by the
// blocking connection and the asynchronous client.

#include <hiredis/hiredis.h>

#include <vector>

#include "redis/redis.h"

namespace numaserve::redis::detail {

inline std::optional<std::string> scalar(const redisReply* r) {
  switch (r->type) {
    case REDIS_REPLY_STRING:
    case REDIS_REPLY_STATUS: return std::string(r->str, r->len);
    case REDIS_REPLY_INTEGER: return std::to_string(r->integer);
    default: return std::nullopt;  // nil, or an array nested deeper than we read
  }
}

inline Reply convert(const redisReply* r) {
  Reply out;
  if (r->type == REDIS_REPLY_ERROR) {
    out.error = std::string(r->str, r->len);
  } else if (r->type == REDIS_REPLY_ARRAY) {
    out.elements.reserve(r->elements);
    for (std::size_t i = 0; i < r->elements; ++i) {
      out.elements.push_back(scalar(r->element[i]));
      if (r->element[i]->type != REDIS_REPLY_ARRAY) continue;
      out.children.resize(r->elements);
      out.children[i] = convert(r->element[i]);
    }
  } else {
    out.elements.push_back(scalar(r));
  }
  return out;
}

// A command as hiredis takes it: binary-safe pointers and lengths.
struct Argv {
  explicit Argv(const Command& command) {
    for (const auto& arg : command) {
      pointers.push_back(arg.data());
      lengths.push_back(arg.size());
    }
  }
  int count() const { return static_cast<int>(pointers.size()); }
  const char** data() { return pointers.data(); }
  std::vector<const char*> pointers;  // hiredis 0.14 takes `const char**`
  std::vector<std::size_t> lengths;
};

// AUTH and SELECT, when the URL asks for them: the first commands of a connection.
inline std::vector<Command> handshake(const Url& url) {
  std::vector<Command> out;
  if (!url.password.empty()) {
    out.push_back(url.user.empty() ? Command{"AUTH", url.password} : Command{"AUTH", url.user, url.password});
  }
  if (url.db != 0) out.push_back({"SELECT", std::to_string(url.db)});
  return out;
}

}  // namespace numaserve::redis::detail
