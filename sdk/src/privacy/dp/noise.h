// Gaussian noise for differential privacy, drawn from a cryptographic stream: ChaCha20 keyed
// from the OS CSPRNG, so nobody (the operator included) can predict, replay or subtract it,
// unlike noise from a seeded PRNG such as core/rng.h's. Standard normals by Box-Muller on
// 53-bit uniforms. Floating-point sampling has a known weakness (Mironov 2012: the low bits of
// a float sample are not uniformly spread); docs/SECURITY.md says so. Where exactness matters
// (distributed DP inside secure aggregation) privacy/dp/discrete_gaussian.h samples integers.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "crypto/crypto.h"

namespace shoal::privacy {

class SecureRandom {
 public:
  SecureRandom();  // keyed from the OS CSPRNG
  explicit SecureRandom(const crypto::StreamKey& key);  // reproducible, for tests

  uint64_t NextU64();
  double Uniform();  // in [0, 1), 53 bits
  double Normal();   // standard normal

 private:
  void Refill();
  crypto::StreamKey key_;
  crypto::StreamNonce nonce_{};
  uint32_t counter_ = 0;
  std::vector<uint8_t> buffer_;
  size_t used_ = 0;
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// values[i] += N(0, stddev^2), each draw independent.
void AddGaussianNoise(SecureRandom& random, double stddev, std::span<double> values);

}  // namespace shoal::privacy
