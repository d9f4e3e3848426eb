// int8 quantizer: values in chunks of `chunk`, each chunk with its own scale
// s = absmax / 127, q = round(x / s) in [-127, 127] (round to nearest even), or with
// stochastic=1 q = floor(x / s + u), u uniform in [0, 1) from the encoder's private seed
// (unbiased up to the 24-bit resolution of u). Deterministic error: |x - q s| <= s/2 (plus
// float rounding of x/s, a few ulps of s).
// Wire: nchunks x f32 scale, then n x int8. Decode refuses non-finite, negative or oversized
// (> FLT_MAX/128) scales and q = -128, so every decoded value is finite.
// Encoding is per chunk: the absmax pass (which also detects non-finite values: their
// magnitude bits are the largest) leaves the chunk in L1 for the rounding pass. With error
// feedback the same two passes read update + residual and write the next residual
// x - q s, the decoder's value subtracted, so nothing is decoded. Deterministic rounding and
// the absmax have AVX2 bodies (simd.h) computing the same IEEE operations: x * (127/absmax),
// + - 1.5 * 2^23, clamp, truncate; stochastic rounding and subnormal scales stay scalar.
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "codec/bytes.h"
#include "codec/kernels.h"
#include "codec/simd.h"
#include "codec/stages.h"
#include "core/rng.h"

#if SHOAL_HAVE_AVX2_BODIES
#include <immintrin.h>
#endif

namespace shoal::codec {
namespace {

constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: (v + M) - M rounds |v| < 2^22 to nearest even
constexpr uint32_t kInfBits = 0x7f800000u;   // magnitude bits at or above: not finite

inline int8_t RoundClamp(float v) {
  float r = (v + kRoundMagic) - kRoundMagic;
  r = std::min(std::max(r, -127.0f), 127.0f);
  return static_cast<int8_t>(static_cast<int>(r));
}

// Chunk kernels. x: the chunk's values; with error feedback, AbsMax first writes
// x[i] = fl(u[i] + r[i]) (x being the next-residual buffer) and Round then overwrites x[i]
// with fl(x[i] - q[i] * scale).

// Largest magnitude of a chunk as float bits (the order of non-negative float bit patterns is
// the order of the values): an integer max reduction, which vectorizes without fast-math.
inline uint32_t AbsMaxBaseline(const float* u, const float* r, float* x, size_t n) {
  uint32_t lanes[16] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    float v[16];
    if (r) {
      for (size_t j = 0; j < 16; ++j) v[j] = u[i + j] + r[i + j];
      std::memcpy(x + i, v, sizeof v);
    } else {
      std::memcpy(v, u + i, sizeof v);
    }
    uint32_t b[16];
    std::memcpy(b, v, sizeof b);
    for (size_t j = 0; j < 16; ++j) lanes[j] = std::max(lanes[j], b[j] & 0x7fffffffu);
  }
  uint32_t m = 0;
  for (size_t j = 0; j < 16; ++j) m = std::max(m, lanes[j]);
  for (; i < n; ++i) {
    const float v = r ? (x[i] = u[i] + r[i]) : u[i];
    m = std::max(m, std::bit_cast<uint32_t>(v) & 0x7fffffffu);
  }
  return m;
}

inline void RoundBaseline(const float* x, size_t n, float inv, float scale, int8_t* q, float* residual) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    float v[16];
    for (size_t j = 0; j < 16; ++j) {
      const float t = (x[i + j] * inv + kRoundMagic) - kRoundMagic;
      v[j] = std::min(std::max(t, -127.0f), 127.0f);
    }
    int8_t b[16];
    for (size_t j = 0; j < 16; ++j) b[j] = static_cast<int8_t>(static_cast<int32_t>(v[j]));
    std::memcpy(q + i, b, sizeof b);
    if (residual) {
      for (size_t j = 0; j < 16; ++j) residual[i + j] = x[i + j] - v[j] * scale;
    }
  }
  for (; i < n; ++i) {
    q[i] = RoundClamp(x[i] * inv);
    if (residual) residual[i] = x[i] - static_cast<float>(q[i]) * scale;
  }
}

