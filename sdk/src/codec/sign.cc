// Scaled sign quantizer (1-bit, signSGD with a magnitude): per tensor the scale
// m = mean |x_i| (f32), then one bit per value, LSB first, 1 = negative (the IEEE sign bit,
// so -0 counts as negative). Decodes to +-m. Wire: f32 scale, ceil(n/8) bytes.
// Decode refuses a non-finite or negative scale and non-zero padding bits.
// Encoding is one pass: 64 values -> 8 bytes of signs, |x| summed in 16 float lanes flushed
// into a double every 4096 values (bounded float error, a fixed order), non-finite values
// detected on their exponent bits. With error feedback that pass reads update + residual and
// stores x; a second pass, once m is known, turns x into the next residual x - (+-m). The
// AVX2 body (simd.h) keeps the 16 lanes as two vectors of 8 and adds in the same order.
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "codec/bytes.h"
#include "codec/kernels.h"
#include "codec/simd.h"
#include "codec/stages.h"

#if SHOAL_HAVE_AVX2_BODIES
#include <immintrin.h>
#endif

namespace shoal::codec {
namespace {

constexpr uint32_t kExponent = 0x7f800000u;
constexpr size_t kFlushBlocks = 64;  // 64-value blocks between flushes of the float lanes

// The signs of x (x = u, or x = fl(u + r) stored into x_out) into bits[0, n/64*8), the sum
// of |x| over those values into *total; returns false when one of them is not finite.
bool SignsBaseline(const float* u, const float* r, float* x_out, size_t n, uint8_t* bits, double* total) {
  float lanes[16] = {};
  uint32_t bad = 0;
  size_t since_flush = 0;
  for (size_t i = 0; i + 64 <= n; i += 64) {
    uint32_t w[64];
    if (r) {
      float v[64];
      for (size_t j = 0; j < 64; ++j) v[j] = u[i + j] + r[i + j];
      std::memcpy(x_out + i, v, sizeof v);
      std::memcpy(w, v, sizeof w);
    } else {
      std::memcpy(w, u + i, sizeof w);
    }
    uint8_t b[8];
    for (size_t k = 0; k < 8; ++k) {
      uint32_t acc = 0;
      for (size_t j = 0; j < 8; ++j) acc |= (w[8 * k + j] >> 31) << j;
      b[k] = static_cast<uint8_t>(acc);
    }
    std::memcpy(bits + i / 8, b, 8);
    for (size_t j = 0; j < 64; ++j) bad |= static_cast<uint32_t>((w[j] & kExponent) == kExponent);
    for (size_t k = 0; k < 4; ++k) {
      for (size_t j = 0; j < 16; ++j) lanes[j] += std::bit_cast<float>(w[16 * k + j] & 0x7fffffffu);
    }
    if (++since_flush == kFlushBlocks) {
      for (float& l : lanes) { *total += l; l = 0; }
      since_flush = 0;
    }
  }
  for (float l : lanes) *total += l;
  return bad == 0;
}

// x[i] = fl(x[i] - (+-m)), the sign being x's own (what the decoder reconstructs).
void SubtractSignedBaseline(float* x, size_t n, uint32_t m_bits) {
  for (size_t i = 0; i < n; ++i) {
    const uint32_t d = m_bits | (std::bit_cast<uint32_t>(x[i]) & 0x80000000u);
    x[i] = x[i] - std::bit_cast<float>(d);
  }
}

#if SHOAL_HAVE_AVX2_BODIES
SHOAL_TARGET_AVX2 bool SignsAvx2(const float* u, const float* r, float* x_out, size_t n, uint8_t* bits, double* total) {
  const __m256 abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  const __m256i exp = _mm256_set1_epi32(static_cast<int>(kExponent));
  __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();  // lanes 0-7, 8-15
  __m256i bad = _mm256_setzero_si256();
  size_t since_flush = 0;
  for (size_t i = 0; i + 64 <= n; i += 64) {
    for (size_t k = 0; k < 8; ++k) {
      __m256 v = _mm256_loadu_ps(u + i + 8 * k);
      if (r) {
        v = _mm256_add_ps(v, _mm256_loadu_ps(r + i + 8 * k));
        _mm256_storeu_ps(x_out + i + 8 * k, v);
      }
      bits[i / 8 + k] = static_cast<uint8_t>(_mm256_movemask_ps(v));
      bad = _mm256_or_si256(bad, _mm256_cmpeq_epi32(_mm256_and_si256(_mm256_castps_si256(v), exp), exp));
      if (k % 2 == 0) {
        lo = _mm256_add_ps(lo, _mm256_and_ps(v, abs_mask));
      } else {
        hi = _mm256_add_ps(hi, _mm256_and_ps(v, abs_mask));
      }
    }
    if (++since_flush == kFlushBlocks) {
      float lanes[16];
      _mm256_storeu_ps(lanes, lo);
      _mm256_storeu_ps(lanes + 8, hi);
      for (float l : lanes) *total += l;
      lo = hi = _mm256_setzero_ps();
      since_flush = 0;
    }
  }
  float lanes[16];
  _mm256_storeu_ps(lanes, lo);
  _mm256_storeu_ps(lanes + 8, hi);
  for (float l : lanes) *total += l;
  return _mm256_testz_si256(bad, bad);
}

SHOAL_TARGET_AVX2 void SubtractSignedAvx2(float* x, size_t n, uint32_t m_bits) {
  const __m256 m = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(m_bits)));
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(static_cast<int>(0x80000000u)));
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    _mm256_storeu_ps(x + i, _mm256_sub_ps(v, _mm256_or_ps(m, _mm256_and_ps(v, sign))));
  }
  SubtractSignedBaseline(x + i, n - i, m_bits);
}
#endif

