#include "codec/predict_json.h"

#include <nlohmann/json.hpp>
#include <simdjson.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>

namespace numaserve::codec {
namespace {

using nlohmann::json;

Error bad(const std::string& field, const std::string& message) {
  return Error{Error::Code::kInvalidArgument, field + ": " + message, field};
}

// Reads a parsed /predict body into a PredictRequest, event by event in
// document order: a 200-item request costs its values rather than a map
// per item. The first value that breaks the schema stops the walk with an
// error naming its field; a container deeper than the schema's is refused
// on sight, and items over the limit are counted without being read.
class RequestReader {
 public:
  explicit RequestReader(const api::RequestLimits& limits) : limits_(limits) {}

  Result<PredictRequest> finish() {
    if (error_) return tl::unexpected(std::move(*error_));
    if (!saw_user_) return tl::unexpected(bad("user", "required"));
    if (!saw_items_) return tl::unexpected(bad("items", "required: a list of items"));
    return std::move(out_);
  }

  // Each returns false to stop the walk: the request is refused.
  bool other() { return skipping() || value(Kind::kOther); }  // null, true, false
  bool integer(std::int64_t n) { return skipping() || integer(std::to_string(n), static_cast<double>(n)); }
  bool integer(std::uint64_t n) { return skipping() || integer(std::to_string(n), static_cast<double>(n)); }
  bool number(double x) {
    if (skipping()) return true;
    number_ = x;
    return value(Kind::kFloat);
  }
  bool string(std::string_view text) {
    if (skipping()) return true;
    text_ = text;
    return value(Kind::kString);
  }
  bool start_object() { return skip_depth_ > 0 ? (++skip_depth_, true) : value(Kind::kObject); }
  // `size`: its values, which the parse has counted (an items list is
  // allocated once instead of grown by doubling, each step moving the items).
  bool start_array(std::size_t size) {
    if (skip_depth_ > 0) return ++skip_depth_, true;
    array_size_ = size;
    return value(Kind::kArray);
  }
  bool end_container() { return skip_depth_ > 0 ? (--skip_depth_, true) : end(); }
  // True while the items list is being read.
  bool reading_items() const { return skip_depth_ == 0 && !stack_.empty() && stack_.back().in == In::kItems; }
  // An item that is its id alone ({"id": "i1"}, the usual one: its
  // features are the store's) kept as it is, without the frames of the
  // general walk; false, having read nothing, past the limit, where the
  // general walk counts the rest.
  bool plain_item(std::string_view id) {
    Frame& f = stack_.back();
    if (f.count >= limits_.max_items) return false;
    ++f.count;
    out_.features.items.push_back(features::Entity{std::string(id), {}});
    return true;
  }
  bool key(std::string_view name) { return skipping() || on_key(name); }

 private:
  enum class Kind { kString, kInteger, kFloat, kObject, kArray, kOther };
  enum class In { kRoot, kItems, kEntity, kFeatures, kList, kParameters };
  // Where an entity sits ("user", "items[3]"), spelled out only when a
  // message needs it: 200 items would otherwise build strings nobody reads.
  struct Path {
    const char* name;
    std::optional<std::size_t> index;
    std::string str() const { return index ? name + ("[" + std::to_string(*index) + "]") : std::string(name); }
  };
  struct Frame {
    explicit Frame(In where) : in(where) {}
    In in;
    std::string_view key;            // the pending key (root, entity, feature map), in the parser's strings
    std::size_t count = 0;           // items, features or ids so far
    Path entity{"", std::nullopt};   // kEntity
    std::string path;                // kFeatures, kList: the field as a client wrote it
    features::Entity* target_entity = nullptr;
    features::Features* target_features = nullptr;
    std::vector<std::string>* target_list = nullptr;
    bool id_required = false, saw_id = false;
  };

  bool skipping() const { return skip_depth_ > 0; }
  bool fail(Error error) {
    error_ = std::move(error);
    return false;
  }
  bool integer(std::string text, double number) {
    integer_text_ = std::move(text);
    text_ = integer_text_;
    number_ = number;
    return value(Kind::kInteger);
  }
  bool is_id(Kind kind) const { return kind == Kind::kString || kind == Kind::kInteger; }

