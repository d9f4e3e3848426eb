// Rényi-DP accountant for the Poisson-subsampled Gaussian mechanism: the privacy loss of
// DP-FedAvg, where each round selects every client independently with probability q, clips
// each update to L2 norm C and adds N(0, (z C)^2) noise to their sum.
//
// RDP of one round at order alpha (Mironov, Talwar, Zhang 2019, "Rényi Differential Privacy
// of the Sampled Gaussian Mechanism", §3.3), computed in log space throughout:
//   q = 1:        alpha / (2 z^2)
//   integer a:    log( sum_{k=0..a} C(a,k) (1-q)^(a-k) q^k exp((k^2-k) / (2 z^2)) ) / (a-1)
//   fractional a: the paper's two-sided series with erfc terms, summed until both terms fall
//                 below exp(-30) of the running value; binomials of real order carry their sign.
// Rounds compose by adding RDP order by order. (epsilon, delta) is the tightest order of the
// conversion of Balle et al. 2020 ("Hypothesis testing interpretations and Rényi DP", Thm 21):
//   eps(alpha) = rdp(alpha) + log((alpha-1)/alpha) - (log delta + log alpha) / (alpha-1)
// clamped at 0. The default orders are 1.1..10.9 by 0.1 and 12..63, as Opacus uses, so its
// values are reproduced (tests/unit/privacy against Opacus and Google's dp-accounting).
//
// Refuses (InvalidArgument): q outside [0, 1], z <= 0 or not finite, orders <= 1, delta
// outside (0, 1).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "shoal/status.h"

namespace shoal::privacy {

// 1.1, 1.2, ..., 10.9, 12, 13, ..., 63.
std::vector<double> DefaultOrders();

// RDP at `alpha` of one round of the sampled Gaussian mechanism (arguments as checked above;
// an out-of-range argument returns NaN, which the accountant never passes).
double SampledGaussianRdp(double q, double noise_multiplier, double alpha);

struct Epsilon {
  double epsilon = 0.0;  // the smallest over the orders, >= 0 (infinity when every order is)
  double order = 0.0;    // the order that gave it
};
StatusOr<Epsilon> EpsilonFromRdp(std::span<const double> orders, std::span<const double> rdp, double delta);

class RdpAccountant {
 public:
  explicit RdpAccountant(std::vector<double> orders = DefaultOrders());

  // Adds `steps` rounds at sampling rate q and noise multiplier z.
  Status Compose(double q, double noise_multiplier, uint64_t steps = 1);
  StatusOr<Epsilon> Spent(double delta) const;
  // What Spent would say after one more Compose(q, z, steps), leaving this one unchanged.
  StatusOr<Epsilon> SpentAfter(double q, double noise_multiplier, uint64_t steps, double delta) const;

  const std::vector<double>& orders() const { return orders_; }
  const std::vector<double>& rdp() const { return rdp_; }
  uint64_t rounds() const { return rounds_; }

  // Exact text form for checkpoints (every double round-trips); Load refuses another order set.
  std::string Save() const;
  Status Load(const std::string& state);

 private:
  std::vector<double> orders_;
  std::vector<double> rdp_;
  uint64_t rounds_ = 0;
};

// The smallest noise multiplier (to 1e-4 relative) with which `steps` rounds at rate q spend at
// most `target_epsilon` at `delta`; InvalidArgument when even z = 1e4 does not reach it.
StatusOr<double> NoiseMultiplierFor(double target_epsilon, double delta, double q, uint64_t steps);

}  // namespace shoal::privacy
