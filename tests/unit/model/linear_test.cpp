// The linear chains' kernels (kernels/linear.h) on every path this CPU has:
// each fp32 path equal bit for bit to the portable one, which is held to
// the exact product within the bound the arithmetic gives (a chain of K
// fused multiply-adds and one bias add: at most (K + 1) roundings of at
// most the running sum of |x w| + |b| each); the bf16 path to the same
// arithmetic on its bf16-rounded inputs; and every row's output the same
// bits whatever the rows run beside it.
#include "kernels/linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace numaserve::kernels {
namespace {

constexpr double kUnit = 0x1p-24;  // the unit roundoff of fp32

struct Layer {
  std::int64_t inputs, outputs;
  bool relu, bias;
  std::vector<float> weight, b;
  std::vector<float> packed_fp32;
  std::vector<std::uint16_t> packed_bf16;
};

struct Chain {
  std::vector<Layer> layers;
  LinearChain view(LinearPrecision precision) const {
    LinearChain c;
    for (const auto& l : layers) {
      const void* packed = precision == LinearPrecision::kFp32 ? static_cast<const void*>(l.packed_fp32.data())
                                                               : static_cast<const void*>(l.packed_bf16.data());
      c.layers.push_back({packed, l.bias ? l.b.data() : nullptr, l.inputs, l.outputs, l.relu, precision});
    }
    return c;
  }
};

Chain random_chain(std::mt19937& rng, const std::vector<std::int64_t>& widths, bool relu_last) {
  std::normal_distribution<float> value(0.f, 0.5f);
  Chain chain;
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
    Layer l{widths[i], widths[i + 1], i + 2 < widths.size() || relu_last, i % 2 == 0, {}, {}, {}, {}};
    l.weight.resize(static_cast<std::size_t>(l.inputs * l.outputs));
    for (auto& w : l.weight) w = value(rng);
    l.b.resize(static_cast<std::size_t>(l.outputs));
    for (auto& b : l.b) b = value(rng);
    l.packed_fp32.resize(packed_elements(l.inputs, l.outputs, LinearPrecision::kFp32));
    pack_fp32(l.weight.data(), l.inputs, l.outputs, l.packed_fp32.data());
    l.packed_bf16.resize(packed_elements(l.inputs, l.outputs, LinearPrecision::kBf16));
    pack_bf16(l.weight.data(), l.inputs, l.outputs, l.packed_bf16.data());
    chain.layers.push_back(std::move(l));
  }
  return chain;
}

std::vector<float> random_rows(std::mt19937& rng, std::int64_t rows, std::int64_t width) {
  std::normal_distribution<float> value(0.f, 1.f);
  std::vector<float> x(static_cast<std::size_t>(rows * width));
  for (auto& v : x) v = value(rng);
  return x;
}

std::vector<float> run(Isa isa, const Chain& chain, LinearPrecision precision, const std::vector<float>& x, std::int64_t rows) {
  std::vector<float> out(static_cast<std::size_t>(rows * chain.layers.back().outputs), NAN);
  run_chain(isa, chain.view(precision), x.data(), out.data(), 0, rows);
  return out;
}

float bf16_round(float x) { return from_bf16(to_bf16(x)); }

// One layer against its exact (double) value on the same fp32 inputs, within
// (K + 1) u times the magnitudes summed; a bf16 layer's x and w rounded to
// bf16 first, as the kernel reads them (their products are exact in fp32).
void expect_layer_within_bound(const Layer& l, const std::vector<float>& x, const std::vector<float>& y, std::int64_t rows,
                               bool bf16, const std::string& where) {
  for (std::int64_t m = 0; m < rows; ++m) {
    for (std::int64_t n = 0; n < l.outputs; ++n) {
      double exact = 0, magnitude = 0;
      for (std::int64_t k = 0; k < l.inputs; ++k) {
        double xi = x[static_cast<std::size_t>(m * l.inputs + k)], wi = l.weight[static_cast<std::size_t>(n * l.inputs + k)];
        if (bf16) xi = bf16_round(static_cast<float>(xi)), wi = bf16_round(static_cast<float>(wi));
        exact += xi * wi;
        magnitude += std::abs(xi * wi);
      }
      if (l.bias) {
        exact += l.b[static_cast<std::size_t>(n)];
        magnitude += std::abs(l.b[static_cast<std::size_t>(n)]);
      }
      if (l.relu) exact = std::max(exact, 0.0);
      // gamma_{K+1} = (K+1)u / (1 - (K+1)u); denormals flushed by vdpbf16ps cost at most 2^-126 a step.
      const double steps = static_cast<double>(l.inputs + 1);
      const double bound = steps * kUnit / (1 - steps * kUnit) * magnitude + steps * 0x1p-126;
      const float got = y[static_cast<std::size_t>(m * l.outputs + n)];
      ASSERT_LE(std::abs(got - exact), bound) << where << " row " << m << " output " << n << ": got " << got << ", exact " << exact;
    }
  }
}

