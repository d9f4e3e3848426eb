// The adaptive round deadline (--deadline-quantile Q): each round closes
//   D = clamp(margin * quantile_Q(T), min, --round-timeout)
// after its tasks went out, T being the completion times (task sent to update received) of
// the last `window` rounds' updates. A selected client that missed its round's deadline counts
// as an observation AT that deadline (its true time is censored), so when more than 1 - Q of
// the clients miss, the Q-quantile is the deadline itself and the next one grows by `margin`;
// when the bulk is fast, the deadline follows it down and a heavy tail of stragglers no longer
// holds every round. Until the first observation, and with Q = 0, D = --round-timeout.
// Late updates (for a round already closed) are refused and counted by the service.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <vector>

#include "shoal/server.h"

namespace shoal::aggregator {

using shoal::DeadlineOptions;  // public: shoal/server.h

class AdaptiveDeadline {
 public:
  explicit AdaptiveDeadline(DeadlineOptions o = {}) : o_(o) {}
  // One completion time (seconds) of the round in progress.
  void Observe(double seconds) { current_.push_back(seconds); }
  // Ends the round in progress: its observations join the window.
  void EndRound() {
    rounds_.push_back(std::move(current_));
    current_.clear();
    while (rounds_.size() > o_.window) rounds_.pop_front();
  }
  // The next round's deadline in milliseconds, at most `timeout_ms`.
  uint32_t NextMs(uint32_t timeout_ms) const {
    std::vector<double> t;
    for (const auto& r : rounds_) t.insert(t.end(), r.begin(), r.end());
    if (o_.quantile <= 0.0 || t.empty()) return timeout_ms;
    // The nearest-rank quantile: the smallest observation with at least Q of them at or below.
    const size_t k = static_cast<size_t>(std::ceil(o_.quantile * static_cast<double>(t.size())));
    std::nth_element(t.begin(), t.begin() + static_cast<std::ptrdiff_t>(std::max<size_t>(k, 1) - 1), t.end());
    const double ms = o_.margin * t[std::max<size_t>(k, 1) - 1] * 1000.0;
    return static_cast<uint32_t>(std::clamp(ms, static_cast<double>(std::min(o_.min_ms, timeout_ms)),
                                            static_cast<double>(timeout_ms)));
  }

 private:
  DeadlineOptions o_;
  std::vector<double> current_;
  std::deque<std::vector<double>> rounds_;
};

}  // namespace shoal::aggregator
