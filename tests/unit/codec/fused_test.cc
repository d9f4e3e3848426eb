// The fused, allocation-free encoder against the wire it must keep (issue 18):
//  - golden payloads: hashes of three rounds of payloads and of the final error-feedback
//    residual, for every quantizer and the pipelines, recorded from the unfused encoder of
//    2026-12-04 (before fusion and SIMD). Any change of a payload byte or residual bit fails.
//  - the unfused reference kept here: x = fl(update + residual), the same spec without "ef"
//    encodes x (ef is not on the wire, so the payload must be byte-identical), its decode d
//    gives the residual fl(x - d), which the fused encoder must match bit for bit.
//  - every SIMD level this CPU has, forced in turn, gives identical payloads and decodes.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "codec/simd.h"
#include "core/rng.h"

namespace shoal::codec {
namespace {

// A layout that reaches every path: a tensor large enough for top-k's sampled threshold
// (>= 2^18 values), a matrix, a ragged tail for chunked quantizers, a scalar.
std::vector<TensorSpec> Layout() { return {{"big", {300000}}, {"mat", {70, 33}}, {"tail", {1001}}, {"scalar", {}}}; }

std::vector<float> Update(size_t n, uint64_t seed) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.Normal() * 0.01);
  // Edge chunks: all zeros, subnormal magnitudes (int8's division path), negative zeros,
  // large magnitudes, exact ties for top-k.
  for (size_t i = 1024; i < 1536; ++i) v[i] = 0.0f;
  for (size_t i = 2048; i < 2560; ++i) v[i] = static_cast<float>(rng.Normal() * 1e-39);
  for (size_t i = 3072; i < 3200; ++i) v[i] = -0.0f;
  for (size_t i = 4096; i < 4160; ++i) v[i] = static_cast<float>(rng.Normal() * 1e30);
  for (size_t i = 5000; i < 9000; i += 7) v[i] = 0.03125f;
  return v;
}

RoundContext Ctx(uint64_t round) {
  RoundContext c;
  c.round = round;
  c.shared_seed = 77 + round;
  c.private_seed = 5150 + round;
  return c;
}

// Bit equality of floats (a NaN equals itself, -0 differs from +0).
bool BitEqual(float x, float y) { return std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y); }

uint64_t Fnv(uint64_t h, const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ULL;
  return h;
}

// Three rounds of payloads, then the residual, hashed.
uint64_t RunHash(const std::string& spec) {
  auto c = Codec::Create(spec, Layout());
  EXPECT_TRUE(c.ok()) << spec << ": " << c.status().ToString();
  if (!c.ok()) return 0;
  const size_t n = LayoutSize(Layout());
  uint64_t h = 0xcbf29ce484222325ULL;
  for (uint64_t round = 0; round < 3; ++round) {
    auto p = (*c)->Encode(Update(n, 900 + round), Ctx(round));
    EXPECT_TRUE(p.ok()) << spec << ": " << p.status().ToString();
    if (!p.ok()) return 0;
    h = Fnv(h, p->data(), p->size());
  }
  const auto r = (*c)->residual();
  return Fnv(h, r.data(), r.size() * sizeof(float));
}

struct Golden {
  const char* spec;
  uint64_t hash;
};

const Golden kGolden[] = {
    {"int8", 0x763cca457ff1db0fULL},
    {"int8:stochastic=1", 0xf1fcaa7801da4703ULL},
    {"int8:chunk=7", 0xe66a89cac5a51c31ULL},
    {"int8:chunk=4096", 0x83ca1763afa3c372ULL},
    {"sign", 0xdfef85006eb78aebULL},
    {"fp16", 0xba0cbb45946198c7ULL},
    {"bf16", 0x661af921cfdef9ddULL},
    {"qsgd:levels=16", 0xcd940fe0913bee80ULL},
    {"topk:ratio=0.01|int8", 0xa627a8713c1dad99ULL},
    {"randk:ratio=0.1|int8", 0x21d81caeca981b20ULL},
    {"demo:chunk=64,topk=8,bits=1", 0x90c9667949869390ULL},
    {"ef|sign", 0x6bb90ea320bf907aULL},
    {"ef|int8", 0xfb270d70597dce5bULL},
    {"ef|int8:chunk=7", 0x2f2a8f70eb46ba15ULL},
    {"ef|int8:stochastic=1", 0xcc46d57ff0350d59ULL},
    {"ef|bf16", 0x8e1003075e8b1099ULL},
    {"ef|fp16", 0x2f5b0c004a97d761ULL},
    {"ef|qsgd:levels=4", 0xb212ef6f72e5c18bULL},
    {"ef|topk:ratio=0.01|int8", 0xf8bd9be46fddd367ULL},
    {"ef|topk:ratio=0.01,approx=1|int8", 0x664ae658bd60448dULL},
    {"ef|topk:ratio=0.05", 0xcadc407e065d3219ULL},
    {"ef|randk:ratio=0.1|int8", 0xc68eb1a0f08466beULL},
    {"ef|topk:ratio=0.01|int8|zstd", 0x718d66cc60023c1aULL},
    {"ef|dct:chunk=8|topk:k=2|sign", 0xfb051f1c14d109d0ULL},
    {"ef|powersgd:rank=2", 0x9a06a5689d75fc3bULL},
};

