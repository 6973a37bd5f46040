#include "commands/extract.h"

#include <fstream>
#include <functional>
#include <istream>
#include <ostream>

#include <nlohmann/json.hpp>

#include "codec/errors.h"
#include "codec/predict_json.h"
#include "feature_store/embedded.h"

namespace numaserve::commands {
namespace {

using nlohmann::json;

json batch_json(const features::Batch& batch) {
  // A float32 widened to double prints (shortest round trip of the double)
  // as a decimal that narrows back to the same float32.
  json dense = json::array();
  for (float v : batch.dense) dense.push_back(static_cast<double>(v));
  json bags = json::array();
  for (const auto& bag : batch.bags) bags.push_back({{"indices", bag.indices}, {"offsets", bag.offsets}});
  return {{"rows", batch.rows}, {"dense_width", batch.dense_width}, {"dense", std::move(dense)}, {"bags", std::move(bags)}};
}

json refusal_json(const Error& error) {
  json out = {{"status", codec::http_status(error.code)}, {"error", error.message}};
  if (!error.field.empty()) out["field"] = error.field;
  return out;
}

// One request the way /predict takes it up to its forward.
Result<features::Batch> extract_one(const std::string& body, const features::ModelSpec& spec,
                                    feature_store::FeatureStore& store) {
  auto parsed = codec::parse_predict_request(body, api::RequestLimits{});
  if (!parsed) return tl::unexpected(parsed.error());
  if (parsed->model && *parsed->model != spec.name) {
    return make_error(Error::Code::kNotFound, "model '" + *parsed->model + "' is not served here", "model");
  }
  std::optional<Result<features::Batch>> batch;
  store.fetch(0, 0, parsed->features, [&](Result<feature_store::Found>&& found) {
    if (!found) {
      batch = tl::unexpected(found.error());
      return;
    }
    batch = features::extract(spec, parsed->features, found->stored, found->cache);
  });
  return std::move(*batch);  // the embedded store answers inside fetch()
}

}  // namespace

std::vector<OptionSpec> extract_options(ExtractConfig& c) {
  return command_line_only({
      text_option("model_dir", "DIR", "The model whose model.yaml defines the features (model.pt is not read)", c.model_dir),
      text_option("feature_store", "FILE", "The JSON Lines store the requests' ids are looked up in", c.feature_store),
  });
}

namespace {

// Each line of `in` extracted as /predict would, handed to `each` with its line number.
Status extract_lines(const ExtractConfig& c, std::istream& in,
                     const std::function<Status(Result<features::Batch>&&, std::size_t line)>& each) {
  if (c.model_dir.empty()) return make_error(Error::Code::kInvalidArgument, "--model-dir: give a model directory", "model_dir");
  auto spec = features::read_model_spec(c.model_dir);
  if (!spec) return tl::unexpected(spec.error());
  auto entities = c.feature_store.empty() ? feature_store::Entities::parse("", "no store")
                                          : feature_store::Entities::load(c.feature_store);
  if (!entities) return tl::unexpected(entities.error());
  auto store = feature_store::EmbeddedStore::open(std::move(*entities), {&*spec});
  if (!store) return tl::unexpected(store.error());
  std::size_t number = 0;
  for (std::string line; std::getline(in, line);) {
    if (auto done = each(extract_one(line, *spec, **store), ++number); !done) return done;
  }
  return {};
}

}  // namespace

Status run_extract(const ExtractConfig& c, std::istream& in, std::ostream& out) {
  auto done = extract_lines(c, in, [&out](Result<features::Batch>&& batch, std::size_t) {
    out << (batch ? batch_json(*batch) : refusal_json(batch.error())).dump() << '\n';
    return Status();
  });
  out.flush();
  return done;
}

Result<std::vector<features::Batch>> extract_requests(const ExtractConfig& c, const std::filesystem::path& requests) {
  std::ifstream in(requests);
  if (!in) return make_error(Error::Code::kNotFound, requests.string() + ": cannot open", "requests");
  std::vector<features::Batch> out;
  auto done = extract_lines(c, in, [&](Result<features::Batch>&& batch, std::size_t line) -> Status {
    if (!batch) {
      return make_error(Error::Code::kInvalidArgument, requests.string() + " line " + std::to_string(line) + ": " +
                                                           batch.error().message, "requests");
    }
    out.push_back(std::move(*batch));
    return {};
  });
  if (!done) return tl::unexpected(done.error());
  return out;
}

Result<std::vector<std::vector<float>>> read_labels(const std::filesystem::path& file) {
  std::ifstream in(file);
  if (!in) return make_error(Error::Code::kNotFound, file.string() + ": cannot open", "labels");
  std::vector<std::vector<float>> out;
  std::size_t number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    const json labels = json::parse(line, nullptr, /*allow_exceptions=*/false);
    std::vector<float> row;
    bool ok = labels.is_array();
    for (const auto& label : ok ? labels : json::array()) {
      ok = ok && label.is_number() && (label == 0 || label == 1);
      if (ok) row.push_back(label.get<float>());
    }
    if (!ok) {
      return make_error(Error::Code::kInvalidArgument,
                        file.string() + " line " + std::to_string(number) + ": want a JSON array of 0 and 1 (one per item)",
                        "labels");
    }
    out.push_back(std::move(row));
  }
  return out;
}


}  // namespace numaserve::commands
