// The codec pipeline: spec parsing (errors and canonical forms), dense bit-exactness, round
// trips through every quantizer and the transform/selector stages, determinism, zstd, the
// error-feedback invariant over several rounds, and header checks on decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <vector>

#include "codec/codec.h"
#include "codec/xform_params.h"
#include "core/rng.h"

namespace shoal::codec {
namespace {

std::vector<TensorSpec> Layout() {
  return {{"fc0.weight", {64, 48}}, {"fc0.bias", {48}}, {"conv", {8, 3, 3, 3}}, {"scalar", {}}, {"empty", {0, 5}}};
}

std::vector<float> RandomUpdate(size_t n, uint64_t seed, double scale = 0.01) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.Normal() * scale);
  return v;
}

RoundContext Ctx(uint64_t round, uint64_t priv = 99) {
  RoundContext c;
  c.round = round;
  c.shared_seed = 1234 + round;
  c.private_seed = priv;
  return c;
}

std::string ParseError(const std::string& spec) {
  auto r = ParseSpec(spec);
  EXPECT_FALSE(r.ok()) << spec;
  return r.ok() ? "" : r.status().message();
}

std::string Canonical(const std::string& spec) {
  auto c = Codec::Create(spec, Layout());
  EXPECT_TRUE(c.ok()) << spec << ": " << c.status().ToString();
  return c.ok() ? (*c)->spec() : "";
}

#define EXPECT_CONTAINS(hay, needle) EXPECT_NE((hay).find(needle), std::string::npos) << (hay)

TEST(SpecTest, Errors) {
  EXPECT_CONTAINS(ParseError("foo"), "unknown stage 'foo' (valid: ef, dct, powersgd, topk, randk, fp16, bf16, int8, qsgd, sign, zstd");
  EXPECT_CONTAINS(ParseError("int8:bits=4"), "int8: unknown parameter 'bits' (valid: chunk, stochastic)");
  EXPECT_CONTAINS(ParseError("qsgd:levels=abc"), "qsgd: bad value 'abc' for 'levels'");
  EXPECT_CONTAINS(ParseError("qsgd:levels=0"), "qsgd: bad value '0' for 'levels'");
  EXPECT_CONTAINS(ParseError("topk:ratio=1.5"), "topk: bad value '1.5' for 'ratio'");
  EXPECT_CONTAINS(ParseError("topk:ratio=0"), "topk: bad value '0' for 'ratio'");
  EXPECT_CONTAINS(ParseError("zstd|int8"), "'int8' after 'zstd' is out of order");
  EXPECT_CONTAINS(ParseError("int8|ef"), "'ef' after 'int8' is out of order");
  EXPECT_CONTAINS(ParseError("topk:ratio=0.1|dct"), "'dct' after 'topk' is out of order");
  EXPECT_CONTAINS(ParseError("bf16|int8"), "'bf16' and 'int8' both fill the quantize slot");
  EXPECT_CONTAINS(ParseError("int8|int8"), "'int8' appears twice");
  EXPECT_CONTAINS(ParseError("demo|topk"), "'demo' and 'topk' both fill the select slot");
  EXPECT_CONTAINS(ParseError("topk:ratio=0.1,k=3"), "not both");
  EXPECT_CONTAINS(ParseError("int8:chunk"), "int8: malformed parameter 'chunk' (expected key=value)");
  EXPECT_CONTAINS(ParseError("int8:chunk=4,chunk=8"), "given twice");
  EXPECT_CONTAINS(ParseError("int8||zstd"), "empty stage");
  EXPECT_CONTAINS(ParseError("none|int8"), "'none' must be the whole spec");
  EXPECT_CONTAINS(ParseError("demo:bits=3"), "demo: bad value '3' for 'bits'");
  EXPECT_CONTAINS(ParseError("demo:foo=1"), "demo: unknown parameter 'foo'");
  // The message names the whole spec.
  EXPECT_CONTAINS(ParseError("ef|nope"), "codec spec 'ef|nope'");
  auto c = Codec::Create("int8:stochastic=2", Layout());
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kInvalidArgument);
}