  bool on_key(std::string_view name) {
    Frame& f = stack_.back();
    if (f.in == In::kRoot && name != "model" && name != "version" && name != "request_id" && name != "user" &&
        name != "context" && name != "items" && name != "parameters") {
      return fail(bad(member_field("", name), "unknown field"));
    }
    if (f.in == In::kParameters && name != "priority" && name != "timeout") {
      return fail(bad(member_field("parameters", name), "unknown field: the parameters are priority and timeout"));
    }
    if (f.in == In::kEntity) {
      if (name != "id" && name != "features") return fail(bad(member_field(f.entity.str(), name), "unknown field"));
      if (name == "id") f.saw_id = true;
    }
    if (f.in == In::kFeatures && ++f.count > limits_.max_features_per_entity) {
      return fail(bad(f.path, "more than " + std::to_string(limits_.max_features_per_entity) +
                                  " features; the limit is " + std::to_string(limits_.max_features_per_entity)));
    }
    f.key = name;
    return true;
  }

  bool value(Kind kind) {
    if (stack_.empty()) {
      if (kind != Kind::kObject) return fail(bad("body", "want a JSON object"));
      stack_.emplace_back(In::kRoot);
      return true;
    }
    Frame& f = stack_.back();
    switch (f.in) {
      case In::kRoot: return root_value(f.key, kind);
      case In::kItems: return item_value(f, kind);
      case In::kEntity: return entity_value(f, kind);
      case In::kFeatures: return feature_value(f, kind);
      case In::kList: return list_value(f, kind);
      case In::kParameters: return parameter_value(f.key, kind);
    }
    return false;
  }

  bool root_value(std::string_view key, Kind kind) {
    if (key == "model") {
      if (kind != Kind::kString) return fail(bad("model", "want a string"));
      out_.model = text_;
    } else if (key == "version") {
      if (!is_id(kind)) return fail(bad("version", "want a version number or a label"));
      out_.version = text_;
    } else if (key == "request_id") {
      if (!is_id(kind)) return fail(bad("request_id", "want a string or an integer id"));
      out_.request_id = text_;
    } else if (key == "user") {
      if (kind != Kind::kObject) return fail(bad("user", "want an object with an id"));
      saw_user_ = true;
      out_.features.user = {};
      push_entity(&out_.features.user, Path{"user", std::nullopt}, false);
    } else if (key == "parameters") {
      if (kind != Kind::kObject) return fail(bad("parameters", "want an object: {\"priority\": 1, \"timeout\": 50000}"));
      stack_.emplace_back(In::kParameters);
    } else if (key == "context") {
      if (kind != Kind::kObject) return fail(bad("context", "want an object of feature values"));
      out_.features.context.clear();
      push_features(&out_.features.context, "context");
    } else {  // items
      if (kind != Kind::kArray) return fail(bad("items", "required: a list of items"));
      saw_items_ = true;
      out_.features.items.clear();
      out_.features.items.reserve(std::min(array_size_, limits_.max_items));
      stack_.emplace_back(In::kItems);
    }
    return true;
  }

  bool item_value(Frame& f, Kind kind) {
    const std::size_t index = f.count++;
    if (f.count > limits_.max_items) {
      // Count the rest without keeping it, so the message can say how many.
      if (kind == Kind::kObject || kind == Kind::kArray) skip_depth_ = 1;
      return true;
    }
    if (kind != Kind::kObject) return fail(bad(Path{"items", index}.str(), "want an object with an id"));
    out_.features.items.emplace_back();
    push_entity(&out_.features.items.back(), Path{"items", index}, true);
    return true;
  }

  // An integer, as written: the service checks it against its levels. One
  // beyond int64 is kept as the largest, which no level or timeout allows.
  bool parameter_value(std::string_view key, Kind kind) {
    const std::string field = "parameters." + std::string(key);
    if (kind != Kind::kInteger) {
      return fail(bad(field, key == "priority" ? "want an integer level, 1 the highest" : "want an integer of microseconds"));
    }
    std::int64_t n = 0;
    const auto [end, error] = std::from_chars(text_.data(), text_.data() + text_.size(), n);
    if (error == std::errc::result_out_of_range) n = std::numeric_limits<std::int64_t>::max();
    (key == "priority" ? out_.scheduling.priority : out_.scheduling.timeout_us) = n;
    return true;
  }

  bool entity_value(Frame& f, Kind kind) {
    if (f.key == "id") {
      if (!is_id(kind)) return fail(bad(f.entity.str() + ".id", "want a string or an integer id"));
      f.target_entity->id = text_;
      return true;
    }
    const std::string path = f.entity.str() + ".features";
    if (kind != Kind::kObject) return fail(bad(path, "want an object of feature values"));
    f.target_entity->features.clear();
    push_features(&f.target_entity->features, path);
    return true;
  }

