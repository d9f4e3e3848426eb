// shoal-sim's attacks (runtime/sim/attack.h) against the formulas written out here, with a
// stand-in for the attackers' honest training.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>

#include "runtime/sim/attack.h"

namespace shoal::sim {
namespace {

// Attacker a's honest delta for round r: coordinate i is a + r + i / 10 (distinct per attacker).
Attack::Honest CountingHonest(std::atomic<int>* calls) {
  return [calls](uint32_t a, const TaskConfig&, std::span<const float> global, const RoundConfig& round,
                 TrainResult* out) {
    ++*calls;
    out->delta.resize(global.size());
    for (size_t i = 0; i < global.size(); ++i) out->delta[i] = static_cast<float>(a + round.round + i / 10.0);
    return Status::Ok();
  };
}

std::unique_ptr<Attack> Make(const std::string& kind, double share, double strength = 0.0,
                             std::atomic<int>* calls = nullptr, uint32_t clients = 100) {
  static std::atomic<int> unused{0};
  auto a = Attack::Create({kind, share, strength}, clients, clients, 7, CountingHonest(calls ? calls : &unused));
  EXPECT_TRUE(a.ok()) << a.status().message();
  return std::move(*a);
}

TEST(Attack, NormalQuantileMatchesKnownValues) {
  EXPECT_NEAR(NormalQuantile(0.5), 0.0, 1e-12);
  EXPECT_NEAR(NormalQuantile(0.975), 1.959963984540054, 1e-9);
  EXPECT_NEAR(NormalQuantile(0.69), 0.495850347347453, 1e-9);
  EXPECT_NEAR(NormalQuantile(0.01), -2.326347874040841, 1e-9);
}

TEST(Attack, ChoosesExactlyTheShareFromTheSeed) {
  auto a = Make("sign-flip", 0.2), b = Make("sign-flip", 0.2);
  EXPECT_EQ(a->count(), 20u);
  size_t same = 0, flagged = 0;
  for (uint32_t c = 0; c < 100; ++c) {
    same += a->attacker(c) == b->attacker(c);
    flagged += a->attacker(c);
  }
  EXPECT_EQ(same, 100u);
  EXPECT_EQ(flagged, 20u);
}

TEST(Attack, SimpleKindsTransformTheHonestDelta) {
  const std::vector<float> global(4, 0.0f);
  RoundConfig round;
  round.round = 3;
  TrainResult r;
  r.delta = {1.0f, -2.0f, 0.5f, 0.0f};
  ASSERT_TRUE(Make("sign-flip", 0.1)->Corrupt(0, {}, global, round, &r).ok());
  EXPECT_EQ(r.delta, (std::vector<float>{-1.0f, 2.0f, -0.5f, -0.0f}));
  ASSERT_TRUE(Make("scale", 0.1)->Corrupt(0, {}, global, round, &r).ok());
  EXPECT_EQ(r.delta, (std::vector<float>{-100.0f, 200.0f, -50.0f, -0.0f}));
  ASSERT_TRUE(Make("scale", 0.1, 3.0)->Corrupt(0, {}, global, round, &r).ok());
  EXPECT_EQ(r.delta[1], 600.0f);
  // noise: N(0, 10^2) in place of the delta, the same draws for the same client and round.
  TrainResult n1, n2;
  n1.delta.assign(20000, 5.0f);
  n2.delta.assign(20000, 5.0f);
  auto noise = Make("noise", 0.1);
  ASSERT_TRUE(noise->Corrupt(4, {}, std::vector<float>(20000), round, &n1).ok());
  ASSERT_TRUE(noise->Corrupt(4, {}, std::vector<float>(20000), round, &n2).ok());
  EXPECT_EQ(n1.delta, n2.delta);
  double s = 0.0, ss = 0.0;
  for (float v : n1.delta) s += v, ss += static_cast<double>(v) * v;
  EXPECT_NEAR(s / 20000, 0.0, 0.3);
  EXPECT_NEAR(std::sqrt(ss / 20000), 10.0, 0.2);
}

TEST(Attack, AlieAndIpmColludeOncePerRound) {
  for (const char* kind : {"alie", "ipm"}) {
    std::atomic<int> calls{0};
    auto a = Make(kind, 0.2, 0.0, &calls);
    const std::vector<float> global(30, 0.0f);
    RoundConfig round;
    round.round = 2;
    // The attackers' honest deltas, as CountingHonest makes them: mean and spread per coordinate.
    std::vector<double> mu(30, 0.0), sd(30, 0.0);
    std::vector<uint32_t> who;
    for (uint32_t c = 0; c < 100; ++c)
      if (a->attacker(c)) who.push_back(c);
    for (size_t i = 0; i < 30; ++i) {
      for (uint32_t c : who) mu[i] += (c + 2 + i / 10.0) / who.size();
      for (uint32_t c : who) sd[i] += std::pow(c + 2 + i / 10.0 - mu[i], 2) / who.size();
      sd[i] = std::sqrt(sd[i]);
    }
    // n = 100 a round, m = 20: s = 51 - 20 = 31, z = Phi^-1(0.69).
    const double z = NormalQuantile(0.69);
    std::vector<float> first;
    for (uint32_t c : who) {
      TrainResult r;
      r.delta.assign(30, 1.0f);
      ASSERT_TRUE(a->Corrupt(c, {}, global, round, &r).ok());
      if (first.empty()) first = r.delta;
      EXPECT_EQ(r.delta, first) << kind << ": every attacker sends the same vector";
    }
    for (size_t i = 0; i < 30; ++i) {
      const double want = std::string(kind) == "ipm" ? -0.1 * mu[i] : mu[i] - z * sd[i];
      EXPECT_NEAR(first[i], want, 1e-4 * std::max(1.0, std::fabs(want))) << kind << " " << i;
    }
    EXPECT_EQ(calls.load(), 20) << kind << ": one honest training per attacker per round";
  }
}

TEST(Attack, RefusesBadOptions) {
  auto honest = CountingHonest(nullptr);
  EXPECT_FALSE(Attack::Create({"sybil", 0.1, 0}, 10, 10, 1, honest).ok());
  EXPECT_FALSE(Attack::Create({"scale", 1.0, 0}, 10, 10, 1, honest).ok());
  EXPECT_FALSE(Attack::Create({"scale", 0.0, 0}, 10, 10, 1, honest).ok());
  EXPECT_FALSE(Attack::Create({"none", 0.2, 0}, 10, 10, 1, honest).ok());
  EXPECT_FALSE(Attack::Create({"scale", 0.2, -1}, 10, 10, 1, honest).ok());
  auto none = Attack::Create({"none", 0.0, 0}, 10, 10, 1, honest);
  ASSERT_TRUE(none.ok());
  EXPECT_EQ(*none, nullptr);
}

}  // namespace
}  // namespace shoal::sim