TEST(SpecTest, CanonicalForms) {
  EXPECT_EQ(Canonical(""), "none");
  EXPECT_EQ(Canonical("none"), "none");
  EXPECT_EQ(Canonical("bf16"), "bf16");
  EXPECT_EQ(Canonical("int8"), "int8:chunk=256,stochastic=0");
  EXPECT_EQ(Canonical("qsgd:levels=16"), "qsgd:levels=16");
  EXPECT_EQ(Canonical(" ef | topk:ratio=0.010 | int8 "), "ef|topk:ratio=0.01,approx=0|int8:chunk=256,stochastic=0");
  EXPECT_EQ(Canonical("topk:k=5"), "topk:k=5,approx=0");
  EXPECT_EQ(Canonical("ef|sign"), "ef|sign");
  EXPECT_EQ(Canonical("ef|powersgd:rank=4"), "ef|powersgd:rank=4,seed=0");
  EXPECT_EQ(Canonical("demo:chunk=64,topk=8,bits=1"), "dct:chunk=64|topk:k=8,approx=0|sign");
  EXPECT_EQ(Canonical("demo:bits=8"), "dct:chunk=64|topk:k=8,approx=0|int8:chunk=256,stochastic=0");
  EXPECT_EQ(Canonical("demo:bits=32|zstd"), "dct:chunk=64|topk:k=8,approx=0|zstd:level=3");
  EXPECT_EQ(Canonical("randk:ratio=1e-1|fp16|zstd:level=9"), "randk:ratio=0.1|fp16|zstd:level=9");
  // Canonical specs are fixed points.
  for (const char* s : {"int8", "ef|topk:ratio=0.01|int8", "demo:chunk=32,topk=4,bits=1", "qsgd:levels=3|zstd"}) {
    std::string c = Canonical(s);
    EXPECT_EQ(Canonical(c), c);
  }
  auto names = SupportedStages();
  for (const char* n : {"ef", "dct", "powersgd", "topk", "randk", "fp16", "bf16", "int8", "qsgd", "sign", "zstd"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << n;
  }
}

// The names as written, presets not expanded (what the aggregator checks the demo preset with).
TEST(SpecTest, NamesAsWritten) {
  using V = std::vector<std::string>;
  EXPECT_EQ(*SpecNames(" ef | demo:chunk=64,topk=8,bits=1 | zstd "), (V{"ef", "demo", "zstd"}));
  EXPECT_EQ(*SpecNames("demo:bits=8"), (V{"demo"}));
  EXPECT_EQ(*SpecNames("none"), V{});
  EXPECT_EQ(*SpecNames(""), V{});
  EXPECT_FALSE(SpecNames("demo:chunk=64,,").ok());
}

// The demo preset is refused on plain deltas unless error feedback keeps what top-k drops.
TEST(SpecTest, DemoPresetPairing) {
  const std::string flags = "--client-optimizer demo";
  EXPECT_EQ(CheckDemoPresetPairing("demo:chunk=64,topk=8,bits=1", "sgd", flags).code(), StatusCode::kInvalidArgument);
  EXPECT_NE(CheckDemoPresetPairing("demo:bits=8|zstd", "adamw", flags).message().find("--codec 'ef|demo:bits=8|zstd'"),
            std::string::npos);
  EXPECT_TRUE(CheckDemoPresetPairing("demo:chunk=64,topk=8,bits=1", "demo", flags).ok());
  EXPECT_TRUE(CheckDemoPresetPairing("ef|demo:chunk=64,topk=8,bits=1", "sgd", flags).ok());
  // The expanded stages are not the preset: dct|topk|sign written out is the user's choice.
  EXPECT_TRUE(CheckDemoPresetPairing("dct:chunk=64|topk:k=8|sign", "sgd", flags).ok());
  EXPECT_TRUE(CheckDemoPresetPairing("int8", "sgd", flags).ok());
  EXPECT_TRUE(CheckDemoPresetPairing("demo:chunk=64,,", "sgd", flags).ok());  // ParseSpec's to report
}

TEST(ShapeTest, ToShape2D) {
  EXPECT_EQ(ToShape2D({"s", {}}).size(), 1);
  Shape2D v = ToShape2D({"v", {7}});
  EXPECT_EQ(v.rows, 1);
  EXPECT_EQ(v.cols, 7);
  Shape2D m = ToShape2D({"m", {4, 3, 2}});
  EXPECT_EQ(m.rows, 4);
  EXPECT_EQ(m.cols, 6);
}

TEST(PipelineTest, DenseIsBitExactRawFp32) {
  for (const char* spec : {"none", "", "ef"}) {
    auto c = Codec::Create(spec, Layout());
    ASSERT_TRUE(c.ok());
    EXPECT_TRUE((*c)->is_dense());
    std::vector<float> u = RandomUpdate(LayoutSize(Layout()), 3);
    u[0] = -0.0f;
    u[1] = std::bit_cast<float>(1u);  // subnormal
    u[2] = 3.4e38f;
    auto p = (*c)->Encode(u, Ctx(0));
    ASSERT_TRUE(p.ok());
    ASSERT_EQ(p->size(), u.size() * 4);
    EXPECT_EQ(std::memcmp(p->data(), u.data(), p->size()), 0);
    std::vector<float> out(u.size());
    ASSERT_TRUE((*c)->Decode(*p, Ctx(0), out).ok());
    EXPECT_EQ(std::memcmp(out.data(), u.data(), p->size()), 0);
    auto bad = *p;
    bad.pop_back();
    EXPECT_FALSE((*c)->Decode(bad, Ctx(0), out).ok());
  }
}

// Per quantizer spec, the largest error allowed relative to the largest |value| of the update.
// One tensor's place in the flat vector.
struct TensorAt {
  size_t offset, size;
  Shape2D shape;
};
std::vector<TensorAt> Tensors(const std::vector<TensorSpec>& layout) {
  std::vector<TensorAt> out;
  size_t offset = 0;
  for (const auto& t : layout) {
    const Shape2D s = ToShape2D(t);
    const size_t size = static_cast<size_t>(std::max<int64_t>(s.size(), 0));
    out.push_back({offset, size, s});
    offset += size;
  }
  return out;
}

struct RoundTripCase {
  const char* spec;
  double max_err;  // absolute, for updates with |x| < ~0.05
};

TEST(PipelineTest, QuantizerRoundTrips) {
  const RoundTripCase cases[] = {
      {"fp16", 0.05 * 0x1p-11 + 1e-7},  // fp16 subnormals below 6e-5 have absolute error 3e-8
      {"bf16", 0.05 * 0x1p-8},
      {"int8", 0.05 / 127 / 2 * 1.001},
      {"int8:chunk=16,stochastic=1", 0.05 / 127 * 1.001},
      {"bf16|zstd", 0.05 * 0x1p-8},
  };
  const auto layout = Layout();
  const size_t n = LayoutSize(layout);
  std::vector<float> u = RandomUpdate(n, 5);
  for (auto& x : u) x = std::max(-0.049f, std::min(0.049f, x));
  for (const auto& tc : cases) {
    auto c = Codec::Create(tc.spec, layout);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_FALSE((*c)->is_dense());
    auto p = (*c)->Encode(u, Ctx(1));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    std::vector<float> d(n);
    ASSERT_TRUE((*c)->Decode(*p, Ctx(1), d).ok()) << tc.spec;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(d[i]));
      ASSERT_LE(std::fabs(d[i] - u[i]), tc.max_err) << tc.spec << " at " << i;
    }
  }
  // The two whose error scales with the tensor, each by its own rule (quantizer_test.cc):
  // QSGD within ||u_t|| / levels of each value, with its sign; sign as sign(u) times the
  // tensor's mean |u|.
  for (const char* spec : {"qsgd:levels=16", "sign"}) {
    auto c = Codec::Create(spec, layout);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    auto p = (*c)->Encode(u, Ctx(1));
    ASSERT_TRUE(p.ok()) << p.status().ToString();
    std::vector<float> d(n);
    ASSERT_TRUE((*c)->Decode(*p, Ctx(1), d).ok()) << spec;
    for (const auto& [offset, size, shape] : Tensors(layout)) {
      double norm = 0, mean_abs = 0;
      for (size_t i = offset; i < offset + size; ++i) {
        norm += static_cast<double>(u[i]) * u[i];
        mean_abs += std::fabs(u[i]) / static_cast<double>(size);
      }
      norm = std::sqrt(norm);
      for (size_t i = offset; i < offset + size; ++i) {
        ASSERT_TRUE(d[i] == 0.0f || std::signbit(d[i]) == std::signbit(u[i])) << spec << " at " << i;
        if (std::string(spec) == "sign")
          ASSERT_NEAR(std::fabs(d[i]), mean_abs, mean_abs * 1e-5) << i;
        else
          ASSERT_LE(std::fabs(d[i] - u[i]), norm / 16 * (1 + 1e-6)) << i;
      }
    }
  }
}

