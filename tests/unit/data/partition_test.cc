// The held-out split, the partitioners and ParsePartition.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "shoal/data.h"

namespace shoal::data {
namespace {

// A dataset whose class c has 20 + 7c examples (uneven on purpose), interleaved, with one
// feature that records the example's original index so a split can be traced back.
Dataset Synthetic(int32_t classes = 10) {
  std::vector<int32_t> labels;
  for (int32_t c = 0; c < classes; ++c) labels.insert(labels.end(), 20 + 7 * c, c);
  // Interleave deterministically (a fixed stride permutation; 7919 is prime).
  const size_t n = labels.size();
  std::vector<int32_t> y(n);
  for (size_t i = 0; i < n; ++i) y[i] = labels[(i * 7919) % n];
  Dataset d;
  d.name = "synthetic";
  d.n = static_cast<int64_t>(n);
  d.dim = 1;
  d.num_classes = classes;
  d.y = y;
  d.x.resize(n);
  std::iota(d.x.begin(), d.x.end(), 0.0f);
  return d;
}

std::vector<int64_t> ClassCounts(const std::vector<int32_t>& y, int32_t classes) {
  std::vector<int64_t> c(classes);
  for (int32_t v : y) ++c[v];
  return c;
}

// Original indices of a subset built from Synthetic().
std::vector<int64_t> Origins(const Dataset& d) {
  std::vector<int64_t> o;
  for (float v : d.x) o.push_back(static_cast<int64_t>(v));
  return o;
}

// ---------------------------------------------------------------------------------------------
// TrainTestSplit

TEST(SplitTest, StratifiedDisjointAndComplete) {
  const Dataset d = Synthetic();
  ASSERT_EQ(std::gcd(static_cast<size_t>(d.n), size_t{7919}), 1u);  // the stride is a permutation
  auto split = TrainTestSplit(d, 0.2, 1);
  ASSERT_TRUE(split.ok()) << split.status().ToString();

  // Per class, exactly round(0.2 * count) examples are held out.
  const auto all = ClassCounts(d.y, 10);
  const auto test = ClassCounts(split->test.y, 10);
  const auto train = ClassCounts(split->train.y, 10);
  for (int c = 0; c < 10; ++c) {
    EXPECT_EQ(test[c], std::llround(0.2 * static_cast<double>(all[c]))) << "class " << c;
    EXPECT_EQ(train[c] + test[c], all[c]) << "class " << c;
  }

  // Disjoint, together every example once, each half in dataset order, labels carried along.
  std::vector<int64_t> tr = Origins(split->train), te = Origins(split->test);
  EXPECT_TRUE(std::is_sorted(tr.begin(), tr.end()));
  EXPECT_TRUE(std::is_sorted(te.begin(), te.end()));
  std::vector<int64_t> both = tr;
  both.insert(both.end(), te.begin(), te.end());
  std::sort(both.begin(), both.end());
  std::vector<int64_t> every(d.n);
  std::iota(every.begin(), every.end(), 0);
  EXPECT_EQ(both, every);
  for (size_t i = 0; i < te.size(); ++i) EXPECT_EQ(split->test.y[i], d.y[te[i]]);
  EXPECT_EQ(split->train.n + split->test.n, d.n);
  EXPECT_EQ(split->train.num_classes, 10);
  EXPECT_EQ(split->test.num_classes, 10);
}

TEST(SplitTest, DeterministicPerSeedDifferentAcrossSeeds) {
  const Dataset d = Synthetic();
  auto a = TrainTestSplit(d, 0.25, 7);
  auto b = TrainTestSplit(d, 0.25, 7);
  auto c = TrainTestSplit(d, 0.25, 8);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(Origins(a->test), Origins(b->test));
  EXPECT_EQ(Origins(a->train), Origins(b->train));
  EXPECT_NE(Origins(a->test), Origins(c->test));
  // Same class counts whatever the seed.
  EXPECT_EQ(ClassCounts(a->test.y, 10), ClassCounts(c->test.y, 10));
}

TEST(SplitTest, ZeroFractionKeepsEverythingForTraining) {
  auto s = TrainTestSplit(Synthetic(), 0.0, 1);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->test.n, 0);
  EXPECT_EQ(s->train.n, Synthetic().n);
}

TEST(SplitTest, RejectsBadArguments) {
  const Dataset d = Synthetic();
  for (double f : {-0.1, 1.0, 1.5, std::nan("")}) {
    EXPECT_EQ(TrainTestSplit(d, f, 1).status().code(), StatusCode::kInvalidArgument) << f;
  }
  Dataset bad = d;
  bad.y[3] = 10;  // outside num_classes
  EXPECT_EQ(TrainTestSplit(bad, 0.2, 1).status().code(), StatusCode::kInvalidArgument);
  bad = d;
  bad.x.pop_back();  // inconsistent sizes
  EXPECT_EQ(TrainTestSplit(bad, 0.2, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(TrainTestSplit(Dataset{}, 0.2, 1).status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// ParsePartition

TEST(ParsePartitionTest, AcceptsIndexOverCount) {
  auto p = ParsePartition("2/4");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->index, 2u);
  EXPECT_EQ(p->count, 4u);
  p = ParsePartition("0/1");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->index, 0u);
  EXPECT_EQ(p->count, 1u);
  p = ParsePartition("99/100");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->index, 99u);
}

TEST(ParsePartitionTest, RejectsMalformed) {
  for (const char* text : {"4/4", "5/4", "-1/3", "a/b", "3", "", "/", "1/", "/4", "0/0", " 1/4", "1/4 ", "1/4/5",
                           "+1/4", "1.0/4", "1/99999999999"}) {
    auto p = ParsePartition(text);
    EXPECT_FALSE(p.ok()) << "accepted '" << text << "'";
    EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument) << text;
  }
  EXPECT_NE(ParsePartition("4/4").status().message().find("0 <= i < n"), std::string::npos);
}

// ---------------------------------------------------------------------------------------------
// Partition

// Labels like digits' training half: 1500 examples, 10 classes of 150, interleaved.
std::vector<int32_t> Labels1500() {
  std::vector<int32_t> y(1500);
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>((i * 7) % 10);
  return y;
}

// Each index in [0, n) appears in exactly one part; each part is sorted.
void ExpectExactCover(const std::vector<std::vector<int64_t>>& parts, size_t n) {
  std::vector<int> seen(n);
  for (const auto& part : parts) {
    EXPECT_TRUE(std::is_sorted(part.begin(), part.end()));
    for (int64_t i : part) {
      ASSERT_GE(i, 0);
      ASSERT_LT(static_cast<size_t>(i), n);
      ++seen[i];
    }
  }
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(seen[i], 1) << "index " << i;
}

// Mean over parts of the largest class share in the part: 1/num_classes for perfectly
// balanced parts, 1 when each part holds a single class.
double MeanMaxClassShare(const std::vector<std::vector<int64_t>>& parts, const std::vector<int32_t>& y,
                         int32_t classes) {
  double sum = 0.0;
  for (const auto& part : parts) {
    std::vector<int64_t> c(classes);
    for (int64_t i : part) ++c[y[i]];
    sum += static_cast<double>(*std::max_element(c.begin(), c.end())) / static_cast<double>(part.size());
  }
  return sum / static_cast<double>(parts.size());
}

TEST(PartitionTest, IidCoversEveryIndexOnceWithNearEqualParts) {
  const auto y = Labels1500();
  for (uint32_t count : {1u, 3u, 7u, 16u}) {
    auto parts = Partition(y, 10, count, "iid", 42);
    ASSERT_TRUE(parts.ok()) << parts.status().ToString();
    ASSERT_EQ(parts->size(), count);
    ExpectExactCover(*parts, y.size());
    size_t lo = y.size(), hi = 0;
    for (const auto& p : *parts) {
      lo = std::min(lo, p.size());
      hi = std::max(hi, p.size());
    }
    EXPECT_LE(hi - lo, 1u) << count;
  }
}

TEST(PartitionTest, IidIsDeterministicAndShuffled) {
  const auto y = Labels1500();
  auto a = Partition(y, 10, 4, "iid", 1);
  auto b = Partition(y, 10, 4, "iid", 1);
  auto c = Partition(y, 10, 4, "iid", 2);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(*a, *b);
  EXPECT_NE(*a, *c);
  // Not contiguous blocks of the original order: part 0 reaches beyond the first quarter.
  EXPECT_GT((*a)[0].back(), 375);
  // And close to the overall class balance.
  EXPECT_LT(MeanMaxClassShare(*a, y, 10), 0.16);
}

TEST(PartitionTest, DirichletCoversEveryIndexOnceAndIsDeterministic) {
  const auto y = Labels1500();
  for (const char* scheme : {"dirichlet:0.1", "dirichlet:0.5", "dirichlet:100"}) {
    auto a = Partition(y, 10, 8, scheme, 3);
    ASSERT_TRUE(a.ok()) << scheme << ": " << a.status().ToString();
    ASSERT_EQ(a->size(), 8u);
    ExpectExactCover(*a, y.size());
    auto b = Partition(y, 10, 8, scheme, 3);
    ASSERT_TRUE(b.ok());
    EXPECT_EQ(*a, *b) << scheme;
    auto c = Partition(y, 10, 8, scheme, 4);
    ASSERT_TRUE(c.ok());
    EXPECT_NE(*a, *c) << scheme;
  }
}

TEST(PartitionTest, DirichletSkewGrowsAsAlphaShrinks) {
  const auto y = Labels1500();
  // Averaged over a few seeds so the comparison is about alpha, not one draw.
  auto skew = [&](const std::string& scheme) {
    double s = 0.0;
    for (uint64_t seed = 0; seed < 5; ++seed) {
      auto parts = Partition(y, 10, 10, scheme, seed);
      EXPECT_TRUE(parts.ok()) << scheme << ": " << parts.status().ToString();
      if (!parts.ok()) return 0.0;
      s += MeanMaxClassShare(*parts, y, 10);
    }
    return s / 5.0;
  };
  const double s01 = skew("dirichlet:0.1"), s1 = skew("dirichlet:1"), s100 = skew("dirichlet:100");
  EXPECT_GT(s01, s1 + 0.1);
  EXPECT_GT(s1, s100 + 0.1);
  EXPECT_GT(s01, 0.5) << "alpha 0.1 should give parts dominated by one or two classes";
  EXPECT_LT(s100, 0.16) << "alpha 100 should be close to uniform (0.1)";
}

TEST(PartitionTest, DirichletHonoursMinPerPart) {
  const auto y = Labels1500();
  for (int64_t min : {0, 10, 50}) {
    auto parts = Partition(y, 10, 10, "dirichlet:0.1", 11, min);
    ASSERT_TRUE(parts.ok()) << parts.status().ToString();
    ExpectExactCover(*parts, y.size());
    for (const auto& p : *parts) EXPECT_GE(static_cast<int64_t>(p.size()), min);
  }
  // With min 0 and strong skew, some part is left very small; min 50 changes the result.
  auto loose = Partition(y, 10, 10, "dirichlet:0.1", 11, 0);
  auto strict = Partition(y, 10, 10, "dirichlet:0.1", 11, 50);
  ASSERT_TRUE(loose.ok() && strict.ok());
  size_t smallest = y.size();
  for (const auto& p : *loose) smallest = std::min(smallest, p.size());
  EXPECT_LT(smallest, 50u);
  EXPECT_NE(*loose, *strict);
}

TEST(PartitionTest, DirichletGivesUpWhenMinIsUnreachable) {
  // Two classes and a tiny alpha: each class lands (almost) whole in one part, so 10 parts can
  // never all hold an example.
  std::vector<int32_t> y(200);
  for (size_t i = 0; i < y.size(); ++i) y[i] = static_cast<int32_t>(i % 2);
  auto parts = Partition(y, 2, 10, "dirichlet:0.0001", 1, 5);
  EXPECT_EQ(parts.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(parts.status().message().find("larger ALPHA"), std::string::npos) << parts.status().ToString();
}

TEST(PartitionTest, TooFewExamplesForMinPerPart) {
  const auto y = Labels1500();
  for (const char* scheme : {"iid", "dirichlet:1"}) {
    auto parts = Partition(y, 10, 200, scheme, 1, 10);  // 2000 needed
    EXPECT_EQ(parts.status().code(), StatusCode::kInvalidArgument) << scheme;
  }
  // With min_per_part 0, more parts than examples is allowed (some parts are empty).
  auto parts = Partition({0, 1, 0}, 2, 5, "iid", 1, 0);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ExpectExactCover(*parts, 3);
}

TEST(PartitionTest, RejectsBadArguments) {
  const auto y = Labels1500();
  for (const char* scheme : {"", "IID", "dirichlet", "dirichlet:", "dirichlet:0", "dirichlet:-1", "dirichlet:abc",
                             "dirichlet:nan", "dirichlet:inf", "dirichlet:1x", "zipf:2"}) {
    auto parts = Partition(y, 10, 4, scheme, 1);
    EXPECT_EQ(parts.status().code(), StatusCode::kInvalidArgument) << "'" << scheme << "'";
  }
  EXPECT_NE(Partition(y, 10, 4, "zipf", 1).status().message().find("dirichlet:ALPHA"), std::string::npos);
  EXPECT_EQ(Partition(y, 10, 0, "iid", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Partition(y, 9, 4, "iid", 1).status().code(), StatusCode::kInvalidArgument);  // label 9 out of range
  EXPECT_EQ(Partition({}, 10, 4, "iid", 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(Partition(y, 10, 4, "iid", 1, -1).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shoal::data
