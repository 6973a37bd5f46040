// The fused ops' kernels, every instruction-set path this CPU has, against
// a scalar reference on the same inputs. Unweighted bags must match the
// reference bit for bit (each path adds in index order, as ATen does);
// dot products and weighted bags within a bound on reordered float sums.
#include "kernels/kernels.h"

#include <gtest/gtest.h>
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

namespace numaserve::kernels {
namespace {

struct Tables {
  std::vector<float> table;
  std::int64_t rows, dim;
};

Tables random_table(std::mt19937& rng, std::int64_t rows, std::int64_t dim) {
  std::normal_distribution<float> value(0.f, 1.f);
  Tables t{std::vector<float>(static_cast<std::size_t>(rows * dim)), rows, dim};
  for (auto& x : t.table) x = value(rng);
  return t;
}

// |got - want| within 4 float epsilons of the sum of the terms' magnitudes:
// what reordering a float sum of those terms can change.
void expect_close(float got, double want, double magnitude, const std::string& where) {
  EXPECT_LE(std::abs(got - want), 4 * 1.2e-7 * magnitude + 1e-30) << where << ": got " << got << ", want " << want;
}

class KernelPaths : public ::testing::TestWithParam<Isa> {
 protected:
  void SetUp() override {
    const auto supported = supported_isas();
    if (std::find(supported.begin(), supported.end(), GetParam()) == supported.end()) {
      GTEST_SKIP() << "this CPU has no " << isa_name(GetParam()) << " (the path is tested where it has)";
    }
  }
};

TEST_P(KernelPaths, DotPairsEqualTheReferenceForEveryWidth) {
  std::mt19937 rng(7);
  for (std::int64_t dim : {1, 3, 8, 15, 16, 17, 32, 33, 64, 100}) {
    const std::int64_t n = 13, vectors = 10;
    std::vector<float> v = random_table(rng, n * vectors, dim).table;
    std::vector<std::int64_t> rows, cols;
    for (std::int64_t i = 0; i < vectors; ++i) {
      for (std::int64_t j = 0; j <= i; ++j) rows.push_back(i), cols.push_back(j);
    }
    const auto pairs = static_cast<std::int64_t>(rows.size());
    std::vector<float> out(static_cast<std::size_t>(n * pairs), NAN);
    const DotPairs job{v.data(), vectors, dim, rows.data(), cols.data(), pairs, out.data()};
    // Two calls over halves of the rows: a thread's share is what it writes.
    dot_pairs(GetParam(), job, 0, 6);
    dot_pairs(GetParam(), job, 6, n);
    for (std::int64_t r = 0; r < n; ++r) {
      for (std::int64_t p = 0; p < pairs; ++p) {
        double want = 0, magnitude = 0;
        for (std::int64_t d = 0; d < dim; ++d) {
          const double term = double(v[(r * vectors + rows[p]) * dim + d]) * v[(r * vectors + cols[p]) * dim + d];
          want += term;
          magnitude += std::abs(term);
        }
        expect_close(out[r * pairs + p], want, magnitude,
                     "dim " + std::to_string(dim) + " row " + std::to_string(r) + " pair " + std::to_string(p));
      }
    }
  }
}

// Bags of 0, 1, 2, 5 and 100 ids, the last bag ending at last_end.
struct BagInput {
  std::vector<std::int64_t> indices, offsets;
  std::vector<float> weights;
};

BagInput random_bags(std::mt19937& rng, std::int64_t table_rows) {
  BagInput in;
  for (std::int64_t length : {0, 1, 2, 0, 5, 100, 1, 0}) {
    in.offsets.push_back(static_cast<std::int64_t>(in.indices.size()));
    for (std::int64_t k = 0; k < length; ++k) {
      in.indices.push_back(static_cast<std::int64_t>(rng() % static_cast<unsigned>(table_rows)));
      in.weights.push_back(static_cast<float>(rng() % 1000) / 250.f - 2.f);
    }
  }
  return in;
}

// One bag over `in` of width `dim`, table and output left to the caller:
// k 0 sums, 1 averages, 2 sums weighted.
Bag bag_over(const BagInput& in, std::int64_t dim, int k) {
  Bag bag;
  bag.dim = dim;
  bag.indices = in.indices.data();
  bag.offsets = in.offsets.data();
  bag.bags = static_cast<std::int64_t>(in.offsets.size());
  bag.last_end = static_cast<std::int64_t>(in.indices.size());
  bag.mode = k == 1 ? Bag::Mode::kMean : Bag::Mode::kSum;
  bag.weights = k == 2 ? in.weights.data() : nullptr;
  return bag;
}

TEST_P(KernelPaths, BagsEqualTheReferenceForEveryModeWidthAndLength) {
  std::mt19937 rng(11);
  for (std::int64_t dim : {1, 7, 8, 16, 24, 32, 33, 64, 65, 128, 130}) {
    for (std::int64_t table_rows : {1, 1000}) {
      // Three tables in one call, as the fused op passes a model's tables:
      // sum, mean, and weighted sum.
      std::vector<Tables> tables;
      std::vector<BagInput> inputs;
      std::vector<std::vector<float>> outs;
      std::vector<Bag> bags;
      for (int k = 0; k < 3; ++k) {
        tables.push_back(random_table(rng, table_rows, dim + k));
        inputs.push_back(random_bags(rng, table_rows));
      }
      for (int k = 0; k < 3; ++k) {
        outs.emplace_back(inputs[k].offsets.size() * static_cast<std::size_t>(dim + k), NAN);
        Bag bag;
        bag.table = tables[k].table.data();
        bag.dim = dim + k;
        bag.indices = inputs[k].indices.data();
        bag.offsets = inputs[k].offsets.data();
        bag.bags = static_cast<std::int64_t>(inputs[k].offsets.size());
        bag.last_end = static_cast<std::int64_t>(inputs[k].indices.size());
        bag.mode = k == 1 ? Bag::Mode::kMean : Bag::Mode::kSum;
        bag.weights = k == 2 ? inputs[k].weights.data() : nullptr;
        bag.out = outs[k].data();
        bags.push_back(bag);
      }
      embedding_bags(GetParam(), bags.data(), bags.size(), 0, 3);
      embedding_bags(GetParam(), bags.data(), bags.size(), 3, 8);
      for (int k = 0; k < 3; ++k) {
        const Bag& bag = bags[k];
        for (std::int64_t b = 0; b < bag.bags; ++b) {
          const std::int64_t start = bag.offsets[b], stop = b + 1 < bag.bags ? bag.offsets[b + 1] : bag.last_end;
          for (std::int64_t d = 0; d < bag.dim; ++d) {
            const std::string where = "table " + std::to_string(k) + " dim " + std::to_string(bag.dim) + " bag " +
                                      std::to_string(b) + " element " + std::to_string(d);
            const float got = bag.out[b * bag.dim + d];
            if (bag.weights == nullptr) {
              float want = 0;  // index order, from zero: ATen's order
              for (std::int64_t i = start; i < stop; ++i) want += bag.table[bag.indices[i] * bag.dim + d];
              if (bag.mode == Bag::Mode::kMean && stop > start) want /= static_cast<float>(stop - start);
              EXPECT_EQ(got, want) << where;
            } else {
              double want = 0, magnitude = 0;
              for (std::int64_t i = start; i < stop; ++i) {
                const double term = double(bag.weights[i]) * bag.table[bag.indices[i] * bag.dim + d];
                want += term;
                magnitude += std::abs(term);
              }
              expect_close(got, want, magnitude, where);
            }
          }
        }
      }
    }
  }
}

TEST_P(KernelPaths, ATableWithFewerBagsStopsAtItsLast) {
  std::mt19937 rng(3);
  const Tables t = random_table(rng, 10, 16);
  std::vector<std::int64_t> indices = {1, 2, 3}, offsets = {0, 2};
  std::vector<float> out(2 * 16 + 16, -1.f);  // one row of slack that must stay untouched
  Bag bag;
  bag.table = t.table.data();
  bag.dim = 16;
  bag.indices = indices.data();
  bag.offsets = offsets.data();
  bag.bags = 2;
  bag.last_end = 3;
  bag.out = out.data();
  embedding_bags(GetParam(), &bag, 1, 0, 5);
  EXPECT_EQ(out[0], t.table[16 + 0] + t.table[32 + 0]);
  EXPECT_EQ(out[16], t.table[48]);
  for (std::size_t d = 32; d < out.size(); ++d) EXPECT_EQ(out[d], -1.f);
}

// Rows of one request repeat their user's bags; a batch joins requests.
// Bags that repeat the one before (wholly, in part, or with other weights)
// must come out bit for bit as pooled on their own: each bag is computed
// alone (a range of one, where nothing can be reused) as the reference.
TEST_P(KernelPaths, RepeatedBagsEqualTheirOwnPoolingBitForBit) {
  std::mt19937 rng(5);
  const Tables t = random_table(rng, 500, 40);
  // Runs of equal bags, a bag sharing a prefix, one a permutation (another
  // order of adds), an empty run, equal ids with another weight, and a
  // last bag that repeats the one before.
  const std::vector<std::vector<std::int64_t>> ids = {
      {3, 9, 27}, {3, 9, 27}, {3, 9, 27}, {3, 9}, {3, 9, 28}, {27, 9, 3}, {}, {}, {7}, {7}, {7}, {4, 4}, {4, 4}};
  BagInput in;
  for (std::size_t b = 0; b < ids.size(); ++b) {
    in.offsets.push_back(static_cast<std::int64_t>(in.indices.size()));
    for (std::int64_t id : ids[b]) {
      in.indices.push_back(id);
      in.weights.push_back(b == 10 ? 0.5f : 1.25f);  // bag 10: the ids of bag 9, another weight
    }
  }
  for (bool weighted : {false, true}) {
    for (Bag::Mode mode : {Bag::Mode::kSum, Bag::Mode::kMean}) {
      std::vector<float> got(ids.size() * 40, NAN), want(ids.size() * 40, NAN);
      Bag bag;
      bag.table = t.table.data();
      bag.dim = 40;
      bag.indices = in.indices.data();
      bag.offsets = in.offsets.data();
      bag.bags = static_cast<std::int64_t>(ids.size());
      bag.last_end = static_cast<std::int64_t>(in.indices.size());
      bag.weights = weighted ? in.weights.data() : nullptr;
      bag.mode = mode;
      bag.out = got.data();
      embedding_bags(GetParam(), &bag, 1, 0, 5);  // two threads' shares: the first bag of the second repeats
      embedding_bags(GetParam(), &bag, 1, 5, bag.bags);
      bag.out = want.data();
      for (std::int64_t b = 0; b < bag.bags; ++b) embedding_bags(GetParam(), &bag, 1, b, b + 1);
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
            << "bag " << i / 40 << " element " << i % 40 << (weighted ? " weighted" : "") << ": " << got[i]
            << " != " << want[i];
      }
    }
  }
}

// bf16 tables: every bag (sum, mean, weighted; every width, with the tails
// of each path) equals, bit for bit, the same path's bag of the float table
// the bf16 one widens to.
TEST_P(KernelPaths, Bf16BagsEqualTheBagsOfTheirFloatWideningBitForBit) {
  std::mt19937 rng(13);
  for (std::int64_t dim : {1, 7, 8, 15, 16, 17, 24, 32, 33, 64, 65, 128, 130}) {
    Tables t = random_table(rng, 300, dim);
    std::vector<std::uint16_t> half(t.table.size());
    to_bf16(Isa::kPortable, t.table.data(), half.data(), half.size());
    for (std::size_t i = 0; i < half.size(); ++i) t.table[i] = from_bf16(half[i]);
    const BagInput in = random_bags(rng, 300);
    for (int k = 0; k < 3; ++k) {
      std::vector<float> got(in.offsets.size() * static_cast<std::size_t>(dim), NAN), want = got;
      Bag bag = bag_over(in, dim, k);
      bag.table = t.table.data();
      bag.out = want.data();
      embedding_bags(GetParam(), &bag, 1, 0, bag.bags);
      bag.table = nullptr;
      bag.table_bf16 = half.data();
      bag.out = got.data();
      embedding_bags(GetParam(), &bag, 1, 0, bag.bags);
      for (std::size_t i = 0; i < got.size(); ++i) {
        ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
            << "dim " << dim << " kind " << k << " bag " << i / static_cast<std::size_t>(dim) << " element "
            << i % static_cast<std::size_t>(dim) << ": " << got[i] << " != " << want[i];
      }
    }
  }
}

std::uint16_t bf16_of_bits(std::uint32_t bits) {
  float x = 0;
  std::memcpy(&x, &bits, sizeof x);
  return to_bf16(x);
}

TEST(Bf16, TheScalarReferenceRoundsToNearestEven) {
  EXPECT_EQ(bf16_of_bits(0x3F800000), 0x3F80);  // 1
  EXPECT_EQ(bf16_of_bits(0x3F808000), 0x3F80);  // halfway, kept part even: down
  EXPECT_EQ(bf16_of_bits(0x3F818000), 0x3F82);  // halfway, kept part odd: up
  EXPECT_EQ(bf16_of_bits(0x3F808001), 0x3F81);  // past halfway: up
  EXPECT_EQ(bf16_of_bits(0x3F807FFF), 0x3F80);  // below halfway: down
  EXPECT_EQ(bf16_of_bits(0xBF818000), 0xBF82);  // negative: the same on the magnitude
  EXPECT_EQ(bf16_of_bits(0x7F7FFFFF), 0x7F80);  // the largest float rounds to infinity
  EXPECT_EQ(bf16_of_bits(0x7F800000), 0x7F80);  // infinity
  EXPECT_EQ(bf16_of_bits(0xFF800000), 0xFF80);
  EXPECT_EQ(bf16_of_bits(0x80000000), 0x8000);  // -0
  EXPECT_EQ(bf16_of_bits(0x00008000), 0x0000);  // a denormal's tie, even: down (not flushed)
  EXPECT_EQ(bf16_of_bits(0x00018000), 0x0002);
  EXPECT_EQ(bf16_of_bits(0x007FFFFF), 0x0080);  // the largest denormal rounds to the smallest normal
  EXPECT_EQ(bf16_of_bits(0x7F800001), 0x7FC0);  // a signalling NaN comes back quiet, never infinity
  EXPECT_EQ(bf16_of_bits(0xFFFFFFFF), 0xFFFF);
  EXPECT_EQ(bf16_of_bits(0x7FC00000), 0x7FC0);
  for (std::uint32_t top : {0x0000u, 0x3F80u, 0x4049u, 0xC2F7u, 0x0001u}) {
    EXPECT_EQ(to_bf16(from_bf16(static_cast<std::uint16_t>(top))), top) << "a bf16 widened and narrowed is itself";
  }
}

TEST_P(KernelPaths, ConversionToBf16EqualsTheScalarReferenceBitForBit) {
  std::mt19937 rng(17);
  // Random bit patterns (every exponent, NaNs and denormals among them),
  // the values around each rounding boundary, and the special values, at
  // lengths that leave every tail.
  std::vector<std::uint32_t> bits;
  for (int i = 0; i < 1 << 20; ++i) bits.push_back(static_cast<std::uint32_t>(rng()));
  for (std::uint32_t low : {0x7FFFu, 0x8000u, 0x8001u, 0x18000u, 0xFFFFu}) {
    for (std::uint32_t high : {0x0000u, 0x3F80u, 0x7F7Fu, 0x7F80u, 0x8000u, 0xFF7Fu, 0x0080u}) bits.push_back(high << 16 | low);
  }
  std::vector<float> in(bits.size());
  std::memcpy(in.data(), bits.data(), 4 * bits.size());
  for (std::size_t n : {bits.size(), std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{8}, std::size_t{15},
                        std::size_t{16}, std::size_t{17}, std::size_t{33}}) {
    std::vector<std::uint16_t> out(n + 1, 0xABCD);
    to_bf16(GetParam(), in.data() + (bits.size() - n), out.data(), n);
    for (std::size_t i = 0; i < n; ++i) {
      ASSERT_EQ(out[i], to_bf16(in[bits.size() - n + i])) << "length " << n << " element " << i << " bits 0x" << std::hex
                                                           << bits[bits.size() - n + i];
    }
    EXPECT_EQ(out[n], 0xABCD) << "wrote past the end";
  }
}

// Rowwise-quantized tables: every bag (sum, mean, weighted, empty; widths
// that leave every path's tails; int8 and int4, odd widths for int4; runs
// of repeated bags, reused) equals, bit for bit, the same path's bag of the
// float table dequantize_rows gives.
TEST_P(KernelPaths, RowwiseBagsEqualTheBagsOfTheirDequantizedRowsBitForBit) {
  std::mt19937 rng(19);
  for (int bits : {8, 4}) {
    for (std::int64_t dim : {1, 3, 13, 16, 17, 33, 64, 100, 128}) {
      const std::int64_t rows = 300;
      const Tables t = random_table(rng, rows, dim);
      std::vector<std::uint8_t> quantized(static_cast<std::size_t>(rows * rowwise_row_bytes(dim, bits)));
      ASSERT_TRUE(quantize_rows(t.table.data(), rows, dim, bits, quantized.data()));
      std::vector<float> dequantized(t.table.size());
      dequantize_rows(quantized.data(), rows, dim, bits, dequantized.data());
      // Each bag twice in a row: the second is reused.
      const BagInput drawn = random_bags(rng, rows);
      BagInput in;
      for (std::size_t b = 0; b < drawn.offsets.size(); ++b) {
        const std::int64_t start = drawn.offsets[b];
        const std::int64_t stop = b + 1 < drawn.offsets.size() ? drawn.offsets[b + 1] : static_cast<std::int64_t>(drawn.indices.size());
        for (int copy = 0; copy < 2; ++copy) {
          in.offsets.push_back(static_cast<std::int64_t>(in.indices.size()));
          in.indices.insert(in.indices.end(), drawn.indices.begin() + start, drawn.indices.begin() + stop);
          in.weights.insert(in.weights.end(), drawn.weights.begin() + start, drawn.weights.begin() + stop);
        }
      }
      for (int k = 0; k < 3; ++k) {
        std::vector<float> got(in.offsets.size() * static_cast<std::size_t>(dim), NAN), want = got;
        Bag bag = bag_over(in, dim, k);
        bag.table = dequantized.data();
        bag.out = want.data();
        embedding_bags(GetParam(), &bag, 1, 0, 5);
        embedding_bags(GetParam(), &bag, 1, 5, bag.bags);
        bag.table = nullptr;
        bag.table_rowwise = quantized.data();
        bag.row_bits = bits;
        bag.out = got.data();
        embedding_bags(GetParam(), &bag, 1, 0, 5);
        embedding_bags(GetParam(), &bag, 1, 5, bag.bags);
        for (std::size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
              << "int" << bits << " dim " << dim << " kind " << k << " bag " << i / static_cast<std::size_t>(dim)
              << " element " << i % static_cast<std::size_t>(dim) << ": " << got[i] << " != " << want[i];
        }
      }
    }
  }
}

std::string path_name(const ::testing::TestParamInfo<Isa>& path) { return std::string(isa_name(path.param)); }

INSTANTIATE_TEST_SUITE_P(EveryPath, KernelPaths, ::testing::Values(Isa::kPortable, Isa::kAvx2, Isa::kAvx512), path_name);

// Each element by the same function, wherever it stands: the value at
// position 0 of one call and at the tail of a longer one are the same bits,
// and within an ulp of the exact value.
TEST(Elementwise, SigmoidAndTanhAreOneFunctionOfTheElementWherever) {
  std::mt19937 rng(9);
  std::normal_distribution<float> value(0.f, 6.f);
  std::vector<float> x(37);
  for (auto& v : x) v = value(rng);
  x[3] = -90.f;  // a denormal sigmoid
  x[5] = NAN;
  std::vector<float> s(x.size()), t(x.size());
  sigmoid(x.data(), s.data(), x.size());
  tanh(x.data(), t.data(), x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    float alone_s = 0, alone_t = 0;
    sigmoid(&x[i], &alone_s, 1);
    tanh(&x[i], &alone_t, 1);
    EXPECT_EQ(std::memcmp(&alone_s, &s[i], sizeof(float)), 0) << i;
    EXPECT_EQ(std::memcmp(&alone_t, &t[i], sizeof(float)), 0) << i;
    if (std::isnan(x[i])) {
      EXPECT_TRUE(std::isnan(s[i]) && std::isnan(t[i]));
      continue;
    }
    const long double exact_s = 1.0L / (1.0L + std::exp(-static_cast<long double>(x[i])));
    EXPECT_LE(std::abs(s[i] - exact_s), std::abs(std::nextafter(s[i], 2.f) - s[i])) << x[i];
    EXPECT_LE(std::abs(t[i] - std::tanh(static_cast<long double>(x[i]))), std::abs(std::nextafter(t[i], 2.f) - t[i])) << x[i];
  }
}

// A half's value from its fields, in double: the reference from_fp16 must equal.
double half_value(std::uint16_t h) {
  const int exponent = (h >> 10) & 0x1F, mantissa = h & 0x3FF;
  const double magnitude = exponent == 0x1F ? (mantissa == 0 ? INFINITY : NAN)
                           : exponent == 0  ? std::ldexp(mantissa, -24)
                                            : std::ldexp(1024 + mantissa, exponent - 25);
  return (h & 0x8000) != 0 ? -magnitude : magnitude;
}

TEST(Fp16, EveryHalfWidensExactlyAndNarrowsBackToItself) {
  for (std::uint32_t bits = 0; bits < 0x10000; ++bits) {
    const auto h = static_cast<std::uint16_t>(bits);
    const float f = from_fp16(h);
    const double want = half_value(h);
    ASSERT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << h;
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << h;
      ASSERT_EQ(to_fp16(f), h | 0x0200) << "a NaN stays a NaN (quieted, payload and sign kept): " << std::hex << h;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), want) << std::hex << h;
    ASSERT_EQ(to_fp16(f), h) << std::hex << h;
  }
}

