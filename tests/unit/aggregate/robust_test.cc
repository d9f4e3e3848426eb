// The robust rules (aggregate/robust.h) against naive computations written here, their
// breakdown points on constructed inputs, and the strategies around them.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "aggregate/robust.h"
#include "aggregate/strategy.h"
#include "core/rng.h"
#include "round_helper.h"

namespace shoal::aggregator {
namespace {

std::vector<std::vector<float>> RandomUpdates(size_t n, size_t d, uint64_t seed, double spread = 1.0) {
  Rng rng(seed);
  std::vector<std::vector<float>> x(n, std::vector<float>(d));
  for (auto& u : x)
    for (float& v : u) v = static_cast<float>(spread * rng.Normal());
  return x;
}

// The k-th smallest of coordinate i, by counting: the value v with fewer than k+1 values below
// it and at least k+1 at or below it.
float KthByCounting(const std::vector<std::vector<float>>& x, size_t i, size_t k) {
  for (const auto& cand : x) {
    size_t below = 0, at_or_below = 0;
    for (const auto& u : x) {
      below += u[i] < cand[i];
      at_or_below += u[i] <= cand[i];
    }
    if (below <= k && k < at_or_below) return cand[i];
  }
  ADD_FAILURE() << "no k-th value";
  return 0.0f;
}

TEST(Robust, MedianAndTrimmedMeanMatchACountingReference) {
  for (size_t n : {size_t{1}, size_t{2}, size_t{7}, size_t{10}}) {
    const auto x = RandomUpdates(n, 33, n);
    std::vector<float> median(33), trimmed(33);
    robust::CoordinateMedian(x, median);
    const size_t trim = (n - 1) / 3;
    robust::TrimmedMean(x, trim, trimmed);
    for (size_t i = 0; i < 33; ++i) {
      const double want = n % 2 ? KthByCounting(x, i, n / 2)
                                : (static_cast<double>(KthByCounting(x, i, n / 2 - 1)) + KthByCounting(x, i, n / 2)) / 2;
      EXPECT_EQ(median[i], static_cast<float>(want)) << n << " " << i;
      double s = 0.0;
      for (size_t k = trim; k < n - trim; ++k) s += KthByCounting(x, i, k);
      EXPECT_NEAR(trimmed[i], s / static_cast<double>(n - 2 * trim), 1e-6) << n << " " << i;
    }
  }
}

// n = 10 honest values in [0.9, 1.1] per coordinate; b of them replaced by 1e6.
std::vector<std::vector<float>> WithAttackers(size_t b) {
  auto x = RandomUpdates(10, 5, 3, 0.05);
  for (auto& u : x)
    for (float& v : u) v = std::clamp(1.0f + v, 0.9f, 1.1f);
  for (size_t k = 0; k < b; ++k) std::fill(x[k].begin(), x[k].end(), 1e6f);
  return x;
}

TEST(Robust, BreakdownPoints) {
  std::vector<float> out(5);
  // The median holds with 4 of 10 attackers and breaks with 6 (past its breakdown point 1/2).
  robust::CoordinateMedian(WithAttackers(4), out);
  for (float v : out) EXPECT_TRUE(v >= 0.9f && v <= 1.1f) << v;
  robust::CoordinateMedian(WithAttackers(6), out);
  for (float v : out) EXPECT_GT(v, 1e5f);
  // Trimming 3 at each end holds 3 attackers and not 4.
  robust::TrimmedMean(WithAttackers(3), 3, out);
  for (float v : out) EXPECT_TRUE(v >= 0.9f && v <= 1.1f) << v;
  robust::TrimmedMean(WithAttackers(4), 3, out);
  for (float v : out) EXPECT_GT(v, 1e4f);
  // The plain mean breaks with one.
  const auto one = WithAttackers(1);
  std::vector<size_t> all(10);
  for (size_t k = 0; k < 10; ++k) all[k] = k;
  robust::MeanOf(one, all, out);
  for (float v : out) EXPECT_GT(v, 1e4f);
}

double KrumScoreNaive(const std::vector<std::vector<float>>& x, size_t a, size_t f) {
  std::vector<double> d;
  for (size_t b = 0; b < x.size(); ++b) {
    if (b == a) continue;
    double s = 0.0;
    for (size_t i = 0; i < x[a].size(); ++i) s += (static_cast<double>(x[a][i]) - x[b][i]) * (x[a][i] - x[b][i]);
    d.push_back(s);
  }
  std::sort(d.begin(), d.end());
  double s = 0.0;
  for (size_t k = 0; k < x.size() - f - 2; ++k) s += d[k];
  return s;
}

TEST(Robust, KrumPicksTheLowestNaiveScoresAndShunsOutliers) {
  auto x = RandomUpdates(11, 20, 9);
  const size_t f = 3;
  const auto pick = robust::KrumSelect(x, f, 5);
  ASSERT_EQ(pick.size(), 5u);
  std::vector<double> scores;
  for (size_t a = 0; a < x.size(); ++a) scores.push_back(KrumScoreNaive(x, a, f));
  for (size_t k = 1; k < pick.size(); ++k) EXPECT_LE(scores[pick[k - 1]], scores[pick[k]]);
  for (size_t a = 0; a < x.size(); ++a) {
    if (std::find(pick.begin(), pick.end(), a) == pick.end()) {
      EXPECT_GE(scores[a], scores[pick.back()] - 1e-9);
    }
  }
  // Three attackers far away (f = 3 < (11 - 2) / 2) are never chosen, even by Multi-Krum's 8.
  for (size_t k = 0; k < 3; ++k)
    for (float& v : x[k]) v += 50.0f;
  for (size_t m : {size_t{1}, size_t{8}}) {
    const auto chosen = robust::KrumSelect(x, f, m);
    for (size_t a : chosen) EXPECT_GE(a, 3u) << m;
  }
}

TEST(Robust, CenteredClipIsTheMeanWithoutClippingAndBoundsAnOutlier) {
  const auto x = RandomUpdates(6, 10, 4);
  std::vector<float> out(10), mean(10);
  const std::vector<float> start(10, 0.0f);
  robust::CenteredClip(x, start, 1e9, 1, out);
  std::vector<size_t> all = {0, 1, 2, 3, 4, 5};
  robust::MeanOf(x, all, mean);
  for (size_t i = 0; i < 10; ++i) EXPECT_NEAR(out[i], mean[i], 1e-6);
  // One update 1e6 away: one iteration with radius tau moves the center by at most
  // (sum of honest steps + tau) / n; the honest ones have norm < 10 here.
  auto bad = x;
  std::fill(bad[0].begin(), bad[0].end(), 1e6f);
  robust::CenteredClip(bad, start, 5.0, 1, out);
  double norm = 0.0;
  for (float v : out) norm += static_cast<double>(v) * v;
  EXPECT_LE(std::sqrt(norm), 6 * 5.0 / 6 + 1e-6);
  // The median radius: the outlier's pull is bounded by the median distance, not its own.
  robust::CenteredClip(bad, start, 0.0, 3, out);
  for (float v : out) EXPECT_LT(std::fabs(v), 10.0f);
}

StrategyOptions Named(const std::string& name) {
  StrategyOptions o;
  o.name = name;
  return o;
}

TEST(RobustStrategy, OrderIndependentAndNeedsIndividualUpdates) {
  for (const char* name : {"median", "trimmed_mean", "krum", "multi_krum", "centered_clip"}) {
    auto x = RandomUpdates(9, 16, 21);
    std::vector<TestUpdate> ups;
    for (size_t k = 0; k < x.size(); ++k) ups.push_back({"c" + std::to_string(k), 1 + k, x[k]});
    auto s1 = MakeStrategy(Named(name));
    auto s2 = MakeStrategy(Named(name));
    ASSERT_TRUE(s1.ok() && s2.ok()) << name;
    EXPECT_TRUE((*s1)->needs_individual_updates());
    auto a = RunRound(**s1, 1, ups, std::vector<float>(16));
    std::reverse(ups.begin(), ups.end());
    auto b = RunRound(**s2, 1, ups, std::vector<float>(16));
    ASSERT_TRUE(a.ok() && b.ok() && a->has_value() && b->has_value()) << name;
    EXPECT_EQ(**a, **b) << name;
  }
}

TEST(RobustStrategy, RefusesBadUpdatesAndOptions) {
  auto s = MakeStrategy(Named("median"));
  auto acc = (*s)->StartRound(1, std::vector<float>(2));
  const std::vector<float> nan = {1.0f, std::nanf("")}, short_one = {1.0f};
  EXPECT_EQ(acc->Add({"a", 0, 1, nan}).message(), "value 1 is not finite");
  EXPECT_FALSE(acc->Add({"a", 0, 1, short_one}).ok());
  EXPECT_EQ(acc->count(), 0u);
  auto o = Named("krum");
  o.byzantine_fraction = 0.5f;
  EXPECT_FALSE(MakeStrategy(o).ok());
  o = Named("centered_clip");
  o.clip_iterations = 0;
  EXPECT_FALSE(MakeStrategy(o).ok());
}

TEST(RobustStrategy, CenteredClipResumesFromItsCenter) {
  auto a = MakeStrategy(Named("centered_clip"));
  auto b = MakeStrategy(Named("centered_clip"));
  std::vector<std::vector<float>> rounds[3] = {RandomUpdates(5, 8, 1), RandomUpdates(5, 8, 2), RandomUpdates(5, 8, 3)};
  auto as_updates = [](const std::vector<std::vector<float>>& x) {
    std::vector<TestUpdate> u;
    for (size_t k = 0; k < x.size(); ++k) u.push_back({"c" + std::to_string(k), 1, x[k]});
    return u;
  };
  std::vector<float> last_a, last_b;
  for (int r = 0; r < 3; ++r) last_a = **RunRound(**a, r + 1, as_updates(rounds[r]), std::vector<float>(8));
  ASSERT_TRUE(RunRound(**b, 1, as_updates(rounds[0]), std::vector<float>(8)).ok());
  ASSERT_TRUE(RunRound(**b, 2, as_updates(rounds[1]), std::vector<float>(8)).ok());
  auto c = MakeStrategy(Named("centered_clip"));
  ASSERT_TRUE((*c)->LoadState((*b)->SaveState()).ok());
  last_b = **RunRound(**c, 3, as_updates(rounds[2]), std::vector<float>(8));
  EXPECT_EQ(last_a, last_b);
}

}  // namespace
}  // namespace shoal::aggregator
