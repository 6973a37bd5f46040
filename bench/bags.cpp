#include "bags.h"

#include <algorithm>
#include <chrono>
#include <random>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/kernels.h"
#include "measure.h"
#include "numa/huge_pages.h"
#include "numaserve/common/duration.h"

namespace numaserve::bench {
namespace {

using Clock = std::chrono::steady_clock;
using nlohmann::json;

struct Side {
  kernels::Isa isa;
  bool bf16;
  std::size_t calls = 0;
  double seconds = 0;
};

json measure_bags(const BagsOptions& o) {
  const std::size_t rows = static_cast<std::size_t>(o.table_mb * (1 << 20)) / (o.dim * sizeof(float));
  // Both tables in huge pages, as a served model's are (numa/huge_pages.h).
  std::vector<float, numa::HugePageAllocator<float>> table(rows * o.dim);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> value(0.f, 0.1f);
  for (auto& x : table) x = value(rng);
  std::vector<std::uint16_t, numa::HugePageAllocator<std::uint16_t>> half(table.size());
  kernels::to_bf16(kernels::best_isa(), table.data(), half.data(), table.size());
  // Two bag inputs: one id per bag, and `ids` per bag; 64 draws of each, cycled.
  struct Input {
    std::vector<std::int64_t> indices, offsets;
  };
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
  std::vector<float> out(o.bags * o.dim);
  std::vector<Side> sides;
  for (const auto isa : kernels::supported_isas()) {
    for (bool bf16 : {false, true}) sides.push_back({isa, bf16});
  }
  auto run = [&](Side& side, std::size_t per_bag_kind, double seconds) {
    const auto start = Clock::now();
    for (std::size_t i = 0; Clock::now() - start < to_duration(seconds); ++i) {
      const Input& in = inputs[per_bag_kind * 64 + i % 64];
      kernels::Bag bag;
      bag.dim = static_cast<std::int64_t>(o.dim);
      if (side.bf16) {
        bag.table_bf16 = half.data();
      } else {
        bag.table = table.data();
      }
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
    for (auto& side : sides) side.calls = 0, side.seconds = 0;
    constexpr int kRounds = 5;  // alternating: the machine's drift falls on every side
    for (auto& side : sides) run(side, kind, 0.2);
    for (auto& side : sides) side.calls = 0, side.seconds = 0;
    for (int r = 0; r < kRounds; ++r) {
      for (auto& side : sides) run(side, kind, o.seconds / kRounds / static_cast<double>(sides.size()));
    }
    for (std::size_t i = 0; i < sides.size(); i += 2) {
      const double fp32 = static_cast<double>(sides[i].calls * o.bags) / sides[i].seconds;
      const double bf16 = static_cast<double>(sides[i + 1].calls * o.bags) / sides[i + 1].seconds;
      results.push_back({{"kernels", std::string(kernels::isa_name(sides[i].isa))},
                         {"ids_per_bag", kind == 0 ? 1 : o.ids},
                         {"fp32_bags_per_s", fp32},
                         {"bf16_bags_per_s", bf16},
                         {"bf16_speedup", bf16 / fp32}});
    }
  }
  return {{"what", "bags"}, {"table_mb", o.table_mb}, {"dim", o.dim}, {"bags_per_call", o.bags},
          {"bf16_cpu", kernels::bf16_support().instructions}, {"runs", results}};
}

}  // namespace

int run_bags(const BagsOptions& o) {
  return print(on_pinned_thread(o.cpus, [&] { return measure_bags(o); }));
}

}  // namespace numaserve::bench
