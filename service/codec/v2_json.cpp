#include "codec/v2_json.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>

namespace numaserve::codec {
namespace {

using nlohmann::json;

tl::unexpected<Error> bad(const std::string& field, const std::string& message) {
  return make_error(Error::Code::kInvalidArgument, field + ": " + message, field);
}

constexpr const char* kHeaderLength = "Inference-Header-Content-Length";

std::string input_name(const features::FeatureSpec& f, const char* part) {
  return std::string(features::to_string(f.source)) + "_" + f.name + "_" + part;
}

json tensor_meta(const std::string& name, const char* datatype, json shape) {
  return {{"name", name}, {"datatype", datatype}, {"shape", std::move(shape)}};
}

template <typename T>
T element(const std::string& data, std::size_t i) {
  T v;
  std::memcpy(&v, data.data() + i * sizeof(T), sizeof(T));
  return v;
}

template <typename T>
void append(std::string& data, T v) {
  data.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

// Row-major values of `data`, flat or nested as the protocol allows.
Status flatten(const json& data, const std::string& field, std::vector<const json*>& out, std::size_t depth) {
  if (!data.is_array()) {
    out.push_back(&data);
    return {};
  }
  if (depth == 0) return bad(field, "nested deeper than the tensor's shape");
  for (const auto& v : data) {
    if (auto s = flatten(v, field, out, depth - 1); !s) return s;
  }
  return {};
}

// JSON data as the elements of the datatype it declares; a datatype no
// input takes is left for read_inputs to refuse.
Status json_data(const json& input, const std::string& field, InputTensor& t) {
  std::vector<const json*> values;
  const std::size_t depth = input.contains("shape") && input["shape"].is_array() ? input["shape"].size() : 1;
  if (auto s = flatten(input["data"], t.data_field, values, depth); !s) return s;
  const bool fp32 = t.datatype == "FP32";
  if (!fp32 && t.datatype != "INT64") return {};
  t.data.reserve(values.size() * element_size(t.datatype));
  for (std::size_t i = 0; i < values.size(); ++i) {
    const json& v = *values[i];
    if (fp32 && (!v.is_number() || !std::isfinite(v.get<double>()))) {
      return bad(field + ".data[" + std::to_string(i) + "]", "want a finite number");
    }
    if (!fp32 && !v.is_number_integer()) return bad(field + ".data[" + std::to_string(i) + "]", "want an integer");
    fp32 ? append(t.data, v.get<float>()) : append(t.data, v.get<std::int64_t>());
  }
  return {};
}

// Where a body's binary tensor data is read from, in the inputs' order.
struct BinaryData {
  std::string_view rest;
  bool given = false;  // the header says where the JSON ends
};

Result<InputTensor> input_tensor(const json& input, const std::string& field, BinaryData& binary) {
  if (!input.is_object() || !input.contains("name") || !input["name"].is_string()) {
    return bad(field + ".name", "required: a string");
  }
  for (const auto& [key, v] : input.items()) {
    if (key != "name" && key != "shape" && key != "datatype" && key != "data" && key != "parameters") {
      return bad(member_field(field, key), "unknown field");
    }
  }
  InputTensor t{field, input["name"].get<std::string>(), "", {}, "", field + ".data"};
  if (input.contains("datatype") && input["datatype"].is_string()) t.datatype = input["datatype"].get<std::string>();
  if (input.contains("shape") && input["shape"].is_array()) {
    for (const auto& d : input["shape"]) {
      if (!d.is_number_integer() || d.get<std::int64_t>() < 0) return bad(field + ".shape", "want sizes >= 0");
      t.shape.push_back(d.get<std::int64_t>());
    }
  } else {
    return bad(field + ".shape", "required: a list of sizes");
  }
  const json* size = nullptr;
  if (input.contains("parameters")) {
    if (!input["parameters"].is_object()) return bad(field + ".parameters", "want an object");
    if (input["parameters"].contains("binary_data_size")) size = &input["parameters"]["binary_data_size"];
  }
  if (size == nullptr) {
    if (!input.contains("data")) return bad(field + ".data", "required");
    if (auto s = json_data(input, field, t); !s) return tl::unexpected(s.error());
    return t;
  }
  t.data_field = field + ".parameters.binary_data_size";
  // KServe's client sends an empty tensor as "data": null beside
  // binary_data_size 0. Data in both places is refused.
  if (input.contains("data") && !input["data"].is_null() && !(input["data"].is_array() && input["data"].empty())) {
    return bad(field + ".data", "given as well as parameters.binary_data_size: give one");
  }
  if (!binary.given) {
    return bad(t.data_field, std::string("binary tensor data needs the ") + kHeaderLength + " header");
  }
  if (!size->is_number_unsigned() || size->get<std::uint64_t>() > binary.rest.size()) {
    return bad(t.data_field, "want the size in bytes of data that follows the JSON (" + std::to_string(binary.rest.size()) +
                                 " bytes are left)");
  }
  const auto n = static_cast<std::size_t>(size->get<std::uint64_t>());
  t.data.assign(binary.rest.substr(0, n));
  binary.rest.remove_prefix(n);
  return t;
}

}  // namespace

std::size_t element_size(std::string_view datatype) {
  if (datatype == "FP32") return 4;
  if (datatype == "INT64") return 8;
  return 0;
}

std::vector<TensorSpec> v2_inputs(const features::ModelSpec& model) {
  std::vector<TensorSpec> inputs{{"dense", "FP32", {-1, static_cast<std::int64_t>(model.dense_features().size())}}};
  for (const auto* f : model.sparse_features()) {
    inputs.push_back({input_name(*f, "indices"), "INT64", {-1}});
    inputs.push_back({input_name(*f, "offsets"), "INT64", {-1}});
  }
  return inputs;
}

TensorSpec v2_output() { return {"score", "FP32", {-1}}; }

std::string v2_server_metadata(std::string_view version) {
  return json{{"name", "numaserve"}, {"version", std::string(version)}, {"extensions", kV2Extensions}}.dump();
}

std::string v2_model_metadata(const features::ModelSpec& model, const std::vector<std::string>& versions) {
  auto meta = [](const TensorSpec& t) { return json{{"name", t.name}, {"datatype", t.datatype}, {"shape", t.shape}}; };
  json inputs = json::array();
  for (const auto& t : v2_inputs(model)) inputs.push_back(meta(t));
  return json{{"name", model.name},
              {"versions", versions.empty() ? std::vector<std::string>{model.version} : versions},
              {"platform", kV2Platform},
              {"inputs", inputs},
              {"outputs", {meta(v2_output())}}}
      .dump();
}

namespace {

// Datatype, rank, element count (bounded before anything is allocated for
// it) and the data's size, against what the model's slot takes.
Status check_tensor(const InputTensor& t, const char* datatype, std::size_t rank, std::size_t max_elements) {
  if (t.datatype != datatype) return bad(t.field + ".datatype", std::string("want ") + datatype);
  if (t.shape.size() != rank) return bad(t.field + ".shape", "want " + std::to_string(rank) + " dimension(s)");
  std::uint64_t elements = 1;
  for (const auto d : t.shape) {
    elements *= static_cast<std::uint64_t>(d);
    if (elements > max_elements) return bad(t.field + ".shape", "more than " + std::to_string(max_elements) + " elements");
  }
  const std::size_t size = element_size(datatype);
  if (t.data.size() % size != 0) {
    return bad(t.data_field, std::to_string(t.data.size()) + " bytes: not a whole number of " + datatype + " values");
  }
  if (t.data.size() / size != elements) {
    return bad(t.data_field, std::to_string(t.data.size() / size) + " values for shape of " + std::to_string(elements));
  }
  return {};
}

// The model's input tensors, by slot: 0 dense, 2k+1 indices and 2k+2
// offsets of sparse feature k; each given once, none missing.
Result<std::vector<const InputTensor*>> slot_tensors(const std::vector<InputTensor>& inputs,
                                                     const features::ModelSpec& model, const api::RequestLimits& limits) {
  const auto dense = model.dense_features();
  const auto sparse = model.sparse_features();
  std::map<std::string, std::size_t> wanted{{"dense", 0}};
  for (std::size_t k = 0; k < sparse.size(); ++k) {
    wanted[input_name(*sparse[k], "indices")] = 2 * k + 1;
    wanted[input_name(*sparse[k], "offsets")] = 2 * k + 2;
  }
  const std::size_t max_ids = limits.max_items * limits.max_list_length;
  std::vector<const InputTensor*> slots(wanted.size(), nullptr);
  for (const InputTensor& t : inputs) {
    const auto slot = wanted.find(t.name);
    if (slot == wanted.end()) return bad(t.field + ".name", "model " + model.name + " has no input of that name");
    if (slots[slot->second] != nullptr) return bad(t.field + ".name", "given twice");
    const bool is_dense = slot->second == 0;
    const bool is_offsets = !is_dense && slot->second % 2 == 0;
    const std::size_t max_elements =
        is_dense ? limits.max_items * std::max<std::size_t>(1, dense.size()) : is_offsets ? limits.max_items : max_ids;
    if (auto s = check_tensor(t, is_dense ? "FP32" : "INT64", is_dense ? 2 : 1, max_elements); !s) {
      return tl::unexpected(s.error());
    }
    slots[slot->second] = &t;
  }
  for (const auto& [name, slot] : wanted) {
    if (slots[slot] == nullptr) return bad("inputs", "missing tensor '" + name + "'");
  }
  return slots;
}

// The dense tensor [N, width] into the batch's rows.
Status read_dense(const InputTensor& d, std::size_t width, features::Batch& batch) {
  if (d.shape[1] != static_cast<std::int64_t>(width)) return bad(d.field + ".shape", "want [N, " + std::to_string(width) + "]");
  const auto rows = static_cast<std::size_t>(d.shape[0]);
  if (rows == 0) return bad(d.field + ".shape", "no rows");
  batch.rows = rows;
  batch.dense_width = width;
  batch.dense.resize(d.data.size() / sizeof(float));
  for (std::size_t i = 0; i < batch.dense.size(); ++i) {
    batch.dense[i] = element<float>(d.data, i);
    if (!std::isfinite(batch.dense[i])) return bad(d.field + ".data[" + std::to_string(i) + "]", "want a finite number");
  }
  return {};
}

std::vector<std::int64_t> int64s(const InputTensor& t) {
  std::vector<std::int64_t> out(t.data.size() / sizeof(std::int64_t));
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = element<std::int64_t>(t.data, i);
  return out;
}

// One embedding bag: indices inside the table, one offset per row, offsets
// from 0 that never fall or pass the indices.
Result<features::Bag> read_bag(const InputTensor& ti, const InputTensor& to, std::size_t rows, const std::string& table,
                               std::int64_t table_rows) {
  auto indices = int64s(ti);
  auto offsets = int64s(to);
  if (offsets.size() != rows) return bad(to.field + ".shape", "want [" + std::to_string(rows) + "], one offset per row");
  for (std::size_t i = 0; i < indices.size(); ++i) {
    const std::int64_t v = indices[i];
    if (v < 0 || v >= table_rows) {
      return bad(ti.field + ".data[" + std::to_string(i) + "]",
                 "index " + std::to_string(v) + " outside table '" + table + "' (rows 0.." +
                     std::to_string(table_rows - 1) + ")");
    }
  }
  std::int64_t previous = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int64_t o = offsets[r];
    if ((r == 0 && o != 0) || o < previous || o > static_cast<std::int64_t>(indices.size())) {
      return bad(to.field + ".data[" + std::to_string(r) + "]",
                 "offsets start at 0 and never fall or pass the " + std::to_string(indices.size()) + " indices");
    }
    previous = o;
  }
  return features::Bag{std::move(indices), std::move(offsets)};
}

// Whether the reply carries the scores as binary data: the request's
// binary_data_output, overridden by the score output's own binary_data.
Result<bool> binary_output(const json& root) {
  bool binary = false;
  if (root.contains("parameters")) {
    const json& p = root["parameters"];
    if (!p.is_object()) return bad("parameters", "want an object");
    if (p.contains("binary_data_output")) {
      if (!p["binary_data_output"].is_boolean()) return bad("parameters.binary_data_output", "want true or false");
      binary = p["binary_data_output"].get<bool>();
    }
  }
  if (!root.contains("outputs")) return binary;
  if (!root["outputs"].is_array()) return bad("outputs", "want a list of outputs");
  for (std::size_t i = 0; i < root["outputs"].size(); ++i) {
    const json& o = root["outputs"][i];
    const std::string field = "outputs[" + std::to_string(i) + "]";
    if (!o.is_object() || !o.contains("name") || o["name"] != "score") return bad(field + ".name", "the model's only output is 'score'");
    if (!o.contains("parameters")) continue;
    const json& p = o["parameters"];
    if (!p.is_object()) return bad(field + ".parameters", "want an object");
    if (!p.contains("binary_data")) continue;
    if (!p["binary_data"].is_boolean()) return bad(field + ".parameters.binary_data", "want true or false");
    binary = p["binary_data"].get<bool>();
  }
  return binary;
}

// The request's priority and timeout: integers among its parameters
// (Triton's names), the rest of which are the codec's or ignored.
Result<Scheduling> scheduling(const json& root) {
  Scheduling out;
  if (!root.contains("parameters") || !root["parameters"].is_object()) return out;
  const json& p = root["parameters"];
  for (const auto& [key, target] : {std::pair{"priority", &out.priority}, std::pair{"timeout", &out.timeout_us}}) {
    if (!p.contains(key)) continue;
    const json& v = p[key];
    if (v.is_number_unsigned()) {
      *target = saturated(v.get<std::uint64_t>());
    } else if (v.is_number_integer()) {
      *target = v.get<std::int64_t>();
    } else {
      return bad(std::string("parameters.") + key, "want an integer");
    }
  }
  return out;
}

// The JSON part of a body, and its binary data.
Result<json> split_body(std::string_view body, std::optional<std::size_t> json_length, BinaryData& binary) {
  if (json_length) {
    if (*json_length > body.size()) {
      return bad(kHeaderLength, std::to_string(*json_length) + " is more than the body's " + std::to_string(body.size()) + " bytes");
    }
    binary = BinaryData{body.substr(*json_length), true};
    body = body.substr(0, *json_length);
  }
  // nlohmann stops at a NUL byte and ignores what follows, so a JSON part
  // with raw tensor bytes after it would parse; no JSON text holds a NUL.
  const bool nul = body.find('\0') != std::string_view::npos;
  json root = nul ? json(json::value_t::discarded) : json::parse(body, nullptr, false);
  if (root.is_discarded()) {
    return bad("body", std::string("not valid JSON") +
                           (nul && !json_length ? std::string(" (binary tensor data needs the ") + kHeaderLength + " header)" : ""));
  }
  if (!root.is_object()) return bad("body", "want a JSON object");
  return root;
}

}  // namespace

Result<features::Batch> read_inputs(std::vector<InputTensor>& inputs, const features::ModelSpec& model,
                                    const api::RequestLimits& limits) {
  auto slots = slot_tensors(inputs, model, limits);
  if (!slots) return tl::unexpected(slots.error());
  features::Batch batch;
  if (auto read = read_dense(*(*slots)[0], model.dense_features().size(), batch); !read) {
    return tl::unexpected(read.error());
  }
  const auto sparse = model.sparse_features();
  for (std::size_t k = 0; k < sparse.size(); ++k) {
    auto bag = read_bag(*(*slots)[2 * k + 1], *(*slots)[2 * k + 2], batch.rows, sparse[k]->table,
                        static_cast<std::int64_t>(model.tables.at(sparse[k]->table)));
    if (!bag) return tl::unexpected(bag.error());
    batch.bags.push_back(std::move(*bag));
  }
  return batch;
}

Result<InferRequest> parse_infer_request(std::string_view body, std::optional<std::size_t> json_length,
                                         const features::ModelSpec& model, const api::RequestLimits& limits) {
  BinaryData binary;
  auto parsed = split_body(body, json_length, binary);
  if (!parsed) return tl::unexpected(parsed.error());
  const json& root = *parsed;
  for (const auto& [key, v] : root.items()) {
    if (key != "id" && key != "inputs" && key != "outputs" && key != "parameters" && key != "model_name" &&
        key != "model_version") {
      return bad(member_field("", key), "unknown field");
    }
  }
  // KServe's client repeats the path's model in the body: it must agree.
  for (const auto& [key, want] : {std::pair{"model_name", &model.name}, std::pair{"model_version", &model.version}}) {
    if (!root.contains(key)) continue;
    if (!root[key].is_string() || root[key].get<std::string>() != *want) {
      return bad(key, "this is model '" + model.name + "' version '" + model.version + "' (the path's): want '" + *want + "'");
    }
  }
  InferRequest out;
  if (root.contains("id")) {
    if (!root["id"].is_string()) return bad("id", "want a string");
    out.id = root["id"].get<std::string>();
  }
  auto binary_out = binary_output(root);
  if (!binary_out) return tl::unexpected(binary_out.error());
  out.binary_output = *binary_out;
  auto scheduled = scheduling(root);
  if (!scheduled) return tl::unexpected(scheduled.error());
  out.scheduling = *scheduled;
  if (!root.contains("inputs") || !root["inputs"].is_array()) return bad("inputs", "required: a list of tensors");
  std::vector<InputTensor> inputs;
  for (std::size_t i = 0; i < root["inputs"].size(); ++i) {
    auto t = input_tensor(root["inputs"][i], "inputs[" + std::to_string(i) + "]", binary);
    if (!t) return tl::unexpected(t.error());
    inputs.push_back(std::move(*t));
  }
  if (!binary.rest.empty()) {
    return bad(kHeaderLength, std::to_string(binary.rest.size()) + " bytes after the JSON that no input's binary_data_size takes");
  }
  auto batch = read_inputs(inputs, model, limits);
  if (!batch) return tl::unexpected(batch.error());
  out.batch = std::move(*batch);
  return out;
}

InferReply v2_infer_response(const features::ModelSpec& model, const std::string& id, const std::vector<float>& scores,
                             bool binary_output) {
  json output = tensor_meta("score", "FP32", {scores.size()});
  if (binary_output) {
    output["parameters"] = {{"binary_data_size", scores.size() * sizeof(float)}};
  } else {
    output["data"] = scores;
  }
  json body = {{"model_name", model.name}, {"model_version", model.version}, {"outputs", {output}}};
  if (!id.empty()) body["id"] = id;
  InferReply reply{body.dump(), std::nullopt};
  if (binary_output) {
    reply.json_length = reply.body.size();
    for (const float s : scores) append(reply.body, s);
  }
  return reply;
}

}  // namespace numaserve::codec
