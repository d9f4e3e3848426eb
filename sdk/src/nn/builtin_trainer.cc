// The built-in trainer (shoal/trainer.h): one of Shoal's own models (nn/model_registry.h),
// trained on this client's part of a dataset with the task the aggregator sent. Constructing
// it loads the data and picks the device; Configure() derives the split, the part, the model
// and the optimizer from the task; Train() only runs the loop.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/backend.h"
#include "backend/collective.h"
#include "codec/bytes.h"
#include "core/rng.h"
#include "crypto/crypto.h"
#include "shoal/data.h"
#include "nn/builtin_trainer.h"
#include "nn/data_parallel.h"
#include "nn/demo_optimizer.h"
#include "nn/evaluate.h"
#include "nn/loss_scaler.h"
#include "nn/model.h"
#include "nn/model_registry.h"
#include "nn/optimizer.h"
#include "nn/token_windows.h"
#include "shoal/trainer.h"

namespace shoal {
namespace {

// Keeps the per-round shuffle streams apart from every other use of the task seed (split,
// partitions), which seed shoal::Rng with the bare seed.
constexpr uint64_t kShuffleSeedTag = 0x7368'6f61'6c2d'7368ULL;  // "shoal-sh"

// The minibatch order of round `round` on part `partition`: its own stream for every
// (round, part) pair, so rounds differ and every process can reproduce any client's run.
Rng ShuffleRng(uint64_t seed, uint64_t round, uint32_t partition) {
  return Rng(seed ^ kShuffleSeedTag, (round << 32) | partition);
}

nn::DynamicLossScaler::Options ScalerOptions(const BuiltinTrainerOptions& o) {
  nn::DynamicLossScaler::Options s;
  s.init_scale = o.fp16_loss_scale;
  return s;
}

// One data-parallel rank (nn/data_parallel.h): its device, its replica of the model and
// everything that steps it. A trainer of one rank is the plain local trainer.
struct Rank {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<nn::Model> model;
  std::unique_ptr<nn::Optimizer> optimizer;
  nn::DemoOptimizer* demo = nullptr;  // optimizer when the task's optimizer is "demo"
  DeviceArray<float> w;         // local weights
  DeviceArray<float> w_global;  // the round's starting point (FedProx anchor, delta base)
  DeviceArray<float> grads;
  DeviceArray<float> batch_x;    // features: [batch, dim]
  DeviceArray<int32_t> batch_y;  // features: labels [batch]; tokens: targets [batch, seq]
  DeviceArray<int32_t> batch_tokens;  // tokens: [batch, seq]
  std::unique_ptr<nn::GradientBuckets> buckets;  // several ranks, buckets on: all-reduced during the backward pass
};

class BuiltinTrainer final : public Trainer {
 public:
  // `backends`: one per rank (rank i on devices[i]); `part`, when set, is this trainer's local
  // data as given (the simulator's shared parts); `dataset` then only describes the shape.
  BuiltinTrainer(BuiltinTrainerOptions options, data::Dataset dataset, std::vector<std::unique_ptr<Backend>> backends,
                 std::vector<std::string> devices, Precision precision, std::shared_ptr<const data::Dataset> part = nullptr)
      : options_(std::move(options)), dataset_(std::move(dataset)), part_(std::move(part)), devices_(std::move(devices)),
        precision_(precision), scaler_(ScalerOptions(options_)), pool_(static_cast<int>(backends.size())) {
    for (auto& b : backends) ranks_.emplace_back().backend = std::move(b);
  }

  std::string name() const override { return "builtin"; }
  bool standardizes() const override { return dataset_.kind == data::DatasetKind::kFeatures; }
  Status Configure(const TaskConfig& task) override;
  uint64_t num_examples() const override;
  Status Train(std::span<const float> global, const RoundConfig& round, const TrainContext& ctx,
               TrainResult* out) override;
  Status Evaluate(std::span<const float> params, EvalResult* out) override;
  // Between rounds it keeps DeMo's momentum (each rank's) and the fp16 loss scale; the other
  // optimizers start every round afresh.
  std::vector<uint8_t> SaveState() const override;
  Status LoadState(std::span<const uint8_t> state) override;

