// The linear chains' kernels (kernels/linear.h) on every path this CPU has:
// each fp32 path equal bit for bit to the portable one, which is held to
// the exact product within the bound the arithmetic gives (a chain of K
// fused multiply-adds and one bias add: at most (K + 1) roundings of at
// most the running sum of |x w| + |b| each); the bf16 path to the same
// arithmetic on its bf16-rounded inputs; the int8 paths equal bit for bit
// to each other and to the numerics of linear.h written out here, and
// within the error quantization allows of the exact product; and every
// row's output the same bits whatever the rows run beside it.
#include "kernels/linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
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
  std::vector<std::int8_t> packed_int8;
};

struct Chain {
  std::vector<Layer> layers;
  LinearChain view(LinearPrecision precision) const { return view(std::vector<LinearPrecision>(layers.size(), precision)); }
  // Each layer in its own precision.
  LinearChain view(const std::vector<LinearPrecision>& precisions) const {
    LinearChain c;
    for (std::size_t i = 0; i < layers.size(); ++i) {
      const Layer& l = layers[i];
      const void* packed = precisions[i] == LinearPrecision::kFp32   ? static_cast<const void*>(l.packed_fp32.data())
                           : precisions[i] == LinearPrecision::kBf16 ? static_cast<const void*>(l.packed_bf16.data())
                                                                     : static_cast<const void*>(l.packed_int8.data());
      c.layers.push_back({packed, l.bias ? l.b.data() : nullptr, l.inputs, l.outputs, l.relu, precisions[i]});
    }
    return c;
  }
};

