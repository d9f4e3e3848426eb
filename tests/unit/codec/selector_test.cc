// Selectors: top-k against a naive sort-based reference (per tensor and per chunk, with ties,
// on both the small-range and the sampled large-range paths), the approximate mode's stated
// bound, exact counts; random-k determinism, sensitivity to round/tensor/seed and uniform
// coverage.

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "codec/stages.h"
#include "core/rng.h"

namespace shoal::codec {
namespace {

StageSpec Spec(std::string name, std::vector<std::pair<std::string, std::string>> params = {}) {
  return StageSpec{std::move(name), std::move(params)};
}

std::unique_ptr<Selector> TopK(std::vector<std::pair<std::string, std::string>> params) {
  auto s = MakeTopK(Spec("topk", std::move(params)));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

uint32_t MagKey(float x, uint32_t mask) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u & mask;
}

// Reference: sort by (key desc, index asc), take the first k of each chunk, sort by index.
std::vector<uint32_t> NaiveTopK(const std::vector<float>& v, size_t chunk, const Selector& sel,
                                uint32_t mask = 0x7fffffffu) {
  std::vector<uint32_t> out;
  const size_t n = v.size();
  const size_t step = chunk == 0 ? n : chunk;
  for (size_t b = 0; b < n; b += step) {
    const size_t len = std::min(step, n - b);
    const size_t k = sel.Count(len, 0);
    std::vector<uint32_t> idx(len);
    std::iota(idx.begin(), idx.end(), static_cast<uint32_t>(b));
    std::sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t c) {
      const uint32_t ka = MagKey(v[a], mask), kc = MagKey(v[c], mask);
      return ka != kc ? ka > kc : a < c;
    });
    idx.resize(k);
    std::sort(idx.begin(), idx.end());
    out.insert(out.end(), idx.begin(), idx.end());
  }
  return out;
}

std::vector<float> Gaussian(size_t n, uint64_t seed) {
  Rng rng(seed, 7);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.Normal());
  return v;
}

// Values from a few levels (lots of exact ties, both signs, -0).
std::vector<float> Tied(size_t n, uint64_t seed) {
  Rng rng(seed, 8);
  std::vector<float> v(n);
  for (float& x : v) {
    const int l = static_cast<int>(rng.Below(11)) - 5;
    x = l == 0 ? (rng.Below(2) ? -0.0f : 0.0f) : static_cast<float>(l) * 0.25f;
  }
  return v;
}

void ExpectMatchesReference(const Selector& sel, const std::vector<float>& v, size_t chunk, const char* what) {
  std::vector<uint32_t> got;
  sel.Select(v, chunk, RoundContext{}, 0, &got);
  const std::vector<uint32_t> want = NaiveTopK(v, chunk, sel);
  EXPECT_EQ(got.size(), sel.Count(v.size(), chunk)) << what;
  EXPECT_TRUE(got == want) << what << " n=" << v.size() << " chunk=" << chunk;
}

// Top-k ----------------------------------------------------------------------------------

TEST(TopKTest, CountIsExact) {
  auto r = TopK({});  // ratio 0.01
  EXPECT_EQ(r->id(), StageId::kTopK);
  EXPECT_FALSE(r->implicit_indices());
  EXPECT_EQ(r->Count(0, 0), 0u);
  EXPECT_EQ(r->Count(1, 0), 1u);
  EXPECT_EQ(r->Count(100, 0), 1u);
  EXPECT_EQ(r->Count(1000, 0), 10u);
  EXPECT_EQ(r->Count(64 << 20, 0), 671089u);  // round(0.01 * 67108864)
  EXPECT_EQ(TopK({{"ratio", "0.29"}})->Count(100, 0), 29u);  // 0.29*100 = 28.999... in double
  EXPECT_EQ(r->Count(130, 64), 3u);           // 1 + 1 + 1 (chunks 64, 64, 2)
  auto k8 = TopK({{"k", "8"}});
  EXPECT_EQ(k8->Count(130, 64), 8u + 8u + 2u);
  EXPECT_EQ(k8->Count(5, 0), 5u);
  EXPECT_EQ(k8->Count(5, 64), 5u);             // chunk larger than the tensor
  auto half = TopK({{"ratio", "0.5"}});
  EXPECT_EQ(half->Count(4096 * 3 + 10, 4096), 3u * 2048u + 5u);
}

