// The built-in trainer (shoal/trainer.h): one of Shoal's own models (nn/model_registry.h),
// trained on this client's part of a dataset with the task the aggregator sent. Constructing
// it loads the data and picks the device; Configure() derives the split, the part, the model
// and the optimizer from the task; Train() only runs the loop.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "backend/backend.h"
#include "core/rng.h"
#include "shoal/data.h"
#include "nn/builtin_trainer.h"
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

class BuiltinTrainer final : public Trainer {
 public:
  // `part`, when set, is this trainer's local data as given (the simulator's shared parts);
  // `dataset` then only describes the shape.
  BuiltinTrainer(BuiltinTrainerOptions options, data::Dataset dataset, std::unique_ptr<Backend> backend,
                 Precision precision, std::shared_ptr<const data::Dataset> part = nullptr)
      : options_(std::move(options)), dataset_(std::move(dataset)), part_(std::move(part)), backend_(std::move(backend)),
        precision_(precision), scaler_(ScalerOptions(options_)) {}

  std::string name() const override { return "builtin"; }
  bool standardizes() const override { return dataset_.kind == data::DatasetKind::kFeatures; }
  Status Configure(const TaskConfig& task) override;
  uint64_t num_examples() const override;
  Status Train(std::span<const float> global, const RoundConfig& round, const TrainContext& ctx,
               TrainResult* out) override;
  Status Evaluate(std::span<const float> params, EvalResult* out) override;

 private:
  BuiltinTrainerOptions options_;
  data::Dataset dataset_;  // everything the loader returned (train + held-out)
  std::shared_ptr<const data::Dataset> part_;  // the local data as given, instead of split + partition
  std::unique_ptr<Backend> backend_;
  Precision precision_;
  nn::DynamicLossScaler scaler_;  // fp16 only; lives as long as the trainer (as GradScaler)

  // Set by Configure().
  bool configured_ = false;
  TaskConfig task_;
  data::Dataset local_;  // this client's part of the training split
  std::unique_ptr<nn::Model> model_;
  std::unique_ptr<nn::Optimizer> optimizer_;
  nn::DemoOptimizer* demo_ = nullptr;  // optimizer_ when the task's optimizer is "demo"
  DeviceArray<float> w_;         // local weights
  DeviceArray<float> w_global_;  // the round's starting point (FedProx anchor, delta base)
  DeviceArray<float> grads_;
  DeviceArray<float> batch_x_;    // features: [batch, dim]
  DeviceArray<int32_t> batch_y_;  // features: labels [batch]; tokens: targets [batch, seq]
  DeviceArray<int32_t> batch_tokens_;  // tokens: [batch, seq]
  int seq_ = 0;                        // tokens: the model's context
  std::vector<float> host_x_;          // staging for the batch uploads
  std::vector<int32_t> host_y_, host_tokens_;

  // The next minibatch of the round (drawn from `rng`, uploaded): its Batch and how many
  // examples it scores (rows, or predicted tokens).
  nn::Batch NextBatch(Rng& rng, std::vector<int64_t>& order, int64_t& pos, int64_t* scored);
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

