// The "demo" strategy (aggregate/strategies/demo.cc): example-weighted mean of the clients'
// deltas (-Q, the extracted DeMo momentum), then lr * server_lr * sign(mean), sign(0) = 0.
// And DeMo end to end: two built-in trainers with the "demo" optimizer and this strategy.
#include <gtest/gtest.h>

#include "blobs_csv.h"
#include "temp_dir.h"
#include <stdlib.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

#include "backend/backend.h"
#include "core/rng.h"
#include "nn/model_registry.h"
#include "shoal/trainer.h"
#include "aggregate/strategy.h"
#include "round_helper.h"

namespace shoal::aggregator {
namespace {

namespace fs = std::filesystem;

StrategyOptions DemoOptions(float lr, float server_lr = 1.0f) {
  StrategyOptions o;
  o.name = "demo";
  o.learning_rate = lr;
  o.server_learning_rate = server_lr;
  o.local_steps = 1;
  return o;
}

TEST(DemoStrategy, SignOfTheWeightedMeanTimesTheLearningRates) {
  auto s = MakeStrategy(DemoOptions(0.01f, 2.0f));
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ((*s)->name(), "demo");
  // Weighted means (weights 1/4, 3/4):
  //   [0] (1 + 3*5)/4 = 4 > 0;  [1] (0 - 3*4)/4 = -3 < 0;  [2] (3 - 3*1)/4 = 0 (cancels);
  //   [3] 0 everywhere;         [4] (-8 + 3*2)/4 = -0.5 (the majority sign loses to weight);
  //   [5] (1e-30 + 0)/4 tiny but positive; [6] (2^-149 + 0)/4 underflows a float, but the sign
  //   is taken from the exact sum.
  const float denorm = std::numeric_limits<float>::denorm_min();
  std::vector<TestUpdate> rs = {{"a", 1, {1.0f, 0.0f, 3.0f, 0.0f, -8.0f, 1e-30f, denorm}},
                                {"b", 3, {5.0f, -4.0f, -1.0f, 0.0f, 2.0f, 0.0f, 0.0f}}};
  auto agg = RunRound(**s, 1, rs, std::vector<float>(7));
  ASSERT_TRUE(agg.ok());
  ASSERT_TRUE(agg->has_value());
  const std::vector<float> want = {0.02f, -0.02f, 0.0f, 0.0f, -0.02f, 0.02f, 0.02f};
  ASSERT_EQ((*agg)->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ((**agg)[i], want[i]) << i;
}

TEST(DemoStrategy, UnweightedClientsAndASingleClient) {
  auto s = MakeStrategy(DemoOptions(0.5f));
  ASSERT_TRUE(s.ok());
  std::vector<TestUpdate> one = {{"a", 7, {-3.0f, 0.0f, 1e-6f}}};
  auto agg = RunRound(**s, 1, one, std::vector<float>(3));
  ASSERT_TRUE(agg.ok() && agg->has_value());
  EXPECT_EQ(**agg, (std::vector<float>{-0.5f, 0.0f, 0.5f}));
  // Equal weights: two opposite votes cancel to exactly 0.
  std::vector<TestUpdate> two = {{"a", 5, {2.0f, -1.0f}}, {"b", 5, {-2.0f, -1.0f}}};
  agg = RunRound(**s, 2, two, std::vector<float>(2));
  ASSERT_TRUE(agg.ok() && agg->has_value());
  EXPECT_EQ(**agg, (std::vector<float>{0.0f, -0.5f}));
}

TEST(DemoStrategy, NoResultsKeepTheModelAndConfigureIsFedAvgs) {
  auto s = MakeStrategy(DemoOptions(0.05f));
  ASSERT_TRUE(s.ok());
  const std::vector<ClientFailure> failed = {{"a", 1, "deadline"}};
  auto agg = RunRound(**s, 1, {}, std::vector<float>(3), failed);
  ASSERT_TRUE(agg.ok());
  EXPECT_FALSE(agg->has_value());
  std::vector<TestUpdate> no_examples = {{"a", 0, {1.0f}}};  // refused: an update needs a weight
  agg = RunRound(**s, 1, no_examples, std::vector<float>(1));
  EXPECT_FALSE(agg.ok());
  const RoundConfig c = (*s)->Configure(4);
  EXPECT_EQ(c.round, 4u);
  EXPECT_EQ(c.learning_rate, 0.05f);
  EXPECT_EQ(c.local_steps, 1u);
  EXPECT_EQ(c.prox_mu, 0.0f);
  // The unknown-name message lists it.
  StrategyOptions bad = DemoOptions(0.05f);
  bad.name = "nope";
  auto st = MakeStrategy(bad);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.status().message().find("demo"), std::string::npos);
}

// ---- End to end ----------------------------------------------------------------------------------

class DemoEndToEnd : public ::testing::Test {
 protected:
  static constexpr int kRows = 300;
  static constexpr int kDim = 4;
  static constexpr int kClasses = 3;

