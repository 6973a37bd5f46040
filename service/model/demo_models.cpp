// Demo models built without Python: weights from a seeded generator, the
// forward written as TorchScript source and compiled by Module::define.
// model.yaml is written first and parsed back, and the forward is generated
// from the parsed spec, so the two halves of the contract cannot drift.
#include "model/demo_models.h"

#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>

#include <nlohmann/json.hpp>

#include "features/model_spec.h"

namespace numaserve::model {
namespace {

constexpr std::int64_t kEmbeddingDim = 32;  // ranker_a
constexpr std::int64_t kSmallDim = 8;       // ranker_b

Status write_file(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return make_error(Error::Code::kIo, "cannot write " + path.string());
  return {};
}

// Fixed-size tables first; the four big ones share what is left of the
// embedding budget, so `embedding_mb` scales the model from a test-sized
// one (~1 MB) to the demo's (~200 MB, where memory locality shows).
std::map<std::string, std::int64_t> ranker_a_tables(double embedding_mb) {
  const double rows_total = embedding_mb * 1024 * 1024 / (kEmbeddingDim * sizeof(float));
  auto share = [&](double fraction) { return std::max<std::int64_t>(64, std::llround(rows_total * fraction)); };
  return {{"user", share(0.45)}, {"item", share(0.45)}, {"brand", share(0.05)}, {"tag", share(0.04)},
          {"country", 256},      {"segment", 64},       {"category", 2048},    {"device", 16}};
}

std::string tables_yaml(const std::map<std::string, std::int64_t>& tables) {
  std::string out = "tables:\n";
  for (const auto& [name, rows] : tables) out += "  " + name + ": " + std::to_string(rows) + "\n";
  return out;
}

// Shared by both models: what a user, an item and the context carry.
constexpr const char* kDenseFeatures = R"(  - {name: age,      source: user,    kind: numeric, transform: standardize, mean: 35, std: 12, default: 35}
  - {name: activity, source: user,    kind: numeric, transform: log1p, clip: [0, 10]}
  - {name: price,    source: item,    kind: numeric, transform: log1p, clip: [0, 12]}
  - {name: ctr,      source: item,    kind: numeric, clip: [0, 1], default: 0.01}
  - {name: age_days, source: item,    kind: numeric, transform: log1p, clip: [0, 8]}
  - {name: hour,     source: context, kind: numeric, transform: standardize, mean: 12, std: 7, default: 12}
)";

std::string ranker_a_yaml(const std::map<std::string, std::int64_t>& tables) {
  return "# DLRM-like demo ranker written by `numaserve make-demo-models`.\n"
         "name: ranker_a\nversion: \"1\"\nhash_seed: 0\n" +
         tables_yaml(tables) + "features:\n" + kDenseFeatures +
         R"(  - {name: id,           source: user,    kind: id,      table: user}
  - {name: country,      source: user,    kind: id,      table: country}
  - {name: segment,      source: user,    kind: id,      table: segment}
  - {name: recent_items, source: user,    kind: id_list, table: item, max_len: 20}
  - {name: id,           source: item,    kind: id,      table: item}
  - {name: category,     source: item,    kind: id,      table: category}
  - {name: brand,        source: item,    kind: id,      table: brand}
  - {name: tags,         source: item,    kind: id_list, table: tag, max_len: 8}
  - {name: device,       source: context, kind: id,      table: device, default: web}
)";
}

std::string ranker_b_yaml() {
  return "# Small MLP demo ranker written by `numaserve make-demo-models`.\n"
         "name: ranker_b\nversion: \"1\"\nhash_seed: 0\ntables: {category: 2048, device: 16}\nfeatures:\n" +
         std::string(kDenseFeatures) +
         R"(  - {name: category, source: item,    kind: id, table: category}
  - {name: device,   source: context, kind: id, table: device, default: web}
)";
}

// A module under construction: parameters with Xavier-uniform weights, and
// the TorchScript lines of an MLP over them.
class Builder {
 public:
  explicit Builder(const std::string& name) : module_(name) {}

  void embedding(const std::string& table, std::int64_t rows, std::int64_t dim) {
    module_.register_parameter("emb_" + table, torch::randn({rows, dim}) * 0.1, false);
  }

