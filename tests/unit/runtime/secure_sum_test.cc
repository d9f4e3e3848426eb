// What an update becomes under secure aggregation (runtime/secure_sum.h): a value that is not
// finite is refused rather than encoded (it would skip the DP clip and turn into 0), an
// aggregator's absurd noise settings are refused before they become integers, and the noise
// of a sum of m survivors has the standard deviation z C sqrt(m / t) the headroom is sized for.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <numeric>

#include "privacy/secagg/masking.h"
#include "runtime/secure_sum.h"

namespace shoal::runtime {
namespace {

protocol::PrivacyConfig Dp(double clip, double z) { return {true, 1.0, 32, clip, z}; }

SecureSumPlan Plan(size_t d, const protocol::PrivacyConfig& p, uint32_t m, uint32_t t) {
  SecureSumPlan plan;
  plan.coordinates.resize(d);
  std::iota(plan.coordinates.begin(), plan.coordinates.end(), 0u);
  plan.encoding = SecureSumEncoding(p, m, t);
  return plan;
}

TEST(SecureSum, AnUpdateThatIsNotFiniteIsRefusedOnEveryPath) {
  privacy::SecureRandom random(crypto::StreamKey{});
  for (const protocol::PrivacyConfig& p : {Dp(0.0, 0.0), Dp(1.0, 0.0), Dp(1.0, 1.0)}) {
    const SecureSumPlan plan = Plan(4, p, 10, 6);
    for (float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
      std::vector<float> delta = {0.1f, bad, 0.2f, 0.3f};
      auto r = EncodeSecureUpdate(plan, delta, p, 6, random);
      ASSERT_FALSE(r.ok()) << "clip " << p.dp_clip << " z " << p.dp_noise_multiplier << " value " << bad;
      EXPECT_NE(r.status().message().find("NaN or Inf"), std::string::npos) << r.status().ToString();
    }
    // Finite values whose squared norm overflows a float still clip (the norm is taken in double).
    std::vector<float> huge = {3e38f, 3e38f, 0.0f, 0.0f};
    auto h = EncodeSecureUpdate(plan, huge, p, 6, random);
    ASSERT_TRUE(h.ok()) << h.status().ToString();
  }
}

TEST(SecureSum, AbsurdNoiseSettingsAreRefusedBeforeTheyBecomeIntegers) {
  privacy::SecureRandom random(crypto::StreamKey{});
  // 16-bit words fix the scale at 127 / R, so z C s is not capped: 1e200 overflows a double's square.
  protocol::PrivacyConfig p{true, 1.0, 16, 1e100, 1e100};
  SecureSumPlan plan = Plan(4, p, 10, 6);
  std::vector<float> delta = {0.1f, 0.0f, 0.2f, 0.3f};
  auto r = EncodeSecureUpdate(plan, delta, p, 6, random);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("outside [1, 2^50]"), std::string::npos) << r.status().ToString();
}

// A large delta is clipped to the DP bound: the decoded encoding's L2 norm is at most C (the
// clip leaves room for the rounding of every value), and a delta within the bound is kept.
TEST(SecureSum, ALargeDeltaIsClippedToTheBound) {
  privacy::SecureRandom random(crypto::StreamKey{});
  const size_t d = 1000;
  const protocol::PrivacyConfig p = Dp(0.5, 0.0);
  const SecureSumPlan plan = Plan(d, p, 10, 6);
  std::vector<float> big(d), small(d);
  for (size_t i = 0; i < d; ++i) {
    big[i] = (i % 2 ? 0.9f : -0.8f);  // norm about 27, every value within the range
    small[i] = big[i] * 0.01f;        // norm about 0.27
  }
  auto norm_of = [&](const std::vector<float>& delta) {
    auto e = EncodeSecureUpdate(plan, delta, p, 6, random);
    EXPECT_TRUE(e.ok()) << e.status().ToString();
    std::vector<double> back(d);
    privacy::secagg::DecodeFixedSum(plan.encoding, e->words, back);
    double sq = 0, err = 0;
    for (size_t i = 0; i < d; ++i) {
      sq += back[i] * back[i];
      err = std::max(err, std::fabs(back[i] - delta[i]));
    }
    return std::make_pair(std::sqrt(sq), err);
  };
  const auto [clipped, moved] = norm_of(big);
  EXPECT_LE(clipped, 0.5) << "clipped to C";
  EXPECT_GT(clipped, 0.5 * 0.999) << "to C, not below it";
  EXPECT_GT(moved, 0.5) << "the values moved";
  const auto [kept, error] = norm_of(small);
  EXPECT_LT(error, 1.0 / plan.encoding.scale) << "within the bound: only rounding";
  EXPECT_NEAR(kept, std::sqrt(500 * 0.81 + 500 * 0.64) * 0.01, 1e-4);
}

// 40 survivors of a roster of 40, threshold 20: each adds a discrete Gaussian of variance
// (z C s)^2 / t, so the decoded sum of zero updates has standard deviation z C sqrt(40 / 20).
// The headroom leaves room for 8 of those (not 8 z C, which would be sized for t survivors).
TEST(SecureSum, TheSumsNoiseIsSizedForTheSurvivorsNotTheThreshold) {
  const uint32_t m = 40, t = 20;
  const size_t d = 20000;
  const protocol::PrivacyConfig p = Dp(1.0, 1.0);
  const SecureSumPlan plan = Plan(d, p, m, t);
  EXPECT_DOUBLE_EQ(privacy::secagg::NoiseHeadroom(m, t, 1.0, 1.0), 8 * std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(privacy::secagg::NoiseHeadroom(m, m, 1.0, 1.0), 8.0);
  EXPECT_TRUE(plan.encoding.Fits(m, privacy::secagg::NoiseHeadroom(m, t, 1.0, 1.0)));
  privacy::SecureRandom random(crypto::StreamKey{});
  std::vector<uint32_t> sum(d, 0);
  const std::vector<float> zero(d, 0.0f);
  for (uint32_t c = 0; c < m; ++c) {
    auto e = EncodeSecureUpdate(plan, zero, p, t, random);
    ASSERT_TRUE(e.ok()) << e.status().ToString();
    for (size_t i = 0; i < d; ++i) sum[i] += e->words[i];
  }
  std::vector<double> decoded(d);
  privacy::secagg::DecodeFixedSum(plan.encoding, sum, decoded);
  double sq = 0;
  for (double v : decoded) sq += v * v;
  const double stddev = std::sqrt(sq / d);
  EXPECT_NEAR(stddev, std::sqrt(2.0), 0.03 * std::sqrt(2.0)) << "z C sqrt(m / t)";
}

}  // namespace
}  // namespace shoal::runtime
