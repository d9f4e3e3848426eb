#include "privacy/dp/discrete_gaussian.h"

#include <algorithm>
#include <cmath>

namespace shoal::privacy {

DiscreteGaussian::DiscreteGaussian(SecureRandom* random, uint64_t variance)
    : random_(random), var_(std::clamp<uint64_t>(variance, 1, uint64_t{1} << 50)) {
  // t = floor(sigma) + 1 from the integer square root of the variance.
  uint64_t s = static_cast<uint64_t>(std::sqrt(static_cast<double>(var_)));
  while (s * s > var_) --s;
  while ((s + 1) * (s + 1) <= var_) ++s;
  t_ = s + 1;
}

DiscreteGaussian::U128 DiscreteGaussian::Below(U128 n) {
  // Rejection on the smallest power of two above n: fewer than 2 draws on average.
  int bits = 0;
  for (U128 m = n - 1; m; m >>= 1) ++bits;
  const U128 mask = bits >= 128 ? ~U128{0} : ((U128{1} << bits) - 1);
  for (;;) {
    U128 v = (static_cast<U128>(random_->NextU64()) << 64) | random_->NextU64();
    v &= mask;
    if (v < n) return v;
  }
}

bool DiscreteGaussian::Bernoulli(U128 num, U128 den) { return Below(den) < num; }

bool DiscreteGaussian::BernoulliExpNeg(U128 num, U128 den) {
  // exp(-g) for g = num/den: one Bernoulli(exp(-1)) per whole unit of g, then the fraction
  // by Algorithm 1: the largest k with Bernoulli(g/1), ..., Bernoulli(g/k) all 1; odd k wins.
  while (num > den) {
    if (!BernoulliExpNeg(1, 1)) return false;
    num -= den;
  }
  uint64_t k = 1;
  while (Bernoulli(num, den * k)) ++k;
  return k % 2 == 1;
}

int64_t DiscreteGaussian::Sample() {
  const U128 t = t_, var = var_;
  for (;;) {
    // Discrete Laplace of scale t (Algorithm 2): |Y| = U + t V, sign uniform, -0 rejected.
    const U128 u = Below(t);
    if (!BernoulliExpNeg(u, t)) continue;
    uint64_t v = 0;
    while (BernoulliExpNeg(1, 1)) ++v;
    const U128 y = u + t * v;
    const bool negative = Bernoulli(1, 2);
    if (negative && y == 0) continue;
    // Accept with exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)) = exp(-(|Y| t - var)^2 / (2 var t^2)).
    const U128 yt = y * t;
    const U128 diff = yt > var ? yt - var : var - yt;
    if (BernoulliExpNeg(diff * diff, 2 * var * t * t)) {
      const int64_t mag = static_cast<int64_t>(y);
      return negative ? -mag : mag;
    }
  }
}

void AddDiscreteGaussian(DiscreteGaussian& noise, std::span<uint32_t> values) {
  for (uint32_t& v : values) v += static_cast<uint32_t>(noise.Sample());
}

}  // namespace shoal::privacy
