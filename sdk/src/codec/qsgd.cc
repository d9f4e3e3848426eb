// QSGD quantizer (Alistarh et al.) with s levels: per tensor the L2 norm ||x|| (f32), then per
// value a sign and a level l in [0, s] with E[l] = s |x_i| / ||x||: l = floor(r) + (u < r -
// floor(r)), r = s |x_i| / ||x||, u uniform from the encoder's private seed. Decoded value
// sign * l * (||x|| / s) is unbiased (up to float rounding and the 24-bit resolution of u).
// Wire: f32 norm, then n codes (level << 1 | sign) bit-packed in ceil(log2(s+1)) + 1 bits.
// Decode refuses non-finite, negative or oversized (> FLT_MAX/2) norms and levels > s.
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "codec/bytes.h"
#include "codec/kernels.h"
#include "codec/stages.h"
#include "core/rng.h"

namespace shoal::codec {
namespace {

int LevelBits(uint32_t levels) { return std::bit_width(levels) + 1; }  // ceil(log2(s+1)) + sign

class Qsgd final : public Quantizer {
 public:
  explicit Qsgd(uint32_t levels) : levels_(levels), bits_(LevelBits(levels)) {}
  StageId id() const override { return StageId::kQsgd; }
  size_t MaxEncodedBytes(size_t n) const override { return 4 + PackedBytes(n, bits_); }

  Status Encode(std::span<const float> values, const RoundContext& ctx, size_t tensor_index,
                ByteWriter* out) const override {
    if (const size_t bad = kernels::FirstNonFinite(values); bad != kernels::kAllFinite) return NotFinite(bad);
    const size_t n = values.size();
    double lanes[8] = {};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      for (size_t j = 0; j < 8; ++j) lanes[j] += static_cast<double>(values[i + j]) * values[i + j];
    }
    double sum = 0;
    for (double l : lanes) sum += l;
    for (; i < n; ++i) sum += static_cast<double>(values[i]) * values[i];
    const float norm = static_cast<float>(std::min(std::sqrt(sum), static_cast<double>(FLT_MAX / 2)));
    out->PutF32(norm);

    std::vector<uint32_t> codes(n, 0);
    if (norm > 0.0f) {
      Rng rng(ctx.private_seed ^ (ctx.round * 0x9e3779b97f4a7c15ULL) ^ 0x95cd000000000000ULL, tensor_index);
      const double k = static_cast<double>(levels_) / static_cast<double>(norm);
      for (size_t t = 0; t < n; ++t) {
        const double r = std::fabs(static_cast<double>(values[t])) * k;
        double level = std::floor(r);
        if (rng.UniformDouble() < r - level) level += 1.0;
        const uint32_t l = static_cast<uint32_t>(std::min(level, static_cast<double>(levels_)));
        codes[t] = (l << 1) | (std::bit_cast<uint32_t>(values[t]) >> 31);
      }
    }
    PackBits(codes, bits_, out->Extend(PackedBytes(n, bits_)));
    return Status::Ok();
  }

  Status Decode(ByteReader* in, std::span<float> values) const override {
    float norm;
    SHOAL_RETURN_IF_ERROR(in->ReadF32(&norm, "qsgd norm"));
    if (!(norm >= 0.0f && norm <= FLT_MAX / 2)) return Status::Corruption("qsgd payload: invalid norm");
    const size_t n = values.size();
    std::span<const uint8_t> packed;
    SHOAL_RETURN_IF_ERROR(in->ReadBytes(PackedBytes(n, bits_), &packed, "qsgd levels"));
    std::vector<uint32_t> codes(n);
    SHOAL_RETURN_IF_ERROR(UnpackBits(packed, bits_, codes));
    const float step = norm / static_cast<float>(levels_);
    for (size_t t = 0; t < n; ++t) {
      const uint32_t l = codes[t] >> 1;
      if (l > levels_) {
        return Status::Corruption("qsgd payload: level " + std::to_string(l) + " > " + std::to_string(levels_));
      }
      const float v = static_cast<float>(l) * step;
      values[t] = (codes[t] & 1u) ? -v : v;
    }
    return Status::Ok();
  }

 private:
  uint32_t levels_;
  int bits_;
};

constexpr ParamDecl kParams[] = {
    IntParam("levels", 16, 1, 65535, "quantization levels s"),
};

StatusOr<std::unique_ptr<Quantizer>> Build(const StageParams& p, const std::vector<TensorSpec>&) {
  return std::unique_ptr<Quantizer>(new Qsgd(static_cast<uint32_t>(p.Int("levels"))));
}

}  // namespace

constinit const StageDecl kQsgdStage = {
    .name = "qsgd", .id = StageId::kQsgd, .slot = Slot::kQuantize,
    .summary = "QSGD: unbiased stochastic quantization to s levels of the tensor's L2 norm",
    .params = kParams, .factory = &Build};

}  // namespace shoal::codec
