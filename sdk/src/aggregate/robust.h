// Byzantine-robust aggregation rules, as pure functions over one round's updates. The
// strategies in aggregate/strategies/robust.cc run them over the updates a round collected.
// Every rule counts clients, not examples: a client's weight is one vote, because a lying
// client could claim any number of examples.
//
// Rules and what they tolerate, for n updates of which b are Byzantine:
// - CoordinateMedian (Yin et al. 2018): per coordinate, the median (the mean of the two middle
//   values for even n). Breakdown point 1/2: with b < n/2, each output coordinate lies between
//   two honest values, however large the Byzantine ones.
// - TrimmedMean (Yin et al. 2018): per coordinate, drop the `trim` largest and `trim` smallest
//   values and average the rest (sum in double, in sorted order). Bounded by the honest values
//   when b <= trim.
// - KrumSelect (Blanchard et al. 2017): the score of update i is the sum of the squared L2
//   distances to its n - f - 2 nearest other updates; Krum takes the update with the lowest
//   score, Multi-Krum the `m` lowest (ties by index), whose mean is the aggregate. Its
//   guarantee needs n > 2f + 2; with n <= f + 2 every score is 0 and the first m are taken.
// - CenteredClip (Karimireddy, He, Jaggi, ICML 2021): from a start v (the previous round's
//   aggregate), `iters` times v += mean_i (x_i - v) * min(1, tau / ||x_i - v||). tau == 0 takes,
//   at each iteration, the median of the ||x_i - v||: the honest half sets the radius.
// The caller passes updates in a fixed order (the strategies sort by client), so every rule is
// a deterministic function of the round's set of updates. Distances and norms are summed in
// double. All updates have the same length and only finite values (the caller validated them).
//
// Cost: median and trimmed mean O(n d log n) time and O(n) scratch; Krum O(n^2 d) time and
// O(n^2) scratch; centered clipping O(iters n d). Memory for the n updates themselves is the
// caller's (O(n d): these rules need every update at once).
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace shoal::aggregator::robust {

using Updates = std::span<const std::vector<float>>;

void CoordinateMedian(Updates x, std::span<float> out);
// Requires 2 * trim < x.size().
void TrimmedMean(Updates x, size_t trim, std::span<float> out);
// The indexes of the m updates with the lowest Krum scores, lowest first; 1 <= m <= x.size().
std::vector<size_t> KrumSelect(Updates x, size_t f, size_t m);
// out = start moved `iters` times toward the updates, each clipped to `tau` around it (tau == 0:
// the median distance). out may not alias start.
void CenteredClip(Updates x, std::span<const float> start, double tau, int iters, std::span<float> out);

// The mean of the updates at `pick` (summed in double in the order given).
void MeanOf(Updates x, std::span<const size_t> pick, std::span<float> out);

}  // namespace shoal::aggregator::robust
