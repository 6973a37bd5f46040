#pragma once
// KServe Open Inference Protocol v2 over the same models: the model's input
// tensors named and typed in its metadata, an infer request carrying them,
// and the scores back. A Triton or KServe client can call numaserve with
// already-extracted features. The REST codec (JSON, and Triton's binary
// tensor data extension) is here; the gRPC codec (rpc/) reads its tensors
// into the same InputTensor and the same checks.
//
// Inputs of a model, from model.yaml:
//   dense                      FP32  [N, D]  the numeric features in order
//   <source>_<name>_indices    INT64 [L]     one pair per id / id-list
//   <source>_<name>_offsets    INT64 [N]     feature: an embedding bag
// Output: score FP32 [N].

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "codec/predict_json.h"
#include "codec/scheduling.h"
#include "features/extract.h"
#include "features/model_spec.h"
#include "numaserve/common/result.h"

namespace numaserve::codec {

// One input tensor as a codec read it. Its data are little-endian elements
// of its datatype, whichever way they came: JSON values converted, Triton's
// binary tensor bytes, or a gRPC request's contents.
struct InputTensor {
  std::string field;  // how a refusal names it: "inputs[2]"
  std::string name, datatype;
  std::vector<std::int64_t> shape;
  std::string data;
  std::string data_field;  // how a refusal of its size names it: "inputs[2].data"
};

// The datatype's element size in bytes, 0 for one no model input takes.
std::size_t element_size(std::string_view datatype);

// Checks every tensor against the model: names, datatypes, shapes, data
// lengths, offsets that start at 0 and never fall, indices inside their
// table; and reads them into the model's batch. Errors name the field:
// "inputs[2].data[7]: index 5000 outside table 'tag' (rows 0..4999)".
Result<features::Batch> read_inputs(std::vector<InputTensor>& inputs, const features::ModelSpec& model,
                                    const api::RequestLimits& limits);

struct InferRequest {
  std::string id;
  features::Batch batch;
  bool binary_output = false;  // the scores as raw bytes after the JSON (Triton's binary tensor data)
  Scheduling scheduling;       // "parameters": {"priority": N, "timeout": us}
};

// A tensor as the model's metadata describes it (-1: any size).
struct TensorSpec {
  std::string name;
  std::string datatype;
  std::vector<std::int64_t> shape;
};
std::vector<TensorSpec> v2_inputs(const features::ModelSpec& model);
TensorSpec v2_output();  // score FP32 [-1]

inline constexpr const char* kV2Platform = "pytorch_torchscript";  // a model's metadata's platform
// The extensions a server's metadata names.
inline const std::vector<std::string> kV2Extensions = {"binary_tensor_data"};

std::string v2_server_metadata(std::string_view version);
// `versions`: every version of the model served now (the model's own when empty).
std::string v2_model_metadata(const features::ModelSpec& model, const std::vector<std::string>& versions = {});

// A REST infer body. With `json_length` (the Inference-Header-Content-Length
// header of Triton's binary tensor data extension) the body is that many
// bytes of JSON, then each input's data whose parameters say
// binary_data_size, in the inputs' order.
Result<InferRequest> parse_infer_request(std::string_view body, std::optional<std::size_t> json_length,
                                         const features::ModelSpec& model, const api::RequestLimits& limits);

struct InferReply {
  std::string body;
  std::optional<std::size_t> json_length;  // binary output: the JSON's bytes, the scores after it
};
InferReply v2_infer_response(const features::ModelSpec& model, const std::string& id, const std::vector<float>& scores,
                             bool binary_output = false);

}  // namespace numaserve::codec
