// POST /predict bodies: never a crash; a refusal names its field; what is
// accepted stays within the limits; and the JSON grammar is nlohmann's —
// a body nlohmann refuses is refused as a syntax error, one it accepts is
// not — but for the documented differences: numbers beyond 64-bit integers
// and doubles, and bytes after a NUL (nlohmann stops there).
#include <nlohmann/json.hpp>

#include "codec/predict_json.h"
#include "fuzz.h"

using namespace numaserve;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const auto body = fuzz::text(data, size);
  api::RequestLimits limits;  // small, so the limits are reached
  limits.max_items = 20;
  limits.max_features_per_entity = 8;
  limits.max_list_length = 8;
  const auto parsed = codec::parse_predict_request(body, limits);
  if (parsed) {
    const auto& r = parsed->features;
    FUZZ_CHECK(!r.items.empty() && r.items.size() <= limits.max_items, "%zu items", r.items.size());
    auto within = [&limits](const features::Features& f) {
      if (f.size() > limits.max_features_per_entity) return false;
      for (const auto& [name, value] : f) {
        if (const auto* list = std::get_if<std::vector<std::string>>(&value); list && list->size() > limits.max_list_length) {
          return false;
        }
      }
      return true;
    };
    FUZZ_CHECK(within(r.user.features) && within(r.context), "user or context beyond the limits");
    for (const auto& item : r.items) FUZZ_CHECK(within(item.features), "an item beyond the limits");
  } else {
    FUZZ_CHECK(!parsed.error().field.empty(), "refused without a field: %s", parsed.error().message.c_str());
  }

  if (body.find('\0') != std::string_view::npos) return 0;
  const bool json = nlohmann::json::accept(body);
  // By field and message: a top-level key may itself be called "body", or
  // "body: empty".
  const bool syntax_error = !parsed && parsed.error().field == "body" &&
                            (parsed.error().message.starts_with("body: not valid JSON") ||
                             parsed.error().message.starts_with("body: empty"));
  const bool beyond_64_bits = !parsed && parsed.error().message.find("beyond 64-bit") != std::string::npos;
  FUZZ_CHECK(syntax_error == !json || (json && beyond_64_bits), "nlohmann %s it, the reader %s",
             json ? "accepts" : "refuses", parsed ? "accepts it" : parsed.error().message.c_str());
  return 0;
}
