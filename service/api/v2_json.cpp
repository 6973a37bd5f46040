#include "api/v2_json.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <map>

namespace numaserve::api {
namespace {

using nlohmann::json;

tl::unexpected<Error> bad(const std::string& field, const std::string& message) {
  return make_error(Error::Code::kInvalidArgument, field + ": " + message, field);
}

constexpr const char* kNoBinaryData =
    "tensor data must be JSON: the binary tensor data extension is not supported (tritonclient: binary_data=False)";

std::string input_name(const features::FeatureSpec& f, const char* part) {
  return std::string(features::to_string(f.source)) + "_" + f.name + "_" + part;
}

json tensor_meta(const std::string& name, const char* datatype, json shape) {
  return {{"name", name}, {"datatype", datatype}, {"shape", std::move(shape)}};
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

struct Tensor {
  std::string field;  // "inputs[i]"
  std::vector<std::int64_t> shape;
  std::vector<const json*> data;
};

Result<Tensor> tensor(const json& input, const std::string& field, const char* datatype, std::size_t rank,
                      std::size_t max_elements) {
  for (const auto& [key, v] : input.items()) {
    if (key != "name" && key != "shape" && key != "datatype" && key != "data" && key != "parameters") {
      return bad(member_field(field, key), "unknown field");
    }
  }
  if (input.contains("parameters") && input["parameters"].is_object() && input["parameters"].contains("binary_data_size")) {
    return bad(field + ".parameters.binary_data_size", kNoBinaryData);
  }
  if (!input.contains("datatype") || input["datatype"] != datatype) return bad(field + ".datatype", std::string("want ") + datatype);
  if (!input.contains("shape") || !input["shape"].is_array() || input["shape"].size() != rank) {
    return bad(field + ".shape", "want " + std::to_string(rank) + " dimension(s)");
  }
  Tensor t{field, {}, {}};
  std::uint64_t elements = 1;
  for (const auto& d : input["shape"]) {
    if (!d.is_number_integer() || d.get<std::int64_t>() < 0) return bad(field + ".shape", "want sizes >= 0");
    t.shape.push_back(d.get<std::int64_t>());
    elements *= static_cast<std::uint64_t>(t.shape.back());
    if (elements > max_elements) return bad(field + ".shape", "more than " + std::to_string(max_elements) + " elements");
  }
  if (!input.contains("data")) return bad(field + ".data", "required");
  if (auto s = flatten(input["data"], field + ".data", t.data, rank); !s) return tl::unexpected(s.error());
  if (t.data.size() != elements) {
    return bad(field + ".data", std::to_string(t.data.size()) + " values for shape of " + std::to_string(elements));
  }
  return t;
}

Result<std::vector<std::int64_t>> int64s(const Tensor& t) {
  std::vector<std::int64_t> out;
  out.reserve(t.data.size());
  for (std::size_t i = 0; i < t.data.size(); ++i) {
    if (!t.data[i]->is_number_integer()) return bad(t.field + ".data[" + std::to_string(i) + "]", "want an integer");
    out.push_back(t.data[i]->get<std::int64_t>());
  }
  return out;
}

}  // namespace

std::string v2_server_metadata(std::string_view version) {
  return json{{"name", "numaserve"}, {"version", std::string(version)}, {"extensions", json::array()}}.dump();
}

std::string v2_model_metadata(const features::ModelSpec& model, const std::vector<std::string>& versions) {
  json inputs = json::array();
  inputs.push_back(tensor_meta("dense", "FP32", {-1, model.dense_features().size()}));
  for (const auto* f : model.sparse_features()) {
    inputs.push_back(tensor_meta(input_name(*f, "indices"), "INT64", {-1}));
    inputs.push_back(tensor_meta(input_name(*f, "offsets"), "INT64", {-1}));
  }
  return json{{"name", model.name},
              {"versions", versions.empty() ? std::vector<std::string>{model.version} : versions},
              {"platform", "pytorch_torchscript"},
              {"inputs", inputs},
              {"outputs", {tensor_meta("score", "FP32", {-1})}}}
      .dump();
}

namespace {

// The model's input tensors, by slot: 0 dense, 2k+1 indices and 2k+2
// offsets of sparse feature k; each given once, none missing.
Result<std::vector<Tensor>> input_tensors(const json& inputs, const features::ModelSpec& model,
                                          const RequestLimits& limits) {
  const auto dense = model.dense_features();
  const auto sparse = model.sparse_features();
  std::map<std::string, std::size_t> wanted{{"dense", 0}};
  for (std::size_t k = 0; k < sparse.size(); ++k) {
    wanted[input_name(*sparse[k], "indices")] = 2 * k + 1;
    wanted[input_name(*sparse[k], "offsets")] = 2 * k + 2;
  }
  const std::size_t max_ids = limits.max_items * limits.max_list_length;
  std::vector<std::optional<Tensor>> slots(wanted.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const std::string field = "inputs[" + std::to_string(i) + "]";
    if (!inputs[i].is_object() || !inputs[i].contains("name") || !inputs[i]["name"].is_string()) {
      return bad(field + ".name", "required: a string");
    }
    const auto slot = wanted.find(inputs[i]["name"].get<std::string>());
    if (slot == wanted.end()) return bad(field + ".name", "model " + model.name + " has no input of that name");
    if (slots[slot->second]) return bad(field + ".name", "given twice");
    const bool is_dense = slot->second == 0;
    const bool is_offsets = !is_dense && slot->second % 2 == 0;
    auto t = tensor(inputs[i], field, is_dense ? "FP32" : "INT64", is_dense ? 2 : 1,
                    is_dense ? limits.max_items * std::max<std::size_t>(1, dense.size()) : is_offsets ? limits.max_items : max_ids);
    if (!t) return tl::unexpected(t.error());
    slots[slot->second] = std::move(*t);
  }
  std::vector<Tensor> out;
  for (const auto& [name, slot] : wanted) {
    if (!slots[slot]) return bad("inputs", "missing tensor '" + name + "'");
  }
  for (auto& slot : slots) out.push_back(std::move(*slot));
  return out;
}

// The dense tensor [N, width] into the batch's rows.
Status read_dense(const Tensor& d, std::size_t width, features::Batch& batch) {
  if (d.shape[1] != static_cast<std::int64_t>(width)) return bad(d.field + ".shape", "want [N, " + std::to_string(width) + "]");
  const auto rows = static_cast<std::size_t>(d.shape[0]);
  if (rows == 0) return bad(d.field + ".shape", "no rows");
  batch.rows = rows;
  batch.dense_width = width;
  batch.dense.reserve(d.data.size());
  for (std::size_t i = 0; i < d.data.size(); ++i) {
    if (!d.data[i]->is_number() || !std::isfinite(d.data[i]->get<double>())) {
      return bad(d.field + ".data[" + std::to_string(i) + "]", "want a finite number");
    }
    batch.dense.push_back(d.data[i]->get<float>());
  }
  return {};
}

// One embedding bag: indices inside the table, one offset per row, offsets
// from 0 that never fall or pass the indices.
Result<features::Bag> read_bag(const Tensor& ti, const Tensor& to, std::size_t rows, const std::string& table,
                               std::int64_t table_rows) {
  auto indices = int64s(ti);
  if (!indices) return tl::unexpected(indices.error());
  auto offsets = int64s(to);
  if (!offsets) return tl::unexpected(offsets.error());
  if (offsets->size() != rows) return bad(to.field + ".shape", "want [" + std::to_string(rows) + "], one offset per row");
  for (std::size_t i = 0; i < indices->size(); ++i) {
    const std::int64_t v = (*indices)[i];
    if (v < 0 || v >= table_rows) {
      return bad(ti.field + ".data[" + std::to_string(i) + "]",
                 "index " + std::to_string(v) + " outside table '" + table + "' (rows 0.." +
                     std::to_string(table_rows - 1) + ")");
    }
  }
  std::int64_t previous = 0;
  for (std::size_t r = 0; r < rows; ++r) {
    const std::int64_t o = (*offsets)[r];
    if ((r == 0 && o != 0) || o < previous || o > static_cast<std::int64_t>(indices->size())) {
      return bad(to.field + ".data[" + std::to_string(r) + "]",
                 "offsets start at 0 and never fall or pass the " + std::to_string(indices->size()) + " indices");
    }
    previous = o;
  }
  return features::Bag{std::move(*indices), std::move(*offsets)};
}

}  // namespace

Result<InferRequest> parse_infer_request(std::string_view body, const features::ModelSpec& model,
                                         const RequestLimits& limits) {
  // nlohmann stops at a NUL byte and ignores what follows, so a JSON header
  // with raw tensor bytes after it would parse; no JSON text holds a NUL.
  // Triton's clients send such bodies by default (binary tensor data): say
  // what to change rather than only that it does not parse.
  const bool nul = body.find('\0') != std::string_view::npos;
  const json root = nul ? json(json::value_t::discarded) : json::parse(body, nullptr, false);
  if (root.is_discarded()) {
    return bad("body", std::string("not valid JSON (") + kNoBinaryData + ")");
  }
  if (!root.is_object()) return bad("body", "want a JSON object");
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
  if (!root.contains("inputs") || !root["inputs"].is_array()) return bad("inputs", "required: a list of tensors");
  auto tensors = input_tensors(root["inputs"], model, limits);
  if (!tensors) return tl::unexpected(tensors.error());
  if (auto read = read_dense((*tensors)[0], model.dense_features().size(), out.batch); !read) {
    return tl::unexpected(read.error());
  }
  const auto sparse = model.sparse_features();
  for (std::size_t k = 0; k < sparse.size(); ++k) {
    auto bag = read_bag((*tensors)[2 * k + 1], (*tensors)[2 * k + 2], out.batch.rows, sparse[k]->table,
                        static_cast<std::int64_t>(model.tables.at(sparse[k]->table)));
    if (!bag) return tl::unexpected(bag.error());
    out.batch.bags.push_back(std::move(*bag));
  }
  return out;
}

std::string v2_infer_response(const features::ModelSpec& model, const std::string& id, const std::vector<float>& scores) {
  json output = tensor_meta("score", "FP32", {scores.size()});
  output["data"] = scores;
  json body = {{"model_name", model.name}, {"model_version", model.version}, {"outputs", {output}}};
  if (!id.empty()) body["id"] = id;
  return body.dump();
}

}  // namespace numaserve::api
