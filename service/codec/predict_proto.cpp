#include "codec/predict_proto.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>
#include <variant>
#include <vector>

namespace numaserve::codec {
namespace {

// protobuf's default recursion limit: messages and groups nested deeper
// are refused.
constexpr int kMaxDepth = 100;

enum Wire : std::uint32_t { kVarint = 0, kFixed64 = 1, kLength = 2, kStartGroup = 3, kEndGroup = 4, kFixed32 = 5 };

// proto3 strings must be strict UTF-8 (no overlong forms, surrogates or code
// points past U+10FFFF). Ids are mostly ASCII: 8 bytes are passed at a time.
bool valid_utf8(std::string_view s) {
  const auto* u = reinterpret_cast<const unsigned char*>(s.data());
  const std::size_t n = s.size();
  std::size_t i = 0;
  while (i < n) {
    if (n - i >= 8) {
      std::uint64_t word;
      std::memcpy(&word, u + i, sizeof word);
      if ((word & 0x8080808080808080ULL) == 0) {
        i += 8;
        continue;
      }
    }
    const unsigned c = u[i];
    if (c < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = 0;
    unsigned low = 0x80, high = 0xBF;  // the second byte's range
    if (c >= 0xC2 && c <= 0xDF) {
      length = 2;
    } else if (c >= 0xE0 && c <= 0xEF) {
      length = 3;
      if (c == 0xE0) low = 0xA0;   // overlong
      if (c == 0xED) high = 0x9F;  // surrogates
    } else if (c >= 0xF0 && c <= 0xF4) {
      length = 4;
      if (c == 0xF0) low = 0x90;   // overlong
      if (c == 0xF4) high = 0x8F;  // past U+10FFFF
    } else {
      return false;
    }
    if (n - i < length || u[i + 1] < low || u[i + 1] > high) return false;
    for (std::size_t k = 2; k < length; ++k) {
      if ((u[i + k] & 0xC0) != 0x80) return false;
    }
    i += length;
  }
  return true;
}

// A message's bytes being read. A read that fails leaves `p` where the
// bad field starts.
struct Cursor {
  const char* p;
  const char* end;

  bool done() const { return p == end; }
  // A varint of at most max_bytes; bits past 64 are dropped, and a tag
  // keeps its low 32 as protobuf's ReadTag does.
  bool varint(std::uint64_t& out, int max_bytes) {
    std::uint64_t value = 0;
    for (int i = 0; i < max_bytes && p + i != end; ++i) {
      const auto byte = static_cast<std::uint8_t>(p[i]);
      value |= static_cast<std::uint64_t>(byte & 0x7F) << (7 * i);
      if (byte < 0x80) {
        p += i + 1;
        out = value;
        return true;
      }
    }
    return false;
  }
  bool tag(std::uint32_t& out) {
    std::uint64_t value = 0;
    if (!varint(value, 5)) return false;
    out = static_cast<std::uint32_t>(value);
    return true;
  }
  bool advance(std::size_t n) {
    if (static_cast<std::size_t>(end - p) < n) return false;
    p += n;
    return true;
  }
  // A length-delimited field: its size in at most 5 bytes, the fifth
  // under 8 (protobuf refuses 2 GiB and more), then that many bytes.
  bool bytes(std::string_view& out) {
    const char* start = p;
    std::uint64_t size = 0;
    if (!varint(size, 5) || (p - start == 5 && static_cast<std::uint8_t>(p[-1]) >= 8) ||
        size > static_cast<std::uint64_t>(end - p)) {
      p = start;
      return false;
    }
    out = {p, static_cast<std::size_t>(size)};
    p += size;
    return true;
  }
};

// Where an entity or its features are in a request: "items[3].features".
// Spelled out only for a refusal — building it for every item cost a
// request of 200 items more than parsing it.
struct Where {
  std::string_view name;  // "user", "items", "context"
  int index = -1;         // items' index
  const char* member = nullptr;
  std::string str() const {
    std::string out(name);
    if (index >= 0) out += "[" + std::to_string(index) + "]";
    if (member != nullptr) out = out + "." + member;
    return out;
  }
};

tl::unexpected<Error> bad(const std::string& field, const std::string& message) {
  return make_error(Error::Code::kInvalidArgument, field + ": " + message, field);
}

// A map<string, FeatureValue> as its entries arrive. An entry without a
// value is refused only if no later entry gives its key one (a later entry
// replaces an earlier one whole, as protobuf's maps do). Keys past the
// limit are not kept, only marked: the request is refused at take(), and
// a message of a million tiny entries costs no more than the limit's.
struct FeatureMap {
  features::Features values;
  std::vector<std::string> unset;
  bool overflowed = false;

  void put(std::string key, std::optional<features::FeatureValue> value, std::size_t limit) {
    const auto was_unset = std::find(unset.begin(), unset.end(), key);
    if (was_unset == unset.end() && !values.contains(key) && values.size() + unset.size() >= limit) {
      overflowed = true;
      return;
    }
    if (value) {
      if (was_unset != unset.end()) unset.erase(was_unset);
      values.insert_or_assign(std::move(key), std::move(*value));
    } else {
      values.erase(key);
      if (was_unset == unset.end()) unset.push_back(std::move(key));
    }
  }

  // The features as /predict's JSON would have them, within the same limits.
  Result<features::Features> take(const Where& where, const api::RequestLimits& limits) {
    if (overflowed || values.size() + unset.size() > limits.max_features_per_entity) {
      return bad(where.str(), "more than " + std::to_string(limits.max_features_per_entity) +
                                  " features; the limit is " + std::to_string(limits.max_features_per_entity));
    }
    if (!unset.empty()) return bad(member_field(where.str(), unset.front()), "want a number, an id or a list of ids");
    for (const auto& [key, value] : values) {
      if (const auto* number = std::get_if<double>(&value); number && !std::isfinite(*number)) {
        return bad(member_field(where.str(), key), "want a finite number");
      }
      if (const auto* ids = std::get_if<std::vector<std::string>>(&value); ids && ids->size() > limits.max_list_length) {
        return bad(member_field(where.str(), key), "list of more than " + std::to_string(limits.max_list_length) +
                                                       " ids; the limit is " + std::to_string(limits.max_list_length));
      }
    }
    return std::move(values);
  }
};

class Decoder {
 public:
  Decoder(std::string_view message, const api::RequestLimits& limits)
      : begin_(message.data()), end_(message.data() + message.size()), limits_(limits) {}

  Result<PredictRequest> run() {
    PredictRequest out;
    std::string model;
    bool has_user = false;
    std::optional<Error> refused;  // a complete item found wrong
    constexpr std::array<Wire, 7> kWire{kLength, kLength, kLength, kLength, kLength, kLength, kVarint};
    const bool read = fields(Cursor{begin_, end_}, kMaxDepth, kWire, [&](std::uint32_t field, Cursor& c, int depth) {
      switch (field) {
        case 1: return string(c, model);
        case 2: return string(c, out.version);
        case 3: return string(c, out.request_id);
        case 4:
          has_user = true;
          return entity(c, depth, out.features.user.id, user_);
        case 5: return entry(c, depth, context_);
        case 6: return item(c, depth, out.features.items, refused);
        case 7: return priority(c, out.scheduling);
        default: return false;
      }
    });
    if (refused) return tl::unexpected(std::move(*refused));
    if (!read) {
      return bad("message", std::string("not a valid numaserve.v1.PredictRequest message: ") + why_ + " at byte " +
                                std::to_string(failed_at_ - begin_));
    }
    if (!model.empty()) out.model = std::move(model);
    if (!has_user) return bad("user", "required");
    if (out.features.user.id.empty()) return bad("user.id", "required");
    auto user = user_.take(Where{"user", -1, "features"}, limits_);
    if (!user) return tl::unexpected(user.error());
    out.features.user.features = std::move(*user);
    auto context = context_.take(Where{"context"}, limits_);
    if (!context) return tl::unexpected(context.error());
    out.features.context = std::move(*context);
    if (out.features.items.empty()) return bad("items", "empty: send at least one item");
    return out;
  }

 private:
  // An item is whole once read (items are never merged): it is checked at
  // once, and a request past the limit stops here.
  bool item(Cursor& c, int depth, std::vector<features::Entity>& items, std::optional<Error>& refused) {
    if (items.size() == limits_.max_items) {
      refused = bad("items", "more than " + std::to_string(limits_.max_items) + " items; the limit is " +
                                 std::to_string(limits_.max_items))
                    .value();
      return false;
    }
    auto& added = items.emplace_back();
    FeatureMap map;
    if (!entity(c, depth, added.id, map)) return false;
    const Where where{"items", static_cast<int>(items.size() - 1), "features"};
    if (added.id.empty()) {
      refused = bad(Where{"items", where.index}.str() + ".id", "required").value();
      return false;
    }
    auto features = map.take(where, limits_);
    if (!features) {
      refused = features.error();
      return false;
    }
    added.features = std::move(*features);
    return true;
  }

  // 0 (proto3's unset) is the service's default level; the level's range
  // is the service's to check. A uint32 keeps a longer varint's low 32
  // bits, as protobuf's parser does.
  static bool priority(Cursor& c, Scheduling& scheduling) {
    std::uint64_t varint = 0;
    if (!c.varint(varint, 10)) return false;
    const auto level = static_cast<std::uint32_t>(varint);
    scheduling.priority_field = "priority";
    if (level == 0) {
      scheduling.priority.reset();
    } else {
      scheduling.priority = level;
    }
    return true;
  }

  bool fail(const char* at, const char* why) {
    if (failed_at_ == nullptr) {
      failed_at_ = at;
      why_ = why;
    }
    return false;
  }

  // A message's fields, each known one handed to known(field, cursor,
  // depth) with the cursor at its value; the rest skipped: unknown
  // numbers, and known ones with another wire type (protobuf keeps those as
  // unknown fields). `wire` holds each known field's wire type by number.
  template <std::size_t N, typename Known>
  bool fields(Cursor c, int depth, const std::array<Wire, N>& wire, Known&& known) {
    while (!c.done()) {
      const char* at = c.p;
      std::uint32_t tag = 0;
      if (!c.tag(tag)) return fail(at, "a truncated tag");
      const std::uint32_t field = tag >> 3;
      if (field == 0 || (tag & 7) == kEndGroup) return fail(at, "a field numbered 0 or an end-group tag");
      if (field <= N && wire[field - 1] == (tag & 7)) {
        if (!known(field, c, depth)) return fail(at, "a malformed field");
      } else if (!skip(c, tag, depth)) {
        return fail(at, "a malformed unknown field");
      }
    }
    return true;
  }

  bool skip(Cursor& c, std::uint32_t tag, int depth) {
    switch (tag & 7) {
      case kVarint: {
        std::uint64_t ignored = 0;
        return c.varint(ignored, 10);
      }
      case kFixed64: return c.advance(8);
      case kLength: {
        std::string_view ignored;
        return c.bytes(ignored);
      }
      case kFixed32: return c.advance(4);
      case kStartGroup: {
        if (--depth < 0) return false;
        for (;;) {
          std::uint32_t inner = 0;
          if (!c.tag(inner)) return false;
          if (inner == tag + 1) return true;  // this group's end
          if ((inner >> 3) == 0 || (inner & 7) == kEndGroup || !skip(c, inner, depth)) return false;
        }
      }
      default: return false;
    }
  }

  // A nested message: its bytes, one level deeper.
  template <typename Read>
  bool nested(Cursor& c, int depth, Read&& read) {
    std::string_view bytes;
    if (!c.bytes(bytes)) return false;
    if (depth - 1 < 0) return fail(c.p, "messages nested too deeply");
    return read(Cursor{bytes.data(), bytes.data() + bytes.size()}, depth - 1);
  }

  bool string(Cursor& c, std::string& out) {
    std::string_view bytes;
    if (!c.bytes(bytes)) return false;
    if (!valid_utf8(bytes)) return fail(bytes.data(), "a string that is not UTF-8");
    out.assign(bytes);
    return true;
  }

  // Entity { string id = 1; map<string, FeatureValue> features = 2; }
  bool entity(Cursor& c, int depth, std::string& id, FeatureMap& map) {
    return nested(c, depth, [&](Cursor inner, int d) {
      return fields(inner, d, std::array<Wire, 2>{kLength, kLength}, [&](std::uint32_t field, Cursor& f, int fd) {
        return field == 1 ? string(f, id) : entry(f, fd, map);
      });
    });
  }

  // A map entry { string key = 1; FeatureValue value = 2; }: the last key
  // given, its values merged.
  bool entry(Cursor& c, int depth, FeatureMap& map) {
    std::string key;
    std::optional<features::FeatureValue> value;
    const bool read = nested(c, depth, [&](Cursor inner, int d) {
      return fields(inner, d, std::array<Wire, 2>{kLength, kLength}, [&](std::uint32_t field, Cursor& f, int fd) {
        return field == 1 ? string(f, key) : feature_value(f, fd, value);
      });
    });
    if (read) map.put(std::move(key), std::move(value), limits_.max_features_per_entity);
    return read;
  }

  // FeatureValue { oneof kind { double number = 1; string id = 2; IdList ids = 3; } }:
  // the last member given wins; IdLists given one after another are merged.
  bool feature_value(Cursor& c, int depth, std::optional<features::FeatureValue>& value) {
    return nested(c, depth, [&](Cursor inner, int d) {
      return fields(inner, d, std::array<Wire, 3>{kFixed64, kLength, kLength},
                       [&](std::uint32_t field, Cursor& f, int fd) {
                         switch (field) {
                           case 1: {
                             double number = 0;
                             if (f.end - f.p < static_cast<std::ptrdiff_t>(sizeof number)) return false;
                             std::memcpy(&number, f.p, sizeof number);  // little-endian, as x86 and the wire
                             f.p += sizeof number;
                             value = number;
                             return true;
                           }
                           case 2: {
                             std::string id;
                             if (!string(f, id)) return false;
                             value = std::move(id);
                             return true;
                           }
                           default: {
                             if (!value || !std::holds_alternative<std::vector<std::string>>(*value)) {
                               value = std::vector<std::string>{};
                             }
                             return id_list(f, fd, std::get<std::vector<std::string>>(*value));
                           }
                         }
                       });
    });
  }

  // IdList { repeated string ids = 1; }: kept to one past the limit (the
  // list is refused then); the rest is read, not kept.
  bool id_list(Cursor& c, int depth, std::vector<std::string>& ids) {
    return nested(c, depth, [&](Cursor inner, int d) {
      return fields(inner, d, std::array<Wire, 1>{kLength}, [&](std::uint32_t, Cursor& f, int) {
        if (ids.size() > limits_.max_list_length) {
          std::string ignored;
          return string(f, ignored);
        }
        return string(f, ids.emplace_back());
      });
    });
  }

  const char* begin_;
  const char* end_;
  const api::RequestLimits& limits_;
  FeatureMap user_, context_;
  const char* failed_at_ = nullptr;
  const char* why_ = "";
};

}  // namespace

Result<PredictRequest> parse_predict_proto(std::string_view message, const api::RequestLimits& limits) {
  return Decoder(message, limits).run();
}

}  // namespace numaserve::codec