// The nearest half by search over every finite one, ties to the even one;
// infinity (0x7C00) stands where 65536 would, so 65520 is its tie with 65504.
std::uint16_t reference_fp16(float x) {
  static const std::vector<double> halves = [] {
    std::vector<double> v;
    for (std::uint16_t h = 0; h < 0x7C00; ++h) v.push_back(half_value(h));
    v.push_back(65536);
    return v;
  }();
  const double a = std::abs(static_cast<double>(x));
  const std::uint16_t sign = std::signbit(x) ? 0x8000 : 0;
  if (a >= 65536) return static_cast<std::uint16_t>(sign | 0x7C00);
  const auto hi = static_cast<std::size_t>(std::lower_bound(halves.begin(), halves.end(), a) - halves.begin());
  std::size_t pick = hi;
  if (halves[hi] != a) {
    const double below = a - halves[hi - 1], above = halves[hi] - a;
    pick = below < above || (below == above && (hi - 1) % 2 == 0) ? hi - 1 : hi;
  }
  return static_cast<std::uint16_t>(sign | pick);
}

__attribute__((target("f16c"))) std::uint16_t hardware_fp16(float x) {
  return static_cast<std::uint16_t>(_cvtss_sh(x, _MM_FROUND_TO_NEAREST_INT));
}

