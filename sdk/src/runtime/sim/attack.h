// Byzantine clients for shoal-sim: `--attack KIND --attackers FRACTION` makes that share of
// the virtual clients (exactly round(FRACTION * clients) of them, drawn from the seed) send
// corrupted updates through the real client code and wire format. The kinds, and what
// `--attack-strength S` means for each (0 = the default given):
//   sign-flip   the honest delta negated.
//   scale       the honest delta times S (100).
//   noise       a vector of independent N(0, S^2) values (S = 10) in place of the delta.
//   label-flip  trains honestly on its part with every label y replaced by C - 1 - y.
//   alie        "A Little Is Enough" (Baruch et al., NeurIPS 2019): every attacker sends
//               mu - z * sigma, mu and sigma the per-coordinate mean and standard deviation of
//               the attackers' own honest deltas this round, with z = Phi^-1((n - s) / n),
//               s = floor(n / 2 + 1) - m, for n clients and m attackers per round (the paper's
//               z_max; S overrides z).
//   ipm         inner-product manipulation (Xie, Koyejo, Gupta, UAI 2019): every attacker sends
//               -S * mu (S = 0.1), mu as for alie.
// alie and ipm collude: the first attacker to train in a round computes the honest delta of
// every attacker (on every attacker's part, from the same global model: training is a
// deterministic function of those), and all of them send the same vector. Attackers keep their
// honest example counts.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "shoal/status.h"
#include "shoal/trainer.h"

namespace shoal::sim {

struct AttackOptions {
  std::string kind = "none";  // none | sign-flip | scale | noise | label-flip | alie | ipm
  double attackers = 0.0;     // share of the clients, [0, 1)
  double strength = 0.0;      // 0 = the kind's default (above)
};

class Attack {
 public:
  // A client's honest training from `global` for the round (alie and ipm estimate from these).
  using Honest = std::function<Status(uint32_t client, const TaskConfig&, std::span<const float> global,
                                      const RoundConfig&, TrainResult*)>;
  // nullptr for kind "none"; InvalidArgument for an unknown kind or a share outside [0, 1).
  // `per_round` is the expected number of clients per round (alie's n).
  static StatusOr<std::unique_ptr<Attack>> Create(const AttackOptions& o, uint32_t clients, double per_round,
                                                  uint64_t seed, Honest honest);

  const std::string& kind() const { return o_.kind; }
  bool attacker(uint32_t client) const { return is_attacker_[client]; }
  size_t count() const { return attackers_.size(); }
  bool flips_labels() const { return o_.kind == "label-flip"; }
  // Turns attacker `client`'s honest result into what it sends. Thread-safe.
  Status Corrupt(uint32_t client, const TaskConfig& task, std::span<const float> global, const RoundConfig& round,
                 TrainResult* out);

 private:
  Attack(AttackOptions o, uint32_t clients, double per_round, uint64_t seed, Honest honest);
  // The colluders' vector for `round` (alie, ipm), computed by the first caller of the round.
  StatusOr<std::vector<float>> Colluded(const TaskConfig& task, std::span<const float> global, const RoundConfig& round);

  AttackOptions o_;
  uint64_t seed_;
  uint32_t clients_;
  double per_round_;
  Honest honest_;
  std::vector<bool> is_attacker_;
  std::vector<uint32_t> attackers_;  // ascending
  std::mutex mu_;
  uint64_t colluded_round_ = 0;      // the round `colluded_` is for (0: none yet)
  std::vector<float> colluded_;
};

// Phi^-1(p) for p in (0, 1), by bisection on erfc to double precision.
double NormalQuantile(double p);

}  // namespace shoal::sim
