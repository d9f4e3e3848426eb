// FedOpt (Reddi et al., "Adaptive Federated Optimization", ICLR 2021, Algorithm 2): the
// round's example-weighted mean delta D (FedAvg's, from the exact sum) is a pseudo-gradient
// for a server optimizer with step eta (--server-lr), state kept across rounds:
//   fedavgm     m = beta * m + D;                                  x += eta * m
//   fedadagrad  m = b1 * m + (1 - b1) D;  v = v + D^2;             x += eta * m / (sqrt(v) + tau)
//   fedadam     m = b1 * m + (1 - b1) D;  v = b2 v + (1 - b2) D^2;  x += eta * m / (sqrt(v) + tau)
//   fedyogi     m = b1 * m + (1 - b1) D;  v = v - (1 - b2) D^2 sign(v - D^2);  (same step)
// with m = v = 0 at the start (the paper's v_{-1} = tau^2 differs from 0 by tau^2 << D^2 after
// the first round). As the paper, and unlike torch.optim.Adam, there is no bias correction:
// a server takes few steps and tau, not a small eps, sets the adaptivity (FedAvgM with beta =
// 0 is FedAvg with --server-lr). Not nn::Optimizer: those run fused per-backend kernels with
// PyTorch's semantics (Adam's bias correction, eps inside the corrected root); the server's step
// is host arithmetic on the aggregate, in double per coordinate.
// State: m and v as float arrays and the step count, saved with each checkpoint, so a resumed
// run continues bit-identically.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>

#include "aggregate/strategies/fedavg.h"

namespace shoal::aggregator {
namespace {

enum class Rule { kAvgM, kAdagrad, kAdam, kYogi };

struct OptState {
  uint64_t steps = 0;
  std::vector<float> m, v;
};

class ServerStep final : public WeightedMean {
 public:
  ServerStep(size_t n, Rule rule, const StrategyOptions& o, OptState* state)
      : WeightedMean(n, 1.0), rule_(rule), o_(o), state_(state) {}
  StatusOr<std::optional<std::vector<float>>> Finish(std::span<const ClientFailure> failures) override {
    SHOAL_ASSIGN_OR_RETURN(auto mean, WeightedMean::Finish(failures));
    if (!mean) return mean;
    // The new state is computed on a copy and kept only if every value is finite: one huge
    // (finite) aggregate must not leave inf moments behind that freeze every later round.
    OptState s = *state_;
    const size_t n = mean->size();
    if (s.m.size() != n) s.m.assign(n, 0.0f);
    if (rule_ != Rule::kAvgM && s.v.size() != n) s.v.assign(n, 0.0f);
    const double eta = o_.server_learning_rate, b1 = o_.server_beta1, b2 = o_.server_beta2, tau = o_.server_tau;
    std::vector<float>& x = *mean;  // D in, the step out
    for (size_t i = 0; i < n; ++i) {
      const double d = x[i];
      if (rule_ == Rule::kAvgM) {
        const double m = o_.server_momentum * static_cast<double>(s.m[i]) + d;
        s.m[i] = static_cast<float>(m);
        x[i] = static_cast<float>(eta * m);
        continue;
      }
      const double m = b1 * s.m[i] + (1.0 - b1) * d, d2 = d * d;
      double v = s.v[i];
      switch (rule_) {
        case Rule::kAdagrad: v += d2; break;
        case Rule::kAdam: v = b2 * v + (1.0 - b2) * d2; break;
        case Rule::kYogi: v -= (1.0 - b2) * d2 * (v > d2 ? 1.0 : v < d2 ? -1.0 : 0.0); break;
        case Rule::kAvgM: break;
      }
      s.m[i] = static_cast<float>(m);
      s.v[i] = static_cast<float>(v);
      x[i] = static_cast<float>(eta * m / (std::sqrt(v) + tau));
    }
    for (size_t i = 0; i < n; ++i)
      if (!std::isfinite(x[i]) || !std::isfinite(s.m[i]) || (!s.v.empty() && !std::isfinite(s.v[i])))
        return std::optional<std::vector<float>>();  // the model and the state stay as they were
    ++s.steps;
    *state_ = std::move(s);
    return mean;
  }

 private:
  Rule rule_;
  const StrategyOptions& o_;
  OptState* state_;
};

class FedOpt final : public FedAvg {
 public:
  FedOpt(const StrategyOptions& o, Rule rule, std::string name) : FedAvg(o), rule_(rule), name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::unique_ptr<Accumulator> StartRound(uint64_t, std::span<const float> global) override {
    return std::make_unique<ServerStep>(global.size(), rule_, options(), &state_);
  }
  // "fedopt1 NAME STEPS M V\n" then m's and v's floats, little-endian.
  std::string SaveState() const override {
    const std::string head = "fedopt1 " + name_ + " " + std::to_string(state_.steps) + " " +
                             std::to_string(state_.m.size()) + " " + std::to_string(state_.v.size()) + "\n";
    std::string out = head;
    for (const std::vector<float>* a : {&state_.m, &state_.v})
      out.append(reinterpret_cast<const char*>(a->data()), 4 * a->size());  // (nullptr, 0) when empty: fine
    return out;
  }
  Status LoadState(const std::string& state) override {
    const size_t eol = state.find('\n');
    char name[32];
    unsigned long long steps = 0, m = 0, v = 0;
    if (eol == std::string::npos ||
        std::sscanf(state.substr(0, eol).c_str(), "fedopt1 %31s %llu %llu %llu", name, &steps, &m, &v) != 4 ||
        name_ != name)
      return Status::Corruption("the checkpoint holds no " + name_ + " server-optimizer state (was it written with "
                                "another --strategy?)");
    constexpr unsigned long long kMaxValues = 1ull << 34;  // bounds 4 * (m + v) well inside 64 bits
    if (m > kMaxValues || v > kMaxValues || state.size() - eol - 1 != 4 * (m + v))
      return Status::Corruption(name_ + " state: wrong length");
    OptState s;
    s.steps = steps;
    s.m.resize(m);
    s.v.resize(v);
    const char* at = state.data() + eol + 1;
    std::copy_n(at, 4 * m, reinterpret_cast<char*>(s.m.data()));  // copy_n, unlike memcpy, takes empty vectors
    std::copy_n(at + 4 * m, 4 * v, reinterpret_cast<char*>(s.v.data()));
    state_ = std::move(s);
    return Status::Ok();
  }

 private:
  Rule rule_;
  std::string name_;
  OptState state_;
};

}  // namespace

std::unique_ptr<Strategy> MakeFedOpt(const StrategyOptions& o) {
  const Rule rule = o.name == "fedavgm" ? Rule::kAvgM : o.name == "fedadagrad" ? Rule::kAdagrad
                    : o.name == "fedadam" ? Rule::kAdam : Rule::kYogi;
  return std::make_unique<FedOpt>(o, rule, o.name);
}

}  // namespace shoal::aggregator