TEST(Fp16, NarrowingRoundsToNearestEven) {
  // The halfway points between neighbouring halves and the floats either
  // side of each, random bit patterns, and the edges.
  std::vector<float> samples;
  for (std::uint16_t h = 0; h < 0x7BFF; ++h) {
    const auto mid = static_cast<float>((half_value(h) + half_value(static_cast<std::uint16_t>(h + 1))) / 2);  // exact: 12 bits
    for (float x : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, INFINITY)}) samples.insert(samples.end(), {x, -x});
  }
  std::mt19937 rng(23);
  for (int i = 0; i < 1 << 20; ++i) {
    const auto bits = static_cast<std::uint32_t>(rng());
    float x = 0;
    std::memcpy(&x, &bits, sizeof x);
    samples.push_back(x);
  }
  for (float x : {0.f, -0.f, 65504.f, 65519.996f, 65520.f, 1e6f, -1e6f, std::numeric_limits<float>::max(), INFINITY,
                  -INFINITY, std::numeric_limits<float>::denorm_min(), 0x1p-24f, 0x1p-25f, 0x1.000002p-25f, 0x1.8p-24f}) {
    samples.push_back(x);
  }
  const bool f16c = __builtin_cpu_supports("f16c");
  for (float x : samples) {
    const std::uint16_t got = to_fp16(x);
    if (f16c) {
      ASSERT_EQ(got, hardware_fp16(x)) << "F16C's conversion of " << x << std::hex << " bits " << got;
    }
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(from_fp16(got))) << x;
      ASSERT_EQ(std::signbit(from_fp16(got)), std::signbit(x));
      continue;
    }
    ASSERT_EQ(got, reference_fp16(x)) << x << std::hex << " bits " << got;
  }
  EXPECT_EQ(to_fp16(65504.f), 0x7BFF);
  EXPECT_EQ(to_fp16(65519.996f), 0x7BFF);
  EXPECT_EQ(to_fp16(65520.f), 0x7C00);  // a tie, to the even one: infinity
  EXPECT_EQ(to_fp16(1e6f), 0x7C00);
  EXPECT_EQ(to_fp16(-1e6f), 0xFC00);
  EXPECT_EQ(to_fp16(1.f + 0x1p-11f), 0x3C00);  // ties to even
  EXPECT_EQ(to_fp16(1.f + 0x3p-11f), 0x3C02);
  EXPECT_EQ(to_fp16(0x1p-25f), 0x0000);  // the smallest subnormal's half: a tie, to zero
  EXPECT_EQ(to_fp16(0x1.8p-24f), 0x0002);
  EXPECT_EQ(to_fp16(std::numeric_limits<float>::denorm_min()), 0x0000);
}