 private:
  BuiltinTrainerOptions options_;
  data::Dataset dataset_;  // everything the loader returned (train + held-out)
  std::shared_ptr<const data::Dataset> part_;  // the local data as given, instead of split + partition
  std::vector<std::string> devices_;           // of the ranks, in order
  Precision precision_;
  nn::DynamicLossScaler scaler_;  // fp16 only; lives as long as the trainer (as GradScaler)
  std::vector<Rank> ranks_;       // rank 0's model evaluates and gives the update
  nn::RankPool pool_;
  std::vector<std::unique_ptr<Collective>> group_;  // with several ranks; made again after an abort

  // Set by Configure().
  bool configured_ = false;
  TaskConfig task_;
  data::Dataset local_;  // this client's part of the training split
  int seq_ = 0;                        // tokens: the model's context
  std::vector<float> host_x_;          // the minibatch on the host, before each rank uploads its shard
  std::vector<int32_t> host_y_, host_tokens_;

  nn::Model& model() { return *ranks_[0].model; }
  // Draws the next minibatch of the round from `rng` into the host buffers: its units (rows,
  // or token windows) and how many examples it scores (rows, or predicted tokens).
  int NextBatch(Rng& rng, std::vector<int64_t>& order, int64_t& pos, int64_t* scored);
  // Rank k's shard of that minibatch, [lo, hi) of its `units`, uploaded to k's buffers.
  nn::Batch UploadShard(Rank& k, int lo, int hi);
  // One step's gradients: each rank's shard forward and backward, then (several ranks) the
  // all-reduce of their share-weighted gradients; the summed loss sums.
  Status ComputeGradients(int units, float loss_scale, nn::LossSums* sums);
  // Runs fn on every rank (nn::RankPool); a failed rank aborts the group, so no rank waits
  // on it, and the next round makes a fresh one.
  Status OnEveryRank(const std::function<Status(int)>& fn);
  // Forgets the ranks' group and buckets (after an abort, or for another task's model).
  void DropGroup();
  // With several ranks: every replica equals rank 0's (InternalError otherwise).
  Status CheckReplicasAgree();
};

Status BuiltinTrainer::Configure(const TaskConfig& task) {
  // 1. Everyone must derive the same split and parts: the seed is the task's.
  if (options_.seed && *options_.seed != task.seed)
    return Status::InvalidArgument("--seed " + std::to_string(*options_.seed) + " differs from the task's seed " +
                                   std::to_string(task.seed) +
                                   " (the aggregator owns the seed; drop --seed or make them equal)");
  if (task.batch_size == 0) return Status::InvalidArgument("task batch_size must be > 0");

  // 2. Held-out split, then this client's part of the training side (or the part given).
  data::Dataset local;
  if (part_) {
    local = *part_;
  } else {
    SHOAL_ASSIGN_OR_RETURN(local, data::TrainingPart(dataset_, task.test_fraction, task.seed,
                                                     {options_.partition_index, options_.partition_count},
                                                     options_.partition_scheme));
  }
  if (!task.feature_mean.empty())
    SHOAL_RETURN_IF_ERROR(data::Standardize({task.feature_mean, task.feature_scale}, &local)
                              .WithContext("the task's feature standardization"));

  // 3. The model must be exactly the one the aggregator holds; each rank builds its replica.
  const size_t R = ranks_.size();
  std::vector<std::unique_ptr<nn::Model>> models;
  for (size_t r = 0; r < R; ++r) {
    SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<nn::Model> m,
                           nn::MakeModel(task.model, nn::InputsOf(dataset_), ranks_[r].backend.get()));
    models.push_back(std::move(m));
  }
  const nn::Model& model = *models[0];
  const bool tokens = dataset_.kind == data::DatasetKind::kTokens;
  if ((model.batch_kind() == nn::BatchKind::kTokens) != tokens)
    return Status::InvalidArgument("model '" + task.model + "' takes " + nn::BatchKindName(model.batch_kind()) +
                                   ", dataset '" + dataset_.name + "' holds " + data::DatasetKindName(dataset_.kind));
  if (model.Layout() != task.layout)
    return Status::InvalidArgument(
        "model '" + task.model + "' on dataset '" + dataset_.name + "' (" +
        (tokens ? "vocabulary " + std::to_string(dataset_.vocab_size)
                : std::to_string(dataset_.dim) + " features, " + std::to_string(dataset_.num_classes) + " classes") +
        ") has layout [" + LayoutToString(model.Layout()) + "] but the task's layout is [" +
        LayoutToString(task.layout) + "]");

