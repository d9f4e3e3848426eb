#include "runtime/sim/attack.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/rng.h"

namespace shoal::sim {
namespace {

constexpr uint64_t kAttackSeedTag = 0x73696d2d61747463ULL;  // "sim-attc": who attacks
constexpr uint64_t kNoiseSeedTag = 0x73696d2d6e6f6973ULL;   // "sim-nois": the noise attack's draws
constexpr const char* kKinds = "none, sign-flip, scale, noise, label-flip, alie, ipm";

}  // namespace

double NormalQuantile(double p) {
  double lo = -40.0, hi = 40.0;
  for (int i = 0; i < 200; ++i) {
    const double mid = (lo + hi) / 2.0;
    (0.5 * std::erfc(-mid / std::sqrt(2.0)) < p ? lo : hi) = mid;
  }
  return (lo + hi) / 2.0;
}

StatusOr<std::unique_ptr<Attack>> Attack::Create(const AttackOptions& o, uint32_t clients, double per_round,
                                                  uint64_t seed, Honest honest) {
  const std::string& k = o.kind;
  if (k != "none" && k != "sign-flip" && k != "scale" && k != "noise" && k != "label-flip" && k != "alie" &&
      k != "ipm")
    return Status::InvalidArgument("unknown --attack '" + k + "' (valid: " + kKinds + ")");
  if (!(o.attackers >= 0.0 && o.attackers < 1.0)) return Status::InvalidArgument("--attackers must be in [0, 1)");
  if (!(o.strength >= 0.0) || !std::isfinite(o.strength))
    return Status::InvalidArgument("--attack-strength must be >= 0 (0: the attack's default)");
  if (k == "none") {
    if (o.attackers > 0.0) return Status::InvalidArgument("--attackers needs --attack KIND");
    return std::unique_ptr<Attack>();
  }
  if (o.attackers == 0.0) return Status::InvalidArgument("--attack " + k + " needs --attackers FRACTION (> 0)");
  if (std::llround(o.attackers * clients) == 0)
    return Status::InvalidArgument("--attackers " + std::to_string(o.attackers) + " of " + std::to_string(clients) +
                                   " clients rounds to no attacker");
  return std::unique_ptr<Attack>(new Attack(o, clients, per_round, seed, std::move(honest)));
}

Attack::Attack(AttackOptions o, uint32_t clients, double per_round, uint64_t seed, Honest honest)
    : o_(std::move(o)), seed_(seed), clients_(clients), per_round_(per_round), honest_(std::move(honest)),
      is_attacker_(clients, false) {
  std::vector<uint32_t> order(clients);
  std::iota(order.begin(), order.end(), 0u);
  Rng rng(seed ^ kAttackSeedTag);
  rng.Shuffle(std::span<uint32_t>(order));
  const auto m = static_cast<size_t>(std::llround(o_.attackers * clients));
  attackers_.assign(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(std::min<size_t>(m, clients)));
  std::sort(attackers_.begin(), attackers_.end());
  for (uint32_t a : attackers_) is_attacker_[a] = true;
}

Status Attack::Corrupt(uint32_t client, const TaskConfig& task, std::span<const float> global,
                       const RoundConfig& round, TrainResult* out) {
  std::vector<float>& d = out->delta;
  if (o_.kind == "sign-flip") {
    for (float& v : d) v = -v;
  } else if (o_.kind == "scale") {
    const float s = o_.strength > 0.0 ? static_cast<float>(o_.strength) : 100.0f;
    for (float& v : d) v *= s;
  } else if (o_.kind == "noise") {
    const double s = o_.strength > 0.0 ? o_.strength : 10.0;
    Rng rng(seed_ ^ kNoiseSeedTag, round.round * clients_ + client);
    for (float& v : d) v = static_cast<float>(s * rng.Normal());
  } else if (o_.kind == "alie" || o_.kind == "ipm") {
    SHOAL_ASSIGN_OR_RETURN(d, Colluded(task, global, round));
  }
  return Status::Ok();  // label-flip: the damage is in the training data
}

StatusOr<std::vector<float>> Attack::Colluded(const TaskConfig& task, std::span<const float> global,
                                              const RoundConfig& round) {
  std::lock_guard<std::mutex> lock(mu_);
  if (colluded_round_ == round.round && !colluded_.empty()) return colluded_;
  const size_t n = global.size(), m = attackers_.size();
  std::vector<double> sum(n, 0.0), sum_sq(n, 0.0);
  for (uint32_t a : attackers_) {
    TrainResult honest;
    SHOAL_RETURN_IF_ERROR(honest_(a, task, global, round, &honest).WithContext("an attacker's honest update"));
    for (size_t i = 0; i < n; ++i) {
      sum[i] += honest.delta[i];
      sum_sq[i] += static_cast<double>(honest.delta[i]) * honest.delta[i];
    }
  }
  std::vector<float> v(n);
  if (o_.kind == "ipm") {
    const double eps = o_.strength > 0.0 ? o_.strength : 0.1;
    for (size_t i = 0; i < n; ++i) v[i] = static_cast<float>(-eps * sum[i] / static_cast<double>(m));
  } else {
    double z = o_.strength;
    if (z == 0.0) {
      // The paper's z_max for n clients a round, of which m_r are attackers.
      const double nr = std::max(1.0, per_round_);
      const double mr = static_cast<double>(m) * nr / static_cast<double>(clients_);
      const double s = std::floor(nr / 2.0 + 1.0) - mr;
      z = NormalQuantile(std::clamp((nr - s) / nr, 0.5, 0.9999));
    }
    for (size_t i = 0; i < n; ++i) {
      const double mu = sum[i] / static_cast<double>(m);
      const double var = std::max(0.0, sum_sq[i] / static_cast<double>(m) - mu * mu);
      v[i] = static_cast<float>(mu - z * std::sqrt(var));
    }
  }
  colluded_round_ = round.round;
  colluded_ = v;
  return v;
}

}  // namespace shoal::sim
