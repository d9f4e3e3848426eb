// The Trainer interface (DESIGN.md §3): what the client runtime calls each round. Shoal's
// built-in trainer drives its own models on a dataset; an application supplies its own to
// train with its own framework (the "bring your own" path; see examples/).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shoal/arena.h"
#include "shoal/status.h"

namespace shoal {

// Local optimizer settings. Semantics follow torch.optim.SGD / torch.optim.AdamW.
struct OptimizerConfig {
  std::string name = "sgd";   // "sgd" | "adamw" | "demo"
  float learning_rate = 0.05f;
  float momentum = 0.0f;      // sgd only
  bool nesterov = false;      // sgd only; requires momentum > 0
  float weight_decay = 0.0f;  // sgd: L2 added to the gradient; adamw: decoupled
  float beta1 = 0.9f;         // adamw only
  float beta2 = 0.999f;       // adamw only
  float eps = 1e-8f;          // adamw only
  // DeMo (Peng et al. 2024, "Decoupled Momentum Optimization"), name "demo" only: the client
  // keeps its momentum m across rounds, m = demo_decay * m + g each step, and extracts the
  // demo_topk largest DCT-II coefficients of each chunk (side <= demo_chunk per dimension) of m
  // as the update it sends; the rest stays in m. Requires the aggregator's "demo" strategy.
  float demo_decay = 0.999f;  // demo only: momentum decay beta, in [0, 1]
  uint32_t demo_chunk = 64;   // demo only: DCT chunk side, in [1, 1024]
  uint32_t demo_topk = 32;    // demo only: DCT coefficients extracted per chunk, >= 1
  bool operator==(const OptimizerConfig&) const = default;
};

// The task the aggregator owns and sends to every client at Welcome.
struct TaskConfig {
  std::string model;                 // model spec, e.g. "mlp:64,32" (DESIGN.md §6)
  std::vector<TensorSpec> layout;    // parameter layout of that model, in arena order
  std::string dataset;               // dataset name the aggregator evaluates on, e.g. "digits"
  OptimizerConfig optimizer;
  uint32_t local_epochs = 1;         // passes over the local data per round (when local_steps == 0)
  uint32_t local_steps = 0;          // if > 0: exactly this many minibatch steps per round instead
  uint32_t batch_size = 32;
  float prox_mu = 0.0f;              // FedProx proximal coefficient; 0 = plain local SGD
  uint64_t seed = 0;                 // base seed: data split, partitions, per-round shuffles
  double test_fraction = 0.2;        // held-out share of the dataset (aggregator only evaluates on it)
  std::string codec = "none";        // upload codec spec, e.g. "ef|topk:ratio=0.01|int8" ("none" = dense fp32)
  std::string codec_down = "none";   // download codec spec for the global delta
  // Per-client upload codec: a client whose measured upload rate is below slow_below_mbps
  // encodes with codec_slow instead of codec ("" = one codec for everyone).
  std::string codec_slow;
  double slow_below_mbps = 0.0;
  // Feature standardization (features only; empty = none): a trainer maps each input x[j] to
  // (x[j] - feature_mean[j]) * feature_scale[j] before training and evaluating. Sent only to
  // trainers that say they apply it (Trainer::standardizes).
  std::vector<float> feature_mean, feature_scale;
  bool operator==(const TaskConfig&) const = default;
};

// Per-round settings chosen by the strategy's Configure(round).
struct RoundConfig {
  uint64_t round = 0;
  float learning_rate = 0.0f;
  uint32_t local_epochs = 1;
  uint32_t local_steps = 0;
  float prox_mu = 0.0f;
  // Keep the local optimizer's state (momentum, Adam moments) from the previous round instead
  // of starting it fresh. Serverless peers set it (DiLoCo's inner AdamW, gossip's momentum
  // live across steps). Default: false, the federated norm.
  bool keep_optimizer_state = false;
};

struct TrainResult {
  std::vector<float> delta;  // w_local - w_global, in layout order
  uint64_t num_examples = 0;  // examples processed this round (the FedAvg weight)
  std::vector<std::pair<std::string, double>> metrics;  // e.g. {"train_loss", 0.31}
};

struct EvalResult {
  double loss = 0.0;
  double accuracy = 0.0;
  uint64_t num_examples = 0;
};

// What a trainer may look at while it runs: a progress callback (fraction in [0,1]) and
// a cancellation flag set from another thread (return Status::Cancelled promptly).
struct TrainContext {
  std::function<void(float)> progress;
  const std::atomic<bool>* cancel = nullptr;
  bool cancelled() const { return cancel && cancel->load(std::memory_order_relaxed); }
};

class Trainer {
 public:
  virtual ~Trainer() = default;
  // A short name sent to the aggregator at Hello (informational).
  virtual std::string name() const { return "application"; }
  // Whether Configure applies the task's feature standardization (TaskConfig::feature_mean,
  // feature_scale) to its data. An aggregator that standardizes refuses trainers that do not,
  // which would otherwise train on differently scaled inputs without a word.
  virtual bool standardizes() const { return false; }
  // Called at Welcome with the aggregator's task. Return InvalidArgument if this trainer
  // cannot train it (for example, its model does not have task.layout).
  virtual Status Configure(const TaskConfig& task) = 0;
  // Number of local training examples (sent at Hello; informational).
  virtual uint64_t num_examples() const = 0;
  // Trains starting from `global` (flat, in task.layout order) and fills *out.
  virtual Status Train(std::span<const float> global, const RoundConfig& round, const TrainContext& ctx,
                       TrainResult* out) = 0;
  // Evaluates `params` on local data. Optional. The client calls it each round on the global
  // model it received, before Train (federated evaluation: the aggregator reports the
  // example-weighted mean as client_eval_loss / client_eval_accuracy).
  virtual Status Evaluate(std::span<const float> params, EvalResult* out) {
    return Status::FailedPrecondition("this trainer does not evaluate");
  }
  // What this trainer carries from one round to the next (DeMo's momentum), so that the client
  // can take a round back that the aggregator never committed (an aggregator that resumed from
  // its checkpoint at an earlier round: docs/PROTOCOL.md, "Client state across aggregator
  // restarts"). The client calls SaveState before each Train and LoadState to return to such a
  // state. A trainer that keeps nothing between rounds (the default) needs neither.
  virtual std::vector<uint8_t> SaveState() const { return {}; }
  virtual Status LoadState(std::span<const uint8_t> state) {
    return state.empty() ? Status::Ok() : Status::FailedPrecondition("this trainer keeps no state between rounds");
  }
};

// Shoal's built-in trainer: its own models (task.model) on a dataset partition.
struct BuiltinTrainerOptions {
  std::string dataset = "digits";          // "digits", "csv:PATH", "idx:IMAGES,LABELS" (features),
                                           // "kjv", "text:PATH" (byte tokens, for task.model gpt)
  std::string data_dir;                    // Default: $SHOAL_DATA_DIR or ~/.cache/shoal
  uint32_t partition_index = 0;            // this client's part, 0-based
  uint32_t partition_count = 1;            // number of parts
  std::string partition_scheme = "iid";    // "iid" | "dirichlet:ALPHA" (data.h: Partition)
  // The split and partition use the task's seed and test_fraction from Welcome, so every
  // process derives the same parts. If set, this must equal the task's seed (checked).
  std::optional<uint64_t> seed;
  std::string device = "auto";             // "auto" | "cpu" | "cuda[:N]"
  // Compute precision of the model's GEMMs: "fp32", "tf32", "bf16" or "fp16" (fp32 master
  // weights and gradients in every case; fp16 adds dynamic loss scaling and skips, and counts,
  // steps whose gradients overflow). Default: fp32.
  std::string precision = "fp32";
  // fp16 only: the initial dynamic loss scale (halved on every overflowing step, doubled
  // after 2000 clean steps in a row). Default: 65536.
  float fp16_loss_scale = 65536.0f;
  // Data-parallel ranks of this one client (shoal-client --gpus N / --ranks N): each step's
  // minibatch is split among them and their gradients all-reduced before every rank steps
  // its replica; the client still sends one update a round. With `device` cpu, threads of
  // this process; cuda[:K], the GPUs cuda:K.. (NCCL, one rank per GPU); auto, the GPUs when a
  // CUDA device is usable. Default: 1.
  uint32_t ranks = 1;
  // Several ranks: the gradient is all-reduced in buckets of this many bytes as the backward
  // pass finishes them, overlapping it (DDP's bucket_cap_mb); 0 = one all-reduce of the whole
  // gradient after the backward pass. The result is the same bits either way. Default: 25 MiB.
  size_t bucket_bytes = size_t{25} << 20;
};
StatusOr<std::unique_ptr<Trainer>> MakeBuiltinTrainer(const BuiltinTrainerOptions& options);

}  // namespace shoal
