#include "aggregate/wrappers/dp.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <cstdio>
#include <sstream>

#include "aggregate/exact_sum.h"
#include "privacy/dp/clip.h"
#include "privacy/dp/noise.h"
#include "privacy/dp/rdp.h"

namespace shoal::aggregator {
namespace {

// What the wrapper keeps across rounds, updated by each round's Finish.
struct DpState {
  DpOptions options;
  double q = 1.0;           // sampling rate
  double z = 0.0;           // noise multiplier the accountant charges
  double clip = 0.0;        // C for the next round
  privacy::RdpAccountant accountant;
  // Distributed mode: the aggregator draws the sample and sees who is in it, so against it
  // the sampling amplifies nothing: this one composes every round at q = 1.
  privacy::RdpAccountant aggregator_accountant;
  privacy::SecureRandom random;
  std::vector<StrategyMetric> last;  // the last released round's metrics
};

class DpAccumulator final : public Accumulator {
 public:
  DpAccumulator(DpState* state, std::unique_ptr<Accumulator> inner, size_t n)
      : state_(state), inner_(std::move(inner)), sum_(n), clip_(state->clip) {}

  Status Add(const ClientUpdate& u) override {
    if (state_->options.distributed) {  // the secure aggregate, already clipped and noised by the clients
      if (aggregate_weight_) return Status::InvalidArgument("distributed DP takes one secure aggregate per round");
      SHOAL_RETURN_IF_ERROR(inner_->Add(u));
      aggregate_weight_ = u.num_examples;
      return Status::Ok();
    }
    if (u.delta.size() != sum_.size())
      return Status::InvalidArgument("update has " + std::to_string(u.delta.size()) + " values; the model has " +
                                     std::to_string(sum_.size()));
    std::vector<float> clipped(u.delta.begin(), u.delta.end());
    const double norm = privacy::ClipToNorm(clipped, clip_);
    if (!std::isfinite(norm)) return Status::InvalidArgument("update holds NaN or Inf");
    SHOAL_RETURN_IF_ERROR(sum_.Add(clipped, 1));
    if (norm <= clip_) ++unclipped_;
    return Status::Ok();
  }
  uint64_t count() const override { return state_->options.distributed ? aggregate_weight_ : sum_.count(); }

  StatusOr<std::optional<std::vector<float>>> Finish(std::span<const ClientFailure> failures) override {
    DpState& s = *state_;
    if (s.options.distributed) {
      if (!aggregate_weight_) return inner_->Finish(failures);  // nothing released
      // The clients' noise is calibrated to the threshold, the fewest survivors a sum has:
      // at least z C on every released sum.
      SHOAL_RETURN_IF_ERROR(Charge(s.z, s.z * clip_ / static_cast<double>(aggregate_weight_)));
      SHOAL_RETURN_IF_ERROR(s.aggregator_accountant.Compose(1.0, s.z));
      SHOAL_ASSIGN_OR_RETURN(privacy::Epsilon against, s.aggregator_accountant.Spent(s.options.delta));
      s.last.push_back({"epsilon_vs_aggregator", against.epsilon});
      return inner_->Finish(failures);
    }
    const double z = s.z;
    const double m = static_cast<double>(std::max<uint64_t>(count(), 1));
    const double selected = static_cast<double>(count() + failures.size());
    const bool adaptive = s.options.clip_quantile > 0.0;
    double z_delta = z, noised_fraction = 0.0;
    if (adaptive) {
      const double s_b = std::max(selected / 20.0, z);
      z_delta = 1.0 / std::sqrt(1.0 / (z * z) - 1.0 / (4.0 * s_b * s_b));
      noised_fraction = (static_cast<double>(unclipped_) + s_b * s.random.Normal()) / m;
    }
    std::vector<double> noised(sum_.size());
    for (size_t i = 0; i < noised.size(); ++i) noised[i] = sum_.Value(i);
    privacy::AddGaussianNoise(s.random, z_delta * clip_, noised);
    std::vector<float> mean(noised.size());
    for (size_t i = 0; i < mean.size(); ++i) mean[i] = static_cast<float>(noised[i] / m);

    SHOAL_RETURN_IF_ERROR(Charge(z, z_delta * clip_ / m));
    if (adaptive) {
      s.clip = clip_ * std::exp(-s.options.clip_learning_rate * (noised_fraction - s.options.clip_quantile));
      s.last.push_back({"dp_unclipped_fraction_noised", noised_fraction});
    }
    SHOAL_RETURN_IF_ERROR(inner_->Add({"dp-aggregate", 0, 1, mean}).WithContext("the privatized mean"));
    return inner_->Finish(failures);
  }

