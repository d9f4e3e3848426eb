// The built-in trainer end to end: on a CSV file the test writes (always) and on sklearn's
// digits (when scripts/setup has fetched them into the data directory).
#include <gtest/gtest.h>

#include "blobs_csv.h"
#include "temp_dir.h"
#include <stdlib.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <thread>

#include "backend/backend.h"
#include "backend/collective.h"
#include "core/rng.h"
#include "shoal/data.h"
#include "nn/builtin_trainer.h"
#include "nn/data_parallel.h"
#include "nn/evaluate.h"
#include "nn/model_registry.h"
#include "shoal/trainer.h"

namespace shoal {
namespace {

namespace fs = std::filesystem;

double Norm(const std::vector<float>& v) {
  double s = 0.0;
  for (float x : v) s += static_cast<double>(x) * x;
  return std::sqrt(s);
}

// The layout the aggregator would send for `model` on data of this shape.
std::vector<TensorSpec> LayoutOf(const std::string& model, int64_t dim, int32_t classes) {
  auto backend = MakeCpuBackend();
  auto mlp = nn::MakeModel(model, {dim, classes}, backend.get());
  EXPECT_TRUE(mlp.ok()) << mlp.status().ToString();
  return (*mlp)->Layout();
}

class BuiltinTrainerTest : public ::testing::Test {
 protected:
  static constexpr int kRows = 240;
  static constexpr int kDim = 4;
  static constexpr int kClasses = 3;

  void SetUp() override {
    csv_ = dir_ + "/blobs.csv";
    // Three well-separated Gaussian blobs, label in the last column, with a header line.
    testing::WriteBlobsCsv(csv_, kRows, kDim, kClasses, 99);
  }

  BuiltinTrainerOptions Options(uint32_t index = 0, uint32_t count = 2) const {
    BuiltinTrainerOptions o;
    o.dataset = "csv:" + csv_;
    o.partition_index = index;
    o.partition_count = count;
    o.device = "cpu";
    return o;
  }

  TaskConfig Task(const std::string& model = "mlp:8") const {
    TaskConfig t;
    t.model = model;
    t.layout = LayoutOf(model, kDim, kClasses);
    t.dataset = "csv:" + csv_;
    t.optimizer.learning_rate = 0.1f;
    t.batch_size = 16;
    t.seed = 7;
    t.test_fraction = 0.25;
    return t;
  }

  std::unique_ptr<Trainer> Make(const BuiltinTrainerOptions& o, const TaskConfig& task) const {
    auto trainer = MakeBuiltinTrainer(o);
    EXPECT_TRUE(trainer.ok()) << trainer.status().ToString();
    if (!trainer.ok()) return nullptr;
    Status st = (*trainer)->Configure(task);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return std::move(trainer).value();
  }

  std::vector<float> InitialModel(const TaskConfig& task, uint64_t seed = 1) const {
    auto backend = MakeCpuBackend();
    auto mlp = nn::MakeModel(task.model, {kDim, kClasses}, backend.get());
    ParameterArena arena;
    (*mlp)->Init(&arena, seed);
    return {arena.data(), arena.data() + arena.size()};
  }

  // A one-layer gpt on byte tokens of `dataset`, AdamW.
  static TaskConfig GptTask(const std::string& dataset, uint32_t batch) {
    auto backend = MakeCpuBackend();
    auto gpt = nn::MakeModel("gpt:layers=1,dim=16,heads=2,ctx=16", {0, 0, 256}, backend.get());
    EXPECT_TRUE(gpt.ok());
    TaskConfig task;
    task.model = (*gpt)->spec();
    task.layout = (*gpt)->Layout();
    task.dataset = dataset;
    task.batch_size = batch;
    task.seed = 3;
    task.test_fraction = 0.1;
    task.optimizer.name = "adamw";
    task.optimizer.learning_rate = 3e-3f;
    return task;
  }
  static std::vector<float> GptInit(const TaskConfig& task) {
    auto backend = MakeCpuBackend();
    auto gpt = nn::MakeModel(task.model, {0, 0, 256}, backend.get());
    ParameterArena init;
    (*gpt)->Init(&init, task.seed);
    return {init.data(), init.data() + init.size()};
  }

