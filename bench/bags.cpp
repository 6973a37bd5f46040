#include "bags.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/kernels.h"
#include "measure.h"
#include "numa/huge_pages.h"
#include "numaserve/common/duration.h"
#include "numaserve/common/result.h"

namespace numaserve::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;
template <class T>
using HugeVector = std::vector<T, numa::HugePageAllocator<T>>;

// The copies of one table the kernel reads, as a served model holds them
// (embedding_precision): the floats, bf16, and rowwise int8 and int4.
enum class Copy { kFp32, kBf16, kInt8, kInt4 };
struct CopyName {
  Copy copy;
  std::string_view name;
};
constexpr std::array kCopies = {CopyName{Copy::kFp32, "fp32"}, CopyName{Copy::kBf16, "bf16"},
                                CopyName{Copy::kInt8, "int8"}, CopyName{Copy::kInt4, "int4"}};

// Every copy in huge pages, as a served model's are (numa/huge_pages.h).
struct Tables {
  std::size_t rows = 0, dim = 0;
  HugeVector<float> fp32;
  HugeVector<std::uint16_t> bf16;
  HugeVector<std::uint8_t> int8, int4;

  std::size_t bytes(Copy c) const {
    switch (c) {
      case Copy::kFp32: return fp32.size() * sizeof(float);
      case Copy::kBf16: return bf16.size() * sizeof(std::uint16_t);
      case Copy::kInt8: return int8.size();
      case Copy::kInt4: return int4.size();
    }
    return 0;
  }
  // `bag` reading copy `c`.
  void point(kernels::Bag& bag, Copy c) const {
    switch (c) {
      case Copy::kFp32: bag.table = fp32.data(); break;
      case Copy::kBf16: bag.table_bf16 = bf16.data(); break;
      case Copy::kInt8: bag.table_rowwise = int8.data(), bag.row_bits = 8; break;
      case Copy::kInt4: bag.table_rowwise = int4.data(), bag.row_bits = 4; break;
    }
  }
};

Result<Tables> make_tables(const BagsOptions& o, std::mt19937_64& rng) {
  Tables t;
  t.dim = o.dim;
  t.rows = static_cast<std::size_t>(o.table_mb * (1 << 20)) / (o.dim * sizeof(float));
  t.fp32.resize(t.rows * o.dim);
  std::normal_distribution<float> value(0.f, 0.1f);
  for (auto& x : t.fp32) x = value(rng);
  t.bf16.resize(t.fp32.size());
  kernels::to_bf16(kernels::best_isa(), t.fp32.data(), t.bf16.data(), t.fp32.size());
  const auto rows = static_cast<std::int64_t>(t.rows), dim = static_cast<std::int64_t>(o.dim);
  for (auto [bits, out] : {std::pair{8, &t.int8}, std::pair{4, &t.int4}}) {
    out->resize(t.rows * static_cast<std::size_t>(kernels::rowwise_row_bytes(dim, bits)));
    if (!kernels::quantize_rows(t.fp32.data(), rows, dim, bits, out->data())) {
      return make_error(Error::Code::kInternal, "cannot quantize the table to int" + std::to_string(bits));
    }
  }
  return t;
}

struct Side {
  kernels::Isa isa;
  Copy copy;
  std::size_t calls = 0;
  double seconds = 0;
};

// A call's bag input: one bag's ids per bag, concatenated, and where each starts.
struct Input {
  std::vector<std::int64_t> indices, offsets;
};

// 64 draws with one id per bag, then 64 with `ids` per bag: cycled by the runs.
std::vector<Input> draw_inputs(const BagsOptions& o, std::size_t rows, std::mt19937_64& rng) {
  std::vector<Input> inputs;
  for (std::size_t per_bag : {std::size_t{1}, o.ids}) {
    for (int draw = 0; draw < 64; ++draw) {
      Input in;
      for (std::size_t b = 0; b < o.bags; ++b) {
        in.offsets.push_back(static_cast<std::int64_t>(in.indices.size()));
        for (std::size_t k = 0; k < per_bag; ++k) in.indices.push_back(static_cast<std::int64_t>(rng() % rows));
      }
      inputs.push_back(std::move(in));
    }
  }
  return inputs;
}

json measure_bags(const BagsOptions& o) {
  std::mt19937_64 rng(3);
  auto tables = make_tables(o, rng);
  if (!tables) return {{"error", tables.error().message}};
  const std::size_t rows = tables->rows;
  const std::vector<Input> inputs = draw_inputs(o, rows, rng);
  std::vector<float> out(o.bags * o.dim);
  // Per path, one side per copy, fp32 first.
  std::vector<Side> sides;
  for (const auto isa : kernels::supported_isas()) {
    for (const auto& c : kCopies) sides.push_back({isa, c.copy});
  }
  auto run = [&](Side& side, std::size_t per_bag_kind, double seconds) {
    const auto start = Clock::now();
    for (std::size_t i = 0; Clock::now() - start < to_duration(seconds); ++i) {
      const Input& in = inputs[per_bag_kind * 64 + i % 64];
      kernels::Bag bag;
      bag.dim = static_cast<std::int64_t>(o.dim);
      tables->point(bag, side.copy);
      bag.indices = in.indices.data();
      bag.offsets = in.offsets.data();
      bag.bags = static_cast<std::int64_t>(o.bags);
      bag.last_end = static_cast<std::int64_t>(in.indices.size());
      bag.out = out.data();
      kernels::embedding_bags(side.isa, &bag, 1, 0, bag.bags, /*reuse=*/false);
      ++side.calls;
    }
    side.seconds += std::chrono::duration<double>(Clock::now() - start).count();
  };
  json results = json::array();
  for (std::size_t kind : {0, 1}) {
    constexpr int kRounds = 5;  // alternating: the machine's drift falls on every side
    for (auto& side : sides) run(side, kind, 0.2);
    for (auto& side : sides) side.calls = 0, side.seconds = 0;
    for (int r = 0; r < kRounds; ++r) {
      for (auto& side : sides) run(side, kind, o.seconds / kRounds / static_cast<double>(sides.size()));
    }
    for (std::size_t i = 0; i < sides.size(); i += kCopies.size()) {
      json row = {{"kernels", std::string(kernels::isa_name(sides[i].isa))}, {"ids_per_bag", kind == 0 ? 1 : o.ids}};
      const double fp32 = static_cast<double>(sides[i].calls * o.bags) / sides[i].seconds;
      for (std::size_t c = 0; c < kCopies.size(); ++c) {
        const Side& side = sides[i + c];
        const double bags_per_s = static_cast<double>(side.calls * o.bags) / side.seconds;
        const std::string name(kCopies[c].name);
        row[name + "_bags_per_s"] = bags_per_s;
        if (c > 0) row[name + "_speedup"] = bags_per_s / fp32;  // over the float table's, same path
      }
      results.push_back(std::move(row));
    }
  }
  json table_mb = json::object();
  for (const auto& c : kCopies) table_mb[std::string(c.name)] = static_cast<double>(tables->bytes(c.copy)) / (1 << 20);
  return {{"what", "bags"}, {"table_mb", o.table_mb}, {"tables_mb", table_mb}, {"rows", rows}, {"dim", o.dim},
          {"bags_per_call", o.bags}, {"bf16_cpu", kernels::bf16_support().instructions}, {"runs", results}};
}

}  // namespace

int run_bags(const BagsOptions& o) {
  return print(on_pinned_thread(o.cpus, [&] { return measure_bags(o); }));
}

}  // namespace numaserve::bench