#if SHOAL_HAVE_AVX2_BODIES
SHOAL_TARGET_AVX2 uint32_t AbsMaxAvx2(const float* u, const float* r, float* x, size_t n) {
  const __m256i mask = _mm256_set1_epi32(0x7fffffff);
  __m256i m0 = _mm256_setzero_si256(), m1 = _mm256_setzero_si256();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256 a = _mm256_loadu_ps(u + i), b = _mm256_loadu_ps(u + i + 8);
    if (r) {
      a = _mm256_add_ps(a, _mm256_loadu_ps(r + i));
      b = _mm256_add_ps(b, _mm256_loadu_ps(r + i + 8));
      _mm256_storeu_ps(x + i, a);
      _mm256_storeu_ps(x + i + 8, b);
    }
    m0 = _mm256_max_epu32(m0, _mm256_and_si256(_mm256_castps_si256(a), mask));
    m1 = _mm256_max_epu32(m1, _mm256_and_si256(_mm256_castps_si256(b), mask));
  }
  uint32_t lanes[8];
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(lanes), _mm256_max_epu32(m0, m1));
  uint32_t m = 0;
  for (uint32_t l : lanes) m = std::max(m, l);
  for (; i < n; ++i) {
    const float v = r ? (x[i] = u[i] + r[i]) : u[i];
    m = std::max(m, std::bit_cast<uint32_t>(v) & 0x7fffffffu);
  }
  return m;
}

// 32 values: four vectors of rounded, clamped integers, packed to bytes in order.
SHOAL_TARGET_AVX2 void RoundAvx2(const float* x, size_t n, float inv, float scale, int8_t* q, float* residual) {
  const __m256 vinv = _mm256_set1_ps(inv), vscale = _mm256_set1_ps(scale);
  const __m256 magic = _mm256_set1_ps(kRoundMagic), lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i t[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * k);
      __m256 r = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(v, vinv), magic), magic);
      r = _mm256_min_ps(_mm256_max_ps(r, lo), hi);
      t[k] = _mm256_cvttps_epi32(r);
      if (residual) _mm256_storeu_ps(residual + i + 8 * k, _mm256_sub_ps(v, _mm256_mul_ps(r, vscale)));
    }
    // packs interleave 128-bit lanes: dwords come out as a0 b0 c0 d0 a1 b1 c1 d1 (4 bytes each).
    const __m256i ab = _mm256_packs_epi32(t[0], t[1]), cd = _mm256_packs_epi32(t[2], t[3]);
    const __m256i bytes = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + i), bytes);
  }
  RoundBaseline(x + i, n - i, inv, scale, q + i, residual ? residual + i : nullptr);
}
#endif

class Int8 final : public Quantizer {
 public:
  Int8(size_t chunk, bool stochastic) : chunk_(chunk), stochastic_(stochastic) {}
  StageId id() const override { return StageId::kInt8; }
  size_t MaxEncodedBytes(size_t n) const override { return 4 * ((n + chunk_ - 1) / chunk_) + n; }

  Status Encode(std::span<const float> values, const RoundContext& ctx, size_t tensor_index,
                ByteWriter* out) const override {
    return Run(values.data(), nullptr, nullptr, values.size(), ctx, tensor_index, out);
  }

  Status EncodeWithFeedback(std::span<const float> update, std::span<const float> residual, const RoundContext& ctx,
                            size_t tensor_index, ByteWriter* out, std::span<float> next_residual) const override {
    return Run(update.data(), residual.empty() ? nullptr : residual.data(), next_residual.data(), update.size(), ctx,
               tensor_index, out);
  }