  // A text file of `lines` repetitions of two short sentences, for the byte-token datasets.
  std::string WriteText(int lines) const {
    const std::string path = dir_ + "/text.txt";
    std::ofstream out(path);
    for (int i = 0; i < lines; ++i) out << "the cat sat on the mat. the dog sat on the log.\n";
    return path;
  }

  // One round of a fresh trainer of part 0/2 of the task's dataset on `ranks` data-parallel
  // ranks, with gradient buckets of `bucket_bytes`; a failed Train fails the test (its delta is
  // then empty).
  TrainResult TrainOnRanks(const TaskConfig& task, const std::vector<float>& global, const RoundConfig& round,
                           uint32_t ranks, size_t bucket_bytes = BuiltinTrainerOptions{}.bucket_bytes) const {
    BuiltinTrainerOptions o = Options();
    o.dataset = task.dataset;
    o.ranks = ranks;
    o.bucket_bytes = bucket_bytes;
    auto trainer = Make(o, task);
    TrainResult r;
    const Status st = trainer ? trainer->Train(global, round, TrainContext{}, &r) : Status::Internal("no trainer");
    EXPECT_TRUE(st.ok()) << ranks << " ranks, buckets of " << bucket_bytes << " bytes: " << st.ToString();
    return r;
  }

  // This client's part, derived exactly as the trainer is documented to derive it.
  data::Dataset LocalPart(const TaskConfig& task, uint32_t index, uint32_t count) const {
    auto full = data::LoadDataset("csv:" + csv_, "");
    EXPECT_TRUE(full.ok()) << full.status().ToString();
    auto split = data::TrainTestSplit(*full, task.test_fraction, task.seed);
    EXPECT_TRUE(split.ok());
    auto parts = data::Partition(split->train.y, split->train.num_classes, count, "iid", task.seed);
    EXPECT_TRUE(parts.ok());
    return data::Subset(split->train, (*parts)[index]);
  }