  // 4. Optimizers (their state is reset every round in Train, except DeMo's momentum, which
  // lives as long as the task), one per rank, then nothing can fail: the ranks take it all.
  const size_t n = model.num_params();
  std::vector<std::unique_ptr<nn::Optimizer>> optimizers(R);
  std::vector<nn::DemoOptimizer*> demos(R, nullptr);
  for (size_t r = 0; r < R; ++r) {
    Backend* backend = ranks_[r].backend.get();
    if (task.optimizer.name == "demo") {
      // DeMo chunks each tensor for its DCT: it needs the layout, not just the size.
      SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<nn::DemoOptimizer> d,
                             nn::MakeDemoOptimizer(task.optimizer, model.Layout(), backend));
      demos[r] = d.get();
      optimizers[r] = std::move(d);
    } else {
      SHOAL_ASSIGN_OR_RETURN(optimizers[r], nn::MakeOptimizer(task.optimizer, n, backend));
    }
  }

  // Another task (an aggregator restarted with other flags): the group and buckets were
  // sized for the old model; Train makes them again.
  DropGroup();
  task_ = task;
  local_ = std::move(local);
  seq_ = models[0]->max_seq_len();
  for (size_t r = 0; r < R; ++r) {
    Rank& k = ranks_[r];
    Backend* backend = k.backend.get();
    k.model = std::move(models[r]);
    k.model->set_precision(precision_);
    k.optimizer = std::move(optimizers[r]);
    k.demo = demos[r];
    k.w = DeviceArray<float>(backend, n);
    k.w_global = DeviceArray<float>(backend, n);
    k.grads = DeviceArray<float>(backend, n);
    if (tokens) {
      k.batch_tokens = DeviceArray<int32_t>(backend, static_cast<size_t>(task.batch_size) * seq_);
      k.batch_y = DeviceArray<int32_t>(backend, static_cast<size_t>(task.batch_size) * seq_);
    } else {
      k.batch_x = DeviceArray<float>(backend, static_cast<size_t>(task.batch_size) * local_.dim);
      k.batch_y = DeviceArray<int32_t>(backend, task.batch_size);
    }
  }
  configured_ = true;
  // One line per client process; the simulator's thousands of trainers log it at debug (data-
  // parallel ones, peers', at info).
  spdlog::log(part_ && R == 1 ? spdlog::level::debug : spdlog::level::info,
              "builtin trainer: {} on {} part {}/{} ({}): {} examples, {} parameters, backend {}{}, precision {}",
              ranks_[0].model->spec(), dataset_.name, options_.partition_index, options_.partition_count,
              options_.partition_scheme, local_.n, n, ranks_[0].backend->name(),
              R > 1 ? " x " + std::to_string(R) + " data-parallel ranks" : std::string(), PrecisionName(precision_));
  return Status::Ok();
}

