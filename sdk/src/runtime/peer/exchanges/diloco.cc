// diloco (Douillard et al. 2023, DiLoCo; as OpenDiLoCo / INTELLECT-1): each step every member
// runs `diloco_inner_steps` (H) local steps with the task's optimizer (AdamW, its state kept
// across outer steps) and sends its delta, minus the pseudo-gradient w_global - w_local; the
// step leader commits, and every replica takes an outer Nesterov SGD step (outer_lr,
// outer_momentum) on the example-weighted mean pseudo-gradient. With diloco_allreduce the
// pseudo-gradients are summed by a ring all-reduce instead (ring.cc; dense, or int8 / bf16 per
// hop with --codec), as OpenDiLoCo and INTELLECT-1.
#include <memory>

#include "runtime/peer/exchanges/shared_step.h"
#include "shoal/arena.h"

namespace shoal::peer {
namespace {

class Diloco final : public SharedStepExchange {
 public:
  Status Init(const protocol::SwarmInfo& s, const std::vector<TensorSpec>& layout) {
    if (s.task.optimizer.name == "demo") return Status::InvalidArgument("diloco's inner optimizer cannot be demo");
    inner_steps_ = static_cast<uint32_t>(s.Param("diloco_inner_steps", 100));
    if (s.Param("diloco_allreduce", 0) != 0) UseRing();
    lr_ = s.task.optimizer.learning_rate;
    OptimizerConfig outer;
    outer.name = "sgd";
    outer.learning_rate = static_cast<float>(s.Param("outer_lr", 0.7));
    outer.momentum = static_cast<float>(s.Param("outer_momentum", 0.9));
    outer.nesterov = outer.momentum > 0.0f;
    return InitMeanThenOptimizer(outer, LayoutSize(layout));
  }
  TaskConfig TrainerTask(const TaskConfig& swarm) const override {
    TaskConfig t = swarm;
    t.prox_mu = 0.0f;
    return t;
  }
  RoundConfig Round(uint64_t step) const override {
    return {.round = step, .learning_rate = lr_, .local_epochs = 1, .local_steps = inner_steps_,
            .keep_optimizer_state = true};
  }

 private:
  uint32_t inner_steps_ = 0;
  float lr_ = 0.0f;
};

}  // namespace

StatusOr<std::unique_ptr<Exchange>> MakeDiloco(const protocol::SwarmInfo& swarm, const std::vector<TensorSpec>& layout) {
  auto x = std::make_unique<Diloco>();
  SHOAL_RETURN_IF_ERROR(x->Init(swarm, layout));
  return std::unique_ptr<Exchange>(std::move(x));
}

}  // namespace shoal::peer
