// What a Redis Cluster node answers, read by the client: never a crash; a
// slot map accepted has ranges inside 0..16383 that share no slot and nodes
// with a host and a port a connection can use; a refused one names the node
// asked; a redirect accepted is a MOVED or an ASK to a usable node.
// Input: one reply, as hiredis's conversion (redis/hiredis_reply.h) hands it
// over; a value is an op byte, taken mod 5:
//   0 string: a length byte, then that many bytes
//   1 nil
//   2 integer: 4 bytes, a little-endian int32, which hiredis gives as its decimal text
//   3 error: a length byte, then that many bytes
//   4 array: a count byte (mod 16), then that many values; below the fourth
//     level an array is a nil, its op byte alone
// Bytes past the input's end are 0; an array's values the input does not
// reach are not there. The same bytes, as text, are also an error reply
// parsed as a redirect.
#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "fuzz.h"
#include "redis/cluster.h"

using namespace numaserve;

namespace {

constexpr int kMaxDepth = 4;
constexpr std::size_t kMaxElements = 16;

struct Input {
  const std::uint8_t* data;
  std::size_t size;
  std::size_t at = 0;

  bool done() const { return at >= size; }
  std::uint8_t byte() { return at < size ? data[at++] : 0; }
  std::string bytes(std::size_t count) {
    count = std::min(count, size - at);
    std::string out(reinterpret_cast<const char*>(data + at), count);
    at += count;
    return out;
  }
};

// A value as hiredis's conversion tells them apart: in an array only a
// scalar has text and only an array has a child.
struct Value {
  enum class Kind { kScalar, kNil, kError, kArray } kind = Kind::kNil;
  std::string text;    // a scalar's or an error's
  redis::Reply array;  // an array's, converted
};

Value value(Input& in, int depth) {
  Value out;
  switch (in.byte() % 5) {
    case 0:
      out.kind = Value::Kind::kScalar;
      out.text = in.bytes(in.byte());
      break;
    case 1: break;
    case 2: {
      std::uint32_t bits = 0;
      for (int shift = 0; shift < 32; shift += 8) bits |= static_cast<std::uint32_t>(in.byte()) << shift;
      std::int32_t integer = 0;
      std::memcpy(&integer, &bits, sizeof integer);
      out.kind = Value::Kind::kScalar;
      out.text = std::to_string(integer);
      break;
    }
    case 3:
      out.kind = Value::Kind::kError;
      out.text = in.bytes(in.byte());
      break;
    default: {
      if (depth >= kMaxDepth) break;
      const std::size_t count = in.byte() % kMaxElements;
      std::vector<Value> items;
      while (items.size() < count && !in.done()) items.push_back(value(in, depth + 1));
      out.kind = Value::Kind::kArray;
      bool nested = false;
      for (const Value& item : items) {
        out.array.elements.push_back(item.kind == Value::Kind::kScalar ? std::optional(item.text) : std::nullopt);
        nested = nested || item.kind == Value::Kind::kArray;
      }
      if (nested) {
        out.array.children.resize(items.size());
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (items[i].kind == Value::Kind::kArray) out.array.children[i] = std::move(items[i].array);
        }
      }
    }
  }
  return out;
}

redis::Reply top_level(Value decoded) {
  redis::Reply out;
  switch (decoded.kind) {
    case Value::Kind::kScalar: out.elements.push_back(std::move(decoded.text)); break;
    case Value::Kind::kNil: out.elements.push_back(std::nullopt); break;
    case Value::Kind::kError: out.error = std::move(decoded.text); break;
    case Value::Kind::kArray: out = std::move(decoded.array); break;
  }
  return out;
}

void check_node(const redis::NodeAddress& node, const char* what) {
  FUZZ_CHECK(!node.host.empty(), "%s without a host (port %d)", what, node.port);
  FUZZ_CHECK(node.port >= 1 && node.port <= 65535, "%s %s with port %d", what, node.host.c_str(), node.port);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const redis::NodeAddress asked{"10.0.0.1", 7000};
  Input in{data, size};
  const redis::Reply reply = top_level(value(in, 0));
  if (auto slots = redis::parse_slots(reply, asked); !slots) {
    const std::string& message = slots.error().message;
    FUZZ_CHECK(message.find(asked.text()) != std::string::npos, "a refusal not naming the node asked: %s", message.c_str());
  } else {
    // Sorted rather than marked slot by slot: a full map would cost 16384 steps an input.
    std::vector<std::pair<unsigned, unsigned>> spans;
    for (const redis::SlotRange& range : *slots) {
      FUZZ_CHECK(range.first <= range.last && range.last < redis::kSlots, "range %u-%u", range.first, range.last);
      spans.emplace_back(range.first, range.last);
      check_node(range.master, "a master");
      for (const redis::NodeAddress& replica : range.replicas) check_node(replica, "a replica");
    }
    std::sort(spans.begin(), spans.end());
    for (std::size_t i = 1; i < spans.size(); ++i) {
      FUZZ_CHECK(spans[i].first > spans[i - 1].second, "ranges %u-%u and %u-%u share slots", spans[i - 1].first,
                 spans[i - 1].second, spans[i].first, spans[i].second);
    }
  }

  const std::string_view error = fuzz::text(data, size);
  if (const auto redirect = redis::parse_redirect(error, asked)) {
    const bool moved = error.starts_with("MOVED "), ask = error.starts_with("ASK ");
    FUZZ_CHECK(moved || ask, "a redirect from '%.*s'", static_cast<int>(error.size()), error.data());
    FUZZ_CHECK(redirect->kind == (moved ? redis::Redirect::Kind::kMoved : redis::Redirect::Kind::kAsk),
               "'%.*s' read as the other kind", static_cast<int>(error.size()), error.data());
    FUZZ_CHECK(redirect->slot < redis::kSlots, "slot %u", redirect->slot);
    check_node(redirect->to, "a redirect's node");
  }
  return 0;
}