// Each layer of `chain` on `isa`, fed the layer before's output, against the
// exact product of its inputs.
void expect_each_layer_within_bound(Isa isa, const Chain& chain, LinearPrecision precision, std::vector<float> x, std::int64_t rows) {
  for (const auto& layer : chain.layers) {
    Chain one;
    one.layers.push_back(layer);
    const auto y = run(isa, one, precision, x, rows);
    expect_layer_within_bound(layer, x, y, rows, precision == LinearPrecision::kBf16,
                              std::string(linear_path(isa, precision)) + " layer " + std::to_string(layer.inputs));
    x = y;
  }
}

class LinearPaths : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    const auto supported = supported_isas();
    if (std::find(supported.begin(), supported.end(), GetParam()) == supported.end()) {
      GTEST_SKIP() << "this CPU has no " << isa_name(GetParam()) << " (the path is tested where it has)";
    }
  }
};

// Widths across the panel edges (1, 15, 16, 17, 33 outputs), odd and tiny
// inputs, and row counts across the tiles' edges (1 to 8 rows, 6 on AVX2).
TEST_P(LinearPaths, Fp32EqualsThePortablePathBitForBitAndTheExactProductWithinTheBound) {
  std::mt19937 rng(11);
  // Narrow last layers (1, 2, 4 outputs; inputs short of, at and past a vector) among them.
  const std::vector<std::vector<std::int64_t>> shapes = {{1, 1},          {13, 64, 32}, {77, 128, 64, 1}, {3, 17, 15, 16},
                                                         {40, 33, 2},     {16, 4},      {37, 5, 1},      {64, 33, 1}};
  for (const auto& widths : shapes) {
    for (bool relu_last : {false, true}) {
      const Chain chain = random_chain(rng, widths, relu_last);
      for (std::int64_t rows : {1, 2, 5, 7, 8, 9, 31, 33, 70}) {
        const auto x = random_rows(rng, rows, widths.front());
        const auto reference = run(Isa::kPortable, chain, LinearPrecision::kFp32, x, rows);
        const auto got = run(GetParam(), chain, LinearPrecision::kFp32, x, rows);
        ASSERT_EQ(0, std::memcmp(reference.data(), got.data(), sizeof(float) * got.size()))
            << isa_name(GetParam()) << " against portable, widths " << widths.front() << ".., rows " << rows;
      }
      expect_each_layer_within_bound(GetParam(), chain, LinearPrecision::kFp32, random_rows(rng, 9, widths.front()), 9);
    }
  }
}

// A row's output is the same bits alone, in any batch and any split of the
// rows over calls (threads): what makes a score independent of its batch.
TEST_P(LinearPaths, ARowsOutputIsTheSameBitsWhateverRowsRunBesideIt) {
  std::mt19937 rng(5);
  const Chain chain = random_chain(rng, {77, 128, 64, 1}, false);
  const std::int64_t rows = 600;
  const auto x = random_rows(rng, rows, 77);
  for (const auto precision : {LinearPrecision::kFp32, LinearPrecision::kBf16}) {
    const auto all = run(GetParam(), chain, precision, x, rows);
    for (const std::int64_t row : {0, 6, 7, 199, 523, 599}) {
      for (const std::int64_t batch : {1, 7, 200}) {
        const std::int64_t start = std::max<std::int64_t>(0, std::min(row - batch / 2, rows - batch));
        std::vector<float> out(static_cast<std::size_t>(rows), NAN);
        // Split unevenly, as threads' shares may be.
        const std::int64_t middle = start + batch / 3;
        run_chain(GetParam(), chain.view(precision), x.data(), out.data(), start, middle);
        run_chain(GetParam(), chain.view(precision), x.data(), out.data(), middle, start + batch);
        ASSERT_EQ(0, std::memcmp(&all[static_cast<std::size_t>(row)], &out[static_cast<std::size_t>(row)], sizeof(float)))
            << linear_path(GetParam(), precision) << ": row " << row << " in a batch of " << batch;
      }
    }
  }
}