TEST(TopKTest, ExactPerTensorMatchesReference) {
  auto sel = TopK({{"ratio", "0.01"}});
  auto sel_k = TopK({{"k", "37"}});
  auto sel_big = TopK({{"ratio", "0.3"}});
  for (size_t n : {size_t{1}, size_t{7}, size_t{100}, size_t{5000}, size_t{70000}, size_t{1} << 18,
                   (size_t{1} << 20) + 3}) {
    for (uint64_t seed : {1u, 2u}) {
      const std::vector<float> g = Gaussian(n, seed), t = Tied(n, seed);
      ExpectMatchesReference(*sel, g, 0, "gaussian ratio");
      ExpectMatchesReference(*sel, t, 0, "tied ratio");
      ExpectMatchesReference(*sel_k, g, 0, "gaussian k");
      ExpectMatchesReference(*sel_k, t, 0, "tied k");
      ExpectMatchesReference(*sel_big, t, 0, "tied 0.3");
    }
  }
}

TEST(TopKTest, ExactLargePathAdversarialInputs) {
  // Mostly zeros (the sampled threshold is 0), a few spikes placed off the sample grid, a
  // sorted ramp, a constant: all must still equal the reference.
  const size_t n = size_t{1} << 19;
  auto sel = TopK({{"ratio", "0.01"}});
  std::vector<float> sparse(n, 0.0f);
  for (size_t i = 5; i < n; i += 997) sparse[i] = static_cast<float>(i % 13) - 6.0f;
  ExpectMatchesReference(*sel, sparse, 0, "sparse");
  std::vector<float> ramp(n);
  for (size_t i = 0; i < n; ++i) ramp[i] = static_cast<float>(i) * 1e-3f;
  ExpectMatchesReference(*sel, ramp, 0, "ramp");
  std::vector<float> constant(n, -2.5f);
  ExpectMatchesReference(*sel, constant, 0, "constant");
  // Large values concentrated where a stratified sample is unlikely to see them.
  std::vector<float> clustered = Gaussian(n, 3);
  for (size_t i = 1000; i < 1000 + n / 50; ++i) clustered[i] *= 100.0f;
  ExpectMatchesReference(*sel, clustered, 0, "clustered");
}

TEST(TopKTest, ExactPerChunkMatchesReference) {
  const std::vector<float> g = Gaussian(64 * 100 + 17, 4), t = Tied(4096 * 5 + 100, 5);
  auto k8 = TopK({{"k", "8"}});       // heap path
  auto k100 = TopK({{"k", "100"}});   // nth_element path
  auto r01 = TopK({{"ratio", "0.1"}});
  for (size_t chunk : {size_t{64}, size_t{4096}, size_t{30}, size_t{100000}}) {
    ExpectMatchesReference(*k8, g, chunk, "gaussian k8");
    ExpectMatchesReference(*k8, t, chunk, "tied k8");
    ExpectMatchesReference(*k100, g, chunk, "gaussian k100");
    ExpectMatchesReference(*k100, t, chunk, "tied k100");
    ExpectMatchesReference(*r01, t, chunk, "tied r0.1");
  }
}

TEST(TopKTest, DeterministicAndSorted) {
  const std::vector<float> v = Gaussian(size_t{1} << 19, 6);
  auto sel = TopK({{"ratio", "0.02"}});
  std::vector<uint32_t> a, b;
  sel->Select(v, 0, RoundContext{1, 2, 3}, 0, &a);
  sel->Select(v, 0, RoundContext{9, 8, 7}, 5, &b);  // context does not matter to top-k
  EXPECT_EQ(a, b);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_TRUE(std::adjacent_find(a.begin(), a.end()) == a.end());
}