  // 3. The model must be exactly the one the aggregator holds.
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<nn::Model> model,
                         nn::MakeModel(task.model, nn::InputsOf(dataset_), backend_.get()));
  const bool tokens = dataset_.kind == data::DatasetKind::kTokens;
  if ((model->batch_kind() == nn::BatchKind::kTokens) != tokens)
    return Status::InvalidArgument("model '" + task.model + "' takes " + nn::BatchKindName(model->batch_kind()) +
                                   ", dataset '" + dataset_.name + "' holds " + data::DatasetKindName(dataset_.kind));
  if (model->Layout() != task.layout)
    return Status::InvalidArgument(
        "model '" + task.model + "' on dataset '" + dataset_.name + "' (" +
        (tokens ? "vocabulary " + std::to_string(dataset_.vocab_size)
                : std::to_string(dataset_.dim) + " features, " + std::to_string(dataset_.num_classes) + " classes") +
        ") has layout [" + LayoutToString(model->Layout()) + "] but the task's layout is [" +
        LayoutToString(task.layout) + "]");

  // 4. Optimizer (its state is reset every round in Train, except DeMo's momentum, which lives
  // as long as the task) and device buffers.
  const size_t n = model->num_params();
  std::unique_ptr<nn::Optimizer> optimizer;
  nn::DemoOptimizer* demo = nullptr;
  if (task.optimizer.name == "demo") {
    // DeMo chunks each tensor for its DCT: it needs the layout, not just the size.
    SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<nn::DemoOptimizer> d,
                           nn::MakeDemoOptimizer(task.optimizer, model->Layout(), backend_.get()));
    demo = d.get();
    optimizer = std::move(d);
  } else {
    SHOAL_ASSIGN_OR_RETURN(optimizer, nn::MakeOptimizer(task.optimizer, n, backend_.get()));
  }

  task_ = task;
  local_ = std::move(local);
  model_ = std::move(model);
  model_->set_precision(precision_);
  optimizer_ = std::move(optimizer);
  demo_ = demo;
  w_ = DeviceArray<float>(backend_.get(), n);
  w_global_ = DeviceArray<float>(backend_.get(), n);
  grads_ = DeviceArray<float>(backend_.get(), n);
  seq_ = model_->max_seq_len();
  if (tokens) {
    batch_tokens_ = DeviceArray<int32_t>(backend_.get(), static_cast<size_t>(task.batch_size) * seq_);
    batch_y_ = DeviceArray<int32_t>(backend_.get(), static_cast<size_t>(task.batch_size) * seq_);
  } else {
    batch_x_ = DeviceArray<float>(backend_.get(), static_cast<size_t>(task.batch_size) * local_.dim);
    batch_y_ = DeviceArray<int32_t>(backend_.get(), task.batch_size);
  }
  configured_ = true;
  // One line per client process; the simulator's thousands of trainers log it at debug.
  spdlog::log(part_ ? spdlog::level::debug : spdlog::level::info,
              "builtin trainer: {} on {} part {}/{} ({}): {} examples, {} parameters, backend {}, precision {}",
              model_->spec(), dataset_.name, options_.partition_index,
              options_.partition_count, options_.partition_scheme, local_.n, n, backend_->name(),
              PrecisionName(precision_));
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
  const size_t n = model_->num_params();
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
  w_.Upload(global.data(), n);
  w_global_.Upload(global.data(), n);
  if (demo_ != nullptr) {
    demo_->BeginRound();
  } else if (!round.keep_optimizer_state) {
    optimizer_->Reset();
  }
  optimizer_->set_learning_rate(lr);

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
    const nn::Batch next = NextBatch(rng, order, pos, &scored);
    const bool scaled = precision_ == Precision::kFp16;
    const float loss_scale = scaled ? scaler_.scale() : 1.0f;
    const nn::LossSums sums = model_->ForwardBackward(w_.get(), next, grads_.get(), loss_scale);
    const double batch_loss = sums.loss_sum;
    if (!std::isfinite(batch_loss))
      return Status::InvalidArgument("training diverged in round " + std::to_string(round.round) + " at step " +
                                     std::to_string(step) + " (loss is not finite); learning rate " +
                                     std::to_string(lr) + " is probably too high");
    loss_sum += batch_loss;
    correct += sums.correct;
    examples += static_cast<uint64_t>(scored);
    // fp16: a scaled gradient that overflowed skips the step and halves the scale.
    const bool overflow = scaled && !std::isfinite(backend_->SumSquares(n, grads_.get()));
    if (scaled) scaler_.Update(overflow);
    if (overflow) {
      ++skipped;
    } else {
      if (scaled) backend_->Scale(n, 1.0f / loss_scale, grads_.get());
      // FedProx: the proximal term mu/2 |w - w_global|^2 adds mu (w - w_global) to the gradient.
      if (round.prox_mu > 0.0f) {
        backend_->Axpy(n, round.prox_mu, w_.get(), grads_.get());
        backend_->Axpy(n, -round.prox_mu, w_global_.get(), grads_.get());
      }
      optimizer_->Step(w_.get(), grads_.get());
    }
    if (ctx.progress && ((step + 1) % progress_every == 0 || step + 1 == total_steps))
      ctx.progress(static_cast<float>(step + 1) / static_cast<float>(total_steps));
  }
  if (total_steps == 0 && ctx.progress) ctx.progress(1.0f);

  out->delta.resize(n);
  if (demo_ != nullptr) {
    // DeMo: the delta is NOT w_local - w_global but minus the momentum components extracted
    // this round, -Q = -(q_1 + ... + q_steps) (exactly -q for one local step). The aggregator
    // must run the "demo" strategy, which applies lr * sign(mean delta) to the global model.
    const std::span<const float> q = demo_->extracted();
    for (size_t i = 0; i < n; ++i) out->delta[i] = -q[i];
  } else {
    // delta = w_local - w_global, computed in place on the device.
    backend_->Axpy(n, -1.0f, w_global_.get(), w_.get());
    w_.Download(out->delta.data(), n);
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

nn::Batch BuiltinTrainer::NextBatch(Rng& rng, std::vector<int64_t>& order, int64_t& pos, int64_t* scored) {
  const int batch = static_cast<int>(task_.batch_size);
  if (seq_ > 0) {  // tokens: `batch` windows at random starts
    const size_t size = static_cast<size_t>(batch) * seq_;
    host_tokens_.resize(size);
    host_y_.resize(size);
    nn::DrawWindows(local_, batch, seq_, rng, host_tokens_.data(), host_y_.data());
    batch_tokens_.Upload(host_tokens_.data(), size);
    batch_y_.Upload(host_y_.data(), size);
    *scored = static_cast<int64_t>(size);
    return nn::Batch::Tokens(batch_tokens_.get(), batch_y_.get(), batch, seq_);
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
  batch_x_.Upload(host_x_.data(), static_cast<size_t>(rows) * dim);
  batch_y_.Upload(host_y_.data(), static_cast<size_t>(rows));
  *scored = rows;
  return nn::Batch::Features(batch_x_.get(), batch_y_.get(), rows);
}

Status BuiltinTrainer::Evaluate(std::span<const float> params, EvalResult* out) {
  if (!configured_) return Status::FailedPrecondition("Evaluate called before Configure");
  if (params.size() != model_->num_params())
    return Status::InvalidArgument("got " + std::to_string(params.size()) + " parameters, the task's model has " +
                                   std::to_string(model_->num_params()));
  *out = nn::Evaluate(*model_, params, local_);
  return Status::Ok();
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
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(options.device));
  return std::unique_ptr<Trainer>(
      std::make_unique<BuiltinTrainer>(options, std::move(dataset), std::move(backend), precision));
}

namespace nn {

StatusOr<std::unique_ptr<Trainer>> MakeBuiltinTrainerOnPart(const BuiltinTrainerOptions& options,
                                                           std::shared_ptr<const data::Dataset> part) {
  SHOAL_ASSIGN_OR_RETURN(Precision precision, ParsePrecision(options.precision));
  SHOAL_ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(options.device));
  data::Dataset shape;
  shape.name = part->name;
  shape.kind = part->kind;
  shape.dim = part->dim;
  shape.num_classes = part->num_classes;
  shape.vocab_size = part->vocab_size;
  return std::unique_ptr<Trainer>(
      std::make_unique<BuiltinTrainer>(options, std::move(shape), std::move(backend), precision, std::move(part)));
}

}  // namespace nn

}  // namespace shoal
