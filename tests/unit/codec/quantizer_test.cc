// Quantizer stages on their own: exact known bit patterns (fp16, bf16), round-trip error
// bounds, unbiasedness of the stochastic ones over many private seeds, wire sizes, and the
// decoder's refusal of invalid scales and encodings. Also the byte/bit helpers they use.
#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <vector>

#include "codec/bytes.h"
#include "codec/stages.h"
#include "core/rng.h"

namespace shoal::codec {
namespace {

std::unique_ptr<Quantizer> Make(const std::string& name, std::vector<std::pair<std::string, std::string>> params = {}) {
  StageSpec spec{name, std::move(params)};
  StatusOr<std::unique_ptr<Quantizer>> q = Status::Internal("unset");
  if (name == "fp16") q = MakeFp16(spec);
  if (name == "bf16") q = MakeBf16(spec);
  if (name == "int8") q = MakeInt8(spec);
  if (name == "qsgd") q = MakeQsgd(spec);
  if (name == "sign") q = MakeSign(spec);
  EXPECT_TRUE(q.ok()) << q.status().ToString();
  return std::move(q).value();
}

std::vector<uint8_t> EncodeBytes(const Quantizer& q, std::span<const float> v, uint64_t seed = 1, size_t tensor = 0) {
  ByteWriter w;
  RoundContext ctx;
  ctx.private_seed = seed;
  EXPECT_TRUE(q.Encode(v, ctx, tensor, &w).ok());
  EXPECT_LE(w.size(), q.MaxEncodedBytes(v.size()));
  return w.Release();
}

std::vector<float> DecodeBytes(const Quantizer& q, const std::vector<uint8_t>& bytes, size_t n) {
  std::vector<float> out(n, -1.0f);
  ByteReader r(bytes);
  Status s = q.Decode(&r, out);
  EXPECT_TRUE(s.ok()) << s.ToString();
  EXPECT_TRUE(r.empty());
  return out;
}

uint16_t Half(const Quantizer& q, float x) {
  auto b = EncodeBytes(q, std::span<const float>(&x, 1));
  uint16_t h;
  std::memcpy(&h, b.data(), 2);
  return h;
}

std::vector<float> RandomValues(size_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.Normal() * scale);
  return v;
}

TEST(Fp16Test, KnownValues) {
  auto q = Make("fp16");
  EXPECT_EQ(Half(*q, 1.0f), 0x3c00);
  EXPECT_EQ(Half(*q, -2.0f), 0xc000);
  EXPECT_EQ(Half(*q, 0.0f), 0x0000);
  EXPECT_EQ(Half(*q, -0.0f), 0x8000);
  EXPECT_EQ(Half(*q, 65504.0f), 0x7bff);
  EXPECT_EQ(Half(*q, 0.1f), 0x2e66);
  EXPECT_EQ(Half(*q, 0.333333343f), 0x3555);
  EXPECT_EQ(Half(*q, 1.0f + 0x1p-11f), 0x3c00);        // halfway: ties to even (down)
  EXPECT_EQ(Half(*q, 1.0f + 3 * 0x1p-11f), 0x3c02);    // halfway: ties to even (up)
  EXPECT_EQ(Half(*q, 1.0f + 0x1p-11f + 0x1p-20f), 0x3c01);
  EXPECT_EQ(Half(*q, 0x1p-24f), 0x0001);               // smallest subnormal
  EXPECT_EQ(Half(*q, 0x1p-25f), 0x0000);               // half of it: ties to even (0)
  EXPECT_EQ(Half(*q, 3 * 0x1p-25f), 0x0002);           // 1.5 ulp: ties to even (2)
  EXPECT_EQ(Half(*q, 0x1p-14f), 0x0400);               // smallest normal
  EXPECT_EQ(Half(*q, 0x1p-14f - 0x1p-25f), 0x0400);    // rounds up into the normals
  EXPECT_EQ(Half(*q, 65519.0f), 0x7bff);
  EXPECT_EQ(Half(*q, 65520.0f), 0x7bff);               // would round to Inf: saturates
  EXPECT_EQ(Half(*q, -1e9f), 0xfbff);
  EXPECT_EQ(Half(*q, FLT_MAX), 0x7bff);
}

TEST(Fp16Test, DecodesKnownBitsAndRoundTrips) {
  auto q = Make("fp16");
  std::vector<uint8_t> b = {0x00, 0x3c, 0x01, 0x00, 0xff, 0x7b, 0x00, 0x80, 0x66, 0x2e};
  auto v = DecodeBytes(*q, b, 5);
  EXPECT_EQ(v[0], 1.0f);
  EXPECT_EQ(v[1], 0x1p-24f);
  EXPECT_EQ(v[2], 65504.0f);
  EXPECT_TRUE(std::signbit(v[3]) && v[3] == 0.0f);
  EXPECT_EQ(v[4], 0.0999755859375f);
  // Every finite half round-trips exactly.
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00) continue;
    std::vector<uint8_t> one = {static_cast<uint8_t>(h), static_cast<uint8_t>(h >> 8)};
    float f = DecodeBytes(*q, one, 1)[0];
    ASSERT_EQ(Half(*q, f), h) << h;
  }
}