 private:
  // One released round at noise multiplier z: the accountant, and the round's metrics.
  Status Charge(double z, double stddev_on_mean) {
    DpState& s = *state_;
    SHOAL_RETURN_IF_ERROR(s.accountant.Compose(s.q, z));
    SHOAL_ASSIGN_OR_RETURN(privacy::Epsilon spent, s.accountant.Spent(s.options.delta));
    s.last = {{"epsilon", spent.epsilon},
              {"dp_delta", s.options.delta},
              {"dp_clip", clip_},
              {"dp_noise_multiplier", z},
              {"dp_noise_stddev", stddev_on_mean}};
    return Status::Ok();
  }

  DpState* state_;
  std::unique_ptr<Accumulator> inner_;
  ExactSum sum_;
  double clip_;
  uint64_t unclipped_ = 0;
  uint64_t aggregate_weight_ = 0;  // distributed: the secure aggregate's survivors
};

class DpStrategy final : public Strategy {
 public:
  DpStrategy(std::unique_ptr<Strategy> inner, DpState state) : inner_(std::move(inner)), state_(std::move(state)) {}

  std::string name() const override { return inner_->name(); }
  RoundConfig Configure(uint64_t round) const override { return inner_->Configure(round); }
  std::unique_ptr<Accumulator> StartRound(uint64_t round, std::span<const float> global) override {
    return std::make_unique<DpAccumulator>(&state_, inner_->StartRound(round, global), global.size());
  }
  bool poisson_sampling() const override { return true; }
  std::vector<StrategyMetric> RoundMetrics() const override {
    auto metrics = inner_->RoundMetrics();
    metrics.insert(metrics.end(), state_.last.begin(), state_.last.end());
    return metrics;
  }
  std::optional<std::string> StopBefore(uint64_t round) const override {
    if (auto inner = inner_->StopBefore(round)) return inner;
    if (!(state_.options.epsilon_budget > 0.0)) return std::nullopt;
    // Asked on every pass of the service's loop while no round is open: computed once per
    // accountant state (the fractional orders' series can be long).
    if (!next_epsilon_ || next_epsilon_->first != state_.accountant.rounds()) {
      auto next = state_.accountant.SpentAfter(state_.q, state_.z, 1, state_.options.delta);
      if (!next.ok()) return next.status().message();
      next_epsilon_ = {state_.accountant.rounds(), next->epsilon};
    }
    const double next = next_epsilon_->second;
    if (next <= state_.options.epsilon_budget) return std::nullopt;
    auto now = state_.accountant.Spent(state_.options.delta);
    char why[256];
    std::snprintf(why, sizeof why,
                  "privacy budget reached: round %llu would take epsilon from %.4g to %.4g, past "
                  "--dp-epsilon-budget %.4g (delta %g)",
                  static_cast<unsigned long long>(round), now.ok() ? now->epsilon : 0.0, next,
                  state_.options.epsilon_budget, state_.options.delta);
    return std::string(why);
  }

  // "dp2 CLIP\n" + accountant + "\n" + the aggregator's accountant + "\n" + the wrapped
  // strategy's state.
  std::string SaveState() const override {
    char head[64];
    std::snprintf(head, sizeof head, "dp2 %a\n", state_.clip);
    return head + state_.accountant.Save() + "\n" + state_.aggregator_accountant.Save() + "\n" + inner_->SaveState();
  }
  Status LoadState(const std::string& state) override {
    size_t ends[3];
    size_t at = 0;
    for (size_t& e : ends) {
      e = state.find('\n', at);
      if (e == std::string::npos) break;
      at = e + 1;
    }
    if (at == 0 || ends[2] == std::string::npos || state.compare(0, 4, "dp2 ") != 0)
      return Status::Corruption("the checkpoint holds no DP state of this version (was it written without --dp-clip?)");
    const double clip = std::strtod(state.c_str() + 4, nullptr);
    if (!(clip > 0.0) || !std::isfinite(clip)) return Status::Corruption("DP state: bad clip norm");
    privacy::RdpAccountant models = state_.accountant, aggregator = state_.aggregator_accountant;
    SHOAL_RETURN_IF_ERROR(models.Load(state.substr(ends[0] + 1, ends[1] - ends[0] - 1)));
    SHOAL_RETURN_IF_ERROR(aggregator.Load(state.substr(ends[1] + 1, ends[2] - ends[1] - 1)));
    SHOAL_RETURN_IF_ERROR(inner_->LoadState(state.substr(ends[2] + 1)));
    state_.accountant = std::move(models);
    state_.aggregator_accountant = std::move(aggregator);
    next_epsilon_.reset();
    state_.clip = clip;
    return Status::Ok();
  }

