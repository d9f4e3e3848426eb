// Serverless peers that train with the APPLICATION's own Trainer (shoal::RunPeer with a
// trainer), as threads of this process over loopback TCP: a binary logistic regression written
// here (like examples/embed_logreg.cc for the client), in allgather and diloco mode. The
// replicas stay bit-identical at every step, the loss falls, and the trainer is driven as
// shoal/peer.h says (allgather: one plain SGD step of lr 1; diloco: H steps at the task's lr).
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <thread>

#include "core/rng.h"
#include "harness.h"
#include "shoal/peer.h"

namespace shoal::testing {
namespace {

constexpr int64_t kDim = 4;

// What the peer asked of the trainer, for the test to check after the run.
struct Seen {
  std::mutex mu;
  OptimizerConfig optimizer;
  std::set<std::pair<float, uint32_t>> rounds;  // (learning_rate, local_steps)
  bool keep_state = true;
};

// p(y=1 | x) = sigmoid(w.x + b) on two Gaussian blobs (means -0.7 and +0.7 in every feature),
// plain minibatch SGD by hand. Layout: w [kDim], b [1].
class LogReg final : public Trainer {
 public:
  LogReg(uint32_t part, Seen* seen) : part_(part), seen_(seen) {
    Rng rng(1234, part);
    for (int i = 0; i < 256; ++i) {
      const int y = i % 2;
      for (int64_t j = 0; j < kDim; ++j) x_.push_back(static_cast<float>((y ? 0.7 : -0.7) + rng.Normal()));
      y_.push_back(y);
    }
  }
  static std::vector<TensorSpec> Layout() { return {{"w", {kDim}}, {"b", {1}}}; }

  std::string name() const override { return "test_logreg"; }
  uint64_t num_examples() const override { return y_.size(); }
  Status Configure(const TaskConfig& task) override {
    if (task.layout != Layout()) return Status::InvalidArgument("not a logistic regression layout");
    task_ = task;
    std::lock_guard<std::mutex> lock(seen_->mu);
    seen_->optimizer = task.optimizer;
    return Status::Ok();
  }
  Status Train(std::span<const float> global, const RoundConfig& round, const TrainContext& ctx,
               TrainResult* out) override {
    {
      std::lock_guard<std::mutex> lock(seen_->mu);
      seen_->rounds.insert({round.learning_rate, round.local_steps});
      seen_->keep_state = seen_->keep_state && round.keep_optimizer_state;
    }
    std::vector<float> w(global.begin(), global.end());
    Rng rng(task_.seed ^ 0x5eed, (round.round << 8) | part_);
    double loss = 0.0;
    uint64_t seen = 0;
    for (uint32_t s = 0; s < round.local_steps; ++s) {
      if (ctx.cancelled()) return Status::Cancelled("stopped");
      std::vector<float> g(w.size(), 0.0f);
      for (uint32_t r = 0; r < task_.batch_size; ++r) {
        const size_t i = static_cast<size_t>(rng.Uniform() * static_cast<double>(y_.size())) % y_.size();
        const double p = Predict(w, i);
        loss += -std::log(y_[i] ? p : 1.0 - p);
        const float dz = static_cast<float>(p - y_[i]);
        for (int64_t j = 0; j < kDim; ++j) g[j] += dz * x_[i * kDim + j];
        g[kDim] += dz;
      }
      for (size_t j = 0; j < w.size(); ++j) w[j] -= round.learning_rate * g[j] / static_cast<float>(task_.batch_size);
      seen += task_.batch_size;
    }
    out->delta.resize(w.size());
    for (size_t j = 0; j < w.size(); ++j) out->delta[j] = w[j] - global[j];
    out->num_examples = seen;
    out->metrics = {{"train_loss", seen ? loss / static_cast<double>(seen) : 0.0}};
    return Status::Ok();
  }
  Status Evaluate(std::span<const float> params, EvalResult* out) override {
    std::vector<float> w(params.begin(), params.end());
    double loss = 0.0, correct = 0.0;
    for (size_t i = 0; i < y_.size(); ++i) {
      const double p = Predict(w, i);
      loss += -std::log(y_[i] ? p : 1.0 - p);
      correct += (p > 0.5) == (y_[i] == 1);
    }
    *out = {loss / static_cast<double>(y_.size()), correct / static_cast<double>(y_.size()), y_.size()};
    return Status::Ok();
  }

