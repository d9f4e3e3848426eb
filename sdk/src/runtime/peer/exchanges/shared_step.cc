#include "runtime/peer/exchanges/shared_step.h"

#include <utility>

namespace shoal::peer {

Status SharedStepExchange::InitMeanThenOptimizer(const OptimizerConfig& optimizer, size_t n) {
  aggregator::StrategyOptions s;
  s.name = "fedavg";
  s.learning_rate = 1.0f;         // the clients' rate: unused here
  s.server_learning_rate = 1.0f;  // the plain mean
  SHOAL_ASSIGN_OR_RETURN(strategy_, aggregator::MakeStrategy(s));
  host_ = MakeCpuBackend();
  SHOAL_ASSIGN_OR_RETURN(optimizer_, nn::MakeOptimizer(optimizer, n, host_.get()));
  return Status::Ok();
}

Status SharedStepExchange::InitSignOfSum(float lr) {
  aggregator::StrategyOptions s;
  s.name = "demo";
  s.learning_rate = lr;
  s.server_learning_rate = 1.0f;  // the step is lr * 1 = lr exactly
  SHOAL_ASSIGN_OR_RETURN(strategy_, aggregator::MakeStrategy(s));
  return Status::Ok();
}

StatusOr<std::unique_ptr<aggregator::Accumulator>> SharedStepExchange::Start(uint64_t step,
                                                                            std::span<const float> replica) {
  return strategy_->StartRound(step, replica);
}

Status SharedStepExchange::Apply(const std::optional<std::vector<float>>& result, std::vector<float>& replica) {
  if (!result) return Status::Ok();
  if (result->size() != replica.size()) return Status::Internal("the step's result has the wrong size");
  if (!optimizer_) {
    for (size_t i = 0; i < replica.size(); ++i) replica[i] += (*result)[i];
    return Status::Ok();
  }
  // The deltas point downhill (w_local - w_global); the optimizer takes a gradient.
  std::vector<float> gradient(result->size());
  for (size_t i = 0; i < gradient.size(); ++i) gradient[i] = -(*result)[i];
  optimizer_->Step(replica.data(), gradient.data());
  return Status::Ok();
}

std::vector<float> SharedStepExchange::SaveState() const { return optimizer_ ? optimizer_->SaveState() : std::vector<float>(); }

Status SharedStepExchange::LoadState(std::span<const float> state) {
  return optimizer_ ? optimizer_->LoadState(state) : Exchange::LoadState(state);
}

}  // namespace shoal::peer