  bool feature_value(Frame& f, Kind kind) {
    features::Features& features = *f.target_features;
    switch (kind) {
      case Kind::kInteger:
      case Kind::kFloat:
        if (!std::isfinite(number_)) return fail(bad(member_field(f.path, f.key), "want a finite number"));
        features.insert_or_assign(std::string(f.key), features::FeatureValue(number_));
        return true;
      case Kind::kString:
        features.insert_or_assign(std::string(f.key), features::FeatureValue(std::string(text_)));
        return true;
      case Kind::kArray: {
        const std::string path = member_field(f.path, f.key);
        auto& slot = features.insert_or_assign(std::string(f.key), features::FeatureValue(std::vector<std::string>{}))
                         .first->second;
        Frame list(In::kList);
        list.path = path;
        list.target_list = &std::get<std::vector<std::string>>(slot);
        list.target_list->reserve(std::min(array_size_, limits_.max_list_length));
        stack_.push_back(std::move(list));
        return true;
      }
      default: return fail(bad(member_field(f.path, f.key), "want a number, a string or a list of ids"));
    }
  }

  bool list_value(Frame& f, Kind kind) {
    const std::size_t index = f.count++;
    if (f.count > limits_.max_list_length) {
      return fail(bad(f.path, "list of more than " + std::to_string(limits_.max_list_length) + " ids; the limit is " +
                                  std::to_string(limits_.max_list_length)));
    }
    if (!is_id(kind)) return fail(bad(f.path + "[" + std::to_string(index) + "]", "want a string or an integer id"));
    f.target_list->emplace_back(text_);
    return true;
  }

  bool end() {
    Frame& f = stack_.back();
    if (f.in == In::kEntity && f.id_required && !f.saw_id) return fail(bad(f.entity.str() + ".id", "required"));
    if (f.in == In::kItems) {
      if (f.count > limits_.max_items) {
        return fail(bad("items", std::to_string(f.count) + " items; the limit is " + std::to_string(limits_.max_items)));
      }
      if (f.count == 0) return fail(bad("items", "empty: send at least one item"));
    }
    stack_.pop_back();
    return true;
  }

  void push_entity(features::Entity* entity, Path path, bool id_required) {
    Frame f(In::kEntity);
    f.entity = path;
    f.target_entity = entity;
    f.id_required = id_required;
    stack_.push_back(std::move(f));
  }
  void push_features(features::Features* target, std::string path) {
    Frame f(In::kFeatures);
    f.path = std::move(path);
    f.target_features = target;
    stack_.push_back(std::move(f));
  }