// The SIMD levels this CPU can run, each forced for the scope of one iteration.
std::vector<simd::Level> Levels() {
  std::vector<simd::Level> out{simd::Level::kBaseline};
  if (simd::Supported(simd::Level::kAvx2)) out.push_back(simd::Level::kAvx2);
  return out;
}

struct ForceLevel {
  explicit ForceLevel(simd::Level l) { simd::ForceForTesting(l); }
  ~ForceLevel() { simd::ForceForTesting(std::nullopt); }
};

TEST(FusedEncoderTest, PayloadsAndResidualsMatchTheUnfusedEncodersRecordedHashesAtEverySimdLevel) {
  if (!simd::Supported(simd::Level::kAvx2)) std::printf("this CPU has no AVX2: only the baseline bodies run\n");
  for (simd::Level level : Levels()) {
    ForceLevel force(level);
    ASSERT_EQ(simd::Active(), level);
    for (const auto& g : kGolden) {
      const uint64_t h = RunHash(g.spec);
      EXPECT_EQ(h, g.hash) << simd::Name(level) << ": {\"" << g.spec << "\", 0x" << std::hex << h << "ULL},";
    }
  }
}

// Every payload decodes to the same bits at every SIMD level (the decoders' kernels: the DCT's
// inverse, the finiteness checks), for payloads encoded at every level.
TEST(FusedEncoderTest, DecodedValuesAreIdenticalAtEverySimdLevel) {
  const auto layout = Layout();
  const size_t n = LayoutSize(layout);
  for (const auto& g : kGolden) {
    auto c = Codec::Create(g.spec, layout);
    ASSERT_TRUE(c.ok()) << g.spec;
    std::vector<std::vector<uint8_t>> payloads;
    for (simd::Level level : Levels()) {
      ForceLevel force(level);
      auto p = (*c)->Encode(Update(n, 7 + payloads.size()), Ctx(payloads.size()));
      ASSERT_TRUE(p.ok()) << g.spec;
      payloads.push_back(std::move(*p));
    }
    for (size_t k = 0; k < payloads.size(); ++k) {
      std::vector<std::vector<float>> decoded;
      for (simd::Level level : Levels()) {
        ForceLevel force(level);
        decoded.emplace_back(n);
        ASSERT_TRUE((*c)->Decode(payloads[k], Ctx(k), decoded.back()).ok()) << g.spec;
      }
      for (size_t l = 1; l < decoded.size(); ++l)
        EXPECT_EQ(std::memcmp(decoded[0].data(), decoded[l].data(), n * sizeof(float)), 0) << g.spec;
    }
  }
}

