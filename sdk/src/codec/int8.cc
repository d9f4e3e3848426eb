// int8 quantizer: values in chunks of `chunk`, each chunk with its own scale
// s = absmax / 127, q = round(x / s) in [-127, 127] (round to nearest even), or with
// stochastic=1 q = floor(x / s + u), u uniform in [0, 1) from the encoder's private seed
// (unbiased up to the 24-bit resolution of u). Deterministic error: |x - q s| <= s/2 (plus
// float rounding of x/s, a few ulps of s).
// Wire: nchunks x f32 scale, then n x int8. Decode refuses non-finite, negative or oversized
// (> FLT_MAX/128) scales and q = -128, so every decoded value is finite.
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>

#include "codec/bytes.h"
#include "codec/stages.h"
#include "core/rng.h"

namespace shoal::codec {
namespace {

constexpr float kRoundMagic = 12582912.0f;  // 1.5 * 2^23: (v + M) - M rounds |v| < 2^22 to nearest even

// Largest |x| of a chunk as float bits (the order of non-negative float bit patterns is the
// order of the values, and an integer max reduction vectorizes without fast-math).
inline uint32_t AbsMaxBits(const float* x, size_t n) {
  uint32_t lanes[16] = {};
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    uint32_t u[16];
    std::memcpy(u, x + i, sizeof u);
    for (size_t j = 0; j < 16; ++j) lanes[j] = std::max(lanes[j], u[j] & 0x7fffffffu);
  }
  uint32_t m = 0;
  for (size_t j = 0; j < 16; ++j) m = std::max(m, lanes[j]);
  for (; i < n; ++i) m = std::max(m, std::bit_cast<uint32_t>(x[i]) & 0x7fffffffu);
  return std::min(m, 0x7f7fffffu);  // Inf/NaN inputs are out of contract: clamp to FLT_MAX
}

inline int8_t RoundClamp(float v) {
  float r = (v + kRoundMagic) - kRoundMagic;
  r = std::min(std::max(r, -127.0f), 127.0f);
  return static_cast<int8_t>(static_cast<int>(r));
}

class Int8 final : public Quantizer {
 public:
  Int8(size_t chunk, bool stochastic) : chunk_(chunk), stochastic_(stochastic) {}
  StageId id() const override { return StageId::kInt8; }
  size_t MaxEncodedBytes(size_t n) const override { return 4 * ((n + chunk_ - 1) / chunk_) + n; }

  void Encode(std::span<const float> values, const RoundContext& ctx, size_t tensor_index,
              ByteWriter* out) const override {
    const size_t n = values.size();
    const size_t nchunks = (n + chunk_ - 1) / chunk_;
    uint8_t* base = out->Extend(nchunks * 4 + n);
    uint8_t* scales = base;
    int8_t* q = reinterpret_cast<int8_t*>(base + nchunks * 4);
    Rng rng(ctx.private_seed ^ (ctx.round * 0x9e3779b97f4a7c15ULL) ^ 0x1a78000000000000ULL, tensor_index);
    for (size_t c = 0; c < nchunks; ++c) {
      const size_t begin = c * chunk_;
      const size_t len = std::min(chunk_, n - begin);
      const float* x = values.data() + begin;
      int8_t* qc = q + begin;
      const float amax = std::bit_cast<float>(AbsMaxBits(x, len));
      const float scale = amax / 127.0f;
      std::memcpy(scales + 4 * c, &scale, 4);
      const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
      if (!(inv <= FLT_MAX) || (scale == 0.0f && amax > 0.0f)) {
        // Subnormal absmax: 127/amax overflows. Rare, so a plain division loop.
        for (size_t i = 0; i < len; ++i) {
          qc[i] = scale > 0.0f ? RoundClamp(x[i] / scale) : 0;
        }
        continue;
      }
      if (stochastic_) {
        for (size_t i = 0; i < len; ++i) {
          const float v = x[i] * inv;
          const float fl = std::floor(v);
          float r = fl + (rng.Uniform() < v - fl ? 1.0f : 0.0f);
          r = std::min(std::max(r, -127.0f), 127.0f);
          qc[i] = static_cast<int8_t>(static_cast<int>(r));
        }
        continue;
      }
      size_t i = 0;
      for (; i + 16 <= len; i += 16) {
        float r[16];
        for (size_t j = 0; j < 16; ++j) {
          float v = (x[i + j] * inv + kRoundMagic) - kRoundMagic;
          r[j] = std::min(std::max(v, -127.0f), 127.0f);
        }
        int32_t t[16];
        for (size_t j = 0; j < 16; ++j) t[j] = static_cast<int32_t>(r[j]);
        int8_t b[16];
        for (size_t j = 0; j < 16; ++j) b[j] = static_cast<int8_t>(t[j]);
        std::memcpy(qc + i, b, sizeof b);
      }
      for (; i < len; ++i) qc[i] = RoundClamp(x[i] * inv);
    }
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