uint64_t BuiltinTrainer::num_examples() const {
  if (configured_) return static_cast<uint64_t>(local_.n);
  if (part_) return static_cast<uint64_t>(part_->n);
  // Before Welcome the split is unknown: estimate with the default held-out share.
  static const TaskConfig kDefaults;
  const double train_share = 1.0 - kDefaults.test_fraction;
  return static_cast<uint64_t>(std::llround(static_cast<double>(dataset_.n) * train_share /
                                            std::max<uint32_t>(1, options_.partition_count)));
}

Status BuiltinTrainer::Train(std::span<const float> global, const RoundConfig& round, const TrainContext& ctx,
                             TrainResult* out) {
  if (!configured_) return Status::FailedPrecondition("Train called before Configure");
  const size_t n = model().num_params();
  if (global.size() != n)
    return Status::InvalidArgument("global model has " + std::to_string(global.size()) +
                                   " parameters, the task's model has " + std::to_string(n));
  // A round without a learning rate of its own uses the task's.
  const float lr = round.learning_rate != 0.0f ? round.learning_rate : task_.optimizer.learning_rate;
  if (!std::isfinite(lr) || lr < 0.0f)
    return Status::InvalidArgument("round " + std::to_string(round.round) + ": learning rate must be >= 0, got " +
                                   std::to_string(lr));
  if (!std::isfinite(round.prox_mu) || round.prox_mu < 0.0f)
    return Status::InvalidArgument("round " + std::to_string(round.round) + ": prox_mu must be >= 0, got " +
                                   std::to_string(round.prox_mu));

  // An epoch: every row once (features), or as many windows as cover the part's tokens once.
  const bool tokens = seq_ > 0;
  const int64_t num_local = local_.n;
  const int64_t batch = task_.batch_size;
  const int64_t per_batch = tokens ? batch * seq_ : batch;
  const int64_t batches_per_epoch = (num_local + per_batch - 1) / per_batch;
  const bool empty = tokens ? nn::WindowCount(num_local, seq_) == 0 : num_local == 0;
  const int64_t total_steps =
      empty ? 0 : (round.local_steps > 0 ? round.local_steps : int64_t{round.local_epochs} * batches_per_epoch);

  // Start from the global model; the optimizer starts fresh every round (the FL norm) unless
  // the round keeps its state, except DeMo's momentum: its residual carries over to the next
  // round by design.
  if (group_.empty() && ranks_.size() > 1) {
    SHOAL_ASSIGN_OR_RETURN(group_, MakeCollectiveGroup(devices_));
    const size_t bucket = options_.bucket_bytes / sizeof(float);
    for (size_t r = 0; r < ranks_.size() && bucket > 0; ++r) {
      Rank& k = ranks_[r];
      k.buckets = std::make_unique<nn::GradientBuckets>(group_[r].get(), k.backend.get(), n, bucket);
      k.model->set_gradient_ready([b = k.buckets.get()](size_t offset, size_t count) { b->Ready(offset, count); });
    }
  }
  for (Rank& k : ranks_) {
    k.w.Upload(global.data(), n);
    k.w_global.Upload(global.data(), n);
    if (k.demo != nullptr) {
      k.demo->BeginRound();
    } else if (!round.keep_optimizer_state) {
      k.optimizer->Reset();
    }
    k.optimizer->set_learning_rate(lr);
  }

  Rng rng = ShuffleRng(task_.seed, round.round, options_.partition_index);
  std::vector<int64_t> order(tokens ? 0 : static_cast<size_t>(num_local));
  std::iota(order.begin(), order.end(), int64_t{0});
  int64_t pos = num_local;  // forces a shuffle before the first batch

  double loss_sum = 0.0;
  int64_t correct = 0;
  uint64_t examples = 0;
  uint64_t skipped = 0;  // fp16 steps skipped for overflow
  const int64_t progress_every = std::max<int64_t>(1, total_steps / 20);
  for (int64_t step = 0; step < total_steps; ++step) {
    if (ctx.cancelled())
      return Status::Cancelled("training cancelled in round " + std::to_string(round.round) + " after " +
                               std::to_string(step) + " of " + std::to_string(total_steps) + " steps");
    int64_t scored = 0;
    const int units = NextBatch(rng, order, pos, &scored);
    const bool scaled = precision_ == Precision::kFp16;
    const float loss_scale = scaled ? scaler_.scale() : 1.0f;
    nn::LossSums sums;
    SHOAL_RETURN_IF_ERROR(ComputeGradients(units, loss_scale, &sums));
    const double batch_loss = sums.loss_sum;
    if (!std::isfinite(batch_loss))
      return Status::InvalidArgument("training diverged in round " + std::to_string(round.round) + " at step " +
                                     std::to_string(step) + " (loss is not finite); learning rate " +
                                     std::to_string(lr) + " is probably too high");
    loss_sum += batch_loss;
    correct += sums.correct;
    examples += static_cast<uint64_t>(scored);
    // fp16: a scaled gradient that overflowed skips the step and halves the scale (every
    // rank holds the same gradient: rank 0 decides for all).
    Rank& first = ranks_[0];
    const bool overflow = scaled && !std::isfinite(first.backend->SumSquares(n, first.grads.get()));
    if (scaled) scaler_.Update(overflow);
    if (overflow) {
      ++skipped;
    } else {
      SHOAL_RETURN_IF_ERROR(OnEveryRank([&](int r) {
        Rank& k = ranks_[static_cast<size_t>(r)];
        if (scaled) k.backend->Scale(n, 1.0f / loss_scale, k.grads.get());
        // FedProx: the proximal term mu/2 |w - w_global|^2 adds mu (w - w_global) to the gradient.
        if (round.prox_mu > 0.0f) {
          k.backend->Axpy(n, round.prox_mu, k.w.get(), k.grads.get());
          k.backend->Axpy(n, -round.prox_mu, k.w_global.get(), k.grads.get());
        }
        k.optimizer->Step(k.w.get(), k.grads.get());
        return Status::Ok();
      }));
    }
    if (ctx.progress && ((step + 1) % progress_every == 0 || step + 1 == total_steps))
      ctx.progress(static_cast<float>(step + 1) / static_cast<float>(total_steps));
  }
  if (total_steps == 0 && ctx.progress) ctx.progress(1.0f);

  SHOAL_RETURN_IF_ERROR(CheckReplicasAgree());
  Rank& first = ranks_[0];
  out->delta.resize(n);
  if (first.demo != nullptr) {
    // DeMo: the delta is NOT w_local - w_global but minus the momentum components extracted
    // this round, -Q = -(q_1 + ... + q_steps) (exactly -q for one local step). The aggregator
    // must run the "demo" strategy, which applies lr * sign(mean delta) to the global model.
    const std::span<const float> q = first.demo->extracted();
    for (size_t i = 0; i < n; ++i) out->delta[i] = -q[i];
  } else {
    // delta = w_local - w_global, computed in place on the device.
    first.backend->Axpy(n, -1.0f, first.w_global.get(), first.w.get());
    first.w.Download(out->delta.data(), n);
  }
  out->num_examples = examples;
  const double denom = examples > 0 ? static_cast<double>(examples) : 1.0;
  out->metrics = {{"train_loss", loss_sum / denom}, {"train_accuracy", static_cast<double>(correct) / denom}};
  if (precision_ == Precision::kFp16) {
    out->metrics.emplace_back("skipped_steps", static_cast<double>(skipped));
    out->metrics.emplace_back("loss_scale", scaler_.scale());
    if (skipped > 0)
      spdlog::info("builtin trainer: round {}: {} of {} fp16 steps overflowed and were skipped (loss scale now {})",
                   round.round, skipped, total_steps, scaler_.scale());
  }
  spdlog::debug("builtin trainer: round {}: {} steps, {} examples, train_loss {:.4f}, train_accuracy {:.4f}",
                round.round, total_steps, examples, loss_sum / denom, static_cast<double>(correct) / denom);
  return Status::Ok();
}

