#include "privacy/secagg/masking.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace shoal::privacy::secagg {

FixedPoint::FixedPoint(double r, uint32_t m, uint32_t b, double headroom)
    : range(r),
      scale(b == 16 ? 127.0 / r : (2147483647.0 - static_cast<double>(m)) / (static_cast<double>(m) * r + headroom)),
      bits(b) {}

bool FixedPoint::Fits(uint32_t m, double headroom) const {
  const double limit = bits == 16 ? 32767.0 : 2147483647.0;
  return static_cast<double>(m) * (range * scale + 0.5) + headroom * scale < limit;
}

double NoiseHeadroom(uint32_t m, uint32_t threshold, double dp_clip, double z) {
  const double t = threshold ? threshold : std::max(m, 1u);
  return 8 * dp_clip * z * std::sqrt(std::max(static_cast<double>(m), t) / t);
}

FixedPoint RoundEncoding(double range, uint32_t m, uint32_t bits, double dp_clip, double z, uint32_t threshold) {
  const double noise = dp_clip * z;
  FixedPoint fp(range, m, bits, NoiseHeadroom(m, threshold, dp_clip, z));
  if (bits == 32 && noise > 0) fp.scale = std::min(fp.scale, 16777216.0 / noise);
  return fp;
}

uint64_t EncodeFixed(const FixedPoint& fp, std::span<const float> x, std::span<uint32_t> out) {
  uint64_t clipped = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    double v = x[i];
    if (!(v >= -fp.range && v <= fp.range)) {  // NaN lands here too, as 0
      ++clipped;
      v = std::isnan(v) ? 0.0 : (v > 0 ? fp.range : -fp.range);
    }
    out[i] = static_cast<uint32_t>(static_cast<int32_t>(std::nearbyint(v * fp.scale)));
  }
  return clipped;
}

void DecodeFixedSum(const FixedPoint& fp, std::span<const uint32_t> sum, std::span<double> out) {
  for (size_t i = 0; i < sum.size(); ++i) {
    const int32_t v = fp.bits == 16 ? static_cast<int16_t>(sum[i] & 0xffff) : static_cast<int32_t>(sum[i]);
    out[i] = static_cast<double>(v) / fp.scale;
  }
}

void ApplyMasks(std::span<const MaskKey> keys, std::span<uint32_t> v) {
  constexpr size_t kWords = 16384;  // 64 KiB of keystream at a time (1024 ChaCha20 blocks)
  std::vector<uint32_t> stream(kWords);
  const crypto::StreamNonce nonce{};
  for (size_t start = 0; start < v.size(); start += kWords) {
    const size_t n = std::min(kWords, v.size() - start);
    uint32_t* out = v.data() + start;
    for (const MaskKey& k : keys) {
      crypto::ChaCha20(k.key, nonce, static_cast<uint32_t>(start / 16),
                       std::span<uint8_t>(reinterpret_cast<uint8_t*>(stream.data()), n * 4));
      const uint32_t* w = stream.data();
      if (k.subtract)
        for (size_t i = 0; i < n; ++i) out[i] -= w[i];
      else
        for (size_t i = 0; i < n; ++i) out[i] += w[i];
    }
  }
}

}  // namespace shoal::privacy::secagg
