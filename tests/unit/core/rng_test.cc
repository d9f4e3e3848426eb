// Rng: known-answer values (the sequence is part of what makes splits reproducible across
// machines), determinism per (seed, stream), and the statistics of each transform.

#include "core/rng.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <numeric>
#include <vector>

namespace shoal {
namespace {

// Expected values computed independently (Python) from the xoshiro256** reference with the
// documented SplitMix64 seeding of seed ^ (stream * 0xd1b54a32d192ed03).
TEST(RngTest, KnownAnswers) {
  struct Case {
    uint64_t seed, stream;
    uint64_t expect[3];
  };
  const Case cases[] = {
      {42, 0, {0x15780b2e0c2ec716ULL, 0x6104d9866d113a7eULL, 0xae17533239e499a1ULL}},
      {42, 7, {0xab0b230f7fc48e9aULL, 0x048b0576862255caULL, 0x8f664d3da4409262ULL}},
      {0, 0, {0x99ec5f36cb75f2b4ULL, 0xbf6e1f784956452aULL, 0x1a5f849d4933e6e0ULL}},
  };
  for (const Case& c : cases) {
    Rng rng(c.seed, c.stream);
    for (uint64_t want : c.expect) EXPECT_EQ(rng.NextU64(), want) << "seed " << c.seed << " stream " << c.stream;
  }
}

std::vector<uint64_t> Draw(uint64_t seed, uint64_t stream, int n) {
  Rng rng(seed, stream);
  std::vector<uint64_t> v(n);
  for (auto& x : v) x = rng.NextU64();
  return v;
}

TEST(RngTest, DeterministicPerSeedAndStream) {
  EXPECT_EQ(Draw(5, 3, 1000), Draw(5, 3, 1000));
  EXPECT_NE(Draw(5, 3, 1000), Draw(5, 4, 1000));
  EXPECT_NE(Draw(5, 3, 1000), Draw(6, 3, 1000));
  // Streams are not shifted copies of one another.
  auto a = Draw(5, 0, 100), b = Draw(5, 1, 100);
  for (uint64_t x : a) EXPECT_EQ(std::count(b.begin(), b.end(), x), 0);
}

TEST(RngTest, UniformInUnitInterval) {
  Rng rng(1);
  double sum = 0.0;
  constexpr int kN = 100000;
  for (int i = 0; i < kN; ++i) {
    const float f = rng.Uniform();
    ASSERT_GE(f, 0.0f);
    ASSERT_LT(f, 1.0f);
    const double d = rng.UniformDouble();
    ASSERT_GE(d, 0.0);
    ASSERT_LT(d, 1.0);
    sum += d;
  }
  EXPECT_NEAR(sum / kN, 0.5, 0.005);
}

TEST(RngTest, BelowStaysInRange) {
  Rng rng(2);
  for (uint64_t n : {uint64_t{1}, uint64_t{2}, uint64_t{7}, uint64_t{1000003}, (uint64_t{1} << 63) + 12345,
                     ~uint64_t{0}}) {
    for (int i = 0; i < 2000; ++i) ASSERT_LT(rng.Below(n), n) << n;
  }
  for (int i = 0; i < 100; ++i) EXPECT_EQ(rng.Below(1), 0u);
}

TEST(RngTest, BelowSmallRangeIsUniform) {
  // Chi-square over 10 buckets (9 degrees of freedom; 0.1% critical value 27.9).
  Rng rng(3);
  constexpr int kBuckets = 10, kN = 200000;
  std::vector<int> counts(kBuckets);
  for (int i = 0; i < kN; ++i) ++counts[rng.Below(kBuckets)];
  const double expect = static_cast<double>(kN) / kBuckets;
  double chi2 = 0.0;
  for (int c : counts) chi2 += (c - expect) * (c - expect) / expect;
  EXPECT_LT(chi2, 27.9);
}

TEST(RngTest, BelowLargeRangeHasNoModuloBias) {
  // n = 3 * 2^62: an unbiased draw falls below 2^62 with probability 1/3; `NextU64() % n`
  // would do so with probability 1/2.
  Rng rng(4);
  const uint64_t n = uint64_t{3} << 62;
  constexpr int kN = 60000;
  int low = 0;
  for (int i = 0; i < kN; ++i) low += rng.Below(n) < (uint64_t{1} << 62);
  EXPECT_NEAR(static_cast<double>(low) / kN, 1.0 / 3.0, 0.01);
}

TEST(RngTest, NormalMomentsAreStandard) {
  Rng rng(5);
  constexpr int kN = 200000;
  double sum = 0.0, sum2 = 0.0, sum4 = 0.0;
  for (int i = 0; i < kN; ++i) {
    const double x = rng.Normal();
    sum += x;
    sum2 += x * x;
    sum4 += x * x * x * x;
  }
  const double mean = sum / kN;
  const double var = sum2 / kN - mean * mean;
  EXPECT_NEAR(mean, 0.0, 0.01);
  EXPECT_NEAR(var, 1.0, 0.02);
  EXPECT_NEAR(sum4 / kN, 3.0, 0.1);  // kurtosis of a normal: tells it from e.g. a uniform
}

TEST(RngTest, GammaMeanAndVarianceEqualShape) {
  for (double shape : {0.1, 0.5, 1.0, 2.5, 10.0}) {
    Rng rng(6, static_cast<uint64_t>(shape * 10));
    constexpr int kN = 100000;
    double sum = 0.0, sum2 = 0.0;
    for (int i = 0; i < kN; ++i) {
      const double g = rng.Gamma(shape);
      ASSERT_GE(g, 0.0) << shape;
      ASSERT_TRUE(std::isfinite(g)) << shape;
      sum += g;
      sum2 += g * g;
    }
    const double mean = sum / kN;
    const double var = sum2 / kN - mean * mean;
    // Gamma(k, 1): mean k, variance k; the tolerance is 5 standard errors of the mean.
    EXPECT_NEAR(mean, shape, 5.0 * std::sqrt(shape / kN)) << shape;
    EXPECT_NEAR(var / shape, 1.0, 0.1) << shape;
  }
}

TEST(RngTest, ShuffleIsADeterministicPermutation) {
  std::vector<int> base(100);
  std::iota(base.begin(), base.end(), 0);
  auto shuffled = [&](uint64_t seed) {
    std::vector<int> v = base;
    Rng rng(seed);
    rng.Shuffle(std::span<int>(v));
    return v;
  };
  const std::vector<int> a = shuffled(7);
  EXPECT_EQ(a, shuffled(7));
  EXPECT_NE(a, shuffled(8));
  EXPECT_NE(a, base);
  std::vector<int> sorted = a;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, base);
}

TEST(RngTest, ShuffleMovesEveryPositionUniformly) {
  // Where element 0 ends up over many shuffles of 5 elements: each slot about 1/5 of the time.
  std::vector<int> where(5);
  Rng rng(9);
  constexpr int kN = 50000;
  for (int t = 0; t < kN; ++t) {
    int v[5] = {0, 1, 2, 3, 4};
    rng.Shuffle(std::span<int>(v));
    ++where[std::find(v, v + 5, 0) - v];
  }
  for (int c : where) EXPECT_NEAR(static_cast<double>(c) / kN, 0.2, 0.01);
}

}  // namespace
}  // namespace shoal