int BuiltinTrainer::NextBatch(Rng& rng, std::vector<int64_t>& order, int64_t& pos, int64_t* scored) {
  const int batch = static_cast<int>(task_.batch_size);
  if (seq_ > 0) {  // tokens: `batch` windows at random starts
    const size_t size = static_cast<size_t>(batch) * seq_;
    host_tokens_.resize(size);
    host_y_.resize(size);
    nn::DrawWindows(local_, batch, seq_, rng, host_tokens_.data(), host_y_.data());
    *scored = static_cast<int64_t>(size);
    return batch;
  }
  // Features: a new permutation at each epoch boundary; the last batch of an epoch may be short
  // (drop_last = False), and local_steps may cross epochs.
  const int64_t num_local = local_.n, dim = local_.dim;
  if (pos == num_local) {
    rng.Shuffle(std::span<int64_t>(order));
    pos = 0;
  }
  const int rows = static_cast<int>(std::min<int64_t>(batch, num_local - pos));
  host_x_.resize(static_cast<size_t>(batch) * dim);
  host_y_.resize(static_cast<size_t>(batch));
  for (int r = 0; r < rows; ++r) {
    const int64_t i = order[static_cast<size_t>(pos + r)];
    std::copy_n(local_.x.data() + i * dim, dim, host_x_.data() + static_cast<int64_t>(r) * dim);
    host_y_[static_cast<size_t>(r)] = local_.y[static_cast<size_t>(i)];
  }
  pos += rows;
  *scored = rows;
  return rows;
}

