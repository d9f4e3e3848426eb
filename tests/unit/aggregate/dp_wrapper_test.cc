// The DP wrapper (aggregate/wrappers/dp.h) around real strategies: clipping, the noise's
// scale, the accountant's epsilon per round, the budget, adaptive clipping, checkpoints.
#include <gtest/gtest.h>

#include <cmath>

#include "aggregate/wrappers/dp.h"
#include "aggregate/wrappers/secagg.h"
#include "privacy/dp/rdp.h"
#include "round_helper.h"

namespace shoal::aggregator {
namespace {

std::unique_ptr<Strategy> Wrapped(const DpOptions& dp, double q = 1.0, uint64_t rounds = 0, StrategyOptions so = {}) {
  auto inner = MakeStrategy(so);
  EXPECT_TRUE(inner.ok());
  auto s = WrapWithDp(std::move(*inner), dp, q, rounds);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(*s);
}

double Metric(const Strategy& s, const std::string& name) {
  for (const auto& m : s.RoundMetrics())
    if (m.name == name) return m.value;
  ADD_FAILURE() << "no metric " << name;
  return NAN;
}

// With negligible noise the result is the unweighted mean of the clipped updates: one of
// norm 10 scaled to norm 1, one of norm 0.5 kept; example counts do not weigh.
TEST(DpWrapper, ClipsEachUpdateAndAveragesWithoutExampleWeights) {
  auto s = Wrapped({.clip = 1.0, .noise_multiplier = 1e-9});
  std::vector<TestUpdate> rs = {{"a", 1, {6.0f, 8.0f, 0.0f}}, {"b", 1000, {0.0f, 0.0f, 0.5f}}};
  auto agg = RunRound(*s, 1, rs, std::vector<float>(3));
  ASSERT_TRUE(agg.ok() && agg->has_value());
  EXPECT_NEAR((**agg)[0], 0.6 / 2, 1e-5);
  EXPECT_NEAR((**agg)[1], 0.8 / 2, 1e-5);
  EXPECT_NEAR((**agg)[2], 0.5 / 2, 1e-7);
  EXPECT_FALSE(RunRound(*s, 2, {{"a", 1, {NAN, 0.0f, 0.0f}}}, std::vector<float>(3)).ok());
  EXPECT_FALSE(RunRound(*s, 2, {{"a", 1, {1.0f}}}, std::vector<float>(3)).ok()) << "wrong size";
}

// The noise on the mean has standard deviation z * C / m, measured over 200k coordinates.
TEST(DpWrapper, NoiseOnTheMeanIsZTimesClipOverTheCount) {
  const double z = 2.0, clip = 0.5;
  auto s = Wrapped({.clip = clip, .noise_multiplier = z});
  const size_t n = 200'000;
  std::vector<TestUpdate> rs(4, TestUpdate{"c", 1, std::vector<float>(n, 0.0f)});
  auto agg = RunRound(*s, 1, rs, std::vector<float>(n));
  ASSERT_TRUE(agg.ok() && agg->has_value());
  double sq = 0.0;
  for (float v : **agg) sq += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(sq / n), z * clip / 4, 0.01 * z * clip / 4);
  EXPECT_DOUBLE_EQ(Metric(*s, "dp_noise_stddev"), z * clip / 4);
  EXPECT_TRUE(s->poisson_sampling());
}

// epsilon after each round is the accountant's for that many rounds; the budget stops the
// round that would pass it, with a message that names the numbers.
TEST(DpWrapper, EpsilonPerRoundAndTheBudget) {
  privacy::RdpAccountant ref;
  ASSERT_TRUE(ref.Compose(0.2, 1.3, 3).ok());
  const double after3 = ref.Spent(1e-5)->epsilon;
  auto s = Wrapped({.clip = 1.0, .noise_multiplier = 1.3, .epsilon_budget = after3 * 1.0001}, 0.2);
  EXPECT_EQ(Metric(*s, "epsilon"), 0.0);
  privacy::RdpAccountant step;
  for (uint64_t r = 1; r <= 3; ++r) {
    EXPECT_FALSE(s->StopBefore(r).has_value()) << r;
    ASSERT_TRUE(RunRound(*s, r, {{"a", 1, {0.1f, 0.2f}}}, std::vector<float>(2)).ok());
    ASSERT_TRUE(step.Compose(0.2, 1.3).ok());
    EXPECT_DOUBLE_EQ(Metric(*s, "epsilon"), step.Spent(1e-5)->epsilon) << r;
  }
  auto why = s->StopBefore(4);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->find("--dp-epsilon-budget"), std::string::npos) << *why;
  EXPECT_NE(why->find("round 4"), std::string::npos) << *why;
}