 private:
  std::unique_ptr<Strategy> inner_;
  DpState state_;
  mutable std::optional<std::pair<uint64_t, double>> next_epsilon_;  // (accountant rounds, epsilon after one more)
};

}  // namespace

StatusOr<double> DpNoiseMultiplier(const DpOptions& o, double sampling_rate, uint64_t rounds) {
  const bool has_z = o.noise_multiplier > 0.0, has_target = o.target_epsilon > 0.0;
  if (has_z == has_target)
    return Status::InvalidArgument("with --dp-clip, give exactly one of --dp-noise-multiplier and --dp-target-epsilon");
  if (has_z) {
    if (!std::isfinite(o.noise_multiplier)) return Status::InvalidArgument("--dp-noise-multiplier must be a positive number");
    return o.noise_multiplier;
  }
  if (rounds == 0) return Status::InvalidArgument("--dp-target-epsilon needs --rounds (the number of rounds to spend it over)");
  auto z = privacy::NoiseMultiplierFor(o.target_epsilon, o.delta, sampling_rate, rounds);
  if (!z.ok()) return z.status().WithContext("--dp-target-epsilon");
  return *z;
}

StatusOr<std::unique_ptr<Strategy>> WrapWithDp(std::unique_ptr<Strategy> inner, const DpOptions& o,
                                               double sampling_rate, uint64_t rounds) {
  if (!(o.clip > 0.0) || !std::isfinite(o.clip)) return Status::InvalidArgument("--dp-clip must be a positive number");
  if (inner->needs_individual_updates())
    return Status::InvalidArgument("--strategy " + inner->name() +
                                   " needs every client's update, which differential privacy does not release; "
                                   "choose a strategy of the mean (fedavg, fedprox, demo, fedavgm, fedadam, fedyogi, fedadagrad) with --dp-clip");
  if (!(o.delta > 0.0 && o.delta < 1.0)) return Status::InvalidArgument("--dp-delta must be in (0, 1)");
  if (!(o.clip_quantile >= 0.0 && o.clip_quantile < 1.0))
    return Status::InvalidArgument("--dp-clip-quantile must be in [0, 1) (0 = fixed clipping)");
  if (!(o.clip_learning_rate > 0.0) || !std::isfinite(o.clip_learning_rate))
    return Status::InvalidArgument("--dp-clip-lr must be a positive number");
  if (!(o.epsilon_budget >= 0.0)) return Status::InvalidArgument("--dp-epsilon-budget must be >= 0");
  if (o.distributed && o.clip_quantile > 0.0)
    return Status::InvalidArgument("adaptive clipping (--dp-clip-quantile) needs --dp-mode central");
  DpState state;
  state.options = o;
  state.q = sampling_rate;
  state.clip = o.clip;
  state.last = {{"epsilon", 0.0}};
  SHOAL_ASSIGN_OR_RETURN(state.z, DpNoiseMultiplier(o, sampling_rate, rounds));
  auto after = privacy::RdpAccountant().SpentAfter(sampling_rate, state.z, rounds ? rounds : 1, o.delta);
  spdlog::info("differential privacy ({}): clip {}{}, noise multiplier {:.4g}, Poisson sampling at {}, delta {}: "
               "epsilon {:.4g} after {} round{}{}",
               o.distributed ? "distributed, under secure aggregation" : "central", o.clip,
               o.clip_quantile > 0 ? " (adaptive)" : "", state.z, sampling_rate, o.delta,
               after.ok() ? after->epsilon : -1.0, rounds ? rounds : 1, rounds == 1 ? "" : "s",
               o.epsilon_budget > 0 ? fmt::format(", budget {}", o.epsilon_budget) : std::string());
  return std::unique_ptr<Strategy>(new DpStrategy(std::move(inner), std::move(state)));
}

}  // namespace shoal::aggregator