// Stated bound of approx=1: it is the exact top-k of |v| truncated to its top 16 bits (ties by
// index), hence every selected |v| >= (k-th largest |v|) * (1 - 2^-7).
TEST(TopKTest, ApproxWithinStatedBound) {
  auto approx = TopK({{"ratio", "0.01"}, {"approx", "1"}});
  auto exact = TopK({{"ratio", "0.01"}});
  for (size_t n : {size_t{5000}, size_t{1} << 18, (size_t{1} << 20) + 5}) {
    const std::vector<float> v = Gaussian(n, 7);
    std::vector<uint32_t> got, ex;
    approx->Select(v, 0, RoundContext{}, 0, &got);
    exact->Select(v, 0, RoundContext{}, 0, &ex);
    ASSERT_EQ(got.size(), approx->Count(n, 0));
    EXPECT_TRUE(got == NaiveTopK(v, 0, *approx, 0x7fff0000u)) << n;
    float kth = INFINITY;
    for (uint32_t i : ex) kth = std::min(kth, std::fabs(v[i]));
    float min_sel = INFINITY;
    for (uint32_t i : got) min_sel = std::min(min_sel, std::fabs(v[i]));
    EXPECT_GE(min_sel, kth * (1.0f - 1.0f / 128.0f)) << n;
    // Per chunk as well.
    auto approx_chunk = TopK({{"k", "8"}, {"approx", "1"}});
    approx_chunk->Select(v, 64, RoundContext{}, 0, &got);
    EXPECT_TRUE(got == NaiveTopK(v, 64, *approx_chunk, 0x7fff0000u)) << n;
  }
}

TEST(TopKTest, ValidatesParameters) {
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"ratio", "0"}, {"ratio", "1.5"}, {"ratio", "-0.1"}, {"ratio", "abc"}, {"ratio", "nan"},
      {"k", "0"},     {"k", "-4"},      {"k", "2.5"},      {"approx", "2"}, {"approx", "yes"}};
  for (const auto& [key, value] : bad) {
    auto s = MakeTopK(Spec("topk", {{key, value}}));
    ASSERT_FALSE(s.ok()) << key << "=" << value;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("topk"), std::string::npos);
    EXPECT_NE(s.status().message().find(key), std::string::npos) << s.status().message();
  }
  EXPECT_FALSE(MakeTopK(Spec("topk", {{"ratio", "0.1"}, {"k", "3"}})).ok());
  EXPECT_FALSE(MakeTopK(Spec("topk", {{"ratio", "0.1"}, {"ratio", "0.2"}})).ok());
  EXPECT_FALSE(MakeTopK(Spec("topk", {{"kk", "3"}})).ok());
  EXPECT_TRUE(MakeTopK(Spec("topk", {{"ratio", "1"}})).ok());
}

// Random-k -------------------------------------------------------------------------------

std::unique_ptr<Selector> RandK(const std::string& ratio) {
  auto s = MakeRandK(Spec("randk", {{"ratio", ratio}}));
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return std::move(s).value();
}

std::vector<uint32_t> Pick(const Selector& sel, size_t n, size_t chunk, RoundContext ctx, size_t ti) {
  std::vector<float> v(n, 1.0f);
  std::vector<uint32_t> idx;
  sel.Select(v, chunk, ctx, ti, &idx);
  return idx;
}

