// FedOpt's server optimizers against Reddi et al. 2021's Algorithm 2 written out here in double
// (state rounded to float between rounds, as the strategy keeps it), and their checkpoints.
#include <gtest/gtest.h>

#include <cmath>

#include "aggregate/strategy.h"
#include "core/rng.h"
#include "round_helper.h"

namespace shoal::aggregator {
namespace {

// One client per round, weight 1: the pseudo-gradient D is its delta.
std::vector<float> Delta(uint64_t round, size_t d) {
  Rng rng(round);
  std::vector<float> x(d);
  for (float& v : x) v = static_cast<float>(0.1 * rng.Normal());
  return x;
}

struct Reference {
  std::string rule;
  double eta, beta, b1, b2, tau;
  std::vector<float> m, v;
  std::vector<double> Step(const std::vector<float>& delta) {
    if (m.empty()) m.assign(delta.size(), 0.0f), v.assign(delta.size(), 0.0f);
    std::vector<double> out(delta.size());
    for (size_t i = 0; i < delta.size(); ++i) {
      const double d = delta[i];
      if (rule == "fedavgm") {
        m[i] = static_cast<float>(beta * m[i] + d);
        out[i] = eta * m[i];
        continue;
      }
      const double mm = b1 * m[i] + (1 - b1) * d;
      double vv = v[i];
      if (rule == "fedadagrad") vv = vv + d * d;
      if (rule == "fedadam") vv = b2 * vv + (1 - b2) * d * d;
      if (rule == "fedyogi") vv = vv - (1 - b2) * d * d * (vv - d * d > 0 ? 1 : (vv - d * d < 0 ? -1 : 0));
      m[i] = static_cast<float>(mm);
      v[i] = static_cast<float>(vv);
      out[i] = eta * mm / (std::sqrt(vv) + tau);
    }
    return out;
  }
};

TEST(FedOpt, FollowsAlgorithm2) {
  for (const char* name : {"fedavgm", "fedadagrad", "fedadam", "fedyogi"}) {
    StrategyOptions o;
    o.name = name;
    auto s = MakeStrategy(o);
    ASSERT_TRUE(s.ok()) << name;
    const double eta = std::string(name) == "fedavgm" ? 1.0 : std::string(name) == "fedadagrad" ? 0.1 : 0.01;
    Reference ref{name, eta, 0.9, 0.9, 0.99, 1e-3, {}, {}};
    for (uint64_t r = 1; r <= 6; ++r) {
      const auto delta = Delta(r, 40);
      auto got = RunRound(**s, r, {{"a", 1, delta}}, std::vector<float>(40));
      ASSERT_TRUE(got.ok() && got->has_value()) << name;
      const auto want = ref.Step(delta);
      for (size_t i = 0; i < want.size(); ++i)
        EXPECT_NEAR((**got)[i], want[i], 1e-6 * std::max(1.0, std::fabs(want[i]))) << name << " round " << r << " i " << i;
    }
  }
}

TEST(FedOpt, AvgMWithoutMomentumIsFedAvg) {
  StrategyOptions o;
  o.name = "fedavgm";
  o.server_momentum = 0.0f;
  o.server_learning_rate = 0.7f;
  auto s = MakeStrategy(o);
  StrategyOptions plain;
  plain.server_learning_rate = 0.7f;
  auto f = MakeStrategy(plain);
  const std::vector<TestUpdate> ups = {{"a", 2, {1.0f, -2.0f}}, {"b", 5, {0.5f, 3.0f}}};
  // Equal up to rounding: FedAvg scales the exact sum once, FedAvgM scales the rounded mean.
  for (uint64_t r = 1; r <= 3; ++r) {
    const auto a = **RunRound(**s, r, ups, std::vector<float>(2)), b = **RunRound(**f, r, ups, std::vector<float>(2));
    for (size_t i = 0; i < 2; ++i) EXPECT_FLOAT_EQ(a[i], b[i]);
  }
}

TEST(FedOpt, ResumesBitIdenticallyAndRefusesAnotherStrategysState) {
  StrategyOptions o;
  o.name = "fedyogi";
  auto whole = MakeStrategy(o);
  auto first = MakeStrategy(o);
  std::vector<float> a, b;
  for (uint64_t r = 1; r <= 4; ++r) a = **RunRound(**whole, r, {{"a", 1, Delta(r, 30)}}, std::vector<float>(30));
  for (uint64_t r = 1; r <= 2; ++r) ASSERT_TRUE(RunRound(**first, r, {{"a", 1, Delta(r, 30)}}, std::vector<float>(30)).ok());
  auto resumed = MakeStrategy(o);
  ASSERT_TRUE((*resumed)->LoadState((*first)->SaveState()).ok());
  for (uint64_t r = 3; r <= 4; ++r) b = **RunRound(**resumed, r, {{"a", 1, Delta(r, 30)}}, std::vector<float>(30));
  EXPECT_EQ(a, b);
  o.name = "fedadam";
  auto adam = MakeStrategy(o);
  EXPECT_EQ((*adam)->LoadState((*first)->SaveState()).code(), StatusCode::kCorruption);
  EXPECT_FALSE((*adam)->LoadState("").ok());
  std::string cut = (*first)->SaveState();
  cut.pop_back();
  o.name = "fedyogi";
  EXPECT_FALSE((*MakeStrategy(o))->LoadState(cut).ok());
}

// Empty moments (before the first round; FedAvgM has no v) save and load too.
TEST(FedOpt, EmptyStatesRoundTrip) {
  for (const char* name : {"fedavgm", "fedadam", "fedyogi", "fedadagrad"}) {
    StrategyOptions o;
    o.name = name;
    auto fresh = MakeStrategy(o), stepped = MakeStrategy(o), other = MakeStrategy(o);
    EXPECT_TRUE((*other)->LoadState((*fresh)->SaveState()).ok()) << name;
    ASSERT_TRUE(RunRound(**stepped, 1, {{"a", 1, Delta(1, 5)}}, std::vector<float>(5)).ok());
    EXPECT_TRUE((*other)->LoadState((*stepped)->SaveState()).ok()) << name;
    EXPECT_EQ((*other)->SaveState(), (*stepped)->SaveState()) << name;
  }
  for (const char* name : {"median", "centered_clip"}) {
    StrategyOptions o;
    o.name = name;
    auto fresh = MakeStrategy(o), other = MakeStrategy(o);
    EXPECT_TRUE((*other)->LoadState((*fresh)->SaveState()).ok()) << name;
  }
}

// An aggregate whose step would overflow (finite, but D^2 past the float range) keeps the model
// and leaves the moments as they were, so later rounds still step.
TEST(FedOpt, AnOverflowingRoundKeepsTheModelAndTheState) {
  StrategyOptions o;
  o.name = "fedadam";
  auto s = MakeStrategy(o), ref = MakeStrategy(o);
  ASSERT_TRUE(RunRound(**s, 1, {{"a", 1, Delta(1, 4)}}, std::vector<float>(4)).ok());
  ASSERT_TRUE(RunRound(**ref, 1, {{"a", 1, Delta(1, 4)}}, std::vector<float>(4)).ok());
  auto huge = RunRound(**s, 2, {{"a", 1, std::vector<float>(4, 3e38f)}}, std::vector<float>(4));
  ASSERT_TRUE(huge.ok());
  EXPECT_FALSE(huge->has_value());
  EXPECT_EQ((*s)->SaveState(), (*ref)->SaveState());
}

TEST(FedOpt, RefusesBadSettings) {
  StrategyOptions o;
  o.name = "fedadam";
  o.server_beta2 = 1.0f;
  EXPECT_FALSE(MakeStrategy(o).ok());
  o = {};
  o.name = "fedavgm";
  o.server_momentum = -0.1f;
  EXPECT_FALSE(MakeStrategy(o).ok());
  o = {};
  o.name = "fedyogi";
  o.server_tau = 0.0f;
  EXPECT_FALSE(MakeStrategy(o).ok());
}

}  // namespace
}  // namespace shoal::aggregator
