#pragma once
// KServe Open Inference Protocol v2 (the REST half) over the same models:
// the model's input tensors named and typed in its metadata, an infer
// request carrying them, and the scores back. A Triton or KServe client can
// call numaserve with already-extracted features.
//
// Inputs of a model, from model.yaml:
//   dense                      FP32  [N, D]  the numeric features in order
//   <source>_<name>_indices    INT64 [L]     one pair per id / id-list
//   <source>_<name>_offsets    INT64 [N]     feature: an embedding bag
// Output: score FP32 [N].

#include <string>
#include <string_view>

#include "features/extract.h"
#include "features/model_spec.h"
#include "api/predict_json.h"
#include "numaserve/common/result.h"

namespace numaserve::api {

struct InferRequest {
  std::string id;
  features::Batch batch;
};

std::string v2_server_metadata(std::string_view version);
// `versions`: every version of the model served now (the model's own when empty).
std::string v2_model_metadata(const features::ModelSpec& model, const std::vector<std::string>& versions = {});

// Checks every tensor against the model: names, datatypes, shapes, data
// lengths, offsets that start at 0 and never fall, indices inside their
// table. Errors name the field: "inputs[2].data[7]: index 5000 outside
// table 'tag' (rows 0..4999)".
Result<InferRequest> parse_infer_request(std::string_view body, const features::ModelSpec& model,
                                         const RequestLimits& limits);

std::string v2_infer_response(const features::ModelSpec& model, const std::string& id, const std::vector<float>& scores);

}  // namespace numaserve::api