TEST(PipelineTest, PayloadSizes) {
  const auto layout = Layout();
  const size_t n = LayoutSize(layout);  // 3072 + 48 + 216 + 1
  std::vector<float> u = RandomUpdate(n, 6);
  auto size_of = [&](const char* spec) {
    auto c = Codec::Create(spec, layout);
    EXPECT_TRUE(c.ok());
    auto p = (*c)->Encode(u, Ctx(1));
    EXPECT_TRUE(p.ok());
    return p->size();
  };
  const size_t header_with_one_stage = 1 + 1 + 1 + 2;  // version, count, id, varint(3337)
  EXPECT_EQ(size_of("bf16"), header_with_one_stage + 2 * n);
  EXPECT_EQ(size_of("sign"), header_with_one_stage + 4 * 4 + (3072 + 7) / 8 + 48 / 8 + 216 / 8 + 1);
  EXPECT_LT(size_of("topk:ratio=0.01|int8"), n / 10);
}

TEST(PipelineTest, TopKSendsTheLargestExactly) {
  std::vector<TensorSpec> layout = {{"v", {1000}}};
  std::vector<float> u = RandomUpdate(1000, 8);
  auto c = Codec::Create("topk:k=10", layout);
  ASSERT_TRUE(c.ok());
  auto p = (*c)->Encode(u, Ctx(0));
  ASSERT_TRUE(p.ok());
  std::vector<float> d(1000);
  ASSERT_TRUE((*c)->Decode(*p, Ctx(0), d).ok());
  std::vector<float> mags;
  for (float x : u) mags.push_back(std::fabs(x));
  std::sort(mags.rbegin(), mags.rend());
  int sent = 0;
  for (size_t i = 0; i < u.size(); ++i) {
    if (d[i] != 0.0f) {
      ++sent;
      EXPECT_EQ(d[i], u[i]);
      EXPECT_GE(std::fabs(u[i]), mags[9]);
    }
  }
  EXPECT_EQ(sent, 10);
}