  const api::RequestLimits& limits_;
  PredictRequest out_;
  std::vector<Frame> stack_;
  std::optional<Error> error_;
  std::size_t skip_depth_ = 0;
  bool saw_user_ = false, saw_items_ = false;
  std::string_view text_;  // the current string or integer value
  std::size_t array_size_ = 0;  // the current array's
  std::string integer_text_;
  double number_ = 0;
};

// The id of an item that is its string id alone, else nothing.
std::optional<std::string_view> plain_item_id(simdjson::dom::element item) {
  if (item.type() != simdjson::dom::element_type::OBJECT) return std::nullopt;
  const simdjson::dom::object object = item.get_object().value_unsafe();
  if (object.size() != 1) return std::nullopt;
  const auto field = *object.begin();
  if (field.key != "id" || field.value.type() != simdjson::dom::element_type::STRING) return std::nullopt;
  return field.value.get_string().value_unsafe();
}

// Feeds a parsed document to the reader in document order; false when the
// reader refused something. Recursion is bounded by simdjson's depth limit.
bool walk(simdjson::dom::element element, RequestReader& reader) {
  using simdjson::dom::element_type;
  switch (element.type()) {
    case element_type::OBJECT: {
      if (!reader.start_object()) return false;
      const simdjson::dom::object object = element.get_object().value_unsafe();
      for (const auto field : object) {
        if (!reader.key(field.key) || !walk(field.value, reader)) return false;
      }
      return reader.end_container();
    }
    case element_type::ARRAY: {
      const simdjson::dom::array array = element.get_array().value_unsafe();
      if (!reader.start_array(array.size())) return false;
      const bool items = reader.reading_items();
      for (const auto value : array) {
        if (const auto id = items ? plain_item_id(value) : std::nullopt; id && reader.plain_item(*id)) continue;
        if (!walk(value, reader)) return false;
      }
      return reader.end_container();
    }
    case element_type::STRING: return reader.string(element.get_string().value_unsafe());
    case element_type::INT64: return reader.integer(element.get_int64().value_unsafe());
    case element_type::UINT64: return reader.integer(element.get_uint64().value_unsafe());
    case element_type::DOUBLE: return reader.number(element.get_double().value_unsafe());
    case element_type::BOOL:
    case element_type::NULL_VALUE: return reader.other();
  }
  return reader.other();
}

std::string syntax_error(simdjson::error_code error) {
  switch (error) {
    case simdjson::EMPTY: return "empty: want a JSON object";
    case simdjson::DEPTH_ERROR: return "not valid JSON: nested deeper than " + std::to_string(simdjson::DEFAULT_MAX_DEPTH) + " levels";
    case simdjson::NUMBER_ERROR:
      return "not valid JSON: a malformed number, or one beyond 64-bit integers and doubles";
    case simdjson::UTF8_ERROR: return "not valid JSON: not UTF-8";
    case simdjson::UNESCAPED_CHARS: return "not valid JSON: a control character inside a string";
    case simdjson::STRING_ERROR: return "not valid JSON: a malformed string escape";
    default: return "not valid JSON";
  }
}

}  // namespace

std::string member_field(std::string_view parent, std::string_view key) {
  if (!key.empty() && key.find_first_of(".[\"") == std::string_view::npos) {
    return parent.empty() ? std::string(key) : std::string(parent) + "." + std::string(key);
  }
  return std::string(parent) + "[" + json(std::string(key)).dump() + "]";
}

Result<PredictRequest> parse_predict_request(std::string_view body, const api::RequestLimits& limits) {
  // simdjson parses the body several times faster than nlohmann's lexer
  // (4 vs 16 us for 200 items), and validates all of it before the walk:
  // a syntax error anywhere is reported as one, never as a schema error.
  // Each HTTP thread keeps its parser, whose buffers cost as much to
  // allocate as the parse. They take ~15 bytes per byte of the largest body
  // parsed (structural indexes, tape, strings, a padded copy of the body;
  // measured), so only bodies up to 32 KiB (200 items: ~3 KiB) use the kept
  // one, which stays under ~500 KiB; a larger body gets a parser of its
  // own, freed with it.
  constexpr std::size_t kKeptParserBytes = 32u << 10;
  thread_local simdjson::dom::parser kept;
  std::optional<simdjson::dom::parser> own;
  simdjson::dom::parser& parser = body.size() <= kKeptParserBytes ? kept : own.emplace();
  // A UTF-8 byte order mark is not JSON (RFC 8259 8.1) but some clients
  // send one; nlohmann's parser, used before, accepted it too.
  if (body.starts_with("\xEF\xBB\xBF")) body.remove_prefix(3);
  const auto document = parser.parse(body.data(), body.size());
  if (document.error()) return tl::unexpected(bad("body", syntax_error(document.error())));
  RequestReader reader(limits);
  walk(document.value_unsafe(), reader);
  return reader.finish();
}

std::string to_json(const PredictResponse& response) {
  // Written by hand: a DOM of hundreds of scores only to print it again
  // cost more than the rest of the reply. Keys in nlohmann's dump order,
  // null for NaN/inf.
  std::string out;
  out.reserve(80 + response.model.size() + response.version.size() + response.request_id.size() +
              24 * response.scores.size());
  out += R"({"model":)";
  out += json(response.model).dump();
  out += R"(,"model_version":)";
  out += json(response.version).dump();
  out += R"(,"request_id":)";
  out += json(response.request_id).dump();
  out += R"(,"scores":[)";
  char number[32];
  for (std::size_t i = 0; i < response.scores.size(); ++i) {
    if (i > 0) out += ',';
    const float score = response.scores[i];
    if (!std::isfinite(score)) {
      out += "null";
      continue;
    }
    // The shortest text that reads back as the same float32 (~9 digits; the
    // float widened to a double took 17 and twice the time).
    const auto written = std::to_chars(number, number + sizeof number, score);
    out.append(number, written.ptr);
    // A score stays a float to parsers that tell 1 from 1.0.
    if (std::string_view(number, written.ptr).find_first_of(".e") == std::string_view::npos) out += ".0";
  }
  out += "]}";
  return out;
}

std::string error_json(const Error& error) {
  json body = {{"error", error.message}};
  if (!error.field.empty()) body["field"] = error.field;
  return body.dump();
}

}  // namespace numaserve::codec
