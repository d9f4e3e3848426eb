// ExactSum (sdk/src/aggregate/exact_sum.h) against independent references: __float128 sums
// where every partial sum fits its 113-bit significand (so the reference is exact and one
// rounding to double is the correctly rounded value), and hand-computed values for the wide
// form (cancellation across 200 binary orders, ties, sticky bits).
#include "aggregate/exact_sum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

namespace shoal::aggregator {
namespace {

struct Term {
  std::vector<float> x;
  uint64_t w;
};

ExactSum SumInOrder(const std::vector<Term>& terms, const std::vector<size_t>& order) {
  ExactSum s(terms.front().x.size());
  for (size_t k : order) EXPECT_TRUE(s.Add(terms[k].x, terms[k].w).ok());
  return s;
}

std::vector<size_t> Iota(size_t n) {
  std::vector<size_t> v(n);
  std::iota(v.begin(), v.end(), 0);
  return v;
}

TEST(ExactSum, MatchesAnExactQuadReferenceWithWeightsUpTo2To40) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> mag(-15.0f, 15.0f);
  const size_t n = 257, clients = 200;
  std::vector<Term> terms;
  for (size_t k = 0; k < clients; ++k) {
    Term t{std::vector<float>(n), 1 + rng() % (uint64_t{1} << 40)};
    for (auto& v : t.x) v = (rng() & 1 ? 1.0f : -1.0f) * std::exp2(mag(rng)) * (rng() % 5 == 0 ? 0.0f : 1.0f);
    terms.push_back(std::move(t));
  }
  ExactSum s = SumInOrder(terms, Iota(clients));
  EXPECT_EQ(s.count(), clients);
  EXPECT_EQ(s.wide_coordinates(), 0u);  // 30 binary orders of spread never need the wide form
  for (size_t i = 0; i < n; ++i) {
    __float128 ref = 0;
    for (const auto& t : terms) ref += static_cast<__float128>(t.x[i]) * static_cast<__float128>(t.w);
    ASSERT_EQ(s.Value(i), static_cast<double>(ref)) << "coordinate " << i;
    ASSERT_EQ(s.Sign(i), ref > 0 ? 1 : (ref < 0 ? -1 : 0));
  }
}

TEST(ExactSum, CancelsHugeTermsDownToTinyOnes) {
  // Per coordinate: random terms near 2^90, the same terms negated, and terms near 2^-90. The
  // exact sum is the tiny terms' sum, which a double accumulator loses entirely.
  std::mt19937_64 rng(11);
  std::uniform_real_distribution<float> jitter(-8.0f, 8.0f);
  const size_t n = 64;
  std::vector<Term> terms;
  for (int k = 0; k < 6; ++k) {
    Term huge{std::vector<float>(n), 1 + rng() % 1000};
    for (auto& v : huge.x) v = (rng() & 1 ? 1.0f : -1.0f) * std::exp2(90.0f + jitter(rng));
    Term neg = huge;
    for (auto& v : neg.x) v = -v;
    Term tiny{std::vector<float>(n), 1 + rng() % 1000};
    for (auto& v : tiny.x) v = (rng() & 1 ? 1.0f : -1.0f) * std::exp2(-90.0f + jitter(rng));
    terms.push_back(std::move(huge));
    terms.push_back(std::move(tiny));
    terms.push_back(std::move(neg));
  }
  ExactSum s = SumInOrder(terms, Iota(terms.size()));
  EXPECT_EQ(s.wide_coordinates(), n);
  for (size_t i = 0; i < n; ++i) {
    __float128 tiny = 0;
    double naive = 0;
    for (size_t k = 0; k < terms.size(); ++k) {
      if (k % 3 == 1) tiny += static_cast<__float128>(terms[k].x[i]) * terms[k].w;
      naive += static_cast<double>(terms[k].x[i]) * static_cast<double>(terms[k].w);
    }
    ASSERT_EQ(s.Value(i), static_cast<double>(tiny)) << "coordinate " << i;
    ASSERT_NE(naive, static_cast<double>(tiny)) << "the case is too easy to show anything";
  }
}

TEST(ExactSum, RoundsOnceToNearestEvenInBothForms) {
  const float two53 = 9007199254740992.0f;  // 2^53: 2^53 + 1 is a tie between 2^53 and 2^53 + 2
  ExactSum narrow(1);
  ASSERT_TRUE(narrow.Add(std::vector<float>{two53}, 1).ok());
  ASSERT_TRUE(narrow.Add(std::vector<float>{1.0f}, 1).ok());
  EXPECT_EQ(narrow.wide_coordinates(), 0u);
  EXPECT_EQ(narrow.Value(0), 9007199254740992.0);  // the tie goes to the even 2^53
  // 2^-100 more is far below the double's precision, but breaks the tie upwards; its span
  // forces the wide form, whose sticky bit must carry it.
  ASSERT_TRUE(narrow.Add(std::vector<float>{std::ldexp(1.0f, -100)}, 1).ok());
  EXPECT_EQ(narrow.wide_coordinates(), 1u);
  EXPECT_EQ(narrow.Value(0), 9007199254740994.0);

  ExactSum tiny(1);  // the smallest float, its negation and 2^100 around it
  const float denorm = std::numeric_limits<float>::denorm_min();
  for (float v : {std::ldexp(1.0f, 100), denorm, -std::ldexp(1.0f, 100), denorm, -denorm})
    ASSERT_TRUE(tiny.Add(std::vector<float>{v}, 1).ok());
  EXPECT_EQ(tiny.Value(0), static_cast<double>(denorm));
  EXPECT_EQ(tiny.Sign(0), 1);
}

TEST(ExactSum, TwentyArrivalOrdersGiveTheSameBits) {
  std::mt19937_64 rng(3);
  const size_t n = 512;
  std::vector<Term> terms;
  for (int k = 0; k < 24; ++k) {
    Term t{std::vector<float>(n), 1 + rng() % 5000};
    for (auto& v : t.x) {
      const int kind = static_cast<int>(rng() % 4);  // ordinary, huge, tiny, zero
      const float e = kind == 1 ? 60.0f : (kind == 2 ? -60.0f : 0.0f);
      v = kind == 3 ? 0.0f : std::ldexp(std::uniform_real_distribution<float>(-1, 1)(rng), static_cast<int>(e));
    }
    terms.push_back(std::move(t));
  }
  std::vector<size_t> order = Iota(terms.size());
  std::vector<float> first(n), mean(n);
  bool naive_differs = false;
  std::vector<double> naive_first;
  for (int trial = 0; trial < 20; ++trial) {
    std::shuffle(order.begin(), order.end(), rng);
    ExactSum s = SumInOrder(terms, order);
    s.Mean(0.5, mean);
    std::vector<double> naive(n, 0.0);
    for (size_t k : order)
      for (size_t i = 0; i < n; ++i) naive[i] += static_cast<double>(terms[k].x[i]) * static_cast<double>(terms[k].w);
    if (trial == 0) {
      first = mean;
      naive_first = naive;
      continue;
    }
    ASSERT_EQ(std::memcmp(first.data(), mean.data(), n * sizeof(float)), 0) << "order " << trial;
    naive_differs = naive_differs || naive != naive_first;
  }
  EXPECT_TRUE(naive_differs) << "a double sum of these terms should depend on the order";
}

TEST(ExactSum, MeanDividesByTheTotalWeightAndSignSurvivesUnderflow) {
  ExactSum s(3);
  ASSERT_TRUE(s.Add(std::vector<float>{1.0f, -2.0f, std::numeric_limits<float>::denorm_min()}, 3).ok());
  ASSERT_TRUE(s.Add(std::vector<float>{3.0f, 2.0f, 0.0f}, 1).ok());
  EXPECT_EQ(s.total_weight(), 4u);
  std::vector<float> mean(3);
  s.Mean(2.0, mean);
  EXPECT_EQ(mean[0], 3.0f);   // (3 + 3) / 4 * 2
  EXPECT_EQ(mean[1], -2.0f);  // (-6 + 2) / 4 * 2
  // 3 * 2^-149 / 4 * 2 = 1.5 * 2^-149, a tie between 2^-149 and 2^-148: to even, 2^-148.
  EXPECT_EQ(mean[2], std::ldexp(1.0f, -148));
  ASSERT_TRUE(s.Add(std::vector<float>{0.0f, 0.0f, 0.0f}, uint64_t{1} << 40).ok());
  s.Mean(1.0, mean);
  EXPECT_EQ(mean[2], 0.0f);  // 3 * 2^-149 / (2^40 + 4) underflows the float...
  EXPECT_EQ(s.Sign(2), 1);   // ...but the sum's sign is exact
  EXPECT_EQ(s.Sign(1), -1);
  ExactSum empty(2);
  std::vector<float> out{7.0f, 7.0f};
  empty.Mean(1.0, out);
  EXPECT_EQ(out, (std::vector<float>{0.0f, 0.0f}));
}

TEST(ExactSum, RefusesBadInputAndKeepsTheSum) {
  ExactSum s(2);
  ASSERT_TRUE(s.Add(std::vector<float>{1.0f, 2.0f}, 2).ok());
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(s.Add(std::vector<float>{1.0f}, 1).message(), "update has 1 values, the sum 2");
  EXPECT_EQ(s.Add(std::vector<float>{5.0f, nan}, 1).message(), "value 1 is not finite");
  EXPECT_EQ(s.Add(std::vector<float>{inf, 5.0f}, 1).message(), "value 0 is not finite");
  EXPECT_FALSE(s.Add(std::vector<float>{1.0f, 1.0f}, 0).ok());
  EXPECT_FALSE(s.Add(std::vector<float>{1.0f, 1.0f}, (uint64_t{1} << 40) + 1).ok());
  EXPECT_EQ(s.count(), 1u);
  EXPECT_EQ(s.total_weight(), 2u);
  EXPECT_EQ(s.Value(0), 2.0);
  EXPECT_EQ(s.Value(1), 4.0);
}

TEST(ExactSum, HoldsTheLargestTermsAndRefusesATotalWeightPast2To63) {
  const float big[1] = {std::numeric_limits<float>::max()};
  ExactSum s(1);
  for (int k = 0; k < 1024; ++k) ASSERT_TRUE(s.Add(big, ExactSum::kMaxWeight).ok());
  EXPECT_EQ(s.Value(0), static_cast<double>(big[0]) * std::ldexp(1.0, 50));  // exact in double
  // 2^23 adds of weight 2^40 reach 2^63 exactly: the next one is refused, the sum kept.
  const float one[1] = {-1.0f};
  ExactSum full(1);
  for (uint64_t k = 0; k < (uint64_t{1} << 23); ++k) ASSERT_TRUE(full.Add(one, ExactSum::kMaxWeight).ok());
  EXPECT_EQ(full.total_weight(), ExactSum::kMaxTotalWeight);
  EXPECT_EQ(full.Add(one, 1).message(), "the total weight would pass 2^63");
  EXPECT_EQ(full.Value(0), -std::ldexp(1.0, 63));
  EXPECT_EQ(full.Sign(0), -1);
}

// A single update is kept as it came (the "one update" form); its Value, Sign and Mean must be
// the exact form's bits. AddSparse with every index builds the exact form of the same update.
TEST(ExactSum, OneUpdateGivesTheExactFormsBits) {
  std::mt19937_64 rng(11);
  const size_t n = 4096;
  std::vector<float> x(n);
  std::uniform_int_distribution<uint32_t> bits;
  for (auto& v : x) {
    do v = std::bit_cast<float>(bits(rng));  // every finite float: subnormals, 0, -0, huge
    while (!std::isfinite(v));
  }
  x[0] = std::numeric_limits<float>::max();
  x[1] = -std::numeric_limits<float>::denorm_min();
  x[2] = -0.0f;
  std::vector<uint32_t> all(n);
  std::iota(all.begin(), all.end(), 0u);
  for (uint64_t w : {uint64_t{1}, uint64_t{3}, (uint64_t{1} << 29) + 1, ExactSum::kMaxWeight - 7, ExactSum::kMaxWeight}) {
    ExactSum single(n), exact(n);
    ASSERT_TRUE(single.Add(x, w).ok());
    ASSERT_TRUE(exact.AddSparse(all, x, w).ok());
    std::vector<float> a(n), b(n);
    single.Mean(0.75, a);
    exact.Mean(0.75, b);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::bit_cast<uint64_t>(single.Value(i)), std::bit_cast<uint64_t>(exact.Value(i))) << i << " w " << w;
      ASSERT_EQ(single.Sign(i), exact.Sign(i)) << i;
      ASSERT_EQ(std::bit_cast<uint32_t>(a[i]), std::bit_cast<uint32_t>(b[i])) << i;
    }
    // A second update moves the single one into the exact form: the same sum either way.
    ASSERT_TRUE(single.Add(x, 1).ok());
    ASSERT_TRUE(exact.Add(x, 1).ok());
    for (size_t i = 0; i < n; ++i)
      ASSERT_EQ(std::bit_cast<uint64_t>(single.Value(i)), std::bit_cast<uint64_t>(exact.Value(i))) << i;
  }
}

