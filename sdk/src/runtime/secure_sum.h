// What an update becomes under secure aggregation, on both sides of a round: the coordinates
// masked (all, or the round's shared-seed random-k selection), the fixed-point encoding, and
// for distributed DP the client's L2 clip and its share of discrete Gaussian noise.
//   client: delta -> pick coordinates -> [DP: clip to C - sqrt(d) / (2 s)] -> fixed point
//           (range clipped, counted) -> [DP: + N_Z(0, ceil((z C s)^2 / t))] -> words
//           (then masked by SecAgg+)
//   server: sum of words mod 2^bits -> signed -> / s / survivors -> scattered into a dense delta
// With DP the L2 clip leaves room for rounding (d values, each moved at most 1/2 unit), so the
// encoded vector's norm is at most C s units: the sensitivity the noise is calibrated to. The
// noise share is calibrated to the threshold t, the fewest survivors a sum can have (the
// aggregator and every client refuse fewer), so every released sum carries noise of at least
// z C s and the accountant charges z (wrappers/dp.h).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "codec/codec.h"
#include "privacy/dp/noise.h"
#include "privacy/secagg/masking.h"
#include "protocol/federated.h"

namespace shoal::runtime {

struct SecureSumPlan {
  std::vector<uint32_t> coordinates;  // ascending, into the dense model
  privacy::secagg::FixedPoint encoding{1.0, 1};
};

// The coordinates masked in `round` (known before the roster); `codec` must pass
// SecureSumRefusal. Each side computes them once a round.
std::vector<uint32_t> SecureSumCoordinates(const codec::Codec& codec, uint64_t task_seed, uint64_t round);
// The fixed-point encoding for a roster of `roster_size` and the Setup's threshold (both known
// at Setup): the noise headroom is sized for every roster member surviving.
privacy::secagg::FixedPoint SecureSumEncoding(const protocol::PrivacyConfig& privacy, uint32_t roster_size,
                                              uint32_t threshold);

struct EncodedUpdate {
  std::vector<uint32_t> words;
  uint64_t clipped = 0;  // values clipped to the range
};
// threshold: the Setup's t (the noise share's divisor). Refuses (and sends nothing) an update
// with a value that is not finite -- its norm would skip the DP clip, and encoding would turn
// the value into 0 -- and a noise share whose variance is not finite or too large to sample
// exactly (an aggregator's absurd z or C): never less noise than the task promises.
StatusOr<EncodedUpdate> EncodeSecureUpdate(const SecureSumPlan& plan, std::span<const float> delta,
                                 const protocol::PrivacyConfig& privacy, uint32_t threshold,
                                 privacy::SecureRandom& random);
// The mean of the survivors' updates as a dense delta of n values.
std::vector<float> DecodeSecureMean(const SecureSumPlan& plan, std::span<const uint32_t> sum, uint32_t survivors,
                                    size_t n);

}  // namespace shoal::runtime
