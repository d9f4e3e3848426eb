// gossip (D-PSGD, Lian et al. 2017): each step every member takes one local step with the
// task's optimizer (its state kept across steps), moves its replica to the local model, and
// sends that model to `gossip_k` members drawn from the step's shared seed (everyone can
// compute everyone's draw, so each peer knows whom to wait for); it then replaces its replica
// by the plain mean of its own model and the models it received. No leader: replicas differ.
#include <algorithm>
#include <memory>

#include "aggregate/weighted_mean.h"
#include "codec/round_context.h"
#include "core/rng.h"
#include "runtime/peer/exchange.h"

namespace shoal::peer {
namespace {

constexpr uint64_t kGossipTag = 0x676f'7373'6970'2d6bULL;  // "gossip-k"

class Gossip final : public Exchange {
 public:
  explicit Gossip(const protocol::SwarmInfo& s)
      : seed_(s.task.seed), lr_(s.task.optimizer.learning_rate), k_(static_cast<size_t>(s.Param("gossip_k", 2))) {}
  Finish finish() const override { return Finish::kLocalMix; }
  TaskConfig TrainerTask(const TaskConfig& swarm) const override {
    TaskConfig t = swarm;
    t.prox_mu = 0.0f;
    return t;
  }
  RoundConfig Round(uint64_t step) const override {
    return {.round = step, .learning_rate = lr_, .local_epochs = 1, .local_steps = 1, .keep_optimizer_state = true};
  }
  std::vector<float> Outgoing(std::vector<float>& replica, std::vector<float> delta, bool* moved) const override {
    for (size_t i = 0; i < replica.size(); ++i) replica[i] += delta[i];
    *moved = true;
    return replica;
  }
  std::vector<std::string> Recipients(const std::string& who, uint64_t step,
                                      const std::vector<std::string>& live) const override {
    std::vector<std::string> others;
    for (const auto& n : live)
      if (n != who) others.push_back(n);
    Rng rng(seed_ ^ kGossipTag ^ codec::NameSeed(who), step);
    rng.Shuffle(std::span<std::string>(others));
    others.resize(std::min(others.size(), k_));
    return others;
  }
  // Peers drift apart by a few steps (one that nobody drew finishes its step at once).
  uint64_t window() const override { return 16; }
  // The mean of the own model (added here) and the received ones, each of weight 1.
  StatusOr<std::unique_ptr<aggregator::Accumulator>> Start(uint64_t, std::span<const float> replica) override {
    auto mean = std::make_unique<aggregator::WeightedMean>(replica.size(), 1.0);
    SHOAL_RETURN_IF_ERROR(mean->Add({.client = "self", .num_examples = 1, .delta = replica}));
    return std::unique_ptr<aggregator::Accumulator>(std::move(mean));
  }
  uint64_t Weight(uint64_t) const override { return 1; }
  Status Apply(const std::optional<std::vector<float>>& result, std::vector<float>& replica) override {
    if (result) replica = *result;
    return Status::Ok();
  }

 private:
  uint64_t seed_;
  float lr_;
  size_t k_;
};

}  // namespace

StatusOr<std::unique_ptr<Exchange>> MakeGossip(const protocol::SwarmInfo& swarm, const std::vector<TensorSpec>&) {
  if (swarm.task.optimizer.name == "demo") return Status::InvalidArgument("gossip's local optimizer cannot be demo");
  return std::unique_ptr<Exchange>(std::make_unique<Gossip>(swarm));
}

}  // namespace shoal::peer
