#include <gtest/gtest.h>

#include <algorithm>

#include "core/rng.h"
#include "aggregate/strategy.h"
#include "round_helper.h"

namespace shoal::aggregator {
namespace {

TEST(FedAvg, WeightsByExamples) {
  auto s = MakeStrategy({});
  ASSERT_TRUE(s.ok());
  std::vector<TestUpdate> rs = {{"a", 1, {1.0f, 0.0f}}, {"b", 3, {5.0f, -4.0f}}};
  auto agg = RunRound(**s, 1, rs, std::vector<float>(2));
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
  std::vector<TestUpdate> rs = {{"a", 2, {2.0f}}, {"b", 2, {4.0f}}};
  auto agg = RunRound(**s, 1, rs, std::vector<float>(1));
  EXPECT_FLOAT_EQ((**agg)[0], 1.5f);
}

TEST(FedAvg, NoResultsKeepsTheModel) {
  auto s = MakeStrategy({});
  const std::vector<ClientFailure> failed = {{"a", 1, "deadline"}};
  auto agg = RunRound(**s, 1, {}, std::vector<float>(3), failed);
  ASSERT_TRUE(agg.ok());
  EXPECT_FALSE(agg->has_value());
}

TEST(FedAvg, MatchesANaiveDoubleReferenceOnRandomInputs) {
  Rng rng(5);
  const size_t n = 1000;
  std::vector<TestUpdate> rs;
  for (int c = 0; c < 7; ++c) {
    std::vector<float> d(n);
    for (auto& x : d) x = static_cast<float>(rng.Normal());
    rs.push_back({"c" + std::to_string(c), 1 + rng.Below(500), d});
  }
  auto s = MakeStrategy({});
  auto agg = RunRound(**s, 1, rs, std::vector<float>(n));
  ASSERT_TRUE(agg.ok() && agg->has_value());
  double total = 0;
  for (auto& r : rs) total += static_cast<double>(r.num_examples);
  for (size_t i = 0; i < n; ++i) {
    double ref = 0;
    for (auto& r : rs) ref += r.delta[i] * static_cast<double>(r.num_examples);
    EXPECT_NEAR((**agg)[i], ref / total, 1e-6);
  }
}

// The accumulator's sum is exact: any arrival order gives bit-identical output, with no sort.
TEST(FedAvg, TwentyArrivalOrdersGiveTheSameAggregate) {
  Rng rng(9);
  std::vector<TestUpdate> rs;
  for (int c = 0; c < 9; ++c) {
    std::vector<float> d(257);
    for (auto& x : d) x = static_cast<float>(rng.Normal() * (c % 3 == 0 ? 1e6 : 1e-3));
    rs.push_back({"client-" + std::to_string(c), 10 + static_cast<uint64_t>(c), d});
  }
  auto s = MakeStrategy({});
  const auto reference = RunRound(**s, 1, rs, std::vector<float>(257));
  ASSERT_TRUE(reference.ok() && reference->has_value());
  for (int trial = 0; trial < 20; ++trial) {
    rng.Shuffle(std::span<TestUpdate>(rs));
    const auto agg = RunRound(**s, 1, rs, std::vector<float>(257));
    ASSERT_TRUE(agg.ok() && agg->has_value());
    EXPECT_EQ(**agg, **reference) << "order " << trial;
  }
}

TEST(FedAvg, RefusesAMalformedUpdateAndKeepsTheOthers) {
  auto s = MakeStrategy({});
  auto acc = (*s)->StartRound(1, std::vector<float>(2));
  const std::vector<float> good = {2.0f, 4.0f}, short_one = {1.0f}, nan = {1.0f, std::nanf("")};
  ASSERT_TRUE(acc->Add({"a", 1, 1, good}).ok());
  EXPECT_FALSE(acc->Add({"b", 2, 1, short_one}).ok());
  EXPECT_FALSE(acc->Add({"c", 3, 1, nan}).ok());
  EXPECT_FALSE(acc->Add({"d", 4, 0, good}).ok());  // no examples: no weight
  EXPECT_EQ(acc->count(), 1u);
  auto agg = acc->Finish({});
  ASSERT_TRUE(agg.ok() && agg->has_value());
  EXPECT_EQ(**agg, good);
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
  std::vector<TestUpdate> rs = {{"a", 1, {1.0f}}, {"b", 1, {3.0f}}};
  EXPECT_FLOAT_EQ((**RunRound(**s, 1, rs, std::vector<float>(1)))[0], 2.0f);
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