TEST(Rowwise, ARowIsItsCodesThenFourBytes) {
  EXPECT_EQ(kRowwiseTail, 4);
  EXPECT_EQ(rowwise_row_bytes(64, 8), 68);
  EXPECT_EQ(rowwise_row_bytes(64, 4), 36);
  EXPECT_EQ(rowwise_row_bytes(13, 4), 11);
  EXPECT_EQ(rowwise_row_bytes(1, 4), 5);
  EXPECT_EQ(rowwise_row_bytes(1, 8), 5);
  EXPECT_EQ(rowwise_row_bytes(0, 8), 4);
}

// Every element within half a step of its value, plus what rounding the
// row's bias and scale to fp16 moved its ends; the layout as documented.
TEST(Rowwise, QuantizedElementsAreWithinHalfAStep) {
  std::mt19937 rng(29);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> narrow(0.5f, 0.6f);  // far from zero: the bias's rounding counts
  for (int bits : {8, 4}) {
    const int top = (1 << bits) - 1;
    for (std::int64_t dim : {1, 2, 3, 13, 16, 33, 64, 100, 128}) {
      for (int kind = 0; kind < 3; ++kind) {
        const std::int64_t rows = 50;
        std::vector<float> table(static_cast<std::size_t>(rows * dim));
        for (auto& x : table) x = kind == 0 ? normal(rng) : kind == 1 ? narrow(rng) : 1e-3f * normal(rng);
        const std::int64_t row_bytes = rowwise_row_bytes(dim, bits), code_bytes = row_bytes - kRowwiseTail;
        std::vector<std::uint8_t> q(static_cast<std::size_t>(rows * row_bytes));
        ASSERT_TRUE(quantize_rows(table.data(), rows, dim, bits, q.data()));
        std::vector<float> values(table.size());
        dequantize_rows(q.data(), rows, dim, bits, values.data());
        double error_sum = 0, step_sum = 0;
        for (std::int64_t r = 0; r < rows; ++r) {
          const float* x = &table[static_cast<std::size_t>(r * dim)];
          const std::uint8_t* row = &q[static_cast<std::size_t>(r * row_bytes)];
          const float scale = from_fp16(static_cast<std::uint16_t>(row[code_bytes] | row[code_bytes + 1] << 8));
          const float bias = from_fp16(static_cast<std::uint16_t>(row[code_bytes + 2] | row[code_bytes + 3] << 8));
          const double lo = *std::min_element(x, x + dim), hi = *std::max_element(x, x + dim);
          const double bound = scale / 2.0 + std::abs(bias - lo) + top * std::abs(scale - (hi - lo) / top);
          if (bits == 4 && dim % 2 == 1) {
            EXPECT_EQ(row[code_bytes - 1] >> 4, 0) << "an odd dim's last high nibble";
          }
          for (std::int64_t d = 0; d < dim; ++d) {
            const int code = bits == 8 ? row[d] : (row[d / 2] >> (4 * (d % 2))) & 0xF;
            const float value = values[static_cast<std::size_t>(r * dim + d)];
            ASSERT_EQ(value, std::fma(static_cast<float>(code), scale, bias)) << "int" << bits << " dim " << dim << " element " << d;
            ASSERT_LE(std::abs(value - x[d]), bound + 1e-6 * std::abs(x[d]))
                << "int" << bits << " dim " << dim << " kind " << kind << " row " << r << " element " << d << ": " << x[d]
                << " came back " << value << " (scale " << scale << ", bias " << bias << ")";
            error_sum += std::abs(value - x[d]);
            step_sum += scale;
          }
        }
        // Rounded to nearest: errors spread over half a step, a quarter on average.
        if (dim >= 16) {
          EXPECT_LT(error_sum, 0.3 * step_sum) << "int" << bits << " dim " << dim << " kind " << kind;
        }
      }
    }
  }
}

