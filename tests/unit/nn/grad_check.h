// Test helpers for the nn tests: a central finite-difference gradient checker and small
// deterministic random inputs (shoal::Rng, never std:: distributions).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "core/rng.h"

namespace shoal::nn::testing {

// n values uniform in [lo, hi).
inline std::vector<float> UniformVector(size_t n, float lo, float hi, uint64_t seed) {
  Rng rng(seed, 0x7e57);
  std::vector<float> v(n);
  for (float& x : v) x = lo + (hi - lo) * rng.Uniform();
  return v;
}

// n values with lo <= |x| < hi and a random sign: keeps points away from the ReLU kink.
inline std::vector<float> AwayFromZero(size_t n, float lo, float hi, uint64_t seed) {
  Rng rng(seed, 0xa3a7);
  std::vector<float> v(n);
  for (float& x : v) {
    const float mag = lo + (hi - lo) * rng.Uniform();
    x = rng.Uniform() < 0.5f ? -mag : mag;
  }
  return v;
}

// Checks analytic[i] against the central difference (f(x + h e_i) - f(x - h e_i)) / (x+ - x-)
// for every coordinate i of *x (restored afterwards). f evaluates the float computation and
// returns a double. Passes when |analytic - numeric| <= rtol * max(|analytic|, |numeric|) + atol
// everywhere; the failure message lists the worst coordinates.
inline ::testing::AssertionResult GradientMatches(const std::function<double()>& f, std::vector<float>* x,
                                                  const std::vector<float>& analytic, float h, double rtol,
                                                  double atol) {
  if (analytic.size() != x->size())
    return ::testing::AssertionFailure() << "analytic gradient has " << analytic.size() << " entries, x has "
                                         << x->size();
  std::string failures;
  int num_failures = 0;
  for (size_t i = 0; i < x->size(); ++i) {
    const float saved = (*x)[i];
    const float plus = saved + h;
    const float minus = saved - h;
    (*x)[i] = plus;
    const double f_plus = f();
    (*x)[i] = minus;
    const double f_minus = f();
    (*x)[i] = saved;
    // Divide by the step actually taken in float, not by 2h.
    const double numeric = (f_plus - f_minus) / (static_cast<double>(plus) - static_cast<double>(minus));
    const double a = analytic[i];
    const double tol = rtol * std::max(std::fabs(a), std::fabs(numeric)) + atol;
    if (!(std::fabs(a - numeric) <= tol)) {
      if (++num_failures <= 8) {
        char line[160];
        std::snprintf(line, sizeof line, "\n  [%zu] analytic %.7g numeric %.7g (|diff| %.3g > tol %.3g)", i, a,
                      numeric, std::fabs(a - numeric), tol);
        failures += line;
      }
    }
  }
  if (num_failures == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << num_failures << " of " << x->size()
                                       << " gradient entries disagree with central differences:" << failures;
}

// Names a test instantiated over model spec strings: "mlp:5,act=gelu" -> "mlp_5_act_gelu".
struct SpecParamName {
  std::string operator()(const ::testing::TestParamInfo<const char*>& info) const {
    std::string name = info.param;
    for (char& ch : name)
      if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return name;
  }
};

// sum_i w[i] * y[i] in double: a scalar "loss" whose gradient with respect to y is w.
inline double Dot(const std::vector<float>& w, const float* y) {
  double s = 0.0;
  for (size_t i = 0; i < w.size(); ++i) s += static_cast<double>(w[i]) * y[i];
  return s;
}

}  // namespace shoal::nn::testing