// AddSparse(indices, values) is Add of the dense vector with the values at those places (an
// index may repeat); Clear empties the sum for reuse.
TEST(ExactSum, SparseAddsMatchDenseOnesAndClearEmpties) {
  const size_t n = 50;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal;
  ExactSum sparse(n), dense(n);
  for (int k = 0; k < 6; ++k) {
    std::vector<uint32_t> idx;
    std::vector<float> val;
    for (uint32_t i = 0; i < n; i += 1 + k) {
      idx.push_back(i);
      val.push_back(std::ldexp(normal(rng), 10 * k - 30));
    }
    idx.push_back(idx.front());  // a repeat adds up
    val.push_back(1.0f);
    const uint64_t w = 1 + 1000 * static_cast<uint64_t>(k);
    ASSERT_TRUE(sparse.AddSparse(idx, val, w).ok());
    // The dense twin: the values but the repeat as one dense update, the repeat on its own.
    std::vector<float> first(n, 0.0f);
    for (size_t j = 0; j + 1 < idx.size(); ++j) first[idx[j]] = val[j];
    ASSERT_TRUE(dense.Add(first, w).ok());
    ASSERT_TRUE(dense.AddSparse(std::vector<uint32_t>{idx.front()}, std::vector<float>{1.0f}, w).ok());
  }
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(sparse.Value(i), dense.Value(i)) << i;
  EXPECT_EQ(sparse.count(), 6u);
  EXPECT_EQ(sparse.AddSparse(std::vector<uint32_t>{0, 50}, std::vector<float>{1.0f, 1.0f}, 1).message(),
            "index 50 is outside the sum's 50");
  EXPECT_EQ(sparse.AddSparse(std::vector<uint32_t>{0}, std::vector<float>{1.0f, 1.0f}, 1).message(), "1 indices for 2 values");
  EXPECT_EQ(sparse.AddSparse(std::vector<uint32_t>{3}, std::vector<float>{std::numeric_limits<float>::infinity()}, 1).message(),
            "value 0 is not finite");
  EXPECT_FALSE(sparse.AddSparse(std::vector<uint32_t>{3}, std::vector<float>{1.0f}, 0).ok());
  EXPECT_EQ(sparse.count(), 6u);
  sparse.Clear();
  EXPECT_EQ(sparse.count(), 0u);
  EXPECT_EQ(sparse.total_weight(), 0u);
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(sparse.Value(i), 0.0) << i;
  const std::vector<float> ones(n, 1.0f);
  ASSERT_TRUE(sparse.Add(ones, 2).ok());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(sparse.Value(i), 2.0) << i;
}

}  // namespace
}  // namespace shoal::aggregator