  void SetUp() override {
    csv_ = dir_ + "/blobs.csv";
    // Three well-separated Gaussian blobs, label in the last column, with a header line.
    testing::WriteBlobsCsv(csv_, kRows, kDim, kClasses, 77);
  }
  testing::TempDir tmp_;  // removed with everything in it after the test
  std::string dir_ = tmp_.path();
  std::string csv_;
};

TEST_F(DemoEndToEnd, TwoClientsWithOneLocalStepReduceTheLoss) {
  const std::string model = "mlp:16";
  auto backend = MakeCpuBackend();
  auto mlp = nn::MakeModel(model, {kDim, kClasses}, backend.get());
  ASSERT_TRUE(mlp.ok()) << mlp.status().ToString();

  TaskConfig task;
  task.model = model;
  task.layout = (*mlp)->Layout();
  task.dataset = "csv:" + csv_;
  task.optimizer.name = "demo";
  task.optimizer.learning_rate = 0.02f;
  task.optimizer.demo_decay = 0.999f;
  task.optimizer.demo_chunk = 8;  // small chunks and k so that the extraction is really partial
  task.optimizer.demo_topk = 4;
  task.batch_size = 32;
  task.seed = 3;
  task.test_fraction = 0.2;

  std::vector<std::unique_ptr<Trainer>> clients;
  for (uint32_t i = 0; i < 2; ++i) {
    BuiltinTrainerOptions o;
    o.dataset = "csv:" + csv_;
    o.partition_index = i;
    o.partition_count = 2;
    o.device = "cpu";
    auto t = MakeBuiltinTrainer(o);
    ASSERT_TRUE(t.ok()) << t.status().ToString();
    ASSERT_TRUE((*t)->Configure(task).ok());
    clients.push_back(std::move(t).value());
  }
  auto strategy = MakeStrategy(DemoOptions(task.optimizer.learning_rate));
  ASSERT_TRUE(strategy.ok());

  ParameterArena arena;
  (*mlp)->Init(&arena, 1);
  std::vector<float> global(arena.data(), arena.data() + arena.size());
  auto loss = [&]() {
    double sum = 0.0;
    for (auto& c : clients) {
      EvalResult e;
      EXPECT_TRUE(c->Evaluate(global, &e).ok());
      sum += e.loss;
    }
    return sum / static_cast<double>(clients.size());
  };
  const double initial = loss();
  for (uint64_t round = 1; round <= 20; ++round) {
    const RoundConfig rc = (*strategy)->Configure(round);
    ASSERT_EQ(rc.local_steps, 1u);
    std::vector<TestUpdate> results;
    for (size_t i = 0; i < clients.size(); ++i) {
      TrainResult tr;
      ASSERT_TRUE(clients[i]->Train(global, rc, TrainContext{}, &tr).ok());
      ASSERT_EQ(tr.delta.size(), global.size());
      results.push_back({"c" + std::to_string(i), tr.num_examples, std::move(tr.delta)});
    }
    auto update = RunRound(**strategy, round, results, global);
    ASSERT_TRUE(update.ok() && update->has_value());
    size_t moved = 0;
    for (size_t i = 0; i < global.size(); ++i) {
      const float u = (**update)[i];
      ASSERT_TRUE(u == 0.0f || std::fabs(u) == rc.learning_rate) << u;  // a sign step
      moved += u != 0.0f;
      global[i] += u;
    }
    EXPECT_GT(moved, 0u) << "round " << round;
  }
  const double final_loss = loss();
  RecordProperty("initial_loss", std::to_string(initial));
  RecordProperty("final_loss", std::to_string(final_loss));
  EXPECT_LT(final_loss, 0.3 * initial) << "initial " << initial << ", final " << final_loss;
}

// With one local step the delta is exactly -q (the extraction of the momentum), not
// w_local - w_global (which would be -lr * sign(q)); and the momentum carries over rounds: a
// client that trained round 1 sends something else in round 2 than a fresh one.
TEST_F(DemoEndToEnd, TheDeltaIsTheExtractedMomentumAndTheResidualCarriesOver) {
  const std::string model = "mlp:8";
  auto backend = MakeCpuBackend();
  auto mlp = nn::MakeModel(model, {kDim, kClasses}, backend.get());
  ASSERT_TRUE(mlp.ok());
  TaskConfig task;
  task.model = model;
  task.layout = (*mlp)->Layout();
  task.dataset = "csv:" + csv_;
  task.optimizer.name = "demo";
  task.optimizer.learning_rate = 0.01f;
  task.optimizer.demo_chunk = 4;
  task.optimizer.demo_topk = 2;
  task.batch_size = 16;
  task.seed = 5;
  BuiltinTrainerOptions o;
  o.dataset = "csv:" + csv_;
  o.device = "cpu";
  auto make = [&]() {
    auto t = MakeBuiltinTrainer(o);
    EXPECT_TRUE(t.ok());
    EXPECT_TRUE((*t)->Configure(task).ok());
    return std::move(t).value();
  };
  auto a = make(), b = make();
  ParameterArena arena;
  (*mlp)->Init(&arena, 2);
  const std::vector<float> global(arena.data(), arena.data() + arena.size());
  RoundConfig rc{1, 0.01f, 1, 1, 0.0f};

  TrainResult ra1, rb1;
  ASSERT_TRUE(a->Train(global, rc, {}, &ra1).ok());
  ASSERT_TRUE(b->Train(global, rc, {}, &rb1).ok());
  EXPECT_EQ(ra1.delta, rb1.delta);  // deterministic
  size_t nonzero = 0, not_a_sign_step = 0;
  for (float d : ra1.delta) {
    nonzero += d != 0.0f;
    not_a_sign_step += d != 0.0f && std::fabs(d) != 0.01f;
  }
  EXPECT_GT(nonzero, ra1.delta.size() / 2);
  EXPECT_GT(not_a_sign_step, ra1.delta.size() / 2);

  // Round 2 from the same global model and the same minibatch stream: `a` has round 1's
  // residual, a fresh trainer does not.
  rc.round = 2;
  auto fresh = make();
  TrainResult ra2, rf2;
  ASSERT_TRUE(a->Train(global, rc, {}, &ra2).ok());
  ASSERT_TRUE(fresh->Train(global, rc, {}, &rf2).ok());
  EXPECT_NE(ra2.delta, rf2.delta);
  // Configure again starts a new task: momentum cleared, so `a` now matches a fresh trainer.
  ASSERT_TRUE(a->Configure(task).ok());
  TrainResult ra3;
  ASSERT_TRUE(a->Train(global, rc, {}, &ra3).ok());
  EXPECT_EQ(ra3.delta, rf2.delta);

  // The trainer's state between rounds (Trainer::SaveState, what a client takes a round back
  // to): saved after round 1, round 2 trained twice from it gives the same delta bit for bit;
  // without the restore, the second try starts from round 2's momentum and differs.
  ASSERT_TRUE(a->Configure(task).ok());
  rc.round = 1;
  ASSERT_TRUE(a->Train(global, rc, {}, &ra1).ok());
  const std::vector<uint8_t> after_round_1 = a->SaveState();
  rc.round = 2;
  TrainResult first, again, restored;
  ASSERT_TRUE(a->Train(global, rc, {}, &first).ok());
  EXPECT_EQ(first.delta, ra2.delta);
  ASSERT_TRUE(a->Train(global, rc, {}, &again).ok());
  EXPECT_NE(again.delta, first.delta);
  ASSERT_TRUE(a->LoadState(after_round_1).ok());
  ASSERT_TRUE(a->Train(global, rc, {}, &restored).ok());
  EXPECT_EQ(restored.delta, first.delta);
  // Another task's state (no DeMo: no momentum) is refused, the trainer unchanged.
  std::vector<uint8_t> other = after_round_1;
  other.resize(other.size() - 4);
  EXPECT_FALSE(a->LoadState(other).ok());
  EXPECT_FALSE(a->LoadState(std::vector<uint8_t>{7}).ok());
}

}  // namespace
}  // namespace shoal::aggregator