// Why the portable path may multiply and add where the others fuse: every
// code times every finite fp16 scale is exact in float, so only the add
// rounds, either way.
TEST(Rowwise, ACodeTimesAnFp16ScaleIsExactInFloat) {
  for (int code = 0; code < 256; ++code) {
    for (std::uint16_t h = 0; h < 0x7C00; ++h) {
      const float scale = from_fp16(h);
      ASSERT_EQ(static_cast<double>(static_cast<float>(code) * scale), code * static_cast<double>(scale)) << code << " " << h;
    }
  }
}

TEST(Rowwise, ConstantRowsComeBackAsTheirFp16) {
  for (int bits : {8, 4}) {
    for (float c : {0.f, 0.5f, -3.f, 0.1f, -1234.5f}) {
      const std::vector<float> row(13, c);
      std::vector<std::uint8_t> q(static_cast<std::size_t>(rowwise_row_bytes(13, bits)), 0xAB);
      ASSERT_TRUE(quantize_rows(row.data(), 1, 13, bits, q.data()));
      std::vector<float> back(13);
      dequantize_rows(q.data(), 1, 13, bits, back.data());
      for (float v : back) EXPECT_EQ(v, from_fp16(to_fp16(c))) << c;
      for (std::size_t i = 0; i + kRowwiseTail < q.size(); ++i) EXPECT_EQ(q[i], 0) << "codes of a constant row";
      EXPECT_EQ(q[q.size() - 4] | q[q.size() - 3], 0) << "scale 0";
    }
  }
}

