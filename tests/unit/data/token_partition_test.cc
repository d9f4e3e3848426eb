// Token datasets: Slice, the held-out tail, iid shards and the books partition (against a
// brute-force optimum on small corpora), and what feature-only calls say about tokens.

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include "core/rng.h"
#include "shoal/data.h"

namespace shoal::data {
namespace {

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

// A token corpus of documents "d0", "d1", ... of the given sizes; token i is i % 251.
Dataset Corpus(const std::vector<int64_t>& sizes) {
  Dataset d;
  d.name = "corpus";
  d.kind = DatasetKind::kTokens;
  d.vocab_size = kByteVocabSize;
  for (size_t i = 0; i < sizes.size(); ++i) {
    d.documents.push_back({"d" + std::to_string(i), d.n});
    d.n += sizes[i];
  }
  for (int64_t i = 0; i < d.n; ++i) d.tokens.push_back(static_cast<uint8_t>(i % 251));
  return d;
}

std::vector<int64_t> Sizes(const std::vector<TokenRange>& parts) {
  std::vector<int64_t> out;
  for (const TokenRange& r : parts) out.push_back(r.end - r.begin);
  return out;
}

// The ranges cover [0, n) in order, exactly once.
void ExpectCover(const std::vector<TokenRange>& parts, int64_t n) {
  ASSERT_FALSE(parts.empty());
  EXPECT_EQ(parts.front().begin, 0);
  for (size_t i = 1; i < parts.size(); ++i) EXPECT_EQ(parts[i].begin, parts[i - 1].end) << i;
  EXPECT_EQ(parts.back().end, n);
}

// ---------------------------------------------------------------------------------------------
// Slice

TEST(SliceTest, ClipsAndRebasesDocuments) {
  const Dataset d = Corpus({10, 20, 30});  // documents at 0, 10, 30
  const Dataset s = Slice(d, 15, 35);
  EXPECT_EQ(s.kind, DatasetKind::kTokens);
  EXPECT_EQ(s.n, 20);
  EXPECT_EQ(s.vocab_size, 256);
  EXPECT_EQ(s.tokens, std::vector<uint8_t>(d.tokens.begin() + 15, d.tokens.begin() + 35));
  EXPECT_EQ(s.documents, (std::vector<Document>{{"d1", 0}, {"d2", 15}}));
  EXPECT_EQ(Slice(d, 10, 30).documents, (std::vector<Document>{{"d1", 0}}));
  EXPECT_TRUE(Slice(d, 7, 7).documents.empty());
}

TEST(SliceDeathTest, MisuseAborts) {
  const Dataset d = Corpus({10});
  EXPECT_DEATH(Slice(d, 5, 11), "not within");
  EXPECT_DEATH(Subset(d, {0}), "use Slice");
  Dataset features;
  features.n = 1, features.dim = 1, features.num_classes = 1, features.x = {0.0f}, features.y = {0};
  EXPECT_DEATH(Slice(features, 0, 1), "use Subset");
}

// ---------------------------------------------------------------------------------------------
// TrainTestSplit: the tail

TEST(TokenSplitTest, HoldsOutTheTail) {
  const Dataset d = Corpus({300, 300, 350, 50});  // documents at 0, 300, 600, 950
  auto split = TrainTestSplit(d, 0.1, 7);
  ASSERT_TRUE(split.ok()) << split.status().ToString();
  EXPECT_EQ(split->train.n, 900);
  EXPECT_EQ(split->test.n, 100);
  EXPECT_EQ(split->train.tokens, std::vector<uint8_t>(d.tokens.begin(), d.tokens.begin() + 900));
  EXPECT_EQ(split->test.tokens, std::vector<uint8_t>(d.tokens.begin() + 900, d.tokens.end()));
  // The document the cut crosses (d2) is in both halves; d3 lies wholly in the tail.
  EXPECT_EQ(split->train.documents, (std::vector<Document>{{"d0", 0}, {"d1", 300}, {"d2", 600}}));
  EXPECT_EQ(split->test.documents, (std::vector<Document>{{"d2", 0}, {"d3", 50}}));
  // No randomness: every seed gives the same split.
  auto other = TrainTestSplit(d, 0.1, 8);
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(other->test.tokens, split->test.tokens);
}

TEST(TokenSplitTest, SizesAreRoundedFractions) {
  for (const auto& [n, fraction, test] : std::vector<std::tuple<int64_t, double, int64_t>>{
           {7, 0.5, 4}, {10, 0.0, 0}, {10, 0.04, 0}, {10, 0.05, 1}, {1000, 0.2, 200}, {3, 0.6, 2}}) {
    auto split = TrainTestSplit(Corpus({n}), fraction, 1);
    ASSERT_TRUE(split.ok()) << split.status().ToString();
    EXPECT_EQ(split->test.n, test) << n << " " << fraction;
    EXPECT_EQ(split->train.n, n - test);
  }
}

TEST(TokenSplitTest, RejectsBadArguments) {
  EXPECT_EQ(TrainTestSplit(Corpus({10}), 1.0, 1).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(TrainTestSplit(Corpus({1}), 0.6, 1).status().code(), StatusCode::kInvalidArgument);  // no training
  Dataset empty = Corpus({});
  EXPECT_EQ(TrainTestSplit(empty, 0.1, 1).status().code(), StatusCode::kInvalidArgument);
  Dataset broken = Corpus({10});
  broken.n = 11;
  EXPECT_EQ(TrainTestSplit(broken, 0.1, 1).status().code(), StatusCode::kInvalidArgument);
  broken = Corpus({10, 10});
  broken.documents[1].start = 0;  // not increasing
  EXPECT_EQ(TrainTestSplit(broken, 0.1, 1).status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// iid: contiguous shards

TEST(TokenPartitionTest, IidShardsAreContiguousNearEqualAndCoverTheStreamOnce) {
  const Dataset d = Corpus({1003});
  auto parts = PartitionTokens(d, 4, "iid");
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ExpectCover(*parts, 1003);
  EXPECT_EQ(Sizes(*parts), (std::vector<int64_t>{251, 251, 251, 250}));

  // Through TrainingParts: the parts, concatenated, are the training stream.
  auto split = TrainTestSplit(d, 0.2, 3);
  auto datasets = TrainingParts(d, 0.2, 3, 5, "iid");
  ASSERT_TRUE(split.ok() && datasets.ok()) << datasets.status().ToString();
  std::vector<uint8_t> joined;
  for (const Dataset& p : *datasets) {
    EXPECT_EQ(p.kind, DatasetKind::kTokens);
    EXPECT_TRUE(p.n == 160 || p.n == 161) << p.n;
    joined.insert(joined.end(), p.tokens.begin(), p.tokens.end());
  }
  EXPECT_EQ(joined, split->train.tokens);
  for (uint32_t i = 0; i < 5; ++i) {
    auto one = TrainingPart(d, 0.2, 3, {i, 5}, "iid");
    ASSERT_TRUE(one.ok());
    EXPECT_EQ(one->tokens, (*datasets)[i].tokens);
  }
}

TEST(TokenPartitionTest, MinPerPartCountsTokens) {
  const Dataset d = Corpus({100});
  EXPECT_TRUE(PartitionTokens(d, 10, "iid", 10).ok());
  auto r = PartitionTokens(d, 11, "iid", 10);
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(r.status().message(), "tokens")) << r.status().ToString();
  EXPECT_EQ(PartitionTokens(d, 0, "iid").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PartitionTokens(d, 1, "iid", -1).status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// books: whole documents

TEST(TokenPartitionTest, BooksGiveWholeDocumentsBalancedByBytes) {
  const Dataset d = Corpus({100, 100, 100, 100});
  auto two = PartitionTokens(d, 2, "books");
  ASSERT_TRUE(two.ok()) << two.status().ToString();
  EXPECT_EQ(*two, (std::vector<TokenRange>{{0, 200}, {200, 400}}));
  // The big documents stand alone; the small ones go together.
  auto three = PartitionTokens(Corpus({300, 10, 10, 10, 300}), 3, "books");
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(Sizes(*three), (std::vector<int64_t>{300, 30, 300}));
  // As many parts as documents: one each.
  auto each = PartitionTokens(Corpus({5, 1, 7}), 3, "books", 1);
  ASSERT_TRUE(each.ok());
  EXPECT_EQ(Sizes(*each), (std::vector<int64_t>{5, 1, 7}));
}

// The smallest largest part of any split of `sizes` into `count` non-empty contiguous groups.
int64_t BruteForceBestMax(const std::vector<int64_t>& sizes, uint32_t count, size_t from = 0) {
  int64_t best = INT64_MAX, run = 0;
  if (count == 1) {
    for (size_t i = from; i < sizes.size(); ++i) run += sizes[i];
    return run;
  }
  for (size_t end = from + 1; end + count - 1 <= sizes.size(); ++end) {
    run += sizes[end - 1];
    best = std::min(best, std::max(run, BruteForceBestMax(sizes, count - 1, end)));
  }
  return best;
}

TEST(TokenPartitionTest, BooksLargestPartIsOptimalAndCutsAreDocumentBoundaries) {
  Rng rng(2024, 1);
  for (int trial = 0; trial < 400; ++trial) {
    const size_t docs = 1 + rng.Below(9);
    std::vector<int64_t> sizes(docs);
    for (int64_t& s : sizes) s = 1 + static_cast<int64_t>(rng.Below(trial % 2 ? 1000 : 20));
    const uint32_t count = 1 + static_cast<uint32_t>(rng.Below(docs));
    const Dataset d = Corpus(sizes);
    auto parts = PartitionTokens(d, count, "books", 0);
    ASSERT_TRUE(parts.ok()) << parts.status().ToString();
    ASSERT_EQ(parts->size(), count);
    ExpectCover(*parts, d.n);
    for (const TokenRange& r : *parts) {
      EXPECT_LT(r.begin, r.end);  // at least one document
      EXPECT_TRUE(std::any_of(d.documents.begin(), d.documents.end(),
                              [&](const Document& doc) { return doc.start == r.begin; }))
          << "part starts inside a document at " << r.begin;
    }
    const std::vector<int64_t> got = Sizes(*parts);
    EXPECT_EQ(*std::max_element(got.begin(), got.end()), BruteForceBestMax(sizes, count)) << "trial " << trial;
    // Deterministic.
    EXPECT_EQ(*PartitionTokens(d, count, "books", 0), *parts);
  }
}

TEST(TokenPartitionTest, BooksOfASplitUseTheDocumentsClippedToTheTrainingStream) {
  const Dataset d = Corpus({100, 100, 100, 100, 100});
  // A 30% tail: d3 is cut at 350, d4 is held out entirely.
  auto parts = TrainingParts(d, 0.3, 1, 2, "books");
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->size(), 2u);
  EXPECT_EQ((*parts)[0].documents, (std::vector<Document>{{"d0", 0}, {"d1", 100}}));
  EXPECT_EQ((*parts)[1].documents, (std::vector<Document>{{"d2", 0}, {"d3", 100}}));
  EXPECT_EQ((*parts)[0].n + (*parts)[1].n, 350);
  auto one = TrainingPart(d, 0.3, 1, {1, 2}, "books");
  ASSERT_TRUE(one.ok());
  EXPECT_EQ(one->tokens, (*parts)[1].tokens);
  EXPECT_EQ(one->documents, (*parts)[1].documents);
}

TEST(TokenPartitionTest, BooksRefusals) {
  auto few = PartitionTokens(Corpus({10, 10, 10}), 4, "books");
  EXPECT_EQ(few.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(few.status().message(), "3 documents")) << few.status().ToString();

  Dataset none = Corpus({50});
  none.documents.clear();
  auto no_docs = PartitionTokens(none, 1, "books");
  EXPECT_EQ(no_docs.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(no_docs.status().message(), "no documents")) << no_docs.status().ToString();

  auto small = PartitionTokens(Corpus({100, 5, 100}), 3, "books", 10);
  EXPECT_EQ(small.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(small.status().message(), "5 tokens")) << small.status().ToString();
}

TEST(TokenPartitionTest, SchemesThatDoNotFitTheKindAreRefused) {
  auto dirichlet = PartitionTokens(Corpus({100}), 2, "dirichlet:0.5");
  EXPECT_EQ(dirichlet.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(dirichlet.status().message(), "tokens")) << dirichlet.status().ToString();
  EXPECT_EQ(TrainingParts(Corpus({100}), 0.1, 1, 2, "dirichlet:0.5").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(PartitionTokens(Corpus({100}), 2, "shuffle").status().code(), StatusCode::kInvalidArgument);

  // books on features, PartitionTokens on features.
  auto books = Partition({0, 1, 0, 1}, 2, 2, "books", 1, 1);
  EXPECT_EQ(books.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(books.status().message(), "token dataset")) << books.status().ToString();
  Dataset features;
  features.name = "f";
  features.n = 2, features.dim = 1, features.num_classes = 2, features.x = {0, 1}, features.y = {0, 1};
  EXPECT_EQ(PartitionTokens(features, 1, "iid").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(TrainingParts(features, 0.0, 1, 1, "books", 1).status().code(), StatusCode::kInvalidArgument);

  // RequireFeatures names the dataset and the consumer.
  EXPECT_TRUE(RequireFeatures(features, "x").ok());
  const Status st = RequireFeatures(Corpus({3}), "model 'mlp'");
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(st.message(), "'corpus' holds tokens")) << st.ToString();
  EXPECT_TRUE(Contains(st.message(), "model 'mlp' needs features")) << st.ToString();
}

}  // namespace
}  // namespace shoal::data
