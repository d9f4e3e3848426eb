// Hostile-input decoding: for several specs, thousands of random byte strings (bare, and behind
// a valid header so they reach the body parser), and random mutations, truncations and
// extensions of valid payloads (for zstd specs also mutated bodies re-compressed into a valid
// frame) must decode to an error or to finite values, never crash or read out of bounds. Run
// under -DSHOAL_SANITIZE=ON this is the ASan/UBSan check. Deterministic (fixed seeds).
#include <gtest/gtest.h>
#include <zstd.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "core/rng.h"

namespace shoal::codec {
namespace {

const std::vector<TensorSpec>& FuzzLayout() {
  static const std::vector<TensorSpec> layout = {
      {"w", {16, 24}}, {"b", {24}}, {"conv", {5, 3, 2}}, {"one", {1}}, {"big", {64, 64}}};
  return layout;
}

struct Stats {
  size_t ok = 0, err = 0;
};

void DecodeOnce(const Codec& c, const std::vector<uint8_t>& payload, const RoundContext& ctx, Stats* st) {
  std::vector<float> out(LayoutSize(FuzzLayout()), 0.0f);
  Status s = c.Decode(payload, ctx, out);
  if (s.ok()) {
    ++st->ok;
    for (float x : out) ASSERT_TRUE(std::isfinite(x));
  } else {
    ++st->err;
    ASSERT_FALSE(s.message().empty());
  }
}

std::vector<uint8_t> RandomBytes(Rng& rng, size_t n) {
  std::vector<uint8_t> b(n);
  for (auto& x : b) x = static_cast<uint8_t>(rng.NextU64());
  return b;
}

// Header length of a (non-dense) payload: version, count, ids, varint total.
size_t HeaderLen(const std::vector<uint8_t>& p) {
  size_t h = 2 + p[1];
  while (p[h] & 0x80) ++h;
  return h + 1;
}

std::vector<uint8_t> Mutate(Rng& rng, std::vector<uint8_t> p) {
  switch (rng.Below(5)) {
    case 0: {  // flip a few bytes
      if (p.empty()) break;
      const int k = 1 + static_cast<int>(rng.Below(4));
      for (int i = 0; i < k; ++i) p[rng.Below(p.size())] ^= static_cast<uint8_t>(1 + rng.Below(255));
      break;
    }
    case 1:  // truncate
      p.resize(rng.Below(p.size() + 1));
      break;
    case 2: {  // extend
      auto extra = RandomBytes(rng, 1 + rng.Below(16));
      p.insert(p.end(), extra.begin(), extra.end());
      break;
    }
    case 3: {  // set a byte to an extreme
      if (p.empty()) break;
      const uint8_t v[] = {0x00, 0xff, 0x7f, 0x80};
      p[rng.Below(p.size())] = v[rng.Below(4)];
      break;
    }
    default: {  // overwrite a 4-byte window with a float special (scales, norms, fp32 values)
      if (p.size() < 4) break;
      const float specials[] = {NAN, INFINITY, -INFINITY, -1.0f, 3.4e38f, 1e-45f};
      float f = specials[rng.Below(6)];
      std::memcpy(p.data() + rng.Below(p.size() - 3), &f, 4);
    }
  }
  return p;
}

class FuzzDecodeTest : public ::testing::TestWithParam<const char*> {};

TEST_P(FuzzDecodeTest, NeverCrashesAndOutputsFiniteValues) {
  const std::string spec = GetParam();
  auto codec = Codec::Create(spec, FuzzLayout());
  ASSERT_TRUE(codec.ok()) << codec.status().ToString();
  const Codec& c = **codec;
  const size_t n = LayoutSize(FuzzLayout());
  Rng rng(std::hash<std::string>{}(spec) & 0xffff);
  RoundContext ctx;
  ctx.round = 3;
  ctx.shared_seed = 77;
  ctx.private_seed = 5;

  // Valid payloads of a few updates (large and small magnitudes, zeros).
  std::vector<std::vector<uint8_t>> valid;
  for (int k = 0; k < 4; ++k) {
    std::vector<float> u(n);
    for (auto& x : u) x = static_cast<float>(rng.Normal() * (k == 3 ? 1e30 : 0.01));
    if (k == 2) std::fill(u.begin(), u.end(), 0.0f);
    auto p = (*codec)->Encode(u, ctx);
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    Stats st;
    DecodeOnce(c, *p, ctx, &st);
    ASSERT_EQ(st.ok, 1u) << spec << ": a valid payload must decode";
    valid.push_back(*p);
  }

  Stats st;
  // 1. Random byte strings.
  for (int i = 0; i < 1500; ++i) DecodeOnce(c, RandomBytes(rng, rng.Below(i < 1000 ? 64 : 4096)), ctx, &st);
  // 2. A valid header followed by random bytes (reaches the body parser).
  if (!c.is_dense()) {
    const size_t h = HeaderLen(valid[0]);
    for (int i = 0; i < 1500; ++i) {
      std::vector<uint8_t> p(valid[0].begin(), valid[0].begin() + static_cast<std::ptrdiff_t>(h));
      auto body = RandomBytes(rng, rng.Below(2 * valid[0].size()));
      p.insert(p.end(), body.begin(), body.end());
      DecodeOnce(c, p, ctx, &st);
    }
  }
  // 3. Mutations of valid payloads (repeated mutations compound).
  for (int i = 0; i < 3000; ++i) {
    auto p = valid[rng.Below(valid.size())];
    const int rounds = 1 + static_cast<int>(rng.Below(3));
    for (int r = 0; r < rounds; ++r) p = Mutate(rng, std::move(p));
    DecodeOnce(c, p, ctx, &st);
  }
  // 4. zstd: mutated bodies inside a well-formed frame.
  if (spec.find("zstd") != std::string::npos) {
    const size_t h = HeaderLen(valid[0]);
    for (int i = 0; i < 1500; ++i) {
      const auto& v = valid[rng.Below(valid.size())];
      std::vector<uint8_t> body(ZSTD_getFrameContentSize(v.data() + h, v.size() - h));
      ASSERT_EQ(ZSTD_decompress(body.data(), body.size(), v.data() + h, v.size() - h), body.size());
      body = Mutate(rng, std::move(body));
      std::vector<uint8_t> p(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(h));
      std::vector<uint8_t> frame(ZSTD_compressBound(body.size()));
      frame.resize(ZSTD_compress(frame.data(), frame.size(), body.data(), body.size(), 1));
      p.insert(p.end(), frame.begin(), frame.end());
      DecodeOnce(c, p, ctx, &st);
    }
  }
  EXPECT_GT(st.err, 0u);
  RecordProperty("decoded_ok", static_cast<int>(st.ok));
}

INSTANTIATE_TEST_SUITE_P(Specs, FuzzDecodeTest,
                         ::testing::Values("none", "fp16", "bf16", "int8:chunk=7", "int8:stochastic=1", "qsgd:levels=16",
                                           "qsgd:levels=5|zstd", "ef|sign", "topk:ratio=0.05|int8",
                                           "ef|topk:ratio=0.01|int8|zstd", "topk:k=3", "randk:ratio=0.1|fp16",
                                           "dct:chunk=8|topk:k=4|sign", "demo:chunk=64,topk=8,bits=1",
                                           "demo:chunk=16,topk=4,bits=32|zstd", "powersgd:rank=2|bf16", "ef|powersgd:rank=1"),
                         [](const ::testing::TestParamInfo<const char*>& param_info) {
                           std::string s = param_info.param;
                           for (char& ch : s) {
                             if (!isalnum(static_cast<unsigned char>(ch))) ch = '_';
                           }
                           return s;
                         });

}  // namespace
}  // namespace shoal::codec