// bf16: each layer against the exact product of its bf16-rounded inputs and
// weights, within the same bound (vdpbf16ps adds each exact product with
// one rounding); the portable reference and the AVX512_BF16 path agree
// within it too (the instruction flushes denormals; the reference does not).
TEST_P(LinearPaths, Bf16LayersAreTheExactProductOfTheirRoundedInputsWithinTheBound) {
  std::mt19937 rng(3);
  for (const auto& widths : std::vector<std::vector<std::int64_t>>{{13, 64, 32}, {77, 128, 64, 1}, {3, 17, 15}, {40, 2}, {70, 1}}) {
    const Chain chain = random_chain(rng, widths, true);
    expect_each_layer_within_bound(GetParam(), chain, LinearPrecision::kBf16, random_rows(rng, 11, widths.front()), 11);
  }
}

std::string path_of(const ::testing::TestParamInfo<Isa>& param) { return std::string(isa_name(param.param)); }
INSTANTIATE_TEST_SUITE_P(EveryPath, LinearPaths, ::testing::Values(Isa::kPortable, Isa::kAvx2, Isa::kAvx512), path_of);

TEST(LinearPacking, PanelsHoldEachOutputsWeightsAndZerosPastThem) {
  const std::int64_t inputs = 3, outputs = 17;
  std::vector<float> w(static_cast<std::size_t>(inputs * outputs));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i + 1);
  std::vector<float> packed(packed_elements(inputs, outputs, LinearPrecision::kFp32), -1);
  ASSERT_EQ(packed.size(), 2u * 16 * 3);
  pack_fp32(w.data(), inputs, outputs, packed.data());
  EXPECT_EQ(packed[0 * 16 + 0], 1);                  // W[0][0]
  EXPECT_EQ(packed[1 * 16 + 0], 2);                  // W[0][1]
  EXPECT_EQ(packed[0 * 16 + 5], 16);                 // W[5][0]
  EXPECT_EQ(packed[16 * 3 + 2 * 16 + 0], 16 * 3 + 3);  // W[16][2]
  EXPECT_EQ(packed[16 * 3 + 0 * 16 + 1], 0);         // past the outputs
  std::vector<std::uint16_t> narrow(packed_elements(inputs, outputs, LinearPrecision::kBf16), 7);
  ASSERT_EQ(narrow.size(), 2u * 16 * 4);  // 3 inputs padded to 2 pairs
  pack_bf16(w.data(), inputs, outputs, narrow.data());
  EXPECT_EQ(from_bf16(narrow[0]), 1);             // W[0][0]
  EXPECT_EQ(from_bf16(narrow[1]), 2);             // W[0][1], its pair
  EXPECT_EQ(from_bf16(narrow[16 * 2 + 0]), 3);    // W[0][2], the next pair
  EXPECT_EQ(narrow[16 * 2 + 1], 0);               // the missing fourth input
  EXPECT_EQ(from_bf16(narrow[2 * 2 + 0]), 7);     // W[2][0]
}

// A narrow layer (a score's last layer): its rows as they are, each padded
// to a whole vector.
TEST(LinearPacking, ANarrowLayerIsItsRowsPaddedToWholeVectors) {
  const std::int64_t inputs = 20, outputs = 2;
  std::vector<float> w(static_cast<std::size_t>(inputs * outputs));
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i + 1);
  std::vector<float> packed(packed_elements(inputs, outputs, LinearPrecision::kFp32), -1);
  ASSERT_EQ(packed.size(), 2u * 32);
  pack_fp32(w.data(), inputs, outputs, packed.data());
  EXPECT_EQ(packed[19], 20);  // W[0][19]
  EXPECT_EQ(packed[20], 0);   // padding
  EXPECT_EQ(packed[32], 21);  // W[1][0]
  std::vector<std::uint16_t> narrow(packed_elements(inputs, outputs, LinearPrecision::kBf16), 7);
  ASSERT_EQ(narrow.size(), 2u * 32);
  pack_bf16(w.data(), inputs, outputs, narrow.data());
  EXPECT_EQ(from_bf16(narrow[32 + 1]), 22);  // W[1][1]
  EXPECT_EQ(narrow[31], 0);
}

}  // namespace
}  // namespace numaserve::kernels