 private:
  double Predict(const std::vector<float>& w, size_t i) const {
    double z = w[kDim];
    for (int64_t j = 0; j < kDim; ++j) z += static_cast<double>(w[j]) * x_[i * kDim + j];
    return std::clamp(1.0 / (1.0 + std::exp(-z)), 1e-7, 1.0 - 1e-7);
  }

  uint32_t part_;
  Seen* seen_;
  TaskConfig task_;
  std::vector<float> x_;
  std::vector<int> y_;
};

struct SwarmRun {
  std::vector<std::map<uint64_t, nlohmann::json>> steps;  // per peer, by step
  std::vector<Status> status;
  std::vector<std::unique_ptr<Seen>> seen;
};

// Whether a TCP connection to `endpoint` ("tcp://127.0.0.1:PORT") opens within 10 s.
bool Accepting(const std::string& endpoint) {
  const int port = std::stoi(endpoint.substr(endpoint.rfind(':') + 1));
  return WaitFor([port] {
    const int fd = ConnectLoopback(port);
    if (fd >= 0) ::close(fd);
    return fd >= 0;
  }, std::chrono::seconds(10));
}

// `count` peers with LogReg trainers; peer 0 founds the swarm with `base`'s task, the others
// join through it.
SwarmRun RunSwarm(const std::string& name, int count, PeerOptions base) {
  const std::string dir = TempDir(name);
  SwarmRun run;
  std::vector<PeerOptions> options;
  for (int i = 0; i < count; ++i) {
    PeerOptions o = base;
    o.name = "p" + std::to_string(i);
    o.listen = Endpoint(FreePort());
    o.metrics_out = dir + "/p" + std::to_string(i) + ".jsonl";
    o.task.layout = LogReg::Layout();
    o.task.model = "logreg";
    o.min_peers = static_cast<uint32_t>(count);
    o.step_timeout_ms = 2000;
    o.heartbeat_interval_ms = 100;
    o.heartbeat_timeout_ms = 2000;
    o.join_timeout_ms = 20000;
    if (i > 0) o.bootstrap = {options[0].listen};
    options.push_back(o);
    run.seen.push_back(std::make_unique<Seen>());
  }
  std::atomic<bool> stop{false};
  run.status.resize(count);
  std::vector<std::thread> threads;
  for (int i = 0; i < count; ++i) {
    threads.emplace_back([&, i] {
      run.status[i] = RunPeer(options[i], std::make_unique<LogReg>(static_cast<uint32_t>(i), run.seen[i].get()), stop);
    });
    if (i == 0) {
      EXPECT_TRUE(Accepting(options[0].listen)) << "the founder binds first";
    }
  }
  for (auto& t : threads) t.join();
  for (int i = 0; i < count; ++i) {
    std::map<uint64_t, nlohmann::json> s;
    for (auto& l : ReadJsonLines(options[i].metrics_out)) s[l["step"].get<uint64_t>()] = l;
    run.steps.push_back(std::move(s));
  }
  return run;
}

// Every peer finished all `steps`, with one model hash per step across peers, and the loss
// fell: the trainer's own evaluation of the shared model, and the training loss it reported.
void ExpectIdenticalAndLearning(const SwarmRun& run, uint64_t steps) {
  for (size_t p = 0; p < run.status.size(); ++p) ASSERT_TRUE(run.status[p].ok()) << "peer " << p << ": " << run.status[p].message();
  uint64_t common = 0;
  for (const auto& [step, line] : run.steps[0]) {
    bool everywhere = true;
    for (size_t p = 1; p < run.steps.size(); ++p) {
      auto it = run.steps[p].find(step);
      if (it == run.steps[p].end()) {
        everywhere = false;
        continue;
      }
      EXPECT_EQ(it->second["model_hash"], line["model_hash"]) << "step " << step << ", peer " << p;
    }
    common += everywhere;
  }
  EXPECT_GE(common, steps - 1) << "every peer took part from (nearly) the first step";
  const auto& s = run.steps[0];
  ASSERT_EQ(s.rbegin()->first, steps);
  ASSERT_TRUE(s.begin()->second.contains("eval_loss")) << s.begin()->second.dump();
  const double first = s.begin()->second["eval_loss"].get<double>();
  const double last = s.rbegin()->second["eval_loss"].get<double>();
  EXPECT_LT(last, first) << "eval loss " << first << " -> " << last;
  EXPECT_LT(last, 0.5) << "from ln 2 = 0.69 at the zero model";
  const double first_train = s.begin()->second["loss"].get<double>();
  const double last_train = s.rbegin()->second["loss"].get<double>();
  EXPECT_LT(last_train, first_train) << "train loss " << first_train << " -> " << last_train;
  EXPECT_GT(s.rbegin()->second["eval_accuracy"].get<double>(), 0.8);
  EXPECT_EQ(s.rbegin()->second["included"], static_cast<int>(run.steps.size()));
}

PeerOptions Task(const std::string& mode, uint64_t steps, float lr) {
  PeerOptions o;
  o.mode = mode;
  o.steps = steps;
  o.eval_every = 1;
  o.task.seed = 11;
  o.task.batch_size = 16;
  o.task.optimizer.name = "sgd";
  o.task.optimizer.learning_rate = lr;
  return o;
}

// allgather: the trainer takes one plain SGD step of lr 1 (its delta is minus the gradient);
// the task's SGD with momentum is the shared optimizer every replica runs on the mean.
TEST(PeerTrainer, AllgatherWithTheApplicationsTrainer) {
  PeerOptions o = Task("allgather", 30, 0.3f);
  o.task.optimizer.momentum = 0.9f;
  SwarmRun run = RunSwarm("peer-trainer-allgather", 3, o);
  ExpectIdenticalAndLearning(run, 30);
  for (const auto& seen : run.seen) {
    EXPECT_EQ(seen->optimizer.name, "sgd");
    EXPECT_EQ(seen->optimizer.learning_rate, 1.0f);
    EXPECT_EQ(seen->optimizer.momentum, 0.0f) << "the momentum is the shared optimizer's";
    EXPECT_EQ(seen->rounds, (std::set<std::pair<float, uint32_t>>{{1.0f, 1u}}));
  }
}

// diloco: H = 10 local steps at the task's rate per outer step; an outer Nesterov step on the
// mean pseudo-gradient.
TEST(PeerTrainer, DilocoWithTheApplicationsTrainer) {
  PeerOptions o = Task("diloco", 6, 0.2f);
  o.diloco_inner_steps = 10;
  SwarmRun run = RunSwarm("peer-trainer-diloco", 3, o);
  ExpectIdenticalAndLearning(run, 6);
  for (const auto& seen : run.seen) {
    EXPECT_EQ(seen->optimizer.learning_rate, 0.2f);
    EXPECT_EQ(seen->rounds, (std::set<std::pair<float, uint32_t>>{{0.2f, 10u}}));
    EXPECT_TRUE(seen->keep_state);
  }
}

// An application trainer needs the swarm's layout: without it the founder refuses to start.
// Secure by default also for the peers a peer dials: a remote bootstrap peer without keys
// needs --insecure (the run ends before binding anything).
TEST(PeerTrainer, AReachableBootstrapPeerNeedsKeysOrInsecure) {
  PeerOptions o = Task("allgather", 1, 0.1f);
  o.task.layout = LogReg::Layout();
  o.listen = Endpoint(FreePort());
  o.bootstrap = {"tcp://192.0.2.7:7101"};
  std::atomic<bool> stop{false};
  Seen seen;
  const Status st = RunPeer(o, std::make_unique<LogReg>(0, &seen), stop);
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(st.message().find("--peers tcp://192.0.2.7:7101 is not a loopback address"), std::string::npos)
      << st.message();
}

TEST(PeerTrainer, AnApplicationTrainerNeedsTheLayout) {
  PeerOptions o = Task("allgather", 1, 0.1f);
  o.name = "p0";
  o.listen = Endpoint(FreePort());
  Seen seen;
  std::atomic<bool> stop{false};
  Status st = RunPeer(o, std::make_unique<LogReg>(0, &seen), stop);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.message();
  EXPECT_NE(st.message().find("layout"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace shoal::testing
