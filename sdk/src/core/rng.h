// Deterministic random numbers, bit-identical on every platform and compiler: Shoal never
// uses std::*_distribution (implementation-defined), only its own transforms of xoshiro256**.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <utility>

namespace shoal {

// Box-Muller: two independent standard normals from two uniforms, u1 in (0, 1], u2 in [0, 1).
inline std::pair<double, double> BoxMuller(double u1, double u2) {
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 6.283185307179586476925 * u2;
  return {r * std::cos(theta), r * std::sin(theta)};
}

class Rng {
 public:
  // Seeds the four state words from `seed` and `stream` with SplitMix64, so (seed, stream)
  // pairs give independent sequences (e.g. stream = round or client index).
  explicit Rng(uint64_t seed, uint64_t stream = 0);

  uint64_t NextU64();
  // Uniform in [0, 1) with 24 bits of precision.
  float Uniform();
  // Uniform in [0, 1) with 53 bits of precision.
  double UniformDouble();
  // Uniform integer in [0, n) without modulo bias; n > 0.
  uint64_t Below(uint64_t n);
  // Standard normal (Box-Muller, both values used).
  double Normal();
  // Gamma(shape, 1) by Marsaglia-Tsang; shape > 0.
  double Gamma(double shape);

  template <typename T>
  void Shuffle(std::span<T> v) {
    for (size_t i = v.size(); i > 1; --i) {
      size_t j = static_cast<size_t>(Below(i));
      std::swap(v[i - 1], v[j]);
    }
  }

 private:
  uint64_t s_[4];
  bool has_spare_ = false;
  double spare_ = 0.0;
};

}  // namespace shoal