  // `x = act(linear(x))` for each width; returns the lines.
  std::string mlp(const std::string& prefix, const std::string& var, std::int64_t in,
                  const std::vector<std::int64_t>& widths, bool relu_last) {
    std::string code;
    for (std::size_t i = 0; i < widths.size(); ++i) {
      const std::string w = prefix + std::to_string(i) + "_w", b = prefix + std::to_string(i) + "_b";
      const double bound = std::sqrt(6.0 / static_cast<double>(in + widths[i]));
      module_.register_parameter(w, torch::rand({widths[i], in}) * (2 * bound) - bound, false);
      module_.register_parameter(b, torch::zeros({widths[i]}), false);
      const bool relu = relu_last || i + 1 < widths.size();
      code += "    " + var + " = " + (relu ? "torch.relu(" : "(") + "torch.linear(" + var + ", self." + w + ", self." +
              b + "))\n";
      in = widths[i];
    }
    return code;
  }

  torch::jit::Module& module() { return module_; }

 private:
  torch::jit::Module module_;
};

constexpr const char* kSignature =
    "def forward(self, dense: Tensor, indices: List[Tensor], offsets: List[Tensor]) -> Tensor:\n";
// Mean of each bag; an empty bag (no ids) is a zero vector.
constexpr const char* kBagMethod =
    "def bag(self, table: Tensor, idx: Tensor, off: Tensor) -> Tensor:\n"
    "    return torch.embedding_bag(table, idx, off, False, 1, False, None, False)[0]\n";

std::string bag_lines(const features::ModelSpec& spec, const std::string& list) {
  std::string code;
  const auto sparse = spec.sparse_features();
  for (std::size_t k = 0; k < sparse.size(); ++k) {
    code += "    " + list + ".append(self.bag(self.emb_" + sparse[k]->table + ", indices[" + std::to_string(k) +
            "], offsets[" + std::to_string(k) + "]))\n";
  }
  return code;
}

// Bottom MLP on the dense features to the embedding width, the pairwise dot
// products of it and every bag (DLRM's interaction), top MLP, sigmoid.
Status build_ranker_a(const features::ModelSpec& spec, const std::map<std::string, std::int64_t>& tables,
                      const std::filesystem::path& file) {
  Builder b("ranker_a");
  for (const auto& [table, rows] : tables) b.embedding(table, rows, kEmbeddingDim);
  const auto dense = static_cast<std::int64_t>(spec.dense_features().size());
  const auto vectors = static_cast<std::int64_t>(spec.sparse_features().size()) + 1;
  std::vector<std::int64_t> pairs;  // below-diagonal entries of the vectors x vectors dot matrix
  for (std::int64_t i = 0; i < vectors; ++i) {
    for (std::int64_t j = 0; j < i; ++j) pairs.push_back(i * vectors + j);
  }
  b.module().register_buffer("pairs", torch::tensor(pairs, torch::kLong));

  std::string code = kSignature;
  code += "    x = dense\n" + b.mlp("bottom", "x", dense, {64, kEmbeddingDim}, true);
  code += "    vectors = [x]\n" + bag_lines(spec, "vectors");
  code += "    t = torch.stack(vectors, 1)\n"
          "    z = torch.bmm(t, t.transpose(1, 2)).flatten(1).index_select(1, self.pairs)\n"
          "    h = torch.cat([x, z], 1)\n";
  code += b.mlp("top", "h", kEmbeddingDim + static_cast<std::int64_t>(pairs.size()), {128, 64, 1}, false);
  code += "    return torch.sigmoid(h).flatten()\n";
  b.module().define(code + kBagMethod);
  b.module().save(file.string());
  return {};
}

// Dense features and two small embeddings, concatenated, through a 3-layer MLP.
Status build_ranker_b(const features::ModelSpec& spec, const std::filesystem::path& file) {
  Builder b("ranker_b");
  for (const auto& [table, rows] : spec.tables) b.embedding(table, static_cast<std::int64_t>(rows), kSmallDim);
  const auto in = static_cast<std::int64_t>(spec.dense_features().size() + spec.sparse_features().size() * kSmallDim);
  std::string code = kSignature;
  code += "    parts = [dense]\n" + bag_lines(spec, "parts") + "    h = torch.cat(parts, 1)\n";
  code += b.mlp("mlp", "h", in, {64, 32, 1}, false);
  code += "    return torch.sigmoid(h).flatten()\n";
  b.module().define(code + kBagMethod);
  b.module().save(file.string());
  return {};
}

