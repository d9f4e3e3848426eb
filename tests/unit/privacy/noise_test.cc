#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdlib>

#include "privacy/dp/discrete_gaussian.h"
#include "privacy/dp/noise.h"

namespace shoal::privacy {
namespace {

// 10^7 draws: the mean within 5 standard errors of 0, the standard deviation within 1%
// (its standard error here is 0.02%), and the tails where a normal puts them.
TEST(Noise, GaussianHasTheRequestedStandardDeviation) {
  SecureRandom random;
  constexpr size_t kN = 10'000'000;
  const double sigma = 3.5;
  std::vector<double> v(kN, 0.0);
  AddGaussianNoise(random, sigma, v);
  double sum = 0.0, sq = 0.0;
  size_t beyond2 = 0;
  for (double x : v) {
    sum += x;
    sq += x * x;
    beyond2 += std::fabs(x) > 2 * sigma;
  }
  const double mean = sum / kN, sd = std::sqrt(sq / kN - mean * mean);
  EXPECT_LT(std::fabs(mean), 5 * sigma / std::sqrt(kN));
  EXPECT_NEAR(sd / sigma, 1.0, 0.01);
  EXPECT_NEAR(static_cast<double>(beyond2) / kN, std::erfc(2 / std::sqrt(2.0)), 0.001);
}

TEST(Noise, KeyedStreamsAreReproducibleAndFreshOnesDiffer) {
  crypto::StreamKey key{};
  key[0] = 7;
  SecureRandom a(key), b(key), fresh1, fresh2;
  for (int i = 0; i < 1000; ++i) EXPECT_EQ(a.NextU64(), b.NextU64());
  EXPECT_NE(fresh1.NextU64(), fresh2.NextU64());
  for (int i = 0; i < 1000; ++i) {
    const double u = a.Uniform();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
  }
}

// The discrete Gaussian against its exact distribution, P(x) = exp(-x^2 / 18) / Z for
// sigma^2 = 9: a chi-square over the 21 values |x| <= 10 and the two tails, 23 bins (22 degrees
// of freedom, 0.1% critical value 48.3), over 200,000 samples.
TEST(DiscreteGaussian, MatchesItsExactDistribution) {
  SecureRandom random;
  DiscreteGaussian g(&random, 9);
  std::vector<double> p(61);
  double z = 0;
  for (int x = -30; x <= 30; ++x) z += p[x + 30] = std::exp(-x * x / 18.0);
  constexpr int kN = 200000;
  std::array<double, 23> observed{}, expected{};
  auto bin = [](int64_t x) { return x < -10 ? 0 : x > 10 ? 22 : static_cast<int>(x + 11); };
  for (int x = -30; x <= 30; ++x) expected[bin(x)] += kN * p[x + 30] / z;
  double sum = 0, sq = 0;
  for (int i = 0; i < kN; ++i) {
    const int64_t x = g.Sample();
    ++observed[bin(x)];
    sum += x;
    sq += static_cast<double>(x) * x;
  }
  double chi2 = 0;
  for (size_t b = 0; b < observed.size(); ++b) chi2 += (observed[b] - expected[b]) * (observed[b] - expected[b]) / expected[b];
  EXPECT_LT(chi2, 48.3);
  // The exact variance of N_Z(0, 9) is 9 to within 1e-12 (sigma >= 1: the lattice's effect is tiny).
  EXPECT_NEAR(sq / kN, 9.0, 9.0 * 0.02);
  EXPECT_NEAR(sum / kN, 0.0, 5 * 3.0 / std::sqrt(kN));
}

// At distributed DP's scale (variance 10^6 in fixed-point units) the standard deviation is
// within 1% and the values are integers spread symmetrically.
TEST(DiscreteGaussian, LargeVarianceHasTheRequestedSpread) {
  SecureRandom random;
  DiscreteGaussian g(&random, 1'000'000);
  constexpr int kN = 400000;
  double sum = 0, sq = 0;
  for (int i = 0; i < kN; ++i) {
    const double x = static_cast<double>(g.Sample());
    sum += x;
    sq += x * x;
  }
  EXPECT_NEAR(std::sqrt(sq / kN) / 1000.0, 1.0, 0.01);
  EXPECT_NEAR(sum / kN, 0.0, 5 * 1000.0 / std::sqrt(kN));
  std::vector<uint32_t> words(4, 10);
  AddDiscreteGaussian(g, words);
  for (uint32_t w : words) EXPECT_LT(std::abs(static_cast<int32_t>(w) - 10), 10'000'000) << "noise mod 2^32, two's complement";
}

}  // namespace
}  // namespace shoal::privacy