TEST(DpWrapper, TargetEpsilonChoosesTheNoise) {
  auto s = Wrapped({.clip = 1.0, .target_epsilon = 2.0}, 0.1, 40);
  for (uint64_t r = 1; r <= 40; ++r) ASSERT_TRUE(RunRound(*s, r, {{"a", 1, {0.1f}}}, std::vector<float>(1)).ok());
  EXPECT_LE(Metric(*s, "epsilon"), 2.0);
  EXPECT_GT(Metric(*s, "epsilon"), 1.99);
}

// Adaptive clipping follows the target quantile of the update norms: 100 clients with norms
// spread log-uniformly over [0.1, 10] (median 1), starting far below at C = 0.01.
TEST(DpWrapper, AdaptiveClippingFindsTheQuantile) {
  auto s = Wrapped({.clip = 0.01, .noise_multiplier = 0.5, .clip_quantile = 0.5, .clip_learning_rate = 0.2});
  std::vector<TestUpdate> rs;
  for (int k = 0; k < 100; ++k) rs.push_back({"c", 1, {static_cast<float>(std::pow(10.0, -1.0 + 2.0 * k / 99.0))}});
  double clip = 0;
  for (uint64_t r = 1; r <= 120; ++r) {
    ASSERT_TRUE(RunRound(*s, r, rs, std::vector<float>(1)).ok());
    clip = Metric(*s, "dp_clip");
  }
  EXPECT_NEAR(std::log(clip), 0.0, std::log(1.25)) << clip;
}

TEST(DpWrapper, CheckpointStateRestoresTheAccountantAndTheClip) {
  DpOptions o{.clip = 0.3, .noise_multiplier = 1.0, .clip_quantile = 0.7};
  auto a = Wrapped(o, 0.5);
  for (uint64_t r = 1; r <= 3; ++r) ASSERT_TRUE(RunRound(*a, r, {{"a", 1, {1.0f, 1.0f}}}, std::vector<float>(2)).ok());
  auto b = Wrapped(o, 0.5);
  ASSERT_TRUE(b->LoadState(a->SaveState()).ok());
  EXPECT_EQ(b->SaveState(), a->SaveState());
  EXPECT_EQ(b->StopBefore(4), a->StopBefore(4));
  EXPECT_FALSE(b->LoadState("").ok()) << "a checkpoint written without DP";
  EXPECT_FALSE(b->LoadState("dp2 -1\nrdp1 0 0\nrdp1 0 0\n").ok());
}

TEST(DpWrapper, RefusesBadSettings) {
  auto make = [](DpOptions o, uint64_t rounds = 10) {
    auto inner = MakeStrategy({});
    return WrapWithDp(std::move(*inner), o, 0.1, rounds).status();
  };
  EXPECT_FALSE(make({.clip = 1.0}).ok()) << "no noise";
  EXPECT_FALSE(make({.clip = 1.0, .noise_multiplier = 1.0, .target_epsilon = 3.0}).ok()) << "both";
  EXPECT_FALSE(make({.clip = 1.0, .target_epsilon = 3.0}, 0).ok()) << "target without rounds";
  EXPECT_FALSE(make({.clip = 1.0, .noise_multiplier = 1.0, .delta = 0.0}).ok());
  EXPECT_FALSE(make({.clip = 1.0, .noise_multiplier = 1.0, .clip_quantile = 1.0}).ok());
  EXPECT_FALSE(make({.clip = -1.0, .noise_multiplier = 1.0}).ok());
  EXPECT_TRUE(make({.clip = 1.0, .noise_multiplier = 1.0}).ok());
}