TEST(PipelineTest, TransformAndSelectorSpecsRoundTripDeterministically) {
  const char* specs[] = {"topk:ratio=0.05|int8",       "randk:ratio=0.1|fp16",        "dct:chunk=8|topk:k=4|int8",
                         "demo:chunk=64,topk=8,bits=1", "demo:chunk=16,topk=4,bits=32", "ef|powersgd:rank=2|bf16",
                         "powersgd:rank=3",             "dct:chunk=4",                  "ef|topk:ratio=0.01|int8|zstd",
                         "qsgd:levels=255|zstd",        "dct:chunk=64|randk:ratio=0.02"};
  std::vector<TensorSpec> layout = {{"w", {128, 96}}, {"b", {96}}, {"w2", {10, 128}}, {"odd", {7, 13}}};
  const size_t n = LayoutSize(layout);
  std::vector<float> u = RandomUpdate(n, 9);
  for (const char* spec : specs) {
    std::vector<uint8_t> first;
    for (int rep = 0; rep < 2; ++rep) {
      auto c = Codec::Create(spec, layout);
      ASSERT_TRUE(c.ok()) << spec << ": " << c.status().ToString();
      auto p = (*c)->Encode(u, Ctx(2));
      ASSERT_TRUE(p.ok()) << spec << ": " << p.status().ToString();
      if (rep == 0) first = *p;
      EXPECT_EQ(*p, first) << spec << ": encoding is not deterministic";
      std::vector<float> d1(n), d2(n);
      ASSERT_TRUE((*c)->Decode(*p, Ctx(2), d1).ok()) << spec;
      ASSERT_TRUE((*c)->Decode(*p, Ctx(2), d2).ok()) << spec;
      EXPECT_EQ(std::memcmp(d1.data(), d2.data(), n * 4), 0) << spec;
      for (size_t i = 0; i < n; ++i) ASSERT_TRUE(std::isfinite(d1[i])) << spec;
    }
  }
}

// The top-k of each block of `block` values of v by magnitude, ties to the lower index (the
// selector's rule, checked against a sort in selector_test.cc), as sorted indices.
std::vector<uint32_t> BlockTopK(std::span<const float> v, size_t block, size_t k) {
  std::vector<uint32_t> out;
  for (size_t b = 0; b < v.size(); b += block) {
    const size_t len = std::min(block, v.size() - b);
    std::vector<uint32_t> idx(len);
    std::iota(idx.begin(), idx.end(), static_cast<uint32_t>(b));
    std::stable_sort(idx.begin(), idx.end(), [&](uint32_t a, uint32_t c) { return std::fabs(v[a]) > std::fabs(v[c]); });
    idx.resize(std::min(k, len));
    std::sort(idx.begin(), idx.end());
    out.insert(out.end(), idx.begin(), idx.end());
  }
  return out;
}

// The payload's coefficients, as Codec::DecodeCoefficients gives them.
void Coefficients(const Codec& c, const std::vector<uint8_t>& payload, const RoundContext& ctx,
                  std::vector<uint32_t>* idx, std::vector<float>* val) {
  ASSERT_TRUE(c.DecodeCoefficients(payload, ctx, idx, val).ok()) << c.spec();
}

