// allgather: every step each member sends its update at the replica to every member; the step
// leader commits which updates the step applies (the peer core's commit log).
// allreduce: the same DDP step (sgd / adamw below) with the gradients summed by a ring
// all-reduce (ring.cc): the dense data-parallel baseline, 2 (N-1)/N of the model per member
// and step, whatever the number of members N.
//   sgd / adamw  DDP-like: the trainer takes one plain SGD step of lr 1 from the replica, so its
//                delta is minus the minibatch gradient (rounded to the replica's precision:
//                fl(fl(w - g) - w)); the shared optimizer (the task's, with its momentum,
//                weight decay and rate) steps with the example-weighted mean gradient.
//   demo         the trainer runs the task's DeMo optimizer for one step; its delta is minus
//                the components extracted from the peer's own momentum, and the replicas move
//                by the exact sign of their weighted sum (the aggregator's "demo" commit).
#include <memory>

#include "runtime/peer/exchanges/shared_step.h"
#include "shoal/arena.h"

namespace shoal::peer {
namespace {

class Allgather final : public SharedStepExchange {
 public:
  Status Init(const TaskConfig& task, const std::vector<TensorSpec>& layout, bool ring) {
    demo_ = task.optimizer.name == "demo";
    if (ring && demo_)
      return Status::InvalidArgument("allreduce sums dense gradients: DeMo's sparse components need --mode allgather");
    if (ring) UseRing();
    lr_ = task.optimizer.learning_rate;
    if (demo_) return InitSignOfSum(task.optimizer.learning_rate);
    return InitMeanThenOptimizer(task.optimizer, LayoutSize(layout));
  }
  TaskConfig TrainerTask(const TaskConfig& swarm) const override {
    TaskConfig t = swarm;
    t.prox_mu = 0.0f;
    if (!demo_) {
      t.optimizer = OptimizerConfig();  // sgd: no momentum, no weight decay
      t.optimizer.learning_rate = 1.0f;
    }
    return t;
  }
  RoundConfig Round(uint64_t step) const override {
    return {.round = step, .learning_rate = demo_ ? lr_ : 1.0f, .local_epochs = 1, .local_steps = 1,
            .keep_optimizer_state = true};
  }

 private:
  bool demo_ = false;
  float lr_ = 0.0f;
};

}  // namespace

StatusOr<std::unique_ptr<Exchange>> MakeAllgather(const protocol::SwarmInfo& swarm, const std::vector<TensorSpec>& layout) {
  auto x = std::make_unique<Allgather>();
  SHOAL_RETURN_IF_ERROR(x->Init(swarm.task, layout, false));
  return std::unique_ptr<Exchange>(std::move(x));
}

StatusOr<std::unique_ptr<Exchange>> MakeAllreduce(const protocol::SwarmInfo& swarm, const std::vector<TensorSpec>& layout) {
  auto x = std::make_unique<Allgather>();
  SHOAL_RETURN_IF_ERROR(x->Init(swarm.task, layout, true));
  return std::unique_ptr<Exchange>(std::move(x));
}

}  // namespace shoal::peer
