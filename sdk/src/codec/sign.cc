// Scaled sign quantizer (1-bit, signSGD with a magnitude): per tensor the scale
// m = mean |x_i| (f32), then one bit per value, LSB first, 1 = negative (the IEEE sign bit,
// so -0 counts as negative). Decodes to +-m. Wire: f32 scale, ceil(n/8) bytes.
// Decode refuses a non-finite or negative scale and non-zero padding bits.
#include <algorithm>
#include <bit>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "codec/bytes.h"
#include "codec/stages.h"

namespace shoal::codec {
namespace {

class Sign final : public Quantizer {
 public:
  StageId id() const override { return StageId::kSign; }
  size_t MaxEncodedBytes(size_t n) const override { return 4 + (n + 7) / 8; }

  void Encode(std::span<const float> values, const RoundContext&, size_t, ByteWriter* out) const override {
    const size_t n = values.size();
    const size_t scale_pos = out->size();
    out->PutF32(0.0f);
    uint8_t* bits = out->Extend((n + 7) / 8);
    const float* x = values.data();
    // One fused pass: 64 values -> 8 bytes of signs, |x| summed in 16 float lanes that are
    // flushed into a double every 4096 values (bounded float error, fixed order).
    double total = 0;
    float lanes[16] = {};
    size_t i = 0;
    size_t since_flush = 0;
    for (; i + 64 <= n; i += 64) {
      uint32_t u[64];
      std::memcpy(u, x + i, sizeof u);
      uint8_t b[8];
      for (size_t k = 0; k < 8; ++k) {
        uint32_t acc = 0;
        for (size_t j = 0; j < 8; ++j) acc |= (u[8 * k + j] >> 31) << j;
        b[k] = static_cast<uint8_t>(acc);
      }
      std::memcpy(bits + i / 8, b, 8);
      for (size_t k = 0; k < 4; ++k) {
        for (size_t j = 0; j < 16; ++j) lanes[j] += std::bit_cast<float>(u[16 * k + j] & 0x7fffffffu);
      }
      if (++since_flush == 64) {
        for (float& l : lanes) { total += l; l = 0; }
        since_flush = 0;
      }
    }
    for (float l : lanes) total += l;
    for (; i < n; ++i) {
      const uint32_t u = std::bit_cast<uint32_t>(x[i]);
      bits[i / 8] = static_cast<uint8_t>(bits[i / 8] | ((u >> 31) << (i % 8)));
      total += std::fabs(x[i]);
    }
    const float scale = n ? static_cast<float>(std::min(total / static_cast<double>(n), static_cast<double>(FLT_MAX))) : 0.0f;
    std::memcpy(out->data() + scale_pos, &scale, 4);
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
    const uint32_t pos = std::bit_cast<uint32_t>(scale);
    float* out = values.data();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
      const uint32_t b = bits[i / 8];
      uint32_t f[8];
      for (size_t j = 0; j < 8; ++j) f[j] = pos | (((b >> j) & 1u) << 31);
      std::memcpy(out + i, f, sizeof f);
    }
    for (; i < n; ++i) {
      const uint32_t f = pos | (((static_cast<uint32_t>(bits[i / 8]) >> (i % 8)) & 1u) << 31);
      std::memcpy(out + i, &f, 4);
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