TEST(RandKTest, DeterministicFromSharedSeedRoundAndTensor) {
  auto sel = RandK("0.05");
  EXPECT_EQ(sel->id(), StageId::kRandK);
  EXPECT_TRUE(sel->implicit_indices());
  const RoundContext ctx{3, 12345, 1};
  const auto a = Pick(*sel, 10000, 0, ctx, 2);
  EXPECT_EQ(a.size(), sel->Count(10000, 0));
  EXPECT_EQ(a.size(), 500u);
  EXPECT_TRUE(std::is_sorted(a.begin(), a.end()));
  EXPECT_TRUE(std::adjacent_find(a.begin(), a.end()) == a.end());
  EXPECT_LT(a.back(), 10000u);
  EXPECT_EQ(a, Pick(*sel, 10000, 0, ctx, 2));
  EXPECT_EQ(a, Pick(*sel, 10000, 0, RoundContext{3, 12345, 999}, 2));  // private seed is not used
  // The values do not matter either: the decoder regenerates indices without them.
  std::vector<float> other = Gaussian(10000, 1);
  std::vector<uint32_t> b;
  sel->Select(other, 0, ctx, 2, &b);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, Pick(*sel, 10000, 0, RoundContext{4, 12345, 1}, 2));
  EXPECT_NE(a, Pick(*sel, 10000, 0, RoundContext{3, 12346, 1}, 2));
  EXPECT_NE(a, Pick(*sel, 10000, 0, ctx, 3));
}

TEST(RandKTest, PerChunkCountsAndRanges) {
  auto sel = RandK("0.1");
  const size_t n = 64 * 10 + 7, chunk = 64;
  const auto idx = Pick(*sel, n, chunk, RoundContext{1, 2, 0}, 0);
  EXPECT_EQ(idx.size(), sel->Count(n, chunk));
  EXPECT_EQ(idx.size(), 10u * 6u + 1u);
  EXPECT_TRUE(std::is_sorted(idx.begin(), idx.end()));
  EXPECT_TRUE(std::adjacent_find(idx.begin(), idx.end()) == idx.end());
  std::vector<size_t> per_chunk(11, 0);
  for (uint32_t i : idx) {
    ASSERT_LT(i, n);
    ++per_chunk[i / chunk];
  }
  for (size_t c = 0; c < 10; ++c) EXPECT_EQ(per_chunk[c], 6u);
  EXPECT_EQ(per_chunk[10], 1u);
  // ratio 1 keeps everything.
  EXPECT_EQ(Pick(*RandK("1"), 100, 0, RoundContext{}, 0).size(), 100u);
}

TEST(RandKTest, UniformCoverage) {
  // Each index is picked with probability m/n; over many rounds the counts follow a
  // multinomial-like law. Chi-square over 100 cells (99 dof: mean 99, sd 14): loose bound 170.
  auto sel = RandK("0.1");
  const size_t n = 100, rounds = 4000;
  std::vector<double> hits(n, 0.0);
  for (uint64_t r = 0; r < rounds; ++r)
    for (uint32_t i : Pick(*sel, n, 0, RoundContext{r, 77, 0}, 1)) hits[i] += 1;
  const double expect = static_cast<double>(rounds) * 10 / n;
  double chi2 = 0;
  for (double h : hits) chi2 += (h - expect) * (h - expect) / expect;
  EXPECT_LT(chi2, 170.0);
  EXPECT_GT(chi2, 40.0);  // suspiciously perfect coverage would mean the draw is not random
  // Per chunk, coverage within each chunk is uniform too.
  std::vector<double> hc(128, 0.0);
  for (uint64_t r = 0; r < rounds; ++r)
    for (uint32_t i : Pick(*sel, 128, 64, RoundContext{r, 78, 0}, 0)) hc[i] += 1;
  const double ec = static_cast<double>(rounds) * 6 / 64;
  double chi2c = 0;
  for (double h : hc) chi2c += (h - ec) * (h - ec) / ec;
  EXPECT_LT(chi2c, 127 + 5 * std::sqrt(2.0 * 127));
}

TEST(RandKTest, ValidatesParameters) {
  for (const char* bad : {"0", "2", "x", "-1", ""}) {
    auto s = MakeRandK(Spec("randk", {{"ratio", bad}}));
    ASSERT_FALSE(s.ok()) << bad;
    EXPECT_EQ(s.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.status().message().find("randk"), std::string::npos);
    EXPECT_NE(s.status().message().find("ratio"), std::string::npos);
  }
  EXPECT_FALSE(MakeRandK(Spec("randk", {{"k", "3"}})).ok());
  EXPECT_TRUE(MakeRandK(Spec("randk")).ok());
}

}  // namespace
}  // namespace shoal::codec
