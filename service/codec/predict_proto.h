#pragma once
// numaserve.v1.PredictRequest (proto/ranking.proto) read off the wire by
// hand, straight into the API's types, as predict_json.h reads /predict's
// JSON. protobuf's generated parser builds every entity, map entry and
// string as a message of its own first, and those were then copied again:
// for a request of 200 items that cost more than the JSON route's whole
// parse (measured in bench/serving.sh's (g)). The wire rules are protobuf's
// own for proto3 (3.21, Debian's), so a message is taken exactly when the
// generated parser takes it and means the same — tests/fuzz/grpc_messages.cpp
// checks the two against each other on every input.

#include <string_view>

#include "api/config.h"
#include "codec/predict_json.h"
#include "numaserve/common/result.h"

namespace numaserve::codec {

// A refusal names the field as /predict's JSON does ("items[3].id:
// required"), or "message" for bytes that are not the message, with the
// offset where they stop being it.
Result<PredictRequest> parse_predict_proto(std::string_view message, const api::RequestLimits& limits);

}  // namespace numaserve::codec
