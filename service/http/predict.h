#pragma once
// POST /predict as plain types: what a request says and what the reply
// carries. JSON conversion lives beside them in predict_json.cpp; the
// transport (server.cpp) is the only file that sees sockets.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "features/extract.h"

namespace numaserve::http {

struct PredictRequest {
  std::optional<std::string> model;  // default: the only / first model served
  std::string request_id;            // echoed back; generated when absent
  features::Request features;        // user, context, items
};

struct PredictResponse {
  std::string model;
  std::string version;
  std::string request_id;
  std::vector<float> scores;  // one per item, in request order
};

struct RequestLimits {
  std::size_t max_items = 2000;
  std::size_t max_features_per_entity = 256;
  std::size_t max_list_length = 1024;
};

// How a refusal names a member the client chose the key of: "parent.key",
// or parent["key"] (JSON-quoted) when the key is empty or holds a '.', '['
// or '"', so the field a refusal names is never empty or ambiguous. Both
// codecs (/predict and KServe v2) name members this way.
std::string member_field(std::string_view parent, std::string_view key);

}  // namespace numaserve::http
