// The Byzantine-robust strategies: median, trimmed_mean, krum, multi_krum, centered_clip
// (the rules and their guarantees: aggregate/robust.h). Each keeps the round's updates
// (Collected: O(clients x model) memory, which these rules need) and declares that it needs
// individual updates, so secure aggregation and DP refuse it at start-up. Updates are sorted by
// client before the rule runs: the aggregate depends on the round's set of updates, not on the
// order they arrived in. The result is applied with --server-lr as FedAvg's mean is.
// Round configuration as FedAvg. Every client counts once (robust.h says why).
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include "aggregate/exact_sum.h"
#include "aggregate/robust.h"
#include "aggregate/strategies/fedavg.h"

namespace shoal::aggregator {
namespace {

// The round's aggregate from its updates (sorted by client), into `out` (zeros on entry).
using Rule = std::function<void(robust::Updates, std::span<float>)>;

class Collected final : public Accumulator {
 public:
  Collected(size_t n, double scale, Rule rule) : n_(n), scale_(scale), rule_(std::move(rule)) {}
  Status Add(const ClientUpdate& u) override {
    SHOAL_RETURN_IF_ERROR(ExactSum::Check(u.delta, n_, u.num_examples));
    updates_.push_back({std::string(u.client), std::vector<float>(u.delta.begin(), u.delta.end())});
    return Status::Ok();
  }
  uint64_t count() const override { return updates_.size(); }
  StatusOr<std::optional<std::vector<float>>> Finish(std::span<const ClientFailure>) override {
    if (updates_.empty()) return std::optional<std::vector<float>>();
    std::sort(updates_.begin(), updates_.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    std::vector<std::vector<float>> x;
    x.reserve(updates_.size());
    for (auto& u : updates_) x.push_back(std::move(u.second));
    updates_.clear();
    std::vector<float> out(n_, 0.0f);
    rule_(x, out);
    if (scale_ != 1.0)
      for (float& v : out) v = static_cast<float>(v * scale_);
    return std::optional<std::vector<float>>(std::move(out));
  }

 private:
  size_t n_;
  double scale_;
  Rule rule_;
  std::vector<std::pair<std::string, std::vector<float>>> updates_;
};

size_t Byzantine(const StrategyOptions& o, size_t n) {
  // The fraction is a float (0.35f is 0.3499999940...): a small tolerance keeps floor(0.35 * 20) at 7.
  return static_cast<size_t>(std::floor(static_cast<double>(o.byzantine_fraction) * static_cast<double>(n) + 1e-6));
}

class Robust final : public FedAvg {
 public:
  using FedAvg::FedAvg;
  std::string name() const override { return options().name; }
  bool needs_individual_updates() const override { return true; }
  std::unique_ptr<Accumulator> StartRound(uint64_t, std::span<const float> global) override {
    const StrategyOptions& o = options();
    Rule rule;
    if (o.name == "median") {
      rule = robust::CoordinateMedian;
    } else if (o.name == "trimmed_mean") {
      rule = [&o](robust::Updates x, std::span<float> out) {
        robust::TrimmedMean(x, std::min(Byzantine(o, x.size()), (x.size() - 1) / 2), out);
      };
    } else if (o.name == "krum" || o.name == "multi_krum") {
      const bool multi = o.name == "multi_krum";
      rule = [&o, multi](robust::Updates x, std::span<float> out) {
        const size_t f = Byzantine(o, x.size());
        const auto pick = robust::KrumSelect(x, f, multi ? x.size() - std::min(f, x.size() - 1) : 1);
        robust::MeanOf(x, pick, out);
      };
    } else {  // centered_clip, from the previous round's aggregate
      rule = [&o, this](robust::Updates x, std::span<float> out) {
        if (center_.size() != out.size()) center_.assign(out.size(), 0.0f);
        robust::CenteredClip(x, center_, o.clip_radius, static_cast<int>(o.clip_iterations), out);
        center_.assign(out.begin(), out.end());
      };
    }
    return std::make_unique<Collected>(global.size(), o.server_learning_rate, std::move(rule));
  }
  // centered_clip's center (the last aggregate) as floats; the other rules are stateless.
  std::string SaveState() const override {
    return std::string(reinterpret_cast<const char*>(center_.data()), 4 * center_.size());
  }
  Status LoadState(const std::string& state) override {
    if (state.size() % 4 != 0) return Status::Corruption(name() + " state: wrong length");
    center_.resize(state.size() / 4);
    std::copy_n(state.data(), state.size(), reinterpret_cast<char*>(center_.data()));  // empty: no memcpy of null
    return Status::Ok();
  }

 private:
  std::vector<float> center_;  // centered_clip: the last round's aggregate (before --server-lr)
};

}  // namespace

std::unique_ptr<Strategy> MakeRobust(const StrategyOptions& o) { return std::make_unique<Robust>(o); }

}  // namespace shoal::aggregator