// Every composite pipeline against the composition of its stages' references, each already
// checked on its own (quantizer_test.cc, selector_test.cc, transform_test.cc): the selected
// places are the reference's, the values within the quantizer's own bound of the exact values
// (the lossless DCT's coefficients for the transform pipelines), and nothing else is sent. A
// decoder returning zeros, or the right values at other places, fails every case.
TEST(PipelineTest, CompositesMatchTheComposedStageReferences) {
  std::vector<TensorSpec> layout = {{"w", {128, 96}}, {"b", {96}}, {"w2", {10, 128}}, {"odd", {7, 13}}};
  const size_t n = LayoutSize(layout);
  const auto tensors = Tensors(layout);
  const std::vector<float> u = RandomUpdate(n, 9);
  const RoundContext ctx = Ctx(2);
  std::vector<uint8_t> payload;  // of the last run
  auto run = [&](const std::string& spec, std::vector<float>* d) -> std::unique_ptr<Codec> {
    auto c = Codec::Create(spec, layout);
    EXPECT_TRUE(c.ok()) << spec << ": " << c.status().ToString();
    if (!c.ok()) return nullptr;
    auto p = (*c)->Encode(u, ctx);
    EXPECT_TRUE(p.ok()) << spec;
    d->assign(n, 0.0f);
    EXPECT_TRUE((*c)->Decode(*p, ctx, *d).ok()) << spec;
    payload = *p;
    return std::move(*c);
  };

  // Sparse pipelines on the values: top-k (per tensor) then int8, random-k then fp16.
  for (const auto& [spec, ratio] : std::vector<std::pair<std::string, double>>{
           {"topk:ratio=0.05|int8", 0.05}, {"ef|topk:ratio=0.01|int8|zstd", 0.01}}) {
    std::vector<float> d;
    ASSERT_TRUE(run(spec, &d));
    for (const auto& t : tensors) {
      const auto ref = BlockTopK(std::span(u).subspan(t.offset, t.size), t.size, detail::CountFor(t.size, ratio, 0));
      float amax = 0;
      for (uint32_t i : ref) amax = std::max(amax, std::fabs(u[t.offset + i]));
      std::vector<bool> chosen(t.size, false);
      for (uint32_t i : ref) chosen[i] = true;
      for (size_t i = 0; i < t.size; ++i) {
        const float want = chosen[i] ? u[t.offset + i] : 0.0f;
        ASSERT_LE(std::fabs(d[t.offset + i] - want), chosen[i] ? amax / 254 * (1 + 1e-5) : 0.0) << spec << " at " << t.offset + i;
      }
    }
  }
  {
    std::vector<float> d;
    ASSERT_TRUE(run("randk:ratio=0.1|fp16", &d));
    for (const auto& t : tensors) {
      size_t sent = 0;
      for (size_t i = t.offset; i < t.offset + t.size; ++i) {
        if (d[i] == 0.0f) continue;
        ++sent;
        ASSERT_LE(std::fabs(d[i] - u[i]), std::fabs(u[i]) * 0x1p-11 + 3e-8) << i;
      }
      EXPECT_EQ(sent, detail::CountFor(t.size, 0.1, 0)) << "tensor at " << t.offset;
    }
  }
  {
    std::vector<float> d;
    ASSERT_TRUE(run("qsgd:levels=255|zstd", &d));
    for (const auto& t : tensors) {
      double norm = 0;
      for (size_t i = t.offset; i < t.offset + t.size; ++i) norm += static_cast<double>(u[i]) * u[i];
      for (size_t i = t.offset; i < t.offset + t.size; ++i) {
        ASSERT_LE(std::fabs(d[i] - u[i]), std::sqrt(norm) / 255 * (1 + 1e-6)) << i;
        ASSERT_TRUE(d[i] == 0.0f || std::signbit(d[i]) == std::signbit(u[i])) << i;
      }
    }
  }

  // Transform pipelines, in the coefficient domain against the lossless DCT's coefficients:
  // the selector's places per DCT chunk (chunk-major: each chunk's coefficients contiguous),
  // the quantizer's bound on their values.
  struct DctCase {
    std::string spec;
    int64_t chunk;
    size_t k;        // top-k per chunk; 0: random-k of `ratio`
    double ratio;
    const char* values;  // "exact", "int8", "sign"
  };
  for (const DctCase& tc : {DctCase{"dct:chunk=8|topk:k=4|int8", 8, 4, 0, "int8"},
                            DctCase{"demo:chunk=64,topk=8,bits=1", 64, 8, 0, "sign"},
                            DctCase{"demo:chunk=16,topk=4,bits=32", 16, 4, 0, "exact"},
                            DctCase{"dct:chunk=64|randk:ratio=0.02", 64, 0, 0.02, "exact"}}) {
    SCOPED_TRACE(tc.spec);
    std::vector<float> d, exact_d;
    auto lossless = run("dct:chunk=" + std::to_string(tc.chunk), &exact_d);
    ASSERT_TRUE(lossless);
    std::vector<uint32_t> all_idx;
    std::vector<float> all_val, coef(n, 0.0f);
    Coefficients(*lossless, payload, ctx, &all_idx, &all_val);
    for (size_t j = 0; j < all_idx.size(); ++j) coef[all_idx[j]] = all_val[j];
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; ++i) {
      err += (exact_d[i] - u[i]) * static_cast<double>(exact_d[i] - u[i]);
      norm += static_cast<double>(u[i]) * u[i];
    }
    ASSERT_LT(err, 1e-8 * norm) << "the lossless DCT inverts";
    auto c = run(tc.spec, &d);
    ASSERT_TRUE(c);
    std::vector<uint32_t> idx;
    std::vector<float> val;
    Coefficients(*c, payload, ctx, &idx, &val);
    size_t j = 0;
    for (const auto& t : tensors) {
      const size_t block = static_cast<size_t>(detail::LargestDivisorAtMost(t.shape.rows, tc.chunk) *
                                               detail::LargestDivisorAtMost(t.shape.cols, tc.chunk));
      std::vector<uint32_t> got;
      std::vector<float> got_val;
      for (; j < idx.size() && idx[j] < t.offset + t.size; ++j) {
        got.push_back(idx[j] - static_cast<uint32_t>(t.offset));
        got_val.push_back(val[j]);
      }
      const std::span<const float> exact(coef.data() + t.offset, t.size);
      if (tc.k > 0) {
        ASSERT_EQ(got, BlockTopK(exact, block, tc.k)) << "tensor at " << t.offset;
      } else {
        ASSERT_EQ(got.size(), detail::CountChunked(t.size, block, tc.ratio, 0)) << "tensor at " << t.offset;
      }
      float amax = 0;
      double mean_abs = 0;
      for (uint32_t i : got) {
        amax = std::max(amax, std::fabs(exact[i]));
        mean_abs += std::fabs(exact[i]) / static_cast<double>(got.size());
      }
      for (size_t m = 0; m < got.size(); ++m) {
        const float want = exact[got[m]];
        if (std::string(tc.values) == "exact") {
          ASSERT_EQ(got_val[m], want) << got[m];
        } else if (std::string(tc.values) == "int8") {
          ASSERT_LE(std::fabs(got_val[m] - want), amax / 254 * (1 + 1e-5)) << got[m];
        } else {
          ASSERT_EQ(std::signbit(got_val[m]), std::signbit(want)) << got[m];
          ASSERT_NEAR(std::fabs(got_val[m]), mean_abs, mean_abs * 1e-5) << got[m];
        }
      }
    }
    EXPECT_EQ(j, idx.size());
  }

  // PowerSGD: 1-D tensors travel as they are; a matrix M comes back as P P^T M, its projection
  // on P's orthonormal columns (transform_test.cc), so the error is orthogonal to the result,
  // which holds a share of M's energy. With bf16 on P and Q, within bf16's error of fp32's.
  std::vector<float> d32, d16;
  ASSERT_TRUE(run("powersgd:rank=3", &d32));
  for (const auto& t : tensors) {
    double dot = 0, dd = 0, ee = 0, uu = 0;
    for (size_t i = t.offset; i < t.offset + t.size; ++i) {
      if (t.shape.rows == 1) {
        ASSERT_EQ(d32[i], u[i]) << i;
      }
      dot += (u[i] - d32[i]) * static_cast<double>(d32[i]);
      dd += static_cast<double>(d32[i]) * d32[i];
      ee += (u[i] - d32[i]) * static_cast<double>(u[i] - d32[i]);
      uu += static_cast<double>(u[i]) * u[i];
    }
    if (t.shape.rows == 1) continue;
    EXPECT_LE(std::fabs(dot), 1e-3 * std::sqrt(dd * ee)) << "tensor at " << t.offset;
    EXPECT_GE(dd, 0.01 * uu) << "tensor at " << t.offset;
  }
  ASSERT_TRUE(run("powersgd:rank=2", &d32));
  ASSERT_TRUE(run("ef|powersgd:rank=2|bf16", &d16));
  for (const auto& t : tensors) {
    double diff = 0, dd = 0;
    for (size_t i = t.offset; i < t.offset + t.size; ++i) {
      diff += (d16[i] - d32[i]) * static_cast<double>(d16[i] - d32[i]);
      dd += static_cast<double>(d32[i]) * d32[i];
    }
    EXPECT_GT(dd, 0.0);
    EXPECT_LE(diff, 0.02 * 0.02 * dd) << "tensor at " << t.offset;
  }
}