// The unfused reference: the spec without "ef" encodes x = fl(u + r) (same wire), its decode d
// gives the residual fl(x - d).
TEST(FusedEncoderTest, ErrorFeedbackEqualsTheUnfusedReferenceBitForBit) {
  const char* specs[] = {"ef|int8", "ef|int8:chunk=7", "ef|int8:stochastic=1", "ef|sign", "ef|topk:ratio=0.01|int8",
                         "ef|topk:ratio=0.01|sign", "ef|topk:ratio=0.05", "ef|randk:ratio=0.1|int8", "ef|bf16",
                         "ef|qsgd:levels=4", "ef|topk:ratio=0.01,approx=1|int8|zstd"};
  const auto layout = Layout();
  const size_t n = LayoutSize(layout);
  for (simd::Level level : Levels()) {
    ForceLevel force(level);
    for (const char* spec : specs) {
      const std::string plain_spec = std::string(spec).substr(3);
      auto fused = Codec::Create(spec, layout);
      auto plain = Codec::Create(plain_spec, layout);
      ASSERT_TRUE(fused.ok() && plain.ok()) << spec;
      std::vector<float> residual(n, 0.0f), x(n), d(n);
      std::vector<uint8_t> payload;
      for (uint64_t round = 0; round < 4; ++round) {
        const std::vector<float> u = Update(n, 40 + round);
        for (size_t i = 0; i < n; ++i) x[i] = u[i] + residual[i];
        auto expected = (*plain)->Encode(x, Ctx(round));
        ASSERT_TRUE(expected.ok()) << spec;
        ASSERT_TRUE((*plain)->Decode(*expected, Ctx(round), d).ok()) << spec;
        for (size_t i = 0; i < n; ++i) residual[i] = x[i] - d[i];

        ASSERT_TRUE((*fused)->EncodeInto(u, Ctx(round), &payload).ok()) << spec;
        ASSERT_EQ(payload, *expected) << simd::Name(level) << " " << spec << " round " << round;
        const auto r = (*fused)->residual();
        ASSERT_EQ(std::memcmp(r.data(), residual.data(), n * sizeof(float)), 0)
            << simd::Name(level) << " " << spec << " round " << round;
      }
    }
  }
}

// A refused update (a NaN or an infinity, in the first chunk, inside, at a tensor's end) names the first bad value and leaves the residual as it was: the next encode continues as
// if the refused one had never been offered.
TEST(FusedEncoderTest, ARefusedUpdateNamesTheValueAndLeavesTheResidualUntouched) {
  const auto layout = Layout();
  const size_t n = LayoutSize(layout);
  const size_t places[] = {0, 17, 299999, 300000 + 70 * 33 + 3, n - 1};
  for (simd::Level level : Levels()) {
    ForceLevel force(level);
    for (const char* spec : {"int8", "sign", "ef|int8", "ef|sign", "ef|topk:ratio=0.01|int8", "ef|bf16", "ef|dct:chunk=8|topk:k=2|sign"}) {
      auto a = Codec::Create(spec, layout);
      auto b = Codec::Create(spec, layout);
      ASSERT_TRUE(a.ok() && b.ok()) << spec;
      ASSERT_TRUE((*a)->Encode(Update(n, 1), Ctx(0)).ok());
      ASSERT_TRUE((*b)->Encode(Update(n, 1), Ctx(0)).ok());
      for (size_t place : places) {
        for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
          std::vector<float> u = Update(n, 2);
          u[place] = bad;
          auto p = (*a)->Encode(u, Ctx(1));
          ASSERT_FALSE(p.ok()) << spec;
          EXPECT_EQ(p.status().code(), StatusCode::kInvalidArgument);
          EXPECT_NE(p.status().message().find("update value " + std::to_string(place) + " is not finite"), std::string::npos)
              << simd::Name(level) << " " << spec << ": " << p.status().message();
          ASSERT_TRUE(std::ranges::equal((*a)->residual(), (*b)->residual(), BitEqual)) << spec;
        }
      }
      auto pa = (*a)->Encode(Update(n, 3), Ctx(1));
      auto pb = (*b)->Encode(Update(n, 3), Ctx(1));
      ASSERT_TRUE(pa.ok() && pb.ok()) << spec;
      EXPECT_EQ(*pa, *pb) << spec;
    }
  }
}

// EncodeInto reuses the caller's buffer: after the first round no reallocation.
TEST(FusedEncoderTest, EncodeIntoReusesTheBufferAndMatchesEncode) {
  const auto layout = Layout();
  const size_t n = LayoutSize(layout);
  for (const char* spec : {"int8", "ef|sign", "ef|topk:ratio=0.01|int8|zstd", "none"}) {
    auto a = Codec::Create(spec, layout);
    auto b = Codec::Create(spec, layout);
    ASSERT_TRUE(a.ok() && b.ok());
    std::vector<uint8_t> buffer;
    const uint8_t* first = nullptr;
    for (uint64_t round = 0; round < 4; ++round) {
      const auto u = Update(n, 60 + round);
      ASSERT_TRUE((*a)->EncodeInto(u, Ctx(round), &buffer).ok());
      auto expected = (*b)->Encode(u, Ctx(round));
      ASSERT_TRUE(expected.ok());
      EXPECT_EQ(buffer, *expected) << spec;
      if (round == 1) first = buffer.data();
      if (round > 1) {
        EXPECT_EQ(buffer.data(), first) << spec << ": the buffer was reallocated";
      }
    }
  }
}

}  // namespace
}  // namespace shoal::codec
