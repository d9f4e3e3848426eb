#include "runtime/secure_sum.h"

#include <algorithm>
#include <cmath>

#include "codec/round_context.h"
#include "runtime/update.h"
#include "privacy/dp/clip.h"
#include "privacy/dp/discrete_gaussian.h"

namespace shoal::runtime {

std::vector<uint32_t> SecureSumCoordinates(const codec::Codec& codec, uint64_t task_seed, uint64_t round) {
  return codec.SharedCoordinates(SharedContext(task_seed, round));
}

privacy::secagg::FixedPoint SecureSumEncoding(const protocol::PrivacyConfig& p, uint32_t roster_size,
                                              uint32_t threshold) {
  return privacy::secagg::RoundEncoding(p.secagg_range, roster_size, p.secagg_bits, p.dp_clip, p.dp_noise_multiplier,
                                        threshold);
}

StatusOr<EncodedUpdate> EncodeSecureUpdate(const SecureSumPlan& plan, std::span<const float> delta,
                                 const protocol::PrivacyConfig& p, uint32_t threshold,
                                 privacy::SecureRandom& random) {
  std::vector<float> values(plan.coordinates.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = delta[plan.coordinates[i]];
  for (float v : values)
    if (!std::isfinite(v)) return Status::InvalidArgument("the update holds NaN or Inf; not sent (nothing revealed)");
  if (p.dp_clip > 0) {
    const double rounding = std::sqrt(static_cast<double>(values.size())) / (2 * plan.encoding.scale);
    const double norm = privacy::ClipToNorm(values, std::max(p.dp_clip - rounding, 0.0));
    if (!std::isfinite(norm)) return Status::InvalidArgument("the update's L2 norm is not finite; not sent");
  }
  // The noise share's variance, checked before it becomes an integer.
  uint64_t variance = 0;
  if (p.dp_clip > 0 && p.dp_noise_multiplier > 0) {
    const double sigma_sum = p.dp_noise_multiplier * p.dp_clip * plan.encoding.scale;
    const double v = std::ceil(sigma_sum * sigma_sum / std::max(threshold, 1u));
    if (!std::isfinite(v) || v < 1 || v > 0x1p50)
      return Status::InvalidArgument("the task's distributed DP noise (z = " + std::to_string(p.dp_noise_multiplier) +
                                     ", C = " + std::to_string(p.dp_clip) + ") gives a noise variance of " +
                                     std::to_string(v) + " units, outside [1, 2^50]; not sent");
    variance = static_cast<uint64_t>(v);
  }
  EncodedUpdate out;
  out.words.resize(values.size());
  out.clipped = privacy::secagg::EncodeFixed(plan.encoding, values, out.words);
  if (variance) {
    privacy::DiscreteGaussian noise(&random, variance);
    privacy::AddDiscreteGaussian(noise, out.words);
  }
  return out;
}

std::vector<float> DecodeSecureMean(const SecureSumPlan& plan, std::span<const uint32_t> sum, uint32_t survivors,
                                    size_t n) {
  std::vector<double> total(sum.size());
  privacy::secagg::DecodeFixedSum(plan.encoding, sum, total);
  std::vector<float> mean(n, 0.0f);
  const double m = survivors ? survivors : 1;
  for (size_t i = 0; i < total.size(); ++i) mean[plan.coordinates[i]] = static_cast<float>(total[i] / m);
  return mean;
}

}  // namespace shoal::runtime
