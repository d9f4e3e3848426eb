#include <gtest/gtest.h>

#include <algorithm>

#include "core/rng.h"
#include "aggregate/strategy.h"

namespace shoal::aggregator {
namespace {

ClientResult Result(const std::string& name, uint64_t n, std::vector<float> delta) {
  ClientResult r;
  r.client = name;
  r.num_examples = n;
  r.delta = std::move(delta);
  return r;
}

TEST(FedAvg, WeightsByExamples) {
  auto s = MakeStrategy({});
  ASSERT_TRUE(s.ok());
  std::vector<ClientResult> rs = {Result("a", 1, {1.0f, 0.0f}), Result("b", 3, {5.0f, -4.0f})};
  auto agg = (*s)->Aggregate(1, rs, {}, std::vector<float>(2));
  ASSERT_TRUE(agg.ok());
  ASSERT_TRUE(agg->has_value());
  // (1*1 + 3*5)/4 = 4, (0 + 3*-4)/4 = -3
  EXPECT_FLOAT_EQ((**agg)[0], 4.0f);
  EXPECT_FLOAT_EQ((**agg)[1], -3.0f);
}

TEST(FedAvg, ServerLearningRateScales) {
  StrategyOptions o;
  o.server_learning_rate = 0.5f;
  auto s = MakeStrategy(o);
  ASSERT_TRUE(s.ok());
  std::vector<ClientResult> rs = {Result("a", 2, {2.0f}), Result("b", 2, {4.0f})};
  auto agg = (*s)->Aggregate(1, rs, {}, std::vector<float>(1));
  EXPECT_FLOAT_EQ((**agg)[0], 1.5f);
}

TEST(FedAvg, NoResultsKeepsTheModel) {
  auto s = MakeStrategy({});
  auto agg = (*s)->Aggregate(1, {}, std::vector<ClientFailure>{{"a", 1, "deadline"}}, std::vector<float>(3));
  ASSERT_TRUE(agg.ok());
  EXPECT_FALSE(agg->has_value());
}

TEST(FedAvg, MatchesANaiveDoubleReferenceOnRandomInputs) {
  Rng rng(5);
  const size_t n = 1000;
  std::vector<ClientResult> rs;
  for (int c = 0; c < 7; ++c) {
    std::vector<float> d(n);
    for (auto& x : d) x = static_cast<float>(rng.Normal());
    rs.push_back(Result("c" + std::to_string(c), 1 + rng.Below(500), d));
  }
  auto agg = WeightedAverage(rs, 1.0f);
  ASSERT_TRUE(agg.has_value());
  double total = 0;
  for (auto& r : rs) total += static_cast<double>(r.num_examples);
  for (size_t i = 0; i < n; ++i) {
    double ref = 0;
    for (auto& r : rs) ref += r.delta[i] * static_cast<double>(r.num_examples);
    EXPECT_NEAR((*agg)[i], ref / total, 1e-6);
  }
}

// The service sorts results by client key before aggregating; given that order, any arrival
// order gives bit-identical output.
TEST(FedAvg, CanonicalOrderMakesTheAggregateIndependentOfArrival) {
  Rng rng(9);
  std::vector<ClientResult> rs;
  for (int c = 0; c < 9; ++c) {
    std::vector<float> d(257);
    for (auto& x : d) x = static_cast<float>(rng.Normal() * 1e3);
    rs.push_back(Result("client-" + std::to_string(c), 10 + c, d));
  }
  auto canonical = [](std::vector<ClientResult> v) {
    std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.client < b.client; });
    return *WeightedAverage(v, 1.0f);
  };
  const auto reference = canonical(rs);
  for (int trial = 0; trial < 20; ++trial) {
    rng.Shuffle(std::span<ClientResult>(rs));
    EXPECT_EQ(canonical(rs), reference);
  }
}

TEST(FedProx, SendsMuAndAveragesLikeFedAvg) {
  StrategyOptions o;
  o.name = "fedprox";
  o.prox_mu = 0.25f;
  o.learning_rate = 0.3f;
  o.local_epochs = 2;
  auto s = MakeStrategy(o);
  ASSERT_TRUE(s.ok());
  RoundConfig c = (*s)->Configure(4);
  EXPECT_EQ(c.round, 4u);
  EXPECT_FLOAT_EQ(c.prox_mu, 0.25f);
  EXPECT_FLOAT_EQ(c.learning_rate, 0.3f);
  EXPECT_EQ(c.local_epochs, 2u);
  std::vector<ClientResult> rs = {Result("a", 1, {1.0f}), Result("b", 1, {3.0f})};
  EXPECT_FLOAT_EQ((**(*s)->Aggregate(1, rs, {}, std::vector<float>(1)))[0], 2.0f);
  // FedAvg sends no proximal term.
  EXPECT_FLOAT_EQ((*MakeStrategy({}))->Configure(1).prox_mu, 0.0f);
}

TEST(Strategy, RejectsBadOptions) {
  StrategyOptions o;
  o.name = "fedmagic";
  auto s = MakeStrategy(o);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("fedavg, fedprox"), std::string::npos);
  o = {};
  o.learning_rate = -1.0f;
  EXPECT_FALSE(MakeStrategy(o).ok());
  o = {};
  o.local_epochs = 0;
  EXPECT_FALSE(MakeStrategy(o).ok());
  o = {};
  o.name = "fedprox";
  o.prox_mu = -0.1f;
  EXPECT_FALSE(MakeStrategy(o).ok());
}

}  // namespace
}  // namespace shoal::aggregator
