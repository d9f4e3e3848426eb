// TransformSum (sdk/src/runtime/transform_sum.h): the mean of DeMo-coded updates summed in
// the DCT domain and transformed back once, against the decoded updates' mean in double (the
// reference), bit-identical in any order, equal to Decode for one update, refusals.
#include "runtime/transform_sum.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "core/rng.h"

namespace shoal::runtime {
namespace {

const std::vector<TensorSpec> kLayout = {{"w", {96, 64}}, {"b", {64}}, {"odd", {7, 5}}};

struct Coded {
  std::vector<uint8_t> payload;
  uint64_t weight;
};

std::vector<Coded> Updates(codec::Codec& enc, const codec::RoundContext& ctx, size_t k) {
  std::vector<Coded> out;
  const size_t n = LayoutSize(kLayout);
  for (size_t j = 0; j < k; ++j) {
    Rng rng(100 + j, 0);
    std::vector<float> x(n);
    for (auto& v : x) v = static_cast<float>(rng.Normal() * 0.01);
    auto p = enc.Encode(x, ctx);
    EXPECT_TRUE(p.ok());
    out.push_back({std::move(*p), 1 + 37 * j});
  }
  return out;
}

TEST(TransformSum, MeanOfDemoUpdatesMatchesTheDecodedMeanInAnyOrder) {
  const size_t n = LayoutSize(kLayout);
  for (const std::string spec : {"demo:chunk=64,topk=8,bits=1", "demo:chunk=16,topk=4,bits=8"}) {
    auto codec = codec::Codec::Create(spec, kLayout);
    ASSERT_TRUE(codec.ok());
    const codec::RoundContext ctx{.round = 3, .shared_seed = 9, .private_seed = 0};
    const auto updates = Updates(**codec, ctx, 5);

    // The reference: each update decoded, the weighted mean in double.
    std::vector<double> ref(n, 0.0);
    double total = 0;
    std::vector<float> d(n);
    for (const auto& u : updates) {
      ASSERT_TRUE((*codec)->Decode(u.payload, ctx, d).ok());
      for (size_t i = 0; i < n; ++i) ref[i] += static_cast<double>(u.weight) * d[i];
      total += static_cast<double>(u.weight);
    }
    double scale = 0;
    for (auto& r : ref) scale = std::max(scale, std::abs(r /= total));

    TransformSum sum(**codec);
    std::vector<size_t> order(updates.size());
    std::iota(order.begin(), order.end(), 0);
    std::vector<float> first(n), mean(n);
    std::mt19937 shuffle(1);
    for (int trial = 0; trial < 4; ++trial) {
      sum.Clear();
      for (size_t k : order) ASSERT_TRUE(sum.Add(updates[k].payload, ctx, updates[k].weight).ok());
      EXPECT_EQ(sum.count(), updates.size());
      ASSERT_TRUE(sum.Mean(mean).ok());
      if (trial == 0) {
        first = mean;
        // One inverse transform of the rounded mean coefficients against the exact mean of
        // the decoded updates: a few float roundings apart, relative to the largest value.
        for (size_t i = 0; i < n; ++i) ASSERT_NEAR(mean[i], ref[i], 1e-5 * scale) << spec << " " << i;
      }
      ASSERT_EQ(std::memcmp(first.data(), mean.data(), n * sizeof(float)), 0) << spec << " order " << trial;
      std::shuffle(order.begin(), order.end(), shuffle);
    }
  }
}

TEST(TransformSum, OneUpdateIsItsDecodeAndRefusalsAddNothing) {
  const size_t n = LayoutSize(kLayout);
  auto codec = codec::Codec::Create("demo:chunk=64,topk=8,bits=1", kLayout);
  ASSERT_TRUE(codec.ok());
  const codec::RoundContext ctx{.round = 1, .shared_seed = 2, .private_seed = 0};
  const auto updates = Updates(**codec, ctx, 1);
  TransformSum sum(**codec);
  std::vector<float> mean(n, 5.0f), decoded(n);
  ASSERT_TRUE(sum.Mean(mean).ok());
  EXPECT_TRUE(std::all_of(mean.begin(), mean.end(), [](float v) { return v == 0.0f; }));  // nothing added: zeros

  ASSERT_TRUE(sum.Add(updates[0].payload, ctx, uint64_t{1} << 40).ok());
  ASSERT_TRUE(sum.Mean(mean).ok());
  ASSERT_TRUE((*codec)->Decode(updates[0].payload, ctx, decoded).ok());
  for (size_t i = 0; i < n; ++i) ASSERT_EQ(mean[i], decoded[i]) << i;

  std::vector<uint8_t> bad = updates[0].payload;
  bad.pop_back();
  EXPECT_EQ(sum.Add(bad, ctx, 1).code(), StatusCode::kCorruption);
  EXPECT_EQ(sum.Add(updates[0].payload, ctx, 0).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(sum.count(), 1u);
  EXPECT_EQ(sum.total_weight(), uint64_t{1} << 40);
}

}  // namespace
}  // namespace shoal::runtime
