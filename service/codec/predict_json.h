#pragma once
// The JSON body of POST /predict:
//   {"model"?: "ranker_a", "version"?: "3" | "stable", "request_id"?: "r1",
//    "user": {"id": "u1", "features"?: {...}},
//    "context"?: {"hour": 13},
//    "items": [{"id": "i1", "features"?: {...}}, ...],
//    "parameters"?: {"priority"?: 1, "timeout"?: 50000}}
// and the reply {"model", "model_version", "request_id", "scores": [...]},
// as plain types and their JSON codec (both the API's, not the transport's).
// Feature values are numbers, strings, or lists of strings (integer ids in a
// list are taken as their decimal text). Every rejection names the field a
// client wrote: "items[3].features.price: want a number, a string or a list".

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "api/config.h"
#include "codec/scheduling.h"
#include "features/extract.h"
#include "numaserve/common/result.h"

namespace numaserve::codec {

struct PredictRequest {
  std::optional<std::string> model;  // default: the only / first model served
  std::string version;               // a version number or label; default: the model's default version
  std::string request_id;            // echoed back; generated when absent
  features::Request features;        // user, context, items
  Scheduling scheduling;             // "parameters": {"priority"?: N, "timeout"?: us}
};

struct PredictResponse {
  std::string model;
  std::string version;
  std::string request_id;
  std::vector<float> scores;  // one per item, in request order
};

// How a refusal names a member the client chose the key of: "parent.key",
// or parent["key"] (JSON-quoted) when the key is empty or holds a '.', '['
// or '"', so the field a refusal names is never empty or ambiguous. Both
// codecs (/predict and KServe v2) name members this way.
std::string member_field(std::string_view parent, std::string_view key);

Result<PredictRequest> parse_predict_request(std::string_view body, const api::RequestLimits& limits);

std::string to_json(const PredictResponse& response);

// {"error": message, "field": field} — the body of every 4xx/5xx reply.
std::string error_json(const Error& error);

}  // namespace numaserve::codec
