#pragma once
// The JSON body of POST /predict:
//   {"model"?: "ranker_a", "request_id"?: "r1",
//    "user": {"id": "u1", "features"?: {...}},
//    "context"?: {"hour": 13},
//    "items": [{"id": "i1", "features"?: {...}}, ...]}
// and the reply {"model", "version", "request_id", "scores": [...]}.
// Feature values are numbers, strings, or lists of strings (integer ids in a
// list are taken as their decimal text). Every rejection names the field a
// client wrote: "items[3].features.price: want a number, a string or a list".

#include <string>
#include <string_view>

#include "http/predict.h"
#include "numaserve/common/result.h"

namespace numaserve::http {

Result<PredictRequest> parse_predict_request(std::string_view body, const RequestLimits& limits);

std::string to_json(const PredictResponse& response);

// {"error": message, "field": field} — the body of every 4xx/5xx reply.
std::string error_json(const Error& error);

}  // namespace numaserve::http
