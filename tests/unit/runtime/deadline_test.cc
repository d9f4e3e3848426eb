// The adaptive round deadline (runtime/server/deadline.h) against a sorted-list reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "core/rng.h"
#include "runtime/server/deadline.h"

namespace shoal::aggregator {
namespace {

TEST(AdaptiveDeadline, FixedWithoutAQuantileOrObservations) {
  AdaptiveDeadline fixed;
  fixed.Observe(0.1);
  fixed.EndRound();
  EXPECT_EQ(fixed.NextMs(60000), 60000u);
  AdaptiveDeadline adaptive({0.9, 1.5, 5, 500});
  EXPECT_EQ(adaptive.NextMs(60000), 60000u);
}

TEST(AdaptiveDeadline, MarginTimesTheNearestRankQuantile) {
  Rng rng(3);
  AdaptiveDeadline d({0.8, 1.5, 3, 10});
  std::vector<std::vector<double>> rounds;
  for (int r = 0; r < 6; ++r) {
    rounds.emplace_back();
    for (int k = 0; k < 7 + r; ++k) {
      const double t = std::exp(rng.Normal());  // heavy-ish tail
      rounds.back().push_back(t);
      d.Observe(t);
    }
    d.EndRound();
    // The reference: the last 3 rounds' times, sorted, the ceil(0.8 n)-th.
    std::vector<double> all;
    for (size_t i = rounds.size() > 3 ? rounds.size() - 3 : 0; i < rounds.size(); ++i)
      all.insert(all.end(), rounds[i].begin(), rounds[i].end());
    std::sort(all.begin(), all.end());
    const double q = all[static_cast<size_t>(std::ceil(0.8 * all.size())) - 1];
    EXPECT_EQ(d.NextMs(600000), static_cast<uint32_t>(1.5 * q * 1000.0)) << r;
  }
}

TEST(AdaptiveDeadline, ClampsAndGrowsWhenMostMissIt) {
  AdaptiveDeadline d({0.5, 2.0, 1, 500});
  d.Observe(0.01);
  d.EndRound();
  EXPECT_EQ(d.NextMs(60000), 500u);  // never below the minimum
  d.Observe(100.0);
  d.EndRound();
  EXPECT_EQ(d.NextMs(60000), 60000u);  // never above --round-timeout
  // Censored: 3 of 4 missed a 2 s deadline (observed at 2 s): the median is 2 s, the next 4 s.
  d.Observe(0.5);
  for (int i = 0; i < 3; ++i) d.Observe(2.0);
  d.EndRound();
  EXPECT_EQ(d.NextMs(60000), 4000u);
}

}  // namespace
}  // namespace shoal::aggregator