TEST(Fp16Test, RelativeErrorBound) {
  auto q = Make("fp16");
  Rng rng(7);
  std::vector<float> v(20000);
  for (auto& x : v) {
    // Log-uniform magnitudes across the normal range of fp16.
    x = static_cast<float>(std::ldexp(1.0 + rng.UniformDouble(), static_cast<int>(rng.Below(30)) - 14));
    if (rng.Below(2)) x = -x;
  }
  auto d = DecodeBytes(*q, EncodeBytes(*q, v), v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_LE(std::fabs(d[i] - v[i]), std::ldexp(std::fabs(v[i]), -11)) << v[i];
  }
}

TEST(Fp16Test, RefusesInfAndNan) {
  auto q = Make("fp16");
  for (uint16_t h : {0x7c00, 0xfc00, 0x7e00, 0x7c01}) {
    std::vector<uint8_t> b = {static_cast<uint8_t>(h), static_cast<uint8_t>(h >> 8)};
    std::vector<float> out(1);
    ByteReader r(b);
    EXPECT_EQ(q->Decode(&r, out).code(), StatusCode::kCorruption);
  }
  std::vector<uint8_t> short_b = {0x00};
  std::vector<float> out(1);
  ByteReader r(short_b);
  EXPECT_EQ(q->Decode(&r, out).code(), StatusCode::kCorruption);
}

TEST(Bf16Test, KnownValues) {
  auto q = Make("bf16");
  EXPECT_EQ(Half(*q, 1.0f), 0x3f80);
  EXPECT_EQ(Half(*q, -2.0f), 0xc000);
  EXPECT_EQ(Half(*q, 3.14159274f), 0x4049);
  EXPECT_EQ(Half(*q, std::bit_cast<float>(0x3f808000u)), 0x3f80);  // tie, even down
  EXPECT_EQ(Half(*q, std::bit_cast<float>(0x3f818000u)), 0x3f82);  // tie, even up
  EXPECT_EQ(Half(*q, std::bit_cast<float>(0x3f808001u)), 0x3f81);
  EXPECT_EQ(Half(*q, std::bit_cast<float>(0x00000001u)), 0x0000);  // tiny subnormal
  EXPECT_EQ(Half(*q, FLT_MAX), 0x7f7f);                             // saturates, no Inf
  EXPECT_EQ(Half(*q, -FLT_MAX), 0xff7f);
}

TEST(Bf16Test, RelativeErrorBound) {
  auto q = Make("bf16");
  Rng rng(8);
  std::vector<float> v(20011);
  for (auto& x : v) {
    x = static_cast<float>(std::ldexp(1.0 + rng.UniformDouble(), static_cast<int>(rng.Below(200)) - 100));
    if (rng.Below(2)) x = -x;
  }
  auto d = DecodeBytes(*q, EncodeBytes(*q, v), v.size());
  for (size_t i = 0; i < v.size(); ++i) {
    ASSERT_LE(std::fabs(d[i] - v[i]), std::ldexp(std::fabs(v[i]), -8)) << v[i];
    ASSERT_EQ(std::bit_cast<uint32_t>(d[i]) & 0xffffu, 0u);
  }
}

TEST(Bf16Test, RefusesInfAndNan) {
  auto q = Make("bf16");
  std::vector<float> vals = RandomValues(40, 3);
  auto b = EncodeBytes(*q, vals);
  b[2 * 37] = 0x80;
  b[2 * 37 + 1] = 0x7f;  // +Inf in the tail
  std::vector<float> out(40);
  ByteReader r(b);
  EXPECT_EQ(q->Decode(&r, out).code(), StatusCode::kCorruption);
}

TEST(Int8Test, DeterministicErrorWithinHalfScale) {
  for (int64_t chunk : {1, 7, 64, 256, 1000}) {
    auto q = Make("int8", {{"chunk", std::to_string(chunk)}});
    std::vector<float> v = RandomValues(3001, 11, 5.0);
    for (size_t i = 100; i < 400; ++i) v[i] = 0.0f;  // all-zero chunks decode to zero
    v[2000] = 1e30f;
    auto bytes = EncodeBytes(*q, v);
    const size_t nchunks = (v.size() + chunk - 1) / chunk;
    EXPECT_EQ(bytes.size(), nchunks * 4 + v.size());
    auto d = DecodeBytes(*q, bytes, v.size());
    for (size_t c = 0; c < nchunks; ++c) {
      float amax = 0;
      const size_t end = std::min(v.size(), (c + 1) * chunk);
      for (size_t i = c * chunk; i < end; ++i) amax = std::max(amax, std::fabs(v[i]));
      const double scale = amax / 127.0;
      for (size_t i = c * chunk; i < end; ++i) {
        ASSERT_LE(std::fabs(static_cast<double>(d[i]) - v[i]), scale / 2 * (1 + 1e-5)) << "chunk " << chunk << " i " << i;
      }
    }
  }
}