nn::Batch BuiltinTrainer::UploadShard(Rank& k, int lo, int hi) {
  const int units = hi - lo;
  if (seq_ > 0) {
    const size_t offset = static_cast<size_t>(lo) * seq_, size = static_cast<size_t>(units) * seq_;
    k.batch_tokens.Upload(host_tokens_.data() + offset, size);
    k.batch_y.Upload(host_y_.data() + offset, size);
    return nn::Batch::Tokens(k.batch_tokens.get(), k.batch_y.get(), units, seq_);
  }
  const size_t dim = static_cast<size_t>(local_.dim);
  k.batch_x.Upload(host_x_.data() + static_cast<size_t>(lo) * dim, static_cast<size_t>(units) * dim);
  k.batch_y.Upload(host_y_.data() + lo, static_cast<size_t>(units));
  return nn::Batch::Features(k.batch_x.get(), k.batch_y.get(), units);
}

Status BuiltinTrainer::OnEveryRank(const std::function<Status(int)>& fn) {
  Status st = pool_.Run([&](int r) {
    Status done = fn(r);
    if (!done.ok() && !group_.empty()) group_[static_cast<size_t>(r)]->Abort(done);
    return done;
  });
  if (!st.ok()) DropGroup();  // aborted: the next round makes another group
  return st;
}

void BuiltinTrainer::DropGroup() {
  for (Rank& k : ranks_) {
    if (k.model) k.model->set_gradient_ready({});
    k.buckets.reset();  // before the group: they hold its ranks
  }
  group_.clear();
}