// Error feedback: with x = update + old residual (in float, as the codec adds them), the decoded
// payload d and the new residual r satisfy d + r == x exactly for Sterbenz-exact stages, and
// |d + r - x| <= 2^-24 |x - d| otherwise (see Codec::Encode).
TEST(PipelineTest, ErrorFeedbackInvariant) {
  struct Case {
    const char* spec;
    bool exact;
  };
  const Case cases[] = {{"ef|topk:ratio=0.05", true}, {"ef|bf16", true},        {"ef|fp16", true},
                        {"ef|int8", true},            {"ef|topk:ratio=0.05|int8", true},
                        {"ef|sign", false},           {"ef|qsgd:levels=4", false}, {"ef|int8:stochastic=1", false},
                        {"ef|dct:chunk=8|topk:k=2|sign", false}, {"ef|powersgd:rank=1", false}};
  const auto layout = Layout();
  const size_t n = LayoutSize(layout);
  for (const auto& tc : cases) {
    auto c = Codec::Create(tc.spec, layout);
    ASSERT_TRUE(c.ok()) << tc.spec;
    ASSERT_TRUE((*c)->has_error_feedback());
    std::vector<float> old_residual(n, 0.0f);
    for (int round = 0; round < 6; ++round) {
      std::vector<float> u = RandomUpdate(n, 100 + round);
      auto p = (*c)->Encode(u, Ctx(round, 7 + round));
      ASSERT_TRUE(p.ok()) << tc.spec;
      std::vector<float> d(n);
      ASSERT_TRUE((*c)->Decode(*p, Ctx(round, 7 + round), d).ok()) << tc.spec;
      std::span<const float> r = (*c)->residual();
      ASSERT_EQ(r.size(), n);
      double residual_norm = 0;
      for (size_t i = 0; i < n; ++i) {
        const float x = u[i] + old_residual[i];
        const double lhs = static_cast<double>(d[i]) + static_cast<double>(r[i]);
        if (tc.exact) {
          ASSERT_EQ(lhs, static_cast<double>(x)) << tc.spec << " round " << round << " i " << i;
        } else {
          ASSERT_LE(std::fabs(lhs - x), std::ldexp(std::fabs(static_cast<double>(x) - d[i]), -24))
              << tc.spec << " round " << round << " i " << i;
        }
        residual_norm += static_cast<double>(r[i]) * r[i];
      }
      if (std::string(tc.spec).find("topk") != std::string::npos) {
        EXPECT_GT(residual_norm, 0.0);
      }
      old_residual.assign(r.begin(), r.end());
    }
    (*c)->Reset();
    for (float x : (*c)->residual()) ASSERT_EQ(x, 0.0f);
  }
}