// Users and items with every feature the two models read. std::mt19937_64's
// sequence is fixed by the standard (its distributions are not), so values
// are derived from raw draws.
std::string demo_store(const DemoConfig& config) {
  std::mt19937_64 rng(config.seed);
  auto pick = [&rng](std::uint64_t n) { return rng() % n; };
  std::string out;
  for (std::size_t u = 0; u < config.users; ++u) {
    nlohmann::json recent = nlohmann::json::array();
    for (std::uint64_t k = pick(11); k > 0; --k) recent.push_back("i" + std::to_string(pick(config.items)));
    nlohmann::json line = {{"kind", "user"},
                           {"id", "u" + std::to_string(u)},
                           {"features",
                            {{"age", 18 + pick(60)},
                             {"activity", pick(2000)},
                             {"country", "c" + std::to_string(pick(60))},
                             {"segment", "s" + std::to_string(pick(12))},
                             {"recent_items", recent}}}};
    out += line.dump() + "\n";
  }
  for (std::size_t i = 0; i < config.items; ++i) {
    nlohmann::json tags = nlohmann::json::array();
    for (std::uint64_t k = 1 + pick(5); k > 0; --k) tags.push_back("t" + std::to_string(pick(800)));
    nlohmann::json line = {{"kind", "item"},
                           {"id", "i" + std::to_string(i)},
                           {"features",
                            {{"price", static_cast<double>(pick(100000)) / 100.0},
                             {"ctr", static_cast<double>(pick(1000)) / 10000.0},
                             {"age_days", pick(365)},
                             {"category", "cat" + std::to_string(pick(500))},
                             {"brand", "b" + std::to_string(pick(3000))},
                             {"tags", tags}}}};
    out += line.dump() + "\n";
  }
  return out;
}

Result<features::ModelSpec> write_spec(const std::filesystem::path& dir, const std::string& yaml) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return make_error(Error::Code::kIo, "cannot create " + dir.string() + ": " + ec.message());
  if (auto written = write_file(dir / "model.yaml", yaml); !written) return tl::unexpected(written.error());
  return features::parse_model_spec(yaml, (dir / "model.yaml").string());
}

}  // namespace

Status make_demo_models(const std::filesystem::path& dir, const DemoConfig& config) {
  if (!(config.embedding_mb > 0) || config.users == 0 || config.items == 0) {
    return make_error(Error::Code::kInvalidArgument, "demo models need embedding_mb > 0 and at least one user and item");
  }
  try {
    torch::manual_seed(config.seed);
    const auto tables = ranker_a_tables(config.embedding_mb);
    auto spec_a = write_spec(dir / "ranker_a", ranker_a_yaml(tables));
    if (!spec_a) return tl::unexpected(spec_a.error());
    if (auto built = build_ranker_a(*spec_a, tables, dir / "ranker_a" / "model.pt"); !built) return built;

    auto spec_b = write_spec(dir / "ranker_b", ranker_b_yaml());
    if (!spec_b) return tl::unexpected(spec_b.error());
    if (auto built = build_ranker_b(*spec_b, dir / "ranker_b" / "model.pt"); !built) return built;
  } catch (const std::exception& e) {
    return make_error(Error::Code::kInternal, std::string("building the demo models: ") + e.what());
  }
  return write_file(dir / "store.jsonl", demo_store(config));
}

std::vector<OptionSpec> demo_options(DemoConfig& config) {
  return command_line_only({
      number_option("embedding_mb", "MB", "ranker_a's embedding tables in MiB", config.embedding_mb),
      count_option("users", "N", "Users in the feature store", config.users),
      count_option("items", "N", "Items in the feature store", config.items),
      count_option("seed", "N", "Seed of weights and store", config.seed),
  });
}

}  // namespace numaserve::model