Status BuiltinTrainer::ComputeGradients(int units, float loss_scale, nn::LossSums* sums) {
  const int R = static_cast<int>(ranks_.size());
  const size_t n = model().num_params();
  std::vector<nn::LossSums> per_rank(ranks_.size());
  SHOAL_RETURN_IF_ERROR(OnEveryRank([&](int r) {
    Rank& k = ranks_[static_cast<size_t>(r)];
    // Rank r's shard: units [r u / R, (r + 1) u / R). The model's gradient is of its shard's
    // mean loss; weighted by the shard's share, the ranks' gradients sum to the batch's.
    const int lo = static_cast<int>(int64_t{r} * units / R), hi = static_cast<int>(int64_t{r + 1} * units / R);
    const float share = units ? static_cast<float>(hi - lo) / static_cast<float>(units) : 0.0f;
    if (k.buckets) k.buckets->Begin(k.grads.get(), share);  // reduced as the backward pass finishes them
    per_rank[static_cast<size_t>(r)] = k.model->ForwardBackward(k.w.get(), UploadShard(k, lo, hi), k.grads.get(), loss_scale);
    if (R == 1) return Status::Ok();
    if (k.buckets) return k.buckets->Finish();
    k.backend->Scale(n, share, k.grads.get());
    return group_[static_cast<size_t>(r)]->AllReduceSum(std::span<float>(k.grads.get(), n));
  }));
  *sums = nn::LossSums{};
  for (const nn::LossSums& p : per_rank) {
    sums->loss_sum += p.loss_sum;
    sums->correct += p.correct;
  }
  return Status::Ok();
}

Status BuiltinTrainer::CheckReplicasAgree() {
  if (ranks_.size() == 1) return Status::Ok();
  const size_t n = model().num_params();
  std::vector<float> host(n);
  std::string first;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    ranks_[r].w.Download(host.data(), n);
    const std::string hash = crypto::ModelHash(host);
    if (r == 0) first = hash;
    if (hash != first)
      return Status::Internal("data-parallel rank " + std::to_string(r) + " on " + devices_[r] +
                              " ended the round with another model than rank 0 (" + hash.substr(0, 16) + " vs " +
                              first.substr(0, 16) + ")");
  }
  return Status::Ok();
}

// Version 1, the loss scaler (scale, clean steps, skipped steps), the number of DeMo ranks,
// then each one's optimizer state (its length, its floats).
std::vector<uint8_t> BuiltinTrainer::SaveState() const {
  codec::ByteWriter w;
  w.PutVarint(1);
  const nn::DynamicLossScaler::State scaler = scaler_.state();
  w.PutF32(scaler.scale);
  w.PutU32(scaler.clean);
  w.PutU64(scaler.skipped);
  size_t demos = 0;
  for (const Rank& k : ranks_) demos += k.demo != nullptr;
  w.PutVarint(demos);
  for (const Rank& k : ranks_) {
    if (!k.demo) continue;
    const std::vector<float> state = k.demo->SaveState();
    w.PutVarint(state.size());
    w.PutFloats(state);
  }
  return w.Release();
}

Status BuiltinTrainer::LoadState(std::span<const uint8_t> state) {
  codec::ByteReader r(state);
  uint64_t version = 0, demos = 0;
  SHOAL_RETURN_IF_ERROR(r.ReadVarint(&version, "trainer state version"));
  if (version != 1) return Status::Corruption("trainer state: version " + std::to_string(version) + ", expected 1");
  nn::DynamicLossScaler::State scaler{};
  SHOAL_RETURN_IF_ERROR(r.ReadF32(&scaler.scale, "trainer state loss scale"));
  SHOAL_RETURN_IF_ERROR(r.ReadU32(&scaler.clean, "trainer state clean steps"));
  SHOAL_RETURN_IF_ERROR(r.ReadU64(&scaler.skipped, "trainer state skipped steps"));
  SHOAL_RETURN_IF_ERROR(r.ReadVarint(&demos, "trainer state DeMo ranks"));
  std::vector<std::vector<float>> states;
  for (const Rank& k : ranks_) {
    if (!k.demo) continue;
    uint64_t n = 0;
    SHOAL_RETURN_IF_ERROR(r.ReadVarint(&n, "trainer state length"));
    states.emplace_back();
    SHOAL_RETURN_IF_ERROR(r.ReadFloats(n, &states.back(), "trainer state optimizer"));
  }
  if (states.size() != demos || !r.empty())
    return Status::Corruption("trainer state: another task's (" + std::to_string(demos) + " DeMo ranks)");
  size_t i = 0;
  for (Rank& k : ranks_)
    if (k.demo) SHOAL_RETURN_IF_ERROR(k.demo->LoadState(states[i++]));
  scaler_.set_state(scaler);
  return Status::Ok();
}