TEST(PipelineTest, ZstdShrinksACompressiblePayloadAndRoundTrips) {
  std::vector<TensorSpec> layout = {{"w", {256, 256}}};
  std::vector<float> u(65536, 0.0f);
  for (size_t i = 0; i < u.size(); i += 17) u[i] = 0.25f;  // mostly zeros: compressible
  auto plain = Codec::Create("int8", layout);
  auto packed = Codec::Create("int8|zstd", layout);
  ASSERT_TRUE(plain.ok() && packed.ok());
  auto p1 = (*plain)->Encode(u, Ctx(0));
  auto p2 = (*packed)->Encode(u, Ctx(0));
  ASSERT_TRUE(p1.ok() && p2.ok());
  EXPECT_LT(p2->size() * 10, p1->size());
  std::vector<float> d1(u.size()), d2(u.size());
  ASSERT_TRUE((*plain)->Decode(*p1, Ctx(0), d1).ok());
  ASSERT_TRUE((*packed)->Decode(*p2, Ctx(0), d2).ok());
  EXPECT_EQ(std::memcmp(d1.data(), d2.data(), d1.size() * 4), 0);
  // Trailing garbage after the frame is refused.
  auto bad = *p2;
  bad.push_back(0);
  EXPECT_EQ((*packed)->Decode(bad, Ctx(0), d2).code(), StatusCode::kCorruption);
}

TEST(PipelineTest, DecodeChecksHeaderAndSizes) {
  const auto layout = Layout();
  const size_t n = LayoutSize(layout);
  std::vector<float> u = RandomUpdate(n, 10);
  auto int8 = Codec::Create("int8", layout);
  auto bf16 = Codec::Create("bf16", layout);
  ASSERT_TRUE(int8.ok() && bf16.ok());
  auto p = (*int8)->Encode(u, Ctx(0));
  ASSERT_TRUE(p.ok());
  std::vector<float> d(n);
  EXPECT_EQ((*bf16)->Decode(*p, Ctx(0), d).code(), StatusCode::kCorruption);  // other stages
  auto other_layout = Codec::Create("int8", {{"x", {static_cast<int64_t>(n) + 1}}});
  std::vector<float> d2(n + 1);
  EXPECT_EQ((*other_layout)->Decode(*p, Ctx(0), d2).code(), StatusCode::kCorruption);
  auto bad = *p;
  bad[0] = 2;  // version
  EXPECT_EQ((*int8)->Decode(bad, Ctx(0), d).code(), StatusCode::kCorruption);
  bad = *p;
  bad.push_back(0);
  EXPECT_EQ((*int8)->Decode(bad, Ctx(0), d).code(), StatusCode::kCorruption);
  bad = *p;
  bad.pop_back();
  EXPECT_EQ((*int8)->Decode(bad, Ctx(0), d).code(), StatusCode::kCorruption);
  std::vector<float> wrong(n - 1);
  EXPECT_EQ((*int8)->Decode(*p, Ctx(0), wrong).code(), StatusCode::kInvalidArgument);
  // An ef-wrapped codec reads the same payload (ef is not part of the format).
  auto ef = Codec::Create("ef|int8", layout);
  ASSERT_TRUE((*ef)->Decode(*p, Ctx(0), d).ok());
}

TEST(PipelineTest, EncodeRefusesNonFiniteAndWrongSize) {
  const auto layout = Layout();
  const size_t n = LayoutSize(layout);
  auto c = Codec::Create("ef|int8", layout);
  ASSERT_TRUE(c.ok());
  std::vector<float> u = RandomUpdate(n, 11);
  u[5] = std::nanf("");
  EXPECT_EQ((*c)->Encode(u, Ctx(0)).status().code(), StatusCode::kInvalidArgument);
  u[5] = INFINITY;
  EXPECT_EQ((*c)->Encode(u, Ctx(0)).status().code(), StatusCode::kInvalidArgument);
  u.pop_back();
  EXPECT_EQ((*c)->Encode(u, Ctx(0)).status().code(), StatusCode::kInvalidArgument);
  for (float x : (*c)->residual()) ASSERT_EQ(x, 0.0f);  // a refused update leaves no trace
}

