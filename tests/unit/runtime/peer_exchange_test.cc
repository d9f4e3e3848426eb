// The peer's exchanges (sdk/src/runtime/peer/exchanges/): the commit each mode applies through
// the aggregator's accumulators moves a replica to exactly the bits the peer's own sums gave
// before they were shared (an ExactSum of the updates, then the shared step), with the delta
// convention (updates are w_local - w_global, so minus the gradient / the DeMo components).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>

#include "aggregate/exact_sum.h"
#include "backend/backend.h"
#include "core/rng.h"
#include "nn/optimizer.h"
#include "runtime/peer/exchange.h"

namespace shoal::peer {
namespace {

constexpr size_t kN = 64;

protocol::SwarmInfo SwarmOf(const std::string& mode, const std::string& optimizer) {
  protocol::SwarmInfo s;
  s.mode = mode;
  s.task.optimizer.name = optimizer;
  s.task.optimizer.learning_rate = 0.05f;
  s.task.optimizer.momentum = optimizer == "sgd" ? 0.9f : 0.0f;
  s.params = {{"outer_lr", 0.7}, {"outer_momentum", 0.9}, {"gossip_k", 2}};
  return s;
}

std::vector<float> Random(uint64_t seed, float scale) {
  Rng rng(seed, 0);
  std::vector<float> v(kN);
  for (auto& x : v) x = scale * static_cast<float>(rng.Normal());
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// One commit through the exchange: updates (vector, weight) against `w`.
void Commit(Exchange& x, uint64_t step, const std::vector<std::pair<std::vector<float>, uint64_t>>& updates,
            std::vector<float>& w) {
  auto acc = x.Start(step, w);
  ASSERT_TRUE(acc.ok()) << acc.status().message();
  for (const auto& [v, n] : updates) ASSERT_TRUE((*acc)->Add({.client = "m", .num_examples = x.Weight(n), .delta = v}).ok());
  auto result = (*acc)->Finish({});
  ASSERT_TRUE(result.ok());
  ASSERT_TRUE(x.Apply(*result, w).ok());
}

std::vector<float> Negated(std::vector<float> v) {
  for (auto& x : v) x = -x;
  return v;
}

const std::vector<TensorSpec> kLayout = {{"p", {static_cast<int64_t>(kN)}}};

// sgd (momentum) allgather and diloco: peers sent gradients g_k (diloco: pseudo-gradients) and
// the shared optimizer stepped with their weighted mean; now they send -g_k.
TEST(PeerExchange, MeanThenOptimizerMatchesTheGradientMean) {
  for (const std::string mode : {"allgather", "diloco"}) {
    const auto swarm = SwarmOf(mode, "sgd");
    auto x = MakeExchange(swarm, kLayout);
    ASSERT_TRUE(x.ok()) << x.status().message();
    OptimizerConfig ref_config = swarm.task.optimizer;
    if (mode == "diloco") ref_config = {.name = "sgd", .learning_rate = 0.7f, .momentum = 0.9f, .nesterov = true};
    auto host = MakeCpuBackend();
    auto ref = nn::MakeOptimizer(ref_config, kN, host.get());
    ASSERT_TRUE(ref.ok());
    std::vector<float> w = Random(1, 1.0f), w_ref = w;
    for (uint64_t step = 1; step <= 3; ++step) {
      const auto g1 = Random(10 + step, 0.01f), g2 = Random(20 + step, 0.01f);
      aggregator::ExactSum sum(kN);
      ASSERT_TRUE(sum.Add(g1, 3).ok());
      ASSERT_TRUE(sum.Add(g2, 5).ok());
      std::vector<float> mean(kN);
      sum.Mean(1.0, mean);
      (*ref)->Step(w_ref.data(), mean.data());
      Commit(**x, step, {{Negated(g1), 3}, {Negated(g2), 5}}, w);
      EXPECT_TRUE(SameBits(w, w_ref)) << mode << " step " << step;
    }
    // The shared optimizer's state travels with the replica.
    EXPECT_FALSE((*x)->SaveState().empty());
    EXPECT_TRUE((*x)->LoadState((*x)->SaveState()).ok());
  }
}

// DeMo allgather: peers sent q_k and replicas took w -= lr * sign(sum n_k q_k); now they send -q_k
// and the demo strategy's SignOfMean result is added.
TEST(PeerExchange, DemoSignStepMatchesMinusTheSignOfTheComponents) {
  const auto swarm = SwarmOf("allgather", "demo");
  auto x = MakeExchange(swarm, kLayout);
  ASSERT_TRUE(x.ok()) << x.status().message();
  std::vector<float> w = Random(2, 1.0f), w_ref = w;
  auto q1 = Random(3, 0.1f), q2 = Random(4, 0.1f);
  q1[0] = q2[0] = 0.0f;  // a zero sum: sign 0, no move
  aggregator::ExactSum sum(kN);
  ASSERT_TRUE(sum.Add(q1, 2).ok());
  ASSERT_TRUE(sum.Add(q2, 7).ok());
  for (size_t i = 0; i < kN; ++i) w_ref[i] -= 0.05f * static_cast<float>(sum.Sign(i));
  Commit(**x, 1, {{Negated(q1), 2}, {Negated(q2), 7}}, w);
  EXPECT_TRUE(SameBits(w, w_ref));
  EXPECT_TRUE((*x)->SaveState().empty());
}

// Gossip: the plain mean of the own model and the received ones.
TEST(PeerExchange, GossipMixesWithEqualWeights) {
  auto x = MakeExchange(SwarmOf("gossip", "sgd"), kLayout);
  ASSERT_TRUE(x.ok());
  EXPECT_EQ((*x)->finish(), Exchange::Finish::kLocalMix);
  std::vector<float> w = Random(5, 1.0f);
  const auto a = Random(6, 1.0f), b = Random(7, 1.0f);
  aggregator::ExactSum sum(kN);
  ASSERT_TRUE(sum.Add(w, 1).ok());
  ASSERT_TRUE(sum.Add(a, 1).ok());
  ASSERT_TRUE(sum.Add(b, 1).ok());
  std::vector<float> mean(kN);
  sum.Mean(1.0, mean);
  Commit(**x, 1, {{a, 100}, {b, 7}}, w);
  EXPECT_TRUE(SameBits(w, mean));
  const std::vector<std::string> live = {"a", "b", "c", "d", "e"};
  const auto to = (*x)->Recipients("c", 4, live);
  EXPECT_EQ(to.size(), 2u);
  EXPECT_EQ(std::count(to.begin(), to.end(), "c"), 0);
  EXPECT_EQ(to, (*x)->Recipients("c", 4, live)) << "everyone computes the same draw";
}

TEST(PeerExchange, ModesAndTasksRefused) {
  EXPECT_EQ(MakeExchange(SwarmOf("ring", "sgd"), kLayout).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeExchange(SwarmOf("diloco", "demo"), kLayout).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeExchange(SwarmOf("gossip", "demo"), kLayout).status().code(), StatusCode::kInvalidArgument);
  auto x = MakeExchange(SwarmOf("allgather", "adamw"), kLayout);
  ASSERT_TRUE(x.ok());
  EXPECT_EQ((*x)->Recipients("b", 1, {"a", "b", "c"}), (std::vector<std::string>{"a", "c"}));
  const TaskConfig t = (*x)->TrainerTask(SwarmOf("allgather", "adamw").task);
  EXPECT_EQ(t.optimizer.name, "sgd");
  EXPECT_EQ(t.optimizer.learning_rate, 1.0f);
  EXPECT_EQ(t.optimizer.momentum, 0.0f);
}

}  // namespace
}  // namespace shoal::peer
