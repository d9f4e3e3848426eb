#include "runtime/secure_sum.h"

#include <algorithm>
#include <cmath>

#include "codec/round_context.h"
#include "privacy/dp/clip.h"
#include "privacy/dp/discrete_gaussian.h"

namespace shoal::runtime {

std::vector<uint32_t> SecureSumCoordinates(const codec::Codec& codec, uint64_t task_seed, uint64_t round) {
  return codec.SharedCoordinates(codec::MakeRoundContext(task_seed, round, 0));
}

privacy::secagg::FixedPoint SecureSumEncoding(const protocol::PrivacyConfig& p, uint32_t roster_size) {
  return privacy::secagg::RoundEncoding(p.secagg_range, roster_size, p.secagg_bits, p.dp_clip, p.dp_noise_multiplier);
}

EncodedUpdate EncodeSecureUpdate(const SecureSumPlan& plan, std::span<const float> delta,
                                 const protocol::PrivacyConfig& p, uint32_t threshold,
                                 privacy::SecureRandom& random) {
  std::vector<float> values(plan.coordinates.size());
  for (size_t i = 0; i < values.size(); ++i) values[i] = delta[plan.coordinates[i]];
  if (p.dp_clip > 0) {
    const double rounding = std::sqrt(static_cast<double>(values.size())) / (2 * plan.encoding.scale);
    privacy::ClipToNorm(values, std::max(p.dp_clip - rounding, 0.0));
  }
  EncodedUpdate out;
  out.words.resize(values.size());
  out.clipped = privacy::secagg::EncodeFixed(plan.encoding, values, out.words);
  if (p.dp_clip > 0 && p.dp_noise_multiplier > 0) {
    const double sigma_sum = p.dp_noise_multiplier * p.dp_clip * plan.encoding.scale;
    privacy::DiscreteGaussian noise(&random, static_cast<uint64_t>(std::ceil(sigma_sum * sigma_sum / std::max(threshold, 1u))));
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