Chain random_chain(std::mt19937& rng, const std::vector<std::int64_t>& widths, bool relu_last) {
  std::normal_distribution<float> value(0.f, 0.5f);
  Chain chain;
  for (std::size_t i = 0; i + 1 < widths.size(); ++i) {
    Layer l{widths[i], widths[i + 1], i + 2 < widths.size() || relu_last, i % 2 == 0, {}, {}, {}, {}, {}};
    l.weight.resize(static_cast<std::size_t>(l.inputs * l.outputs));
    for (auto& w : l.weight) w = value(rng);
    l.b.resize(static_cast<std::size_t>(l.outputs));
    for (auto& b : l.b) b = value(rng);
    l.packed_fp32.resize(packed_elements(l.inputs, l.outputs, LinearPrecision::kFp32));
    pack_fp32(l.weight.data(), l.inputs, l.outputs, l.packed_fp32.data());
    l.packed_bf16.resize(packed_elements(l.inputs, l.outputs, LinearPrecision::kBf16));
    pack_bf16(l.weight.data(), l.inputs, l.outputs, l.packed_bf16.data());
    l.packed_int8.resize(packed_elements(l.inputs, l.outputs, LinearPrecision::kInt8));
    pack_int8(l.weight.data(), l.inputs, l.outputs, l.packed_int8.data());
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

std::vector<float> run(Isa isa, const LinearChain& chain, const std::vector<float>& x, std::int64_t rows) {
  std::vector<float> out(static_cast<std::size_t>(rows * chain.layers.back().outputs), NAN);
  run_chain(isa, chain, x.data(), out.data(), 0, rows);
  return out;
}

std::vector<float> run(Isa isa, const Chain& chain, LinearPrecision precision, const std::vector<float>& x, std::int64_t rows) {
  return run(isa, chain.view(precision), x, rows);
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
  for (const auto precision : {LinearPrecision::kFp32, LinearPrecision::kBf16, LinearPrecision::kInt8}) {
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

// --- int8 (linear.h's numerics).

bool has_vnni() { return linear_path(Isa::kAvx512, LinearPrecision::kInt8) == "avx512_vnni"; }

// The int8 chain as linear.h specifies it, written out here apart from the
// kernels: codes of each weight row and input row, their integer dot
// product (q . code, without the kernels' +128 and column sums), the fma
// epilogue.
std::vector<float> int8_specification(const Chain& chain, std::vector<float> x, std::int64_t rows) {
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  auto scale_of = [](const float* v, std::int64_t count) {
    float amax = 0;
    for (std::int64_t k = 0; k < count; ++k) {
      if (!std::isfinite(v[k])) return std::optional<float>();
      amax = std::max(amax, std::abs(v[k]));
    }
    return std::optional<float>(amax);
  };
  for (const Layer& l : chain.layers) {
    std::vector<float> s(static_cast<std::size_t>(l.outputs));
    std::vector<int> code(static_cast<std::size_t>(l.outputs * l.inputs), 0);
    for (std::int64_t n = 0; n < l.outputs; ++n) {
      const float* w = &l.weight[static_cast<std::size_t>(n * l.inputs)];
      const auto wmax = scale_of(w, l.inputs);
      const float sn = wmax ? *wmax / 127 : kNan;
      s[static_cast<std::size_t>(n)] = sn;
      for (std::int64_t k = 0; k < l.inputs && sn > 0; ++k) {
        code[static_cast<std::size_t>(n * l.inputs + k)] = static_cast<int>(std::clamp(std::nearbyint(w[k] / sn), -127.f, 127.f));
      }
    }
    std::vector<float> y(static_cast<std::size_t>(rows * l.outputs));
    for (std::int64_t m = 0; m < rows; ++m) {
      const float* xm = &x[static_cast<std::size_t>(m * l.inputs)];
      const auto amax = scale_of(xm, l.inputs);
      const float inv = amax ? 127 / *amax : 0;
      const bool zero = !amax || !std::isfinite(inv);
      const float a = !amax ? kNan : zero ? 0 : *amax / 127;
      std::vector<int> q(static_cast<std::size_t>(l.inputs), 0);
      for (std::int64_t k = 0; k < l.inputs && !zero; ++k) {
        q[static_cast<std::size_t>(k)] = static_cast<int>(std::clamp(std::nearbyint(xm[k] * inv), -127.f, 127.f));
      }
      for (std::int64_t n = 0; n < l.outputs; ++n) {
        std::int64_t c = 0;
        for (std::int64_t k = 0; k < l.inputs; ++k) c += q[static_cast<std::size_t>(k)] * code[static_cast<std::size_t>(n * l.inputs + k)];
        const float scale = a * s[static_cast<std::size_t>(n)];
        float v = l.bias ? std::fma(static_cast<float>(c), scale, l.b[static_cast<std::size_t>(n)]) : static_cast<float>(c) * scale;
        if (l.relu) v = 0.f > v ? 0.f : v;
        y[static_cast<std::size_t>(m * l.outputs + n)] = v;
      }
    }
    x = std::move(y);
  }
  return x;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), sizeof(float) * a.size()) == 0;
}

// Widths 1, 3, 13, 16, 17, 64, 100, 256, 415 and 1,024 as inputs and as
// outputs, narrow layers (1 to 4 outputs) last and between, with and without
// a bias and ReLU, and the two ranking MLPs' shapes.
const std::vector<std::vector<std::int64_t>> kInt8Shapes = {
    {13, 512, 256, 64}, {1, 3, 17, 16, 1}, {100, 64, 13, 3}, {1024, 17, 4},
    {256, 100, 1, 16}, {415, 1024, 256, 1}, {17, 415, 5, 2}, {3, 1024, 1}};

TEST(LinearInt8, TheVnniPathEqualsThePortableOneBitForBit) {
  if (!has_vnni()) GTEST_SKIP() << "this CPU has no AVX512_VNNI (the path is tested where it has)";
  std::mt19937 rng(17);
  for (const auto& widths : kInt8Shapes) {
    for (bool relu_last : {false, true}) {
      const Chain chain = random_chain(rng, widths, relu_last);
      for (std::int64_t rows : {1, 2, 7, 8, 9, 33, 200}) {
        const auto x = random_rows(rng, rows, widths.front());
        const auto portable = run(Isa::kPortable, chain, LinearPrecision::kInt8, x, rows);
        ASSERT_TRUE(same_bits(portable, run(Isa::kAvx512, chain, LinearPrecision::kInt8, x, rows)))
            << "widths " << widths.front() << ".." << widths.back() << ", rows " << rows;
      }
    }
  }
}

// One chain, int8 layers beside fp32 ones (each layer its own precision):
// the AVX-512 paths equal the portable ones, and the int8 layers are the
// specification's on the fp32 layers' outputs.
TEST(LinearInt8, ChainsMixInt8AndFp32Layers) {
  std::mt19937 rng(23);
  const std::vector<std::int64_t> widths = {415, 1024, 256, 64, 1};
  const Chain chain = random_chain(rng, widths, false);
  using P = LinearPrecision;
  const std::vector<std::vector<P>> mixes = {{P::kInt8, P::kFp32, P::kInt8, P::kFp32}, {P::kFp32, P::kInt8, P::kFp32, P::kInt8}};
  for (const auto& precisions : mixes) {
    const std::int64_t rows = 37;
    const auto x = random_rows(rng, rows, widths.front());
    const auto portable = run(Isa::kPortable, chain.view(precisions), x, rows);
    if (has_vnni()) {
      ASSERT_TRUE(same_bits(portable, run(Isa::kAvx512, chain.view(precisions), x, rows)));
    }
    // Layer by layer: an int8 layer against the specification, an fp32 one against its portable path.
    std::vector<float> in = x;
    for (std::size_t l = 0; l < widths.size() - 1; ++l) {
      Chain one;
      one.layers.push_back(chain.layers[l]);
      const auto out = precisions[l] == P::kInt8 ? int8_specification(one, in, rows) : run(Isa::kPortable, one, P::kFp32, in, rows);
      in = out;
    }
    ASSERT_TRUE(same_bits(portable, in)) << "the mixed chain against its layers one by one";
  }
}

TEST(LinearInt8, ThePortablePathIsTheSpecificationBitForBit) {
  std::mt19937 rng(29);
  for (const auto& widths : kInt8Shapes) {
    for (bool relu_last : {false, true}) {
      const Chain chain = random_chain(rng, widths, relu_last);
      for (std::int64_t rows : {1, 9, 40}) {
        const auto x = random_rows(rng, rows, widths.front());
        const auto spec = int8_specification(chain, x, rows);
        ASSERT_TRUE(same_bits(spec, run(Isa::kPortable, chain, LinearPrecision::kInt8, x, rows)))
            << "portable, widths " << widths.front() << ".." << widths.back() << ", rows " << rows;
        if (has_vnni()) {
          ASSERT_TRUE(same_bits(spec, run(Isa::kAvx512, chain, LinearPrecision::kInt8, x, rows))) << "avx512_vnni";
        }
      }
    }
  }
}

// A row with a NaN or an infinity has NaN outputs; a row of zeros (or one
// too small for 127 / amax) has the bias's; the rows beside them are as
// they would be alone. Both paths agree.
TEST(LinearInt8, NonFiniteAndZeroRowsAreWhatTheHeaderSays) {
  std::mt19937 rng(31);
  const Chain chain = random_chain(rng, {20, 40}, false);  // one layer, with a bias, no ReLU
  const std::int64_t rows = 6;
  auto x = random_rows(rng, rows, 20);
  x[1 * 20 + 3] = NAN;
  x[2 * 20 + 19] = -INFINITY;
  for (std::int64_t k = 0; k < 20; ++k) x[static_cast<std::size_t>(3 * 20 + k)] = 0;
  for (std::int64_t k = 0; k < 20; ++k) x[static_cast<std::size_t>(4 * 20 + k)] = k % 2 == 0 ? 1e-38f : -0.f;
  for (const Isa isa : {Isa::kPortable, Isa::kAvx512}) {
    if (isa == Isa::kAvx512 && !has_vnni()) continue;
    const auto y = run(isa, chain, LinearPrecision::kInt8, x, rows);
    for (std::int64_t n = 0; n < 40; ++n) {
      EXPECT_TRUE(std::isnan(y[static_cast<std::size_t>(1 * 40 + n)]));
      EXPECT_TRUE(std::isnan(y[static_cast<std::size_t>(2 * 40 + n)]));
      EXPECT_EQ(y[static_cast<std::size_t>(3 * 40 + n)], chain.layers[0].b[static_cast<std::size_t>(n)]);
      EXPECT_EQ(y[static_cast<std::size_t>(4 * 40 + n)], chain.layers[0].b[static_cast<std::size_t>(n)]);
    }
    for (const std::int64_t m : {0, 5}) {
      const std::vector<float> alone(x.begin() + m * 20, x.begin() + (m + 1) * 20);
      const auto one = run(isa, chain, LinearPrecision::kInt8, alone, 1);
      EXPECT_EQ(0, std::memcmp(one.data(), &y[static_cast<std::size_t>(m * 40)], sizeof(float) * 40)) << "row " << m;
    }
  }
}

// Each int8 layer against the exact product of its fp32 inputs and weights,
// within what quantization allows, worst case. An input x_k is read as
// a q_k with |q_k - x_k / a| <= 1/2 + 512 u (the rounding to an integer,
// and x_k * fl(127 / amax) within 3 roundings of x_k / a, of at most 128
// each); a weight w as s c with |c - w / s| <= 1/2 + 256 u likewise. So
// |x w - a q s c| <= ex |w| + (|x| + ex) ew, with ex = a (1/2 + 512 u) and
// ew = s (1/2 + 256 u); the epilogue rounds float(c), a * s and the fma:
// at most 4u of sum |a q s c| + |b| more. ReLU only shrinks differences.
void expect_int8_layer_within_bound(const Layer& l, const std::vector<float>& x, const std::vector<float>& y, std::int64_t rows,
                                    const std::string& where) {
  for (std::int64_t m = 0; m < rows; ++m) {
    double amax = 0;
    for (std::int64_t k = 0; k < l.inputs; ++k) amax = std::max(amax, std::abs(double{x[static_cast<std::size_t>(m * l.inputs + k)]}));
    const double ex = amax / 127 * (0.5 + 512 * kUnit);
    for (std::int64_t n = 0; n < l.outputs; ++n) {
      double wmax = 0;
      for (std::int64_t k = 0; k < l.inputs; ++k) {
        wmax = std::max(wmax, std::abs(double{l.weight[static_cast<std::size_t>(n * l.inputs + k)]}));
      }
      const double ew = wmax / 127 * (0.5 + 256 * kUnit);
      double exact = 0, bound = 0, magnitude = 0;
      for (std::int64_t k = 0; k < l.inputs; ++k) {
        const double xi = x[static_cast<std::size_t>(m * l.inputs + k)], wi = l.weight[static_cast<std::size_t>(n * l.inputs + k)];
        exact += xi * wi;
        bound += ex * std::abs(wi) + (std::abs(xi) + ex) * ew;
        magnitude += (std::abs(xi) + ex) * (std::abs(wi) + ew);
      }
      if (l.bias) {
        exact += l.b[static_cast<std::size_t>(n)];
        magnitude += std::abs(l.b[static_cast<std::size_t>(n)]);
      }
      if (l.relu) exact = std::max(exact, 0.0);
      bound += 4 * kUnit * magnitude;
      const float got = y[static_cast<std::size_t>(m * l.outputs + n)];
      ASSERT_LE(std::abs(got - exact), bound) << where << " row " << m << " output " << n << ": got " << got << ", exact " << exact;
    }
  }
}

TEST(LinearInt8, EachLayerIsTheExactProductWithinWhatQuantizationAllows) {
  std::mt19937 rng(37);
  for (const auto& widths : kInt8Shapes) {
    const Chain chain = random_chain(rng, widths, true);
    std::vector<float> x = random_rows(rng, 9, widths.front());
    for (const auto& layer : chain.layers) {
      Chain one;
      one.layers.push_back(layer);
      const auto y = run(best_isa(), one, LinearPrecision::kInt8, x, 9);
      expect_int8_layer_within_bound(layer, x, y, 9, "layer " + std::to_string(layer.inputs) + "x" + std::to_string(layer.outputs));
      x = y;
    }
  }
}

// The whole chain against the fp32 chain on normal data: typically, not at
// worst (the bound above is the worst case). Each operand's rounding error
// is about uniform within half a step, the step 1/127 of its row's largest
// magnitude, about 3.5 standard deviations of normal data (the largest of a
// few hundred): a relative error of 3.5 / 127 / sqrt(12) = 0.8% an operand,
// sqrt(2) times that (1.1%) a layer. Errors made in earlier layers go
// through the later ones, which on average keep a difference's size
// relative to their output (random weights): the chain's relative error is
// at most the layers' added up, L times 1.1%. (Added as independent errors
// they come to sqrt(L) times 1.1%, about what the layers of many outputs
// show; a score of one output is a single projection of rows that four
// ReLU layers have made much alike, and it scatters more about that.) The
// fp32 chain's own error is a few units of 2^-24: nothing beside it.
// Measured as the RMS of the difference over the RMS of the output.
TEST(LinearInt8, ChainsAreWithinQuantizationsTypicalErrorOfFp32) {
  std::mt19937 rng(41);
  for (const auto& widths : std::vector<std::vector<std::int64_t>>{{13, 512, 256, 64}, {415, 1024, 1024, 512, 256, 1}}) {
    const Chain chain = random_chain(rng, widths, false);
    const std::int64_t rows = 200;
    const auto x = random_rows(rng, rows, widths.front());
    const auto fp32 = run(best_isa(), chain, LinearPrecision::kFp32, x, rows);
    const auto int8 = run(best_isa(), chain, LinearPrecision::kInt8, x, rows);
    double difference = 0, magnitude = 0;
    for (std::size_t i = 0; i < fp32.size(); ++i) {
      difference += (int8[i] - fp32[i]) * double{int8[i] - fp32[i]};
      magnitude += fp32[i] * double{fp32[i]};
    }
    const double per_layer = std::sqrt(2.0) * 3.5 / 127 / std::sqrt(12.0);
    const double bound = static_cast<double>(widths.size() - 1) * per_layer;
    const double relative = std::sqrt(difference / magnitude);
    EXPECT_LE(relative, bound) << "widths " << widths.front() << ".." << widths.back();
    if (std::getenv("LINEAR_INT8_ERROR") != nullptr) {
      std::printf("widths %lld..%lld: relative RMS error %.4f (bound %.4f)\n", static_cast<long long>(widths.front()),
                  static_cast<long long>(widths.back()), relative, bound);
    }
  }
}

TEST(LinearInt8, UnpackGivesEachCodeTimesItsScale) {
  // Row 0: s = 1.27 / 127, codes 50, -127, 1 (0.014 / s = 1.4), 127; row 1: zeros.
  const std::vector<float> w = {0.5f, -1.27f, 0.014f, 1.27f, 0, 0, 0, 0};
  for (const std::int64_t outputs : {2, 17}) {  // narrow, and in panels (rows past 2 copies of row 0)
    std::vector<float> weight(static_cast<std::size_t>(outputs * 4));
    for (std::int64_t n = 0; n < outputs; ++n) std::copy_n(w.begin() + (n == 1 ? 4 : 0), 4, weight.begin() + n * 4);
    std::vector<std::int8_t> packed(packed_elements(4, outputs, LinearPrecision::kInt8));
    pack_int8(weight.data(), 4, outputs, packed.data());
    std::vector<float> back(weight.size(), NAN);
    unpack_int8(packed.data(), 4, outputs, back.data());
    const float s = 1.27f / 127;
    const float expected[] = {50 * s, -127 * s, 1 * s, 127 * s};
    for (std::int64_t n = 0; n < outputs; ++n) {
      for (std::int64_t k = 0; k < 4; ++k) {
        EXPECT_EQ(back[static_cast<std::size_t>(n * 4 + k)], n == 1 ? 0.f : expected[k])
            << outputs << " outputs, W[" << n << "][" << k << "]";
      }
    }
  }
}

// Codes in panels [p][k / 4][16][4], k padded to 4; then each output's
// scale (float) and column sum (int32). A narrow layer: rows padded to 64.
TEST(LinearPacking, Int8PanelsHoldFourCodesAnOutputThenScalesAndColumnSums) {
  const std::int64_t inputs = 5, outputs = 17;
  std::vector<float> w(static_cast<std::size_t>(inputs * outputs));
  for (std::int64_t n = 0; n < outputs; ++n) {
    for (std::int64_t k = 0; k < inputs; ++k) w[static_cast<std::size_t>(n * inputs + k)] = static_cast<float>(k == 0 ? 127 : n % 5 - k);
  }
  std::vector<std::int8_t> packed(packed_elements(inputs, outputs, LinearPrecision::kInt8), 7);
  ASSERT_EQ(packed.size(), 2u * 16 * 8 + 17 * 4 + 17 * 4);  // 5 inputs padded to 8
  pack_int8(w.data(), inputs, outputs, packed.data());
  EXPECT_EQ(packed[0], 127);                      // W[0][0]
  EXPECT_EQ(packed[1], -1);                       // W[0][1]
  EXPECT_EQ(packed[5 * 4 + 2], -2);               // W[5][2]
  EXPECT_EQ(packed[16 * 4 + 3 * 4 + 0], 3 - 4);   // W[3][4]: the second group of 4
  EXPECT_EQ(packed[16 * 4 + 3 * 4 + 1], 0);       // the padding past the inputs
  EXPECT_EQ(packed[2 * 16 * 4 + 0], 127);         // W[16][0]
  EXPECT_EQ(packed[2 * 16 * 4 + 1 * 4 + 0], 0);   // past the outputs
  float s = 0;
  std::int32_t colsum = 0;
  std::memcpy(&s, &packed[2 * 16 * 8 + 4 * 3], sizeof s);
  std::memcpy(&colsum, &packed[2 * 16 * 8 + 17 * 4 + 4 * 3], sizeof colsum);
  EXPECT_EQ(s, 1.f);  // W[3]'s largest is 127
  EXPECT_EQ(colsum, 127 + 2 + 1 + 0 - 1);
  std::vector<std::int8_t> narrow(packed_elements(inputs, 2, LinearPrecision::kInt8), 7);
  ASSERT_EQ(narrow.size(), 2u * 64 + 2 * 4 + 2 * 4);
  pack_int8(w.data(), inputs, 2, narrow.data());
  EXPECT_EQ(narrow[64 + 1], 1 - 1);  // W[1][1]
  EXPECT_EQ(narrow[64 + 2], 1 - 2);  // W[1][2]
  EXPECT_EQ(narrow[5], 0);           // padding
}

TEST(LinearInt8, SupportIsAskedOfTheCpuAndTurnedOffByTheSetting) {
  const char* before = std::getenv("NUMASERVE_CPU_INT8");
  const std::optional<std::string> saved = before != nullptr ? std::optional<std::string>(before) : std::nullopt;
  ::unsetenv("NUMASERVE_CPU_INT8");
  const Int8Support here = int8_support();
  EXPECT_EQ(here.usable, has_vnni());  // the fast path exactly where int8 is served
  if (here.usable) {
    EXPECT_EQ(here.instructions, "avx512_vnni");
    EXPECT_EQ(here.missing, "");
  } else {
    EXPECT_NE(here.missing.find("AVX"), std::string::npos) << here.missing;
  }
  ::setenv("NUMASERVE_CPU_INT8", "off", 1);
  const Int8Support off = int8_support();
  EXPECT_FALSE(off.usable);
  EXPECT_NE(off.missing.find("NUMASERVE_CPU_INT8=off"), std::string::npos) << off.missing;
  if (saved) {
    ::setenv("NUMASERVE_CPU_INT8", saved->c_str(), 1);
  } else {
    ::unsetenv("NUMASERVE_CPU_INT8");
  }
}

}  // namespace
}  // namespace numaserve::kernels