  Status Decode(ByteReader* in, std::span<float> values) const override {
    const size_t n = values.size();
    const size_t nchunks = (n + chunk_ - 1) / chunk_;
    std::span<const uint8_t> sb, qb;
    SHOAL_RETURN_IF_ERROR(in->ReadBytes(nchunks * 4, &sb, "int8 scales"));
    SHOAL_RETURN_IF_ERROR(in->ReadBytes(n, &qb, "int8 values"));
    const int8_t* q = reinterpret_cast<const int8_t*>(qb.data());
    for (size_t c = 0; c < nchunks; ++c) {
      float scale;
      std::memcpy(&scale, sb.data() + 4 * c, 4);
      if (!(scale >= 0.0f && scale <= FLT_MAX / 128.0f)) {
        return Status::Corruption("int8 payload: chunk " + std::to_string(c) + " has an invalid scale");
      }
      const size_t begin = c * chunk_;
      const size_t len = std::min(chunk_, n - begin);
      float* out = values.data() + begin;
      const int8_t* qc = q + begin;
      int bad = 0;
      for (size_t i = 0; i < len; ++i) {
        bad |= qc[i] == -128;
        out[i] = static_cast<float>(qc[i]) * scale;
      }
      if (bad) return Status::Corruption("int8 payload: value -128 is never produced by the encoder");
    }
    return Status::Ok();
  }

 private:
  // Encodes x = u (r null) or x = fl(u + r) (written to `next`, then replaced by the next
  // residual when `next` is not null).
  Status Run(const float* u, const float* r, float* next, size_t n, const RoundContext& ctx, size_t tensor_index,
             ByteWriter* out) const {
    if (r && !next) return Status::Internal("int8: a residual without a buffer for the next one");
    const size_t nchunks = (n + chunk_ - 1) / chunk_;
    uint8_t* base = out->Extend(nchunks * 4 + n);
    uint8_t* scales = base;
    int8_t* q = reinterpret_cast<int8_t*>(base + nchunks * 4);
    Rng rng(ctx.private_seed ^ (ctx.round * 0x9e3779b97f4a7c15ULL) ^ 0x1a78000000000000ULL, tensor_index);
    for (size_t c = 0; c < nchunks; ++c) {
      const size_t begin = c * chunk_;
      const size_t len = std::min(chunk_, n - begin);
      const float* uc = u + begin;
      float* nc = next ? next + begin : nullptr;
      const uint32_t bits = SHOAL_SIMD_CALL(AbsMax, uc, r ? r + begin : nullptr, nc, len);
      const float* x = r ? nc : uc;
      if (bits >= kInfBits) return NotFinite(begin + kernels::FirstNonFinite({x, len}));
      int8_t* qc = q + begin;
      const float amax = std::bit_cast<float>(bits);
      const float scale = amax / 127.0f;
      std::memcpy(scales + 4 * c, &scale, 4);
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      if (!(inv <= FLT_MAX) || (scale == 0.0f && amax > 0.0f)) {
        // Subnormal absmax: 127/amax overflows. Rare, so a plain division loop.
        for (size_t i = 0; i < len; ++i) qc[i] = scale > 0.0f ? RoundClamp(x[i] / scale) : 0;
      } else if (stochastic_) {
        for (size_t i = 0; i < len; ++i) {
          const float v = x[i] * inv;
          const float fl = std::floor(v);
          float rounded = fl + (rng.Uniform() < v - fl ? 1.0f : 0.0f);
          rounded = std::min(std::max(rounded, -127.0f), 127.0f);
          qc[i] = static_cast<int8_t>(static_cast<int>(rounded));
        }
      } else {
        SHOAL_SIMD_CALL(Round, x, len, inv, scale, qc, nc);
        continue;
      }
      if (nc) {
        for (size_t i = 0; i < len; ++i) nc[i] = x[i] - static_cast<float>(qc[i]) * scale;
      }
    }
    return Status::Ok();
  }

  size_t chunk_;
  bool stochastic_;
};

constexpr ParamDecl kParams[] = {
    IntParam("chunk", 256, 1, int64_t{1} << 24, "values sharing one scale"),
    BoolParam("stochastic", false, "1: stochastic rounding from the encoder's private seed"),
};

StatusOr<std::unique_ptr<Quantizer>> Build(const StageParams& p, const std::vector<TensorSpec>&) {
  return std::unique_ptr<Quantizer>(new Int8(static_cast<size_t>(p.Int("chunk")), p.Int("stochastic") != 0));
}

}  // namespace

constinit const StageDecl kInt8Stage = {
    .name = "int8", .id = StageId::kInt8, .slot = Slot::kQuantize,
    .summary = "8-bit integers with a per-chunk absmax scale",
    .params = kParams, .factory = &Build};

}  // namespace shoal::codec
