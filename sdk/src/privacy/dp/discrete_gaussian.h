// The discrete Gaussian N_Z(0, sigma^2): P(x) proportional to exp(-x^2 / (2 sigma^2)) over the
// integers, sampled exactly (Canonne, Kamath, Steinke NeurIPS'20, Algorithm 3) with integer
// arithmetic only: rejection from a discrete Laplace of scale t = floor(sigma) + 1, every
// Bernoulli(exp(-n/d)) drawn by their Algorithm 1 from uniform integers, so the samples carry
// none of floating point's artefacts. sigma^2 must be an integer here (>= 1): distributed DP
// rounds its per-client variance, in fixed-point units of at least 10^6, to the nearest one.
// The randomness is SecureRandom's ChaCha20 stream (privacy/dp/noise.h).
#pragma once

#include <cstdint>
#include <span>

#include "privacy/dp/noise.h"

namespace shoal::privacy {

class DiscreteGaussian {
 public:
  // variance = sigma^2, an integer in [1, 2^50] (clamped into it: 128-bit intermediates).
  DiscreteGaussian(SecureRandom* random, uint64_t variance);
  int64_t Sample();
  uint64_t variance() const { return var_; }

 private:
  __extension__ typedef unsigned __int128 U128;
  bool Bernoulli(U128 num, U128 den);        // P = num / den, num <= den
  bool BernoulliExpNeg(U128 num, U128 den);  // P = exp(-num / den)
  U128 Below(U128 n);                        // uniform in [0, n)

  SecureRandom* random_;
  uint64_t var_;
  uint64_t t_;
};

// values[i] += N_Z(0, variance) mod 2^32 (two's complement).
void AddDiscreteGaussian(DiscreteGaussian& noise, std::span<uint32_t> values);

}  // namespace shoal::privacy