  testing::TempDir tmp_;  // removed with everything in it after the test
  std::string dir_ = tmp_.path();
  std::string csv_;
};

TEST_F(BuiltinTrainerTest, FactoryFailsFastWithTheLoadersError) {
  BuiltinTrainerOptions o = Options();
  o.dataset = "csv:" + dir_ + "/missing.csv";
  auto trainer = MakeBuiltinTrainer(o);
  ASSERT_FALSE(trainer.ok());
  EXPECT_NE(trainer.status().message().find("missing.csv"), std::string::npos) << trainer.status().ToString();

  o = Options(2, 2);
  trainer = MakeBuiltinTrainer(o);
  ASSERT_FALSE(trainer.ok());
  EXPECT_EQ(trainer.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(trainer.status().message().find("2/2"), std::string::npos) << trainer.status().ToString();

  o = Options();
  o.device = "tpu";
  EXPECT_FALSE(MakeBuiltinTrainer(o).ok());
}

// Token datasets (text:, kjv) load, but nothing here trains or evaluates on them yet: each
// feature-only consumer says so instead of reading rows that are not there.
// A text dataset trains a language model: a feature model is refused at Configure with a
// clear message; a gpt trains on random windows of this part's tokens, reports tokens as its
// examples, and lowers the held-out loss its own Evaluate measures.
TEST_F(BuiltinTrainerTest, TextTrainsAGptAndRefusesAFeatureModel) {
  const std::string text = WriteText(200);
  BuiltinTrainerOptions o = Options(0, 2);
  o.dataset = "text:" + text;
  auto trainer = MakeBuiltinTrainer(o);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  Status mlp = (*trainer)->Configure(Task());
  EXPECT_EQ(mlp.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(mlp.message().find("holds tokens"), std::string::npos) << mlp.message();

  const TaskConfig task = GptTask(o.dataset, 8);
  ASSERT_TRUE((*trainer)->Configure(task).ok());
  std::vector<float> w = GptInit(task);
  auto backend = MakeCpuBackend();
  EvalResult before;
  ASSERT_TRUE((*trainer)->Evaluate(w, &before).ok());
  EXPECT_NEAR(before.loss, std::log(256.0), 0.1) << "the init predicts bytes uniformly";
  RoundConfig round;
  round.round = 1;
  round.local_steps = 60;
  TrainContext ctx;
  TrainResult r;
  ASSERT_TRUE((*trainer)->Train(w, round, ctx, &r).ok());
  EXPECT_EQ(r.num_examples, 60u * 8 * 16) << "the weight is the tokens predicted";
  for (size_t i = 0; i < w.size(); ++i) w[i] += r.delta[i];
  EvalResult after;
  ASSERT_TRUE((*trainer)->Evaluate(w, &after).ok());
  EXPECT_LT(after.loss, 0.6 * before.loss) << before.loss << " -> " << after.loss;

  // Evaluate refuses a model of the other kind rather than read rows that are not there.
  auto text_data = data::LoadDataset("text:" + text, "");
  ASSERT_TRUE(text_data.ok());
  auto mlp_model = nn::MakeModel("mlp:8", {kDim, kClasses}, backend.get());
  ASSERT_TRUE(mlp_model.ok());
  const EvalResult eval = nn::Evaluate(**mlp_model, InitialModel(Task()), *text_data);
  EXPECT_TRUE(std::isnan(eval.loss));
  EXPECT_EQ(eval.num_examples, 0u);
}

TEST_F(BuiltinTrainerTest, ConfigureChecksTheSeedAndTheLayout) {
  BuiltinTrainerOptions o = Options();
  o.seed = 8;
  auto trainer = MakeBuiltinTrainer(o);
  ASSERT_TRUE(trainer.ok()) << trainer.status().ToString();
  Status st = (*trainer)->Configure(Task());
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("8"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("7"), std::string::npos) << st.message();

  o.seed = 7;
  trainer = MakeBuiltinTrainer(o);
  ASSERT_TRUE(trainer.ok());
  TaskConfig task = Task("mlp:8");
  task.layout = LayoutOf("mlp:16", kDim, kClasses);  // the aggregator thinks it is another model
  st = (*trainer)->Configure(task);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find(LayoutToString(LayoutOf("mlp:8", kDim, kClasses))), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(LayoutToString(task.layout)), std::string::npos) << st.message();

  task = Task();
  task.model = "cnn";
  EXPECT_EQ((*trainer)->Configure(task).code(), StatusCode::kInvalidArgument);
  task = Task();
  task.optimizer.nesterov = true;  // without momentum
  EXPECT_EQ((*trainer)->Configure(task).code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE((*trainer)->Configure(Task()).ok());
}

TEST_F(BuiltinTrainerTest, TrainAndEvaluateBeforeConfigureAreRefused) {
  auto trainer = MakeBuiltinTrainer(Options());
  ASSERT_TRUE(trainer.ok());
  TrainResult result;
  EvalResult eval;
  std::vector<float> w(10);
  EXPECT_EQ((*trainer)->Train(w, RoundConfig{}, TrainContext{}, &result).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*trainer)->Evaluate(w, &eval).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ((*trainer)->name(), "builtin");
}

TEST_F(BuiltinTrainerTest, EpochsAndStepsCountExamples) {
  const TaskConfig task = Task();
  auto trainer = Make(Options(0, 2), task);
  ASSERT_TRUE(trainer);
  const data::Dataset local = LocalPart(task, 0, 2);
  ASSERT_GT(local.n, 0);
  EXPECT_EQ(trainer->num_examples(), static_cast<uint64_t>(local.n));
  const std::vector<float> global = InitialModel(task);

  RoundConfig round;
  round.learning_rate = 0.1f;
  round.local_epochs = 2;
  TrainResult result;
  ASSERT_TRUE(trainer->Train(global, round, TrainContext{}, &result).ok());
  EXPECT_EQ(result.num_examples, 2u * local.n);
  EXPECT_EQ(result.delta.size(), global.size());
  EXPECT_GT(Norm(result.delta), 0.0);
  ASSERT_EQ(result.metrics.size(), 2u);
  EXPECT_EQ(result.metrics[0].first, "train_loss");
  EXPECT_GT(result.metrics[0].second, 0.0);
  EXPECT_EQ(result.metrics[1].first, "train_accuracy");
  EXPECT_GE(result.metrics[1].second, 0.0);
  EXPECT_LE(result.metrics[1].second, 1.0);

  round.local_steps = 5;  // overrides epochs; crosses an epoch boundary when 5 * 16 > n
  ASSERT_TRUE(trainer->Train(global, round, TrainContext{}, &result).ok());
  EXPECT_EQ(result.num_examples, 5u * 16u);
}

TEST_F(BuiltinTrainerTest, OneFullBatchStepIsMinusLearningRateTimesGradient) {
  TaskConfig task = Task();
  task.batch_size = 1000;  // larger than the part: one step sees every local example once
  auto trainer = Make(Options(1, 2), task);
  ASSERT_TRUE(trainer);
  const std::vector<float> global = InitialModel(task, 3);
  RoundConfig round;
  round.learning_rate = 0.25f;  // the round's rate, not the task's 0.1
  round.local_steps = 1;
  TrainResult result;
  ASSERT_TRUE(trainer->Train(global, round, TrainContext{}, &result).ok());

  const data::Dataset local = LocalPart(task, 1, 2);
  EXPECT_EQ(result.num_examples, static_cast<uint64_t>(local.n));
  auto backend = MakeCpuBackend();
  auto mlp = nn::MakeModel(task.model, {kDim, kClasses}, backend.get());
  std::vector<float> grads(global.size());
  const nn::Batch batch = nn::Batch::Features(local.x.data(), local.y.data(), static_cast<int>(local.n));
  const double loss_sum = (*mlp)->ForwardBackward(global.data(), batch, grads.data(), /*loss_scale=*/1.0f).loss_sum;
  for (size_t i = 0; i < grads.size(); ++i)
    EXPECT_NEAR(result.delta[i], -0.25f * grads[i], 1e-6 + 1e-4 * std::fabs(grads[i])) << i;
  EXPECT_NEAR(result.metrics[0].second, loss_sum / local.n, 1e-5);
}

TEST_F(BuiltinTrainerTest, ShufflesAreDeterministicPerRoundAndPart) {
  const TaskConfig task = Task();
  const std::vector<float> global = InitialModel(task);
  RoundConfig round;
  round.round = 3;
  round.learning_rate = 0.1f;
  round.local_epochs = 1;
  auto train = [&](uint32_t index, uint64_t r) {
    auto trainer = Make(Options(index, 2), task);
    RoundConfig rc = round;
    rc.round = r;
    TrainResult result;
    EXPECT_TRUE(trainer->Train(global, rc, TrainContext{}, &result).ok());
    return result.delta;
  };
  const std::vector<float> a = train(0, 3);
  EXPECT_EQ(a, train(0, 3)) << "same task, part and round must give the same bytes";
  EXPECT_NE(a, train(0, 4)) << "another round must reshuffle";
  EXPECT_NE(a, train(1, 3)) << "another part has other data";
}

TEST_F(BuiltinTrainerTest, FedProxKeepsTheLocalModelCloserToTheGlobalOne) {
  const TaskConfig task = Task();
  auto trainer = Make(Options(0, 2), task);
  ASSERT_TRUE(trainer);
  const std::vector<float> global = InitialModel(task);
  RoundConfig round;
  round.learning_rate = 0.1f;
  round.local_epochs = 3;
  TrainResult plain, prox;
  ASSERT_TRUE(trainer->Train(global, round, TrainContext{}, &plain).ok());
  round.prox_mu = 1.0f;
  ASSERT_TRUE(trainer->Train(global, round, TrainContext{}, &prox).ok());
  EXPECT_LT(Norm(prox.delta), 0.8 * Norm(plain.delta));
  EXPECT_GT(Norm(prox.delta), 0.0);
  round.prox_mu = -1.0f;
  EXPECT_EQ(trainer->Train(global, round, TrainContext{}, &prox).code(), StatusCode::kInvalidArgument);
}

TEST_F(BuiltinTrainerTest, ReportsProgressAndHonoursCancellation) {
  const TaskConfig task = Task();
  auto trainer = Make(Options(0, 2), task);
  ASSERT_TRUE(trainer);
  const std::vector<float> global = InitialModel(task);
  RoundConfig round;
  round.learning_rate = 0.1f;
  round.local_epochs = 4;

  std::vector<float> seen;
  TrainContext ctx;
  ctx.progress = [&](float f) { seen.push_back(f); };
  TrainResult result;
  ASSERT_TRUE(trainer->Train(global, round, ctx, &result).ok());
  ASSERT_GE(seen.size(), 2u);
  EXPECT_FLOAT_EQ(seen.back(), 1.0f);
  for (size_t i = 1; i < seen.size(); ++i) EXPECT_GT(seen[i], seen[i - 1]);

  // Cancel from "another thread" after the second progress report.
  std::atomic<bool> cancel{false};
  int calls = 0;
  ctx.cancel = &cancel;
  ctx.progress = [&](float) {
    if (++calls == 2) cancel = true;
  };
  Status st = trainer->Train(global, round, ctx, &result);
  EXPECT_EQ(st.code(), StatusCode::kCancelled) << st.ToString();
  EXPECT_EQ(calls, 2);
}

TEST_F(BuiltinTrainerTest, RejectsAGlobalModelOfTheWrongSize) {
  auto trainer = Make(Options(), Task());
  ASSERT_TRUE(trainer);
  std::vector<float> wrong(5);
  TrainResult result;
  EvalResult eval;
  EXPECT_EQ(trainer->Train(wrong, RoundConfig{}, TrainContext{}, &result).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(trainer->Evaluate(wrong, &eval).code(), StatusCode::kInvalidArgument);
}

// FedAvg by hand over two built-in trainers; the held-out split (never seen by the clients)
// must be learned.
// FedAvg over `clients`; adds up the clients' "skipped_steps" metric into *skipped if given.
void RunFedAvg(std::vector<std::unique_ptr<Trainer>>& clients, std::vector<float>* global, int rounds, float lr,
               double* skipped = nullptr) {
  for (int r = 0; r < rounds; ++r) {
    RoundConfig round;
    round.round = static_cast<uint64_t>(r);
    round.learning_rate = lr;
    round.local_epochs = 1;
    std::vector<double> sum(global->size(), 0.0);
    uint64_t total = 0;
    for (auto& client : clients) {
      TrainResult result;
      Status st = client->Train(*global, round, TrainContext{}, &result);
      ASSERT_TRUE(st.ok()) << st.ToString();
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += static_cast<double>(result.num_examples) * result.delta[i];
      total += result.num_examples;
      for (const auto& [name, value] : result.metrics)
        if (name == "skipped_steps" && skipped) *skipped += value;
    }
    ASSERT_GT(total, 0u);
    for (size_t i = 0; i < sum.size(); ++i) (*global)[i] += static_cast<float>(sum[i] / total);
  }
}

TEST_F(BuiltinTrainerTest, FederatedRoundsLearnTheHeldOutSplit) {
  const TaskConfig task = Task();
  std::vector<std::unique_ptr<Trainer>> clients;
  for (uint32_t i = 0; i < 2; ++i) clients.push_back(Make(Options(i, 2), task));
  std::vector<float> global = InitialModel(task);
  RunFedAvg(clients, &global, 8, 0.1f);

  auto full = data::LoadDataset("csv:" + csv_, "");
  ASSERT_TRUE(full.ok());
  auto split = data::TrainTestSplit(*full, task.test_fraction, task.seed);
  ASSERT_TRUE(split.ok());
  auto backend = MakeCpuBackend();
  auto mlp = nn::MakeModel(task.model, {kDim, kClasses}, backend.get());
  const EvalResult held_out = nn::Evaluate(**mlp, global, split->test);
  EXPECT_EQ(held_out.num_examples, static_cast<uint64_t>(split->test.n));
  EXPECT_GE(held_out.accuracy, 0.95);

  EvalResult local;
  ASSERT_TRUE(clients[0]->Evaluate(global, &local).ok());
  EXPECT_EQ(local.num_examples, clients[0]->num_examples());
  EXPECT_GE(local.accuracy, 0.95);
}

// FedAvg on sklearn's digits, as the demo runs it: 4 label-skewed clients, `rounds` rounds, in
// the given compute precision. Returns the held-out accuracy; *skipped gets the fp16 steps
// skipped for overflow.
double DigitsFedAvgAccuracy(int rounds, const std::string& precision, float fp16_loss_scale = 65536.0f,
                            double* skipped = nullptr) {
  const std::string dir = data::DefaultDataDir();
  // scripts/test fetches the data first, so a missing file is a failure, not a skip.
  EXPECT_TRUE(fs::exists(dir + "/digits.csv.gz"))
      << "no " << dir << "/digits.csv.gz: run scripts/setup (or set SHOAL_DATA_DIR) to fetch it";
  TaskConfig task;
  task.model = "mlp";
  task.layout = LayoutOf("mlp", 64, 10);
  task.dataset = "digits";
  task.optimizer.learning_rate = 0.1f;
  task.optimizer.momentum = 0.9f;
  task.batch_size = 32;
  task.seed = 1;
  std::vector<std::unique_ptr<Trainer>> clients;
  for (uint32_t i = 0; i < 4; ++i) {
    BuiltinTrainerOptions o;
    o.dataset = "digits";
    o.partition_index = i;
    o.partition_count = 4;
    o.partition_scheme = "dirichlet:0.5";
    o.device = "cpu";
    o.precision = precision;
    o.fp16_loss_scale = fp16_loss_scale;
    auto trainer = MakeBuiltinTrainer(o);
    EXPECT_TRUE(trainer.ok()) << trainer.status().ToString();
    if (!trainer.ok()) return 0.0;
    EXPECT_TRUE((*trainer)->Configure(task).ok());
    clients.push_back(std::move(trainer).value());
  }
  auto backend = MakeCpuBackend();
  auto mlp = nn::MakeModel("mlp", {64, 10}, backend.get());
  ParameterArena arena;
  (*mlp)->Init(&arena, task.seed);
  std::vector<float> global(arena.data(), arena.data() + arena.size());
  RunFedAvg(clients, &global, rounds, 0.1f, skipped);

  auto full = data::LoadDataset("digits", dir);
  EXPECT_TRUE(full.ok()) << full.status().ToString();
  auto split = data::TrainTestSplit(*full, task.test_fraction, task.seed);
  EXPECT_TRUE(split.ok());
  const EvalResult held_out = nn::Evaluate(**mlp, global, split->test);
  EXPECT_NEAR(static_cast<double>(held_out.num_examples), 0.2 * 1797, 10);  // ~20% of each class
  return held_out.accuracy;
}

TEST(BuiltinTrainerDigits, FederatedMlpLearnsDigits) { EXPECT_GE(DigitsFedAvgAccuracy(10, "fp32"), 0.9); }

// Mixed precision (fp32 master weights, reduced-precision GEMM operands, emulated on the CPU
// exactly as tensor cores round them) trains as well as fp32 on digits: within 2 points.
TEST(BuiltinTrainerDigits, ReducedPrecisionTrainsLikeFp32) {
  const double fp32 = DigitsFedAvgAccuracy(10, "fp32");
  for (const char* p : {"tf32", "bf16", "fp16"}) {
    double skipped = 0;
    const double acc = DigitsFedAvgAccuracy(10, p, 65536.0f, &skipped);
    EXPECT_NEAR(acc, fp32, 0.02) << p;
    if (std::string(p) == "fp16") {
      EXPECT_EQ(skipped, 0) << "the default scale does not overflow on digits";
    }
  }
}

// fp16 with a loss scale far too large: the scaled gradients overflow fp16, those steps are
// skipped (and counted) while the scale halves, and training still converges.
TEST(BuiltinTrainerDigits, Fp16OverflowIsSkippedAndCounted) {
  double skipped = 0;
  const double acc = DigitsFedAvgAccuracy(10, "fp16", 0x1p40f, &skipped);
  // Each client halves its scale from 2^40 until its scaled gradients fit in fp16 (|dlogits|
  // <= 1/32, so below about 2^21): some 20 skipped steps per client, then normal training.
  EXPECT_GE(skipped, 4 * 15);
  EXPECT_LE(skipped, 4 * 25);
  EXPECT_GE(acc, 0.85);
}

TEST(BuiltinTrainerOptionsTest, BadPrecisionAndLossScaleAreRefused) {
  BuiltinTrainerOptions o;
  o.dataset = "digits";
  o.device = "cpu";
  o.precision = "fp8";
  auto t = MakeBuiltinTrainer(o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("fp32, tf32, bf16 or fp16"), std::string::npos) << t.status().message();
  o.precision = "fp16";
  o.fp16_loss_scale = 0.5f;
  t = MakeBuiltinTrainer(o);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("loss scale"), std::string::npos) << t.status().message();
}

}  // namespace
}  // namespace shoal

namespace shoal {
namespace {

// max |a - b| over max |b|: how far a data-parallel round is from the one-rank round.
double RelativeMaxDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double diff = 0.0, scale = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::abs(static_cast<double>(a[i]) - b[i]));
    scale = std::max(scale, std::abs(static_cast<double>(b[i])));
  }
  return diff / scale;
}

// Data-parallel ranks on the CPU (nn/data_parallel.h: threads and the thread group): 2, 3 and
// 8 ranks train the round one rank trains, the same minibatches split into shards and the
// shares' gradients all-reduced, up to the rounding of that split sum; the ranks' replicas
// agree (Train checks). A part of 90 rows in batches of 7 ends each epoch with 6 rows, so 8
// ranks also meet empty shards.
TEST_F(BuiltinTrainerTest, DataParallelRanksTrainTheOneRankRound) {
  TaskConfig task = Task("mlp:8");
  task.batch_size = 7;
  task.optimizer.momentum = 0.9f;
  const std::vector<float> global = InitialModel(task);
  RoundConfig round;
  round.round = 1;
  round.local_epochs = 3;
  round.learning_rate = 0.1f;
  const TrainResult one = TrainOnRanks(task, global, round, 1);
  ASSERT_EQ(one.num_examples, 3u * 90);
  ASSERT_GT(Norm(one.delta), 0.1);
  for (uint32_t ranks : {2u, 3u, 8u}) {
    const TrainResult many = TrainOnRanks(task, global, round, ranks);
    EXPECT_EQ(many.num_examples, one.num_examples) << ranks;
    EXPECT_LT(RelativeMaxDiff(many.delta, one.delta), 1e-4) << ranks << " ranks";
    EXPECT_NEAR(many.metrics[0].second, one.metrics[0].second, 1e-6) << "train_loss, " << ranks << " ranks";
  }
  // Another task on the same trainer (an aggregator restarted with another model): its ranks,
  // group and buckets follow the new model.
  BuiltinTrainerOptions o = Options();
  o.ranks = 3;
  o.bucket_bytes = 64;
  auto trainer = Make(o, task);
  ASSERT_TRUE(trainer);
  TrainResult r;
  ASSERT_TRUE(trainer->Train(global, round, TrainContext{}, &r).ok());
  const TaskConfig bigger = Task("mlp:16,16");
  ASSERT_TRUE(trainer->Configure(bigger).ok());
  ASSERT_TRUE(trainer->Train(InitialModel(bigger), round, TrainContext{}, &r).ok());
  EXPECT_EQ(r.delta.size(), InitialModel(bigger).size());
  EXPECT_GT(Norm(r.delta), 0.1);
}

// Token windows split the same way: a gpt's round on 2 ranks is the one-rank round.
TEST_F(BuiltinTrainerTest, DataParallelRanksSplitTokenWindows) {
  const TaskConfig task = GptTask("text:" + WriteText(100), 6);
  const std::vector<float> global = GptInit(task);
  RoundConfig round;
  round.round = 2;
  round.local_steps = 8;
  std::vector<std::vector<float>> deltas;
  for (uint32_t ranks : {1u, 2u, 4u}) {
    const TrainResult r = TrainOnRanks(task, global, round, ranks);
    ASSERT_FALSE(r.delta.empty()) << ranks;
    EXPECT_EQ(r.num_examples, 8u * 6 * 16);
    deltas.push_back(r.delta);
  }
  EXPECT_LT(RelativeMaxDiff(deltas[1], deltas[0]), 1e-3);
  EXPECT_LT(RelativeMaxDiff(deltas[2], deltas[0]), 1e-3);
}

// Gradient buckets (DDP's, all-reduced while the backward pass goes on) give the bits of one
// all-reduce after it: every element is scaled and summed the same way, whatever the buckets.
TEST_F(BuiltinTrainerTest, GradientBucketsGiveTheBitsOfOneAllReduce) {
  TaskConfig task = Task("mlp:8,6");
  task.batch_size = 7;
  const std::vector<float> global = InitialModel(task);
  RoundConfig round;
  round.round = 1;
  round.local_epochs = 2;
  round.learning_rate = 0.1f;
  auto train = [&](uint32_t ranks, size_t bucket_bytes) { return TrainOnRanks(task, global, round, ranks, bucket_bytes).delta; };
  for (uint32_t ranks : {2u, 3u, 8u}) {
    const std::vector<float> whole = train(ranks, 0);
    for (size_t bucket : {size_t{4}, size_t{28}, size_t{64}, size_t{25} << 20})  // 1 float to all of it
      EXPECT_EQ(train(ranks, bucket), whole) << ranks << " ranks, buckets of " << bucket << " bytes";
  }
  // A gpt announces its final layer norm and each block; its embeddings go at the end.
  const TaskConfig gpt = GptTask("text:" + WriteText(60), 4);
  RoundConfig steps;
  steps.round = 1;
  steps.local_steps = 4;
  std::vector<std::vector<float>> deltas;
  for (size_t bucket : {size_t{0}, size_t{512}, size_t{25} << 20}) {
    deltas.push_back(TrainOnRanks(gpt, GptInit(gpt), steps, 2, bucket).delta);
    ASSERT_FALSE(deltas.back().empty()) << bucket;
  }
  EXPECT_EQ(deltas[1], deltas[0]);
  EXPECT_EQ(deltas[2], deltas[0]);
}

TEST(DataParallel, RankDevicesAndThePoolRunEveryRankOnItsOwnThread) {
  EXPECT_EQ(*nn::RankDevices("cpu", 3), (std::vector<std::string>{"cpu", "cpu", "cpu"}));
  EXPECT_EQ(*nn::RankDevices("cuda:2", 2), (std::vector<std::string>{"cuda:2", "cuda:3"}));
  EXPECT_EQ(*nn::RankDevices("cuda", 2), (std::vector<std::string>{"cuda:0", "cuda:1"}));
  EXPECT_EQ(*nn::RankDevices("cuda:1", 1), (std::vector<std::string>{"cuda:1"}));
  EXPECT_EQ(nn::RankDevices("cpu", 0).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(nn::RankDevices("cuda:x", 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(nn::RankDevices("tpu", 2).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeCollectiveGroup({"cpu", "cuda:0"}).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(MakeCollectiveGroup({"cuda:0", "cuda:0"}).status().code(), StatusCode::kInvalidArgument);

  nn::RankPool pool(4);
  std::vector<std::thread::id> ids(4);
  for (int pass = 0; pass < 50; ++pass) {
    std::vector<std::thread::id> now(4);
    ASSERT_TRUE(pool.Run([&](int r) {
      now[static_cast<size_t>(r)] = std::this_thread::get_id();
      return Status::Ok();
    }).ok());
    EXPECT_EQ(now[0], std::this_thread::get_id()) << "rank 0 runs on the caller";
    if (pass > 0) {
      EXPECT_EQ(now, ids) << "each rank keeps its thread";
    }
    ids = now;
  }
  for (int i = 0; i < 4; ++i)
    for (int j = i + 1; j < 4; ++j) EXPECT_NE(ids[i], ids[j]);
  const Status failed = pool.Run([](int r) { return r >= 2 ? Status::Internal("rank " + std::to_string(r)) : Status::Ok(); });
  EXPECT_EQ(failed.message(), "rank 2") << "the lowest failing rank's error";
}

}  // namespace
}  // namespace shoal
