// FedBuff's staleness weights against their definition (the largest w with w^2 (1 + tau) <=
// 2^32, checked by brute force and against 2^16 / sqrt(1 + tau) in long double), and its
// commit against a naive weighted sum written out here.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "aggregate/exact_sum.h"  // UInt128
#include "aggregate/strategies/fedbuff.h"
#include "core/rng.h"

namespace shoal::aggregator {
namespace {

TEST(FedBuff, StalenessWeightIsTheFloorOfTwoToTheSixteenOverRootOnePlusTau) {
  EXPECT_EQ(FedBuffWeight(0), 65536u);
  EXPECT_EQ(FedBuffWeight(1), 46340u);  // 65536 / sqrt(2) = 46340.95
  EXPECT_EQ(FedBuffWeight(3), 32768u);  // exactly half
  EXPECT_EQ(FedBuffWeight(15), 16384u);
  EXPECT_EQ(FedBuffWeight((uint64_t{1} << 32) - 1), 1u);
  EXPECT_EQ(FedBuffWeight(uint64_t{1} << 32), 0u);
  EXPECT_EQ(FedBuffWeight(UINT64_MAX), 0u);
  std::vector<uint64_t> taus;
  for (uint64_t t = 0; t < 5000; ++t) taus.push_back(t);
  // Around the perfect squares, where a floor taken from a rounded double could be one off.
  for (uint64_t w = 2; w < 65536; w += 97)
    for (int64_t dt = -2; dt <= 2; ++dt) {
      const int64_t t = static_cast<int64_t>((uint64_t{1} << 32) / (w * w)) - 1 + dt;
      if (t >= 0) taus.push_back(static_cast<uint64_t>(t));
    }
  for (uint64_t t : taus) {
    SCOPED_TRACE(t);
    const uint64_t w = FedBuffWeight(t);
    const UInt128 d = t + 1, limit = UInt128{1} << 32;
    EXPECT_LE(UInt128{w} * w * d, limit);
    EXPECT_GT(UInt128{w + 1} * (w + 1) * d, limit);
    EXPECT_NEAR(static_cast<long double>(w), 65536.0L / std::sqrt(static_cast<long double>(d)), 1.0L);
  }
  for (uint64_t t = 0; t < 1000; ++t) EXPECT_GE(FedBuffWeight(t), FedBuffWeight(t + 1)) << "monotone";
}

StrategyOptions FedBuffOptions(float server_lr) {
  StrategyOptions o;
  o.name = "fedbuff";
  o.server_learning_rate = server_lr;
  o.buffer_size = 5;
  o.max_staleness = 7;
  return o;
}

struct Buffered {
  uint64_t staleness;
  uint64_t num_examples;
  std::vector<float> delta;
};

std::vector<Buffered> RandomBuffer(size_t k, size_t d, uint64_t seed) {
  Rng rng(seed);
  std::vector<Buffered> b;
  for (size_t i = 0; i < k; ++i) {
    Buffered u{i % 4 == 0 ? 0 : rng.NextU64() % 8, 1 + rng.NextU64() % 1000, std::vector<float>(d)};
    for (float& v : u.delta) v = static_cast<float>(rng.Normal() * std::pow(10.0, static_cast<double>(rng.NextU64() % 5) - 2));
    b.push_back(std::move(u));
  }
  return b;
}

StatusOr<std::optional<std::vector<float>>> Commit(Strategy& s, const std::vector<Buffered>& buffer, size_t d) {
  std::vector<float> global(d, 0.5f);
  auto acc = s.StartRound(1, global);
  for (const auto& u : buffer) SHOAL_RETURN_IF_ERROR(acc->Add({"c", 0, u.num_examples, u.delta, u.staleness}));
  return acc->Finish({});
}

TEST(FedBuff, CommitIsTheStalenessWeightedSumOverKWhateverTheOrderAndExampleCounts) {
  constexpr size_t kD = 300, kK = 9;
  auto strategy = MakeStrategy(FedBuffOptions(0.8f));
  ASSERT_TRUE(strategy.ok()) << strategy.status().ToString();
  ASSERT_TRUE((*strategy)->asynchronous().has_value());
  EXPECT_EQ((*strategy)->asynchronous()->buffer, 5u);
  EXPECT_EQ((*strategy)->asynchronous()->max_staleness, 7u);
  std::vector<Buffered> buffer = RandomBuffer(kK, kD, 3);
  auto step = Commit(**strategy, buffer, kD);
  ASSERT_TRUE(step.ok() && step->has_value()) << step.status().ToString();

  // Naive: eta * sum_k w(tau_k) / 2^16 * delta_k / K in long double (w checked against its
  // definition above): within one float ulp of the strategy's.
  for (size_t i = 0; i < kD; ++i) {
    long double sum = 0;
    for (const auto& u : buffer) sum += static_cast<long double>(FedBuffWeight(u.staleness)) / 65536.0L * u.delta[i];
    const float want = static_cast<float>(0.8L * sum / kK);
    const float ulp = std::nextafter(std::fabs(want), INFINITY) - std::fabs(want);
    EXPECT_LE(std::fabs((**step)[i] - want), ulp) << "coordinate " << i << ": " << (**step)[i] << " vs " << want;
  }

  // Bit-identical in any order, and the example counts do not matter.
  std::vector<Buffered> shuffled = buffer;
  std::reverse(shuffled.begin(), shuffled.end());
  std::swap(shuffled[1], shuffled[4]);
  for (auto& u : shuffled) u.num_examples = 1;
  auto again = Commit(**strategy, shuffled, kD);
  ASSERT_TRUE(again.ok() && again->has_value());
  EXPECT_EQ(**again, **step);

  // The metrics describe that buffer.
  double mean = 0;
  uint64_t max = 0;
  for (const auto& u : buffer) mean += static_cast<double>(u.staleness) / kK, max = std::max(max, u.staleness);
  auto metrics = (*strategy)->RoundMetrics();
  ASSERT_EQ(metrics.size(), 2u);
  EXPECT_EQ(metrics[0].name, "staleness_mean");
  EXPECT_NEAR(metrics[0].value, mean, 1e-12);
  EXPECT_EQ(metrics[1].name, "staleness_max");
  EXPECT_EQ(metrics[1].value, static_cast<double>(max));
}

TEST(FedBuff, AStaleUpdateMovesTheModelLessThanAFreshOne) {
  auto strategy = MakeStrategy(FedBuffOptions(0.0f));  // 0: the default server lr, 1
  ASSERT_TRUE(strategy.ok());
  const std::vector<float> delta = {1.0f, -2.0f, 0.25f};
  auto fresh = Commit(**strategy, {{0, 10, delta}}, 3);
  auto stale = Commit(**strategy, {{3, 10, delta}}, 3);
  ASSERT_TRUE(fresh.ok() && stale.ok());
  EXPECT_EQ(**fresh, delta) << "one fresh update at eta 1 is applied as it is";
  EXPECT_EQ(**stale, (std::vector<float>{0.5f, -1.0f, 0.125f})) << "staleness 3: weight exactly 1/2";
  // Two updates, one fresh and one of staleness 3: (d + d/2) / 2.
  auto both = Commit(**strategy, {{0, 1, delta}, {3, 1000, delta}}, 3);
  ASSERT_TRUE(both.ok());
  EXPECT_EQ(**both, (std::vector<float>{0.75f, -1.5f, 0.1875f}));
  // An empty buffer keeps the model.
  auto none = Commit(**strategy, {}, 3);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(none->has_value());
}

TEST(FedBuff, RefusesWhatItCannotWeigh) {
  StrategyOptions o = FedBuffOptions(1.0f);
  o.buffer_size = 0;
  auto refused = MakeStrategy(o);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("--buffer-size"), std::string::npos);
  auto strategy = MakeStrategy(FedBuffOptions(1.0f));
  ASSERT_TRUE(strategy.ok());
  std::vector<float> global(2, 0.0f), nan = {1.0f, std::nanf("")}, ok = {1.0f, 2.0f};
  auto acc = (*strategy)->StartRound(1, global);
  EXPECT_FALSE(acc->Add({"c", 0, 1, nan, 0}).ok());
  EXPECT_FALSE(acc->Add({"c", 0, 1, ok, uint64_t{1} << 32}).ok()) << "a staleness no weight covers";
  EXPECT_EQ(acc->count(), 0u);
  // The synchronous strategies are not asynchronous.
  StrategyOptions avg;
  EXPECT_FALSE((*MakeStrategy(avg))->asynchronous().has_value());
}

}  // namespace
}  // namespace shoal::aggregator