TEST(PipelineTest, RandKIndicesComeFromTheSharedSeed) {
  std::vector<TensorSpec> layout = {{"v", {4000}}};
  std::vector<float> u = RandomUpdate(4000, 12);
  auto c = Codec::Create("randk:ratio=0.01", layout);
  ASSERT_TRUE(c.ok());
  auto p = (*c)->Encode(u, Ctx(3, 1));
  ASSERT_TRUE(p.ok());
  // 40 fp32 values + count + header: no indices travel.
  EXPECT_LE(p->size(), 40 * 4 + 16);
  std::vector<float> d(4000);
  ASSERT_TRUE((*c)->Decode(*p, Ctx(3, 2), d).ok());  // another party, same round
  int hits = 0;
  for (size_t i = 0; i < d.size(); ++i) {
    if (d[i] != 0.0f) {
      EXPECT_EQ(d[i], u[i]);
      ++hits;
    }
  }
  EXPECT_EQ(hits, 40);
}

// Decoding in the transform domain: a payload's coefficients, scattered into zeros and
// transformed back, are Decode's bits, for every pipeline with a linear transform; a corrupt
// payload is refused as Decode refuses it; pipelines without one refuse the calls.
TEST(PipelineTest, CoefficientsTransformedBackAreDecodesBits) {
  const auto layout = Layout();
  const size_t n = LayoutSize(layout);
  for (const std::string spec : {"demo:chunk=64,topk=8,bits=1", "demo:chunk=16,topk=4,bits=8", "demo:chunk=32,topk=3,bits=32",
                                 "dct:chunk=8|int8", "ef|dct:chunk=16|topk:ratio=0.1|bf16|zstd", "dct:chunk=4"}) {
    auto codec = Codec::Create(spec, layout);
    ASSERT_TRUE(codec.ok()) << spec;
    ASSERT_TRUE((*codec)->linear_transform()) << spec;
    ASSERT_EQ((*codec)->num_coefficients(), n) << spec;  // the DCT keeps the size
    for (uint64_t round = 1; round <= 3; ++round) {
      auto payload = (*codec)->Encode(RandomUpdate(n, round), Ctx(round));
      ASSERT_TRUE(payload.ok()) << spec;
      std::vector<float> decoded(n), coefficients(n, 0.0f), back(n);
      ASSERT_TRUE((*codec)->Decode(*payload, Ctx(round), decoded).ok());
      std::vector<uint32_t> idx;
      std::vector<float> val;
      ASSERT_TRUE((*codec)->DecodeCoefficients(*payload, Ctx(round), &idx, &val).ok()) << spec;
      ASSERT_EQ(idx.size(), val.size());
      ASSERT_TRUE(std::is_sorted(idx.begin(), idx.end()) && std::adjacent_find(idx.begin(), idx.end()) == idx.end());
      for (size_t j = 0; j < idx.size(); ++j) coefficients[idx[j]] = val[j];
      ASSERT_TRUE((*codec)->InverseTransform(coefficients, back).ok());
      ASSERT_EQ(std::memcmp(back.data(), decoded.data(), n * sizeof(float)), 0) << spec << " round " << round;
      // Truncated: refused with Decode's message.
      const std::span<const uint8_t> cut(payload->data(), payload->size() - 1);
      const Status d = (*codec)->Decode(cut, Ctx(round), decoded);
      const Status c = (*codec)->DecodeCoefficients(cut, Ctx(round), &idx, &val);
      ASSERT_FALSE(c.ok()) << spec;
      EXPECT_EQ(c.message(), d.message()) << spec;
    }
    std::vector<float> short_coefficients(n - 1), out(n);
    EXPECT_EQ((*codec)->InverseTransform(short_coefficients, out).code(), StatusCode::kInvalidArgument);
  }
  for (const std::string spec : {"int8", "topk:ratio=0.1|int8", "ef|powersgd:rank=2"}) {
    auto codec = Codec::Create(spec, layout);
    ASSERT_TRUE(codec.ok()) << spec;
    EXPECT_FALSE((*codec)->linear_transform()) << spec;  // PowerSGD's P Q^T is not linear
  }
  auto plain = Codec::Create("int8", layout);
  std::vector<uint32_t> idx;
  std::vector<float> val, x(n), out(n);
  auto payload = (*plain)->Encode(RandomUpdate(n, 1), Ctx(1));
  EXPECT_EQ((*plain)->DecodeCoefficients(*payload, Ctx(1), &idx, &val).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ((*plain)->InverseTransform(x, out).code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shoal::codec
