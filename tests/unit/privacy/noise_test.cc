#include <gtest/gtest.h>

#include <cmath>

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

}  // namespace
}  // namespace shoal::privacy