TEST(Int8Test, StochasticIsUnbiased) {
  auto q = Make("int8", {{"chunk", "32"}, {"stochastic", "1"}});
  std::vector<float> v = RandomValues(64, 12);
  const int kSeeds = 4000;
  std::vector<double> mean(v.size(), 0.0);
  bool any_differs = false;
  for (int s = 0; s < kSeeds; ++s) {
    auto d = DecodeBytes(*q, EncodeBytes(*q, v, 1000 + s), v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      mean[i] += d[i] / kSeeds;
      // Stochastic rounding stays within one step.
      ASSERT_LE(std::fabs(d[i] - v[i]), 2.0f / 127 * 4);
    }
    any_differs = any_differs || EncodeBytes(*q, v, 1000 + s) != EncodeBytes(*q, v, 1001 + s);
  }
  EXPECT_TRUE(any_differs);
  for (size_t c = 0; c < 2; ++c) {
    float amax = 0;
    for (size_t i = 32 * c; i < 32 * c + 32; ++i) amax = std::max(amax, std::fabs(v[i]));
    const double step = amax / 127.0;
    // Per value the rounding error has variance <= step^2/4: allow 5 standard deviations.
    for (size_t i = 32 * c; i < 32 * c + 32; ++i) {
      EXPECT_NEAR(mean[i], v[i], 5 * step / (2 * std::sqrt(kSeeds)) + 1e-6) << i;
    }
  }
}

TEST(Int8Test, RefusesBadScalesAndMinus128) {
  auto q = Make("int8", {{"chunk", "4"}});
  std::vector<float> v = {1, -2, 3, 4, 5, 6};
  auto good = EncodeBytes(*q, v);
  for (float bad : {std::nanf(""), INFINITY, -1.0f, FLT_MAX}) {
    auto b = good;
    std::memcpy(b.data() + 4, &bad, 4);
    std::vector<float> out(v.size());
    ByteReader r(b);
    EXPECT_EQ(q->Decode(&r, out).code(), StatusCode::kCorruption) << bad;
  }
  auto b = good;
  b[8] = 0x80;
  std::vector<float> out(v.size());
  ByteReader r(b);
  EXPECT_EQ(q->Decode(&r, out).code(), StatusCode::kCorruption);
}

TEST(QsgdTest, IsUnbiasedAndBounded) {
  for (int levels : {1, 4, 16}) {
    auto q = Make("qsgd", {{"levels", std::to_string(levels)}});
    std::vector<float> v = RandomValues(50, 21);
    double norm = 0;
    for (float x : v) norm += static_cast<double>(x) * x;
    norm = std::sqrt(norm);
    const double step = norm / levels;
    const int kSeeds = 4000;
    std::vector<double> mean(v.size(), 0.0);
    for (int s = 0; s < kSeeds; ++s) {
      auto bytes = EncodeBytes(*q, v, 5000 + s, 3);
      const int bits = std::bit_width(static_cast<unsigned>(levels)) + 1;
      ASSERT_EQ(bytes.size(), 4 + (v.size() * bits + 7) / 8);
      auto d = DecodeBytes(*q, bytes, v.size());
      for (size_t i = 0; i < v.size(); ++i) {
        ASSERT_LE(std::fabs(d[i] - v[i]), step * (1 + 1e-6));
        ASSERT_TRUE(d[i] == 0.0f || std::signbit(d[i]) == std::signbit(v[i]));
        mean[i] += d[i] / kSeeds;
      }
    }
    for (size_t i = 0; i < v.size(); ++i) {
      EXPECT_NEAR(mean[i], v[i], 5 * step / (2 * std::sqrt(kSeeds)) + 1e-6) << "levels " << levels << " i " << i;
    }
  }
}

TEST(QsgdTest, RefusesBadNormAndLevel) {
  auto q = Make("qsgd", {{"levels", "4"}});  // 4 bits per code, level <= 4
  std::vector<float> v = {1, -1, 0.5f, 0.25f};
  auto good = EncodeBytes(*q, v);
  {
    auto b = good;
    float nan = std::nanf("");
    std::memcpy(b.data(), &nan, 4);
    std::vector<float> out(4);
    ByteReader r(b);
    EXPECT_EQ(q->Decode(&r, out).code(), StatusCode::kCorruption);
  }
  {
    auto b = good;
    b[4] = 0x0e;  // code 14: level 7 > 4
    std::vector<float> out(4);
    ByteReader r(b);
    EXPECT_EQ(q->Decode(&r, out).code(), StatusCode::kCorruption);
  }
}