// Decode: out[i] = +-m, the sign from bit i (LSB first).
[[gnu::always_inline]] inline void ExpandBody(const uint8_t* bits, size_t n, uint32_t m_bits, float* out) {
  for (size_t i = 0; i < n; ++i) {  // one plain loop: the form the vectorizer takes
    const uint32_t f = m_bits | (((static_cast<uint32_t>(bits[i / 8]) >> (i % 8)) & 1u) << 31);
    std::memcpy(out + i, &f, 4);
  }
}
SHOAL_SIMD_CLONES(void, Expand, (const uint8_t* bits, size_t n, uint32_t m_bits, float* out), (bits, n, m_bits, out))


class Sign final : public Quantizer {
 public:
  StageId id() const override { return StageId::kSign; }
  size_t MaxEncodedBytes(size_t n) const override { return 4 + (n + 7) / 8; }

  Status Encode(std::span<const float> values, const RoundContext&, size_t, ByteWriter* out) const override {
    return Run(values.data(), nullptr, nullptr, values.size(), out);
  }

  Status EncodeWithFeedback(std::span<const float> update, std::span<const float> residual, const RoundContext&, size_t,
                            ByteWriter* out, std::span<float> next_residual) const override {
    return Run(update.data(), residual.empty() ? nullptr : residual.data(), next_residual.data(), update.size(), out);
  }

  Status Decode(ByteReader* in, std::span<float> values) const override {
    float scale;
    SHOAL_RETURN_IF_ERROR(in->ReadF32(&scale, "sign scale"));
    if (!(scale >= 0.0f && scale <= FLT_MAX)) return Status::Corruption("sign payload: invalid scale");
    const size_t n = values.size();
    std::span<const uint8_t> bits;
    SHOAL_RETURN_IF_ERROR(in->ReadBytes((n + 7) / 8, &bits, "sign bits"));
    if (n % 8 != 0 && (bits[n / 8] >> (n % 8)) != 0) {
      return Status::Corruption("sign payload: non-zero padding bits");
    }
    SHOAL_SIMD_CALL(Expand, bits.data(), n, std::bit_cast<uint32_t>(scale), values.data());
    return Status::Ok();
  }

 private:
  // Encodes x = u (r null) or x = fl(u + r); with `next`, x - (+-m) is written there.
  static Status Run(const float* u, const float* r, float* next, size_t n, ByteWriter* out) {
    const size_t scale_pos = out->size();
    out->PutF32(0.0f);
    uint8_t* bits = out->Extend((n + 7) / 8);
    float* x_out = r ? next : nullptr;
    double total = 0;
    bool finite = SHOAL_SIMD_CALL(Signs, u, r, x_out, n, bits, &total);
    const float* x = r ? next : u;
    size_t i = n - n % 64;
    for (; i < n; ++i) {
      const float v = r ? (next[i] = u[i] + r[i]) : u[i];
      finite = finite && std::isfinite(v);
      const uint32_t w = std::bit_cast<uint32_t>(v);
      bits[i / 8] = static_cast<uint8_t>(bits[i / 8] | ((w >> 31) << (i % 8)));
      total += std::fabs(v);
    }
    if (!finite) return NotFinite(kernels::FirstNonFinite({x, n}));  // x is whole, in next with r
    const float scale = n ? static_cast<float>(std::min(total / static_cast<double>(n), static_cast<double>(FLT_MAX))) : 0.0f;
    std::memcpy(out->data() + scale_pos, &scale, 4);
    if (next) {
      if (!r) std::copy(x, x + n, next);
      SHOAL_SIMD_CALL(SubtractSigned, next, n, std::bit_cast<uint32_t>(scale));
    }
    return Status::Ok();
  }
};

}  // namespace

constinit const StageDecl kSignStage = {
    .name = "sign", .id = StageId::kSign, .slot = Slot::kQuantize,
    .summary = "1 bit per value (the sign) and a per-tensor scale, mean |x|",
    .params = {}, .factory = &BuildPlain<Quantizer, Sign>};

}  // namespace shoal::codec
