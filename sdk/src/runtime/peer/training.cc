// Local work through the Trainer: the trainer (the application's, or the built-in one on this
// peer's part of options.data), the initial replica, this peer's update of a step (the
// exchange's round, and what it sends of the trainer's delta), held-out evaluation and the
// per-step metrics.
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "codec/codec.h"
#include "codec/round_context.h"
#include "nn/builtin_trainer.h"
#include "nn/evaluate.h"
#include "nn/model_registry.h"
#include "nn/optimizer.h"
#include "protocol/limits.h"
#include "runtime/peer/peer_impl.h"
#include "runtime/update.h"

namespace shoal::peer {

// The founding peer's task and settings become the swarm's; every member sets up the same
// exchange, and its trainer for the task the exchange gives it.
Status Peer::InitTask() {
  TaskConfig& task = swarm_info_.task;
  SHOAL_RETURN_IF_ERROR(nn::ValidateOptimizerConfig(task.optimizer));
  SHOAL_RETURN_IF_ERROR(codec::CheckDemoPresetPairing(task.codec, task.optimizer.name, "--client-optimizer demo"));
  std::vector<float> init;
  SHOAL_RETURN_IF_ERROR(InitTrainer(&init));
  if (!o_.initial_params.empty()) {
    if (o_.initial_params.size() != init.size())
      return Status::InvalidArgument("initial_params holds " + std::to_string(o_.initial_params.size()) +
                                     " parameters, the task's layout " + std::to_string(init.size()));
    init = o_.initial_params;
  }
  n_ = init.size();
  w_ = std::move(init);
  hash_ = crypto::ModelHash(w_);
  SHOAL_ASSIGN_OR_RETURN(codec_, codec::Codec::Create(task.codec, task.layout));
  SHOAL_ASSIGN_OR_RETURN(exchange_, MakeExchange(swarm_info_, task.layout));
  overlap_ = swarm_info_.Param("overlap", 0) != 0;
  if (overlap_ && exchange_->finish() != Exchange::Finish::kLeaderCommits)
    return Status::InvalidArgument("--overlap needs the leader's commit: --mode allgather, or diloco without "
                                   "--diloco-allreduce");
  hash_log_[committed_] = hash_;  // the base of the first steps
  if (exchange_->finish() == Exchange::Finish::kRing) {
    SHOAL_ASSIGN_OR_RETURN(ring_codec_, SegmentCodec::Create(task.codec));
  }
  if (!task.feature_mean.empty() && !trainer_->standardizes())
    return Status::InvalidArgument("the swarm's task standardizes its features (the founder's --standardize); this "
                                   "peer's trainer does not apply it");
  SHOAL_RETURN_IF_ERROR(trainer_->Configure(exchange_->TrainerTask(task)).WithContext("the trainer refused the task"));
  spdlog::info("peer {}: {} mode, model {} ({} parameters), trainer {}, codec {}", self_.name, swarm_info_.mode,
               task.model, n_, trainer_->name(), codec_->spec());
  return Status::Ok();
}

// The application's trainer trains the swarm's layout (the founder's task.layout), starting
// from zeros unless initial_params says otherwise. The built-in trainer trains on this peer's
// part of options.data; the registry's model gives the layout, the initial replica and the
// held-out evaluation (the split the trainer never sees).
Status Peer::InitTrainer(std::vector<float>* init) {
  TaskConfig& task = swarm_info_.task;
  if (trainer_) {
    if (task.layout.empty())
      return Status::InvalidArgument("with an application trainer the swarm's task needs its layout (task.layout)");
    init->assign(LayoutSize(task.layout), 0.0f);
    return Status::Ok();
  }
  SHOAL_ASSIGN_OR_RETURN(eval_backend_, MakeBackend(o_.data.device));
  const std::string data_dir = o_.data.data_dir.empty() ? data::DefaultDataDir() : o_.data.data_dir;
  SHOAL_ASSIGN_OR_RETURN(data::Dataset full, data::LoadDataset(o_.data.dataset, data_dir));
  SHOAL_ASSIGN_OR_RETURN(data::Split split, data::TrainTestSplit(full, task.test_fraction, task.seed));
  SHOAL_ASSIGN_OR_RETURN(data::Dataset part,
                         data::TrainingPart(split, task.seed, {o_.data.partition_index, o_.data.partition_count},
                                            o_.data.partition_scheme));
  auto local = std::make_shared<const data::Dataset>(std::move(part));
  test_ = std::move(split.test);  // the held-out split, for evaluation
  if (fit_standardization_) {
    SHOAL_RETURN_IF_ERROR(data::RequireFeatures(full, "--standardize on"));
    const data::Standardization s = data::FitStandardization(split.train);
    task.feature_mean = s.mean;
    task.feature_scale = s.scale;
  }
  // The trainer standardizes its own part at Configure; the held-out split is ours.
  if (!task.feature_mean.empty()) SHOAL_RETURN_IF_ERROR(data::Standardize({task.feature_mean, task.feature_scale}, &test_));
  if (local->n == 0) return Status::InvalidArgument("this peer's partition holds no examples");

  SHOAL_ASSIGN_OR_RETURN(eval_model_, nn::MakeModel(task.model, nn::InputsOf(full), eval_backend_.get()));
  if (!task.layout.empty() && task.layout != eval_model_->Layout())
    return Status::InvalidArgument("the swarm's model layout [" + LayoutToString(task.layout) +
                                   "] does not fit this peer's data (" + std::to_string(full.dim) + " features)");
  task.layout = eval_model_->Layout();
  SHOAL_ASSIGN_OR_RETURN(Precision precision, ParsePrecision(o_.data.precision));
  eval_model_->set_precision(precision);
  ParameterArena arena;
  eval_model_->Init(&arena, task.seed);
  init->assign(arena.data(), arena.data() + arena.size());
  SHOAL_ASSIGN_OR_RETURN(trainer_, nn::MakeBuiltinTrainerOnPart(o_.data, std::move(local)));
  return Status::Ok();
}

void Peer::LocalUpdates() {
  uint64_t last = committed_ + (overlap_ ? 2 : 1);
  if (swarm_info_.steps) last = std::min(last, swarm_info_.steps);
  for (uint64_t t = std::max(sent_step_, committed_) + 1; t <= last && train_error_.ok(); ++t) {
    LocalUpdate(t);
    if (sent_step_ != t) return;  // it failed (logged): tried again next time round
  }
}

std::string Peer::BaseHash(uint64_t step) const {
  if (!overlap_) return step == committed_ + 1 ? hash_ : std::string();
  auto it = hash_log_.find(step >= 2 ? step - 2 : 0);
  return it == hash_log_.end() ? std::string() : it->second;
}

// This peer's contribution to `step`: the trainer's round from the replica (one gradient
// step, DiLoCo's H inner steps, ...), turned by the exchange into what this peer sends (the
// delta, or gossip's local model), encoded, signed and sent to the exchange's recipients.
void Peer::LocalUpdate(uint64_t step) {
  const auto started = Clock::now();
  TrainContext ctx;
  ctx.cancel = stop_;
  ctx.progress = [this](float) { Heartbeat(); };  // long local work (DiLoCo's H steps) keeps us a member
  TrainResult r;
  Status st = trainer_->Train(w_, exchange_->Round(step), ctx, &r);
  if (st.ok() && r.delta.size() != n_)
    st = Status::InvalidArgument("the trainer's delta has " + std::to_string(r.delta.size()) + " values, the model " +
                                 std::to_string(n_));
  if (!st.ok()) {
    if (train_error_.ok() && !(stop_ && stop_->load())) train_error_ = st.WithContext("step " + std::to_string(step));
    return;
  }
  Update u;
  u.num_examples = std::clamp<uint64_t>(r.num_examples, 1, protocol::kMaxExamples);
  for (const auto& [name, value] : r.metrics)
    if (name == "train_loss" && std::isfinite(value)) u.loss = value;
  if (exchange_->finish() == Exchange::Finish::kRing) {
    // The ring sums weight x delta; the weights and losses ride along (ring.cc).
    const double weight = static_cast<double>(exchange_->Weight(u.num_examples));
    own_ = Contribution{.step = step, .values = std::move(r.delta), .weight = weight, .loss = weight * u.loss};
    for (float& x : own_.values) x = static_cast<float>(weight * x);
    bool finite = true;
    for (float x : own_.values) finite = finite && std::isfinite(x);
    if (!finite) {
      train_error_ = Status::InvalidArgument("step " + std::to_string(step) + ": the trainer's delta is not finite");
      return;
    }
    sent_step_ = step;
    step_started_ = Clock::now();
    compute_seconds_ += std::chrono::duration<double>(step_started_ - started).count();
    return;
  }
  bool moved = false;
  const std::vector<float> vec = exchange_->Outgoing(w_, std::move(r.delta), &moved);
  if (moved) hash_ = crypto::ModelHash(w_);
  u.base_hash = hash_;
  if (Status encoded = runtime::EncodeUpload(*codec_, swarm_info_.task.seed, step, self_.name, vec, &u.payload); !encoded.ok()) {
    spdlog::error("peer {}: step {}: encoding the update failed: {}", self_.name, step, encoded.message());
    return;
  }
  const auto digest = crypto::Hash256(u.payload);
  u.payload_hash = crypto::ToHex(digest);
  u.signature = crypto::Sign(protocol::SignedUpdateBytes(swarm_, step, self_.name, u.base_hash, u.num_examples, u.loss, digest),
                             keys_.sign_secret);
  u.complete = true;
  for (const auto& to : exchange_->Recipients(self_.name, step, LiveNames())) SendUpdate(to, step, self_.name, u);
  updates_[step][self_.name] = std::move(u);
  sent_step_ = step;
  step_started_ = Clock::now();
  compute_seconds_ += std::chrono::duration<double>(step_started_ - started).count();
}

// Held-out evaluation with the built-in trainer (into step->eval, held out); an application's
// trainer evaluates on its own data, when it can.
void Peer::Evaluate(PeerStep* step) {
  if (eval_model_) {
    step->eval = nn::Evaluate(*eval_model_, w_, test_);
    step->eval_held_out = true;
    return;
  }
  EvalResult r;
  if (trainer_->Evaluate(w_, &r).ok()) step->eval = r;
}

void Peer::FinishStep(uint64_t step, size_t included, double loss, double spread) {
  const size_t members = LiveNames().size();
  const uint64_t received = server_->traffic().bytes_received;
  PeerStep s;
  s.step = step;
  s.members = members;
  s.included = included;
  s.loss = loss;
  s.model_hash = hash_;
  s.params = w_;
  s.bytes_sent = bytes_sent_ - bytes_sent_at_step_;
  s.bytes_received = received - bytes_received_at_step_;
  s.seconds = std::chrono::duration<double>(Clock::now() - step_clock_).count();
  s.frames_rejected = frames_rejected_;
  s.resyncs = resyncs_;
  const uint64_t every = static_cast<uint64_t>(swarm_info_.Param("eval_every", 10));
  const bool last = swarm_info_.steps && step >= swarm_info_.steps;
  if ((recorder_->writes_metrics() || o_.on_step) && ((every && step % every == 0) || last)) Evaluate(&s);
  if (o_.on_step) o_.on_step(s);
  bytes_sent_at_step_ = bytes_sent_;
  bytes_received_at_step_ = received;
  step_clock_ = Clock::now();
  if (recorder_->writes_metrics()) {
    // The swarm goes on without its metrics: said each time, never fatal to training.
    if (Status st = recorder_->Record(s, StepExtras(s, spread)); !st.ok())
      spdlog::error("step {}: {}", s.step, st.ToString());
  }
  compute_seconds_ = apply_seconds_ = ring_seconds_ = 0;
}

nlohmann::json Peer::StepExtras(const PeerStep& s, double spread) const {
  nlohmann::json line = {
      {"name", self_.name},
      {"mode", swarm_info_.mode},
      {"leader", exchange_->finish() == Exchange::Finish::kLocalMix ? "" : Leader()},
      {"bytes_dense_equiv", n_ * sizeof(float) * (s.members > 1 ? s.members - 1 : 0)},
      {"compute_seconds", compute_seconds_},
      {"apply_seconds", apply_seconds_},
      {"divergences", divergences_},
      {"readmitted", readmitted_},
      {"ring_restarts", ring_restarts_},
      {"applied_ahead", applied_ahead_},
      {"rollbacks", rollbacks_},
      {"rejected_by_code", rejected_by_code_},
  };
  if (spread >= 0) line["spread"] = spread;
  if (ring_seconds_ > 0) line["ring_seconds"] = ring_seconds_;
  if (s.eval && s.eval_held_out && eval_model_->batch_kind() == nn::BatchKind::kTokens)
    line["test_bits_per_byte"] = nn::BitsPerByte(s.eval->loss);
  return line;
}

}  // namespace shoal::peer