TEST(SignTest, ReproducesSignTimesMeanAbs) {
  auto q = Make("sign");
  for (size_t n : {1u, 7u, 64u, 1000u, 70001u}) {
    std::vector<float> v = RandomValues(n, 31 + n, 3.0);
    v[0] = -0.0f;
    double sum = 0;
    for (float x : v) sum += std::fabs(x);
    const float scale = static_cast<float>(sum / n);
    auto bytes = EncodeBytes(*q, v);
    ASSERT_EQ(bytes.size(), 4 + (n + 7) / 8);
    auto d = DecodeBytes(*q, bytes, n);
    float got_scale = std::fabs(d[0]);
    EXPECT_NEAR(got_scale, scale, scale * 1e-5);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::fabs(d[i]), got_scale);
      ASSERT_EQ(std::signbit(d[i]), std::signbit(v[i])) << i;
    }
  }
}

TEST(SignTest, RefusesPaddingAndBadScale) {
  auto q = Make("sign");
  std::vector<float> v = {1, -1, 2};
  auto good = EncodeBytes(*q, v);
  auto b = good;
  b[4] |= 0x80;  // padding bit
  std::vector<float> out(3);
  ByteReader r(b);
  EXPECT_EQ(q->Decode(&r, out).code(), StatusCode::kCorruption);
  b = good;
  float inf = INFINITY;
  std::memcpy(b.data(), &inf, 4);
  ByteReader r2(b);
  EXPECT_EQ(q->Decode(&r2, out).code(), StatusCode::kCorruption);
}

TEST(QuantizerTest, FactoriesRefuseUnknownParameters) {
  EXPECT_FALSE(MakeFp16({"fp16", {{"x", "1"}}}).ok());
  EXPECT_FALSE(MakeSign({"sign", {{"x", "1"}}}).ok());
  EXPECT_FALSE(MakeInt8({"int8", {{"bits", "4"}}}).ok());
  EXPECT_FALSE(MakeInt8({"int8", {{"chunk", "0"}}}).ok());
  EXPECT_FALSE(MakeQsgd({"qsgd", {{"levels", "0"}}}).ok());
  auto st = MakeQsgd({"qsgd", {{"levels", "x"}}});
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("qsgd: bad value 'x' for 'levels'"), std::string::npos) << st.status().message();
}

TEST(BytesTest, VarintsAndBounds) {
  ByteWriter w;
  const uint64_t vals[] = {0, 1, 127, 128, 300, 1ull << 35, ~0ull};
  for (uint64_t v : vals) w.PutVarint(v);
  w.PutU32(0xdeadbeef);
  auto b = w.Release();
  ByteReader r(b);
  for (uint64_t v : vals) {
    uint64_t got;
    ASSERT_TRUE(r.ReadVarint(&got).ok());
    EXPECT_EQ(got, v);
  }
  uint32_t u;
  ASSERT_TRUE(r.ReadU32(&u).ok());
  EXPECT_EQ(u, 0xdeadbeefu);
  EXPECT_EQ(r.ReadU8(nullptr).code(), StatusCode::kCorruption);  // nothing left: no write
  std::vector<uint8_t> overlong = {0x80, 0x00};
  ByteReader r2(overlong);
  uint64_t x;
  EXPECT_FALSE(r2.ReadVarint(&x).ok());
  std::vector<uint8_t> eleven(11, 0xff);
  ByteReader r3(eleven);
  EXPECT_FALSE(r3.ReadVarint(&x).ok());
  std::vector<uint8_t> truncated = {0x80};
  ByteReader r4(truncated);
  EXPECT_FALSE(r4.ReadVarint(&x).ok());
}

TEST(BytesTest, BitPackingRoundTrips) {
  Rng rng(5);
  for (int bits = 1; bits <= 32; ++bits) {
    for (size_t n : {0u, 1u, 9u, 100u}) {
      std::vector<uint32_t> v(n);
      for (auto& x : v) x = static_cast<uint32_t>(rng.NextU64()) & (bits == 32 ? ~0u : ((1u << bits) - 1));
      std::vector<uint8_t> packed(PackedBytes(n, bits));
      PackBits(v, bits, packed.data());
      std::vector<uint32_t> back(n);
      ASSERT_TRUE(UnpackBits(packed, bits, back).ok());
      ASSERT_EQ(back, v);
      if ((n * bits) % 8 != 0) {
        packed.back() |= 0x80;
        EXPECT_FALSE(UnpackBits(packed, bits, back).ok());
      }
    }
  }
}

}  // namespace
}  // namespace shoal::codec
