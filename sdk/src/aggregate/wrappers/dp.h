// Differential privacy as a wrapper around any strategy: client-level DP-FedAvg (McMahan et al.
// ICLR'18) with central noise, and adaptive clipping (Andrew et al. NeurIPS'21).
//
// Each round, every client is selected independently with probability q = --fraction
// (Poisson sampling, what the accountant assumes). Each reported update is clipped to L2 norm
// C (privacy/dp/clip.h: scaled by min(1, C(1 - 2^-20) / ||delta||), the margin keeping the float
// result within C),
// the clipped updates are summed exactly with weight 1 each (client-level privacy: example
// counts would change the sensitivity), Gaussian noise N(0, (z_delta C)^2) from a
// cryptographic stream is added to every coordinate of the sum, and the result divided by the
// number of updates that arrived (treated as public, as TensorFlow Federated does) is handed
// to the wrapped strategy as its round's only update. So FedAvg's server learning rate,
// DeMo's sign step or any later server optimizer apply to the privatized mean.
//
// Adaptive clipping: b = the number of updates with ||delta|| <= C, released with noise
// N(0, s_b^2), s_b = max(m / 20, z) for m selected clients; C <- C exp(-lr (b~/m' - gamma)),
// gamma = --dp-clip-quantile, m' = max(updates, 1). The two releases together are one
// Gaussian mechanism with noise multiplier z when z_delta = (z^-2 - (2 s_b)^-2)^(-1/2)
// (Andrew et al. Thm 1), so the accountant charges z either way; with fixed clipping
// z_delta = z.
//
// The accountant (privacy/dp/rdp.h) composes one round (q, z) each time a round's aggregate
// is released (a round below --min-results releases nothing). epsilon at --dp-delta is in
// RoundMetrics after every round, and StopBefore refuses a round after which epsilon would
// exceed --dp-epsilon-budget. The clip norm and the accountant's state are checkpointed.
//
// Distributed mode (--dp-mode distributed, with --secagg): clipping and noise happen on the
// clients (runtime/secure_sum.h), each adding a discrete Gaussian of variance (z C)^2 / t in
// fixed-point units for the round's SecAgg threshold t, the fewest survivors any unmasked sum
// has, so every released sum carries noise of stddev at least z C. The wrapper passes the
// secure aggregate on and charges z (the sum of discrete Gaussians is treated as a Gaussian:
// Kairouz et al. ICML'21 bound the difference, negligible at these scales). It also reports
// epsilon_vs_aggregator, composed at q = 1: the aggregator draws the Poisson sample, so
// sampling hides nothing from it.
//
// Refuses at creation: C <= 0, neither or both of z and a target epsilon, a target without
// --rounds, delta outside (0, 1), a quantile outside [0, 1), and a strategy that needs
// individual updates.
#pragma once

#include <memory>

#include "aggregate/strategy.h"

namespace shoal::aggregator {

using shoal::DpOptions;  // public: shoal/server.h

// The noise multiplier the options ask for: --dp-noise-multiplier, or the smallest that
// spends --dp-target-epsilon over `rounds` rounds at `sampling_rate`.
StatusOr<double> DpNoiseMultiplier(const DpOptions& options, double sampling_rate, uint64_t rounds);

// `sampling_rate` is --fraction; `rounds` is --rounds (0 = unbounded), needed for a target epsilon.
StatusOr<std::unique_ptr<Strategy>> WrapWithDp(std::unique_ptr<Strategy> inner, const DpOptions& options,
                                               double sampling_rate, uint64_t rounds);

}  // namespace shoal::aggregator