Status BuiltinTrainer::Evaluate(std::span<const float> params, EvalResult* out) {
  if (!configured_) return Status::FailedPrecondition("Evaluate called before Configure");
  if (params.size() != model().num_params())
    return Status::InvalidArgument("got " + std::to_string(params.size()) + " parameters, the task's model has " +
                                   std::to_string(model().num_params()));
  *out = nn::Evaluate(model(), params, local_);
  return Status::Ok();
}

// The ranks' devices and backends (one rank: options.device as given); their group is made at
// the first round (and again after an abort), but checked here so that a bad setting fails now.
struct Ranks {
  std::vector<std::string> devices;
  std::vector<std::unique_ptr<Backend>> backends;
};
StatusOr<Ranks> MakeRanks(const BuiltinTrainerOptions& options) {
  Ranks r;
  SHOAL_ASSIGN_OR_RETURN(r.devices, nn::RankDevices(options.device, static_cast<int>(options.ranks)));
  for (const std::string& device : r.devices) {
    SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(device));
    r.backends.push_back(std::move(backend));
  }
  if (r.devices.size() > 1) SHOAL_RETURN_IF_ERROR(MakeCollectiveGroup(r.devices).status().WithContext("data-parallel ranks"));
  return r;
}

}  // namespace

StatusOr<std::unique_ptr<Trainer>> MakeBuiltinTrainer(const BuiltinTrainerOptions& options) {
  if (options.partition_count == 0 || options.partition_index >= options.partition_count)
    return Status::InvalidArgument("bad partition " + std::to_string(options.partition_index) + "/" +
                                   std::to_string(options.partition_count) +
                                   ": expected i/n with 0 <= i < n (0-based)");
  const std::string data_dir = options.data_dir.empty() ? data::DefaultDataDir() : options.data_dir;
  // Fail fast, with the loader's own message (it names the file and how to get it).
  SHOAL_ASSIGN_OR_RETURN(data::Dataset dataset, data::LoadDataset(options.dataset, data_dir));
  SHOAL_ASSIGN_OR_RETURN(Precision precision, ParsePrecision(options.precision));
  if (!(options.fp16_loss_scale >= 1.0f && options.fp16_loss_scale <= 3.0e38f))
    return Status::InvalidArgument("fp16 loss scale must be in [1, 3e38], got " + std::to_string(options.fp16_loss_scale));
  SHOAL_ASSIGN_OR_RETURN(Ranks ranks, MakeRanks(options));
  return std::unique_ptr<Trainer>(std::make_unique<BuiltinTrainer>(options, std::move(dataset), std::move(ranks.backends),
                                                                   std::move(ranks.devices), precision));
}

namespace nn {

StatusOr<std::unique_ptr<Trainer>> MakeBuiltinTrainerOnPart(const BuiltinTrainerOptions& options,
                                                           std::shared_ptr<const data::Dataset> part) {
  SHOAL_ASSIGN_OR_RETURN(Precision precision, ParsePrecision(options.precision));
  SHOAL_ASSIGN_OR_RETURN(Ranks ranks, MakeRanks(options));
  data::Dataset shape;
  shape.name = part->name;
  shape.kind = part->kind;
  shape.dim = part->dim;
  shape.num_classes = part->num_classes;
  shape.vocab_size = part->vocab_size;
  return std::unique_ptr<Trainer>(std::make_unique<BuiltinTrainer>(options, std::move(shape), std::move(ranks.backends),
                                                                   std::move(ranks.devices), precision, std::move(part)));
}

}  // namespace nn

}  // namespace shoal