TEST(Rowwise, RowsFp16CannotHoldAreRefused) {
  const float big = std::numeric_limits<float>::max();
  for (int bits : {8, 4}) {
    for (float bad : {NAN, INFINITY, -INFINITY, 1e6f, -7e4f}) {
      std::vector<float> table = {0.f, 1.f, 2.f, 0.f, 1.f, bad};  // the second of two rows
      std::vector<std::uint8_t> q(static_cast<std::size_t>(2 * rowwise_row_bytes(3, bits)));
      EXPECT_FALSE(quantize_rows(table.data(), 2, 3, bits, q.data())) << bad;
    }
    std::vector<float> spread = {-big, big};  // finite values, an infinite range
    std::vector<std::uint8_t> q(static_cast<std::size_t>(rowwise_row_bytes(2, bits)));
    EXPECT_FALSE(quantize_rows(spread.data(), 1, 2, bits, q.data()));
    std::vector<float> edge = {-65504.f, 65504.f};
    EXPECT_TRUE(quantize_rows(edge.data(), 1, 2, bits, q.data()));
  }
  std::vector<float> row = {1.f, 2.f};
  std::vector<std::uint8_t> q(16);
  EXPECT_FALSE(quantize_rows(row.data(), 1, 2, 3, q.data())) << "bits other than 8 and 4";
}

TEST(KernelPaths, TheBestPathIsOneThisCpuSupports) {
  const auto supported = supported_isas();
  ASSERT_FALSE(supported.empty());
  EXPECT_EQ(supported.front(), Isa::kPortable);
  EXPECT_EQ(supported.back(), best_isa());
}

}  // namespace
}  // namespace numaserve::kernels