// DeMo under DP: the wrapper keeps the strategy's name (the service pairs it with the client
// optimizer) and DeMo's sign step applies to the privatized mean.
TEST(DpWrapper, WrapsDemoAndKeepsItsName) {
  StrategyOptions so;
  so.name = "demo";
  so.learning_rate = 0.5f;
  auto s = Wrapped({.clip = 10.0, .noise_multiplier = 1e-9}, 1.0, 0, so);
  EXPECT_EQ(s->name(), "demo");
  auto agg = RunRound(*s, 1, {{"a", 1, {2.0f, -3.0f}}, {"b", 1, {1.0f, 1.0f}}}, std::vector<float>(2));
  ASSERT_TRUE(agg.ok() && agg->has_value());
  EXPECT_FLOAT_EQ((**agg)[0], 0.5f);
  EXPECT_FLOAT_EQ((**agg)[1], -0.5f);
}

// Distributed mode: the one secure aggregate passes unchanged (the clients clipped and noised,
// calibrated to the threshold), the accountant charges z, and against the aggregator (which
// knows the sample) epsilon is composed at q = 1.
TEST(DpWrapper, DistributedModeAccountsTheSurvivingNoise) {
  auto s = Wrapped({.clip = 1.0, .noise_multiplier = 2.0, .distributed = true}, 0.5);
  const std::vector<ClientFailure> dropped = {{"x", 9, "deadline"}};
  auto acc = s->StartRound(1, std::vector<float>(2));
  ASSERT_TRUE(acc->Add({"secure-aggregate", 0, 3, std::vector<float>{5.0f, -7.0f}}).ok());
  EXPECT_FALSE(acc->Add({"again", 0, 3, std::vector<float>{1.0f, 1.0f}}).ok()) << "one aggregate per round";
  auto agg = acc->Finish(dropped);
  ASSERT_TRUE(agg.ok() && agg->has_value());
  EXPECT_EQ((**agg)[0], 5.0f) << "no clipping or noise at the aggregator";
  EXPECT_EQ((**agg)[1], -7.0f);
  privacy::RdpAccountant ref, ref_aggregator;
  ASSERT_TRUE(ref.Compose(0.5, 2.0).ok());
  ASSERT_TRUE(ref_aggregator.Compose(1.0, 2.0).ok());
  EXPECT_DOUBLE_EQ(Metric(*s, "epsilon"), ref.Spent(1e-5)->epsilon);
  EXPECT_DOUBLE_EQ(Metric(*s, "epsilon_vs_aggregator"), ref_aggregator.Spent(1e-5)->epsilon);
  auto restored = Wrapped({.clip = 1.0, .noise_multiplier = 2.0, .distributed = true}, 0.5);
  ASSERT_TRUE(restored->LoadState(s->SaveState()).ok());
  EXPECT_EQ(restored->SaveState(), s->SaveState());
  auto inner = MakeStrategy({});
  EXPECT_FALSE(WrapWithDp(std::move(*inner), {.clip = 1.0, .noise_multiplier = 1.0, .clip_quantile = 0.5, .distributed = true}, 1.0, 0).ok())
      << "adaptive clipping needs the central mode";
}

// Secure aggregation and DP refuse a strategy that needs each client's update.
TEST(DpWrapper, StrategiesNeedingIndividualUpdatesAreRefused) {
  class Median final : public Strategy {
   public:
    std::string name() const override { return "median"; }
    RoundConfig Configure(uint64_t round) const override { return {round, 0.1f, 1, 0, 0.0f}; }
    std::unique_ptr<Accumulator> StartRound(uint64_t, std::span<const float>) override { return nullptr; }
    bool needs_individual_updates() const override { return true; }
  };
  Median median;
  Status st = CheckSecAggStrategy(median);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("--strategy median needs every client's update"), std::string::npos) << st.message();
  auto dp = WrapWithDp(std::make_unique<Median>(), {.clip = 1.0, .noise_multiplier = 1.0}, 1.0, 0);
  ASSERT_FALSE(dp.ok());
  EXPECT_NE(dp.status().message().find("median"), std::string::npos);
  auto fedavg = MakeStrategy({});
  EXPECT_TRUE(CheckSecAggStrategy(**fedavg).ok());
}

}  // namespace
}  // namespace shoal::aggregator
