#include "runtime/server/service_impl.h"
#include "transport/zmq/security.h"

namespace shoal::aggregator {

Status Service::Impl::Init(std::unique_ptr<transport::Listener> listener) {
  if (o_.min_clients == 0) return Status::InvalidArgument("--min-clients must be at least 1");
  if (!(o_.fraction > 0.0 && o_.fraction <= 1.0)) return Status::InvalidArgument("--fraction must be in (0, 1]");
  if (o_.batch_size == 0) return Status::InvalidArgument("--batch-size must be at least 1");
  if (o_.round_timeout_ms == 0) return Status::InvalidArgument("--round-timeout must be positive");
  if (!(o_.deadline.quantile >= 0.0 && o_.deadline.quantile < 1.0))
    return Status::InvalidArgument("--deadline-quantile must be in [0, 1) (0 = the fixed --round-timeout)");
  if (!(o_.deadline.margin >= 1.0) || !std::isfinite(o_.deadline.margin))
    return Status::InvalidArgument("--deadline-margin must be at least 1");
  if (o_.deadline.window == 0 || o_.deadline.window > 1000)
    return Status::InvalidArgument("--deadline-window must be in [1, 1000]");
  if (o_.heartbeat_interval_ms == 0 || o_.heartbeat_timeout_ms <= o_.heartbeat_interval_ms)
    return Status::InvalidArgument("--heartbeat-timeout must be larger than --heartbeat-interval");
  if (o_.chunk_bytes < 1024) return Status::InvalidArgument("--chunk-bytes must be at least 1024");
  if (o_.resume && o_.checkpoint_dir.empty()) return Status::InvalidArgument("--resume needs --checkpoint-dir");
  if (!(o_.test_fraction > 0.0 && o_.test_fraction < 1.0))
    return Status::InvalidArgument("--test-fraction must be in (0, 1)");

  if (!o_.upstream.empty()) SHOAL_RETURN_IF_ERROR(StartEdge());  // the parent's task into o_
  SHOAL_ASSIGN_OR_RETURN(strategy_, MakeStrategy(o_.strategy));
  async_ = strategy_->asynchronous();
  if (async_ && (o_.secagg.enabled || o_.dp.enabled()))
    return Status::InvalidArgument("--strategy " + strategy_->name() +
                                   " commits updates trained from different model versions; secure aggregation and DP "
                                   "need a synchronous cohort: drop --secagg/--dp-clip or choose a synchronous strategy");
  if (async_ && o_.min_results > async_->buffer)
    return Status::InvalidArgument("--min-results " + std::to_string(o_.min_results) + " is above --buffer-size " +
                                   std::to_string(async_->buffer) + ": no commit could change the model");
  if (async_ && o_.deadline.quantile > 0)
    return Status::InvalidArgument("--deadline-quantile sets a synchronous round's deadline; --strategy " +
                                   strategy_->name() + " waits for no straggler (--max-staleness bounds how old an update may be)");
  if (o_.secagg.enabled) {
    SHOAL_RETURN_IF_ERROR(CheckSecAggStrategy(*strategy_));
    if (!(o_.secagg.range > 0) || !std::isfinite(o_.secagg.range))
      return Status::InvalidArgument("--secagg-range must be a positive number");
    if (!(o_.secagg.dropout >= 0 && o_.secagg.dropout < 1) || !(o_.secagg.corrupt >= 0 && o_.secagg.corrupt < 0.5))
      return Status::InvalidArgument("--secagg-dropout must be in [0, 1) and --secagg-corrupt in [0, 0.5)");
    if (o_.secagg.stage_timeout_ms == 0) return Status::InvalidArgument("--secagg-stage-timeout must be positive");
    if (o_.dp.enabled() && !o_.dp.distributed)
      return Status::InvalidArgument("with --secagg the aggregator never sees an update to clip: use --dp-mode distributed");
    privacy_.secagg = true;
    privacy_.secagg_range = o_.secagg.range;
    if (o_.dp.enabled()) {
      privacy_.dp_clip = o_.dp.clip;
      SHOAL_ASSIGN_OR_RETURN(privacy_.dp_noise_multiplier, DpNoiseMultiplier(o_.dp, o_.fraction, o_.rounds));
    }
  } else if (o_.dp.distributed) {
    return Status::InvalidArgument("--dp-mode distributed needs --secagg (the noise is split among masked updates)");
  }
  if (o_.dp.enabled()) {
    SHOAL_ASSIGN_OR_RETURN(strategy_, WrapWithDp(std::move(strategy_), o_.dp, o_.fraction, o_.rounds));
  } else if (o_.dp.noise_multiplier != 0 || o_.dp.target_epsilon != 0 || o_.dp.epsilon_budget != 0 ||
             o_.dp.clip_quantile != 0) {
    return Status::InvalidArgument("the --dp-* options need --dp-clip (the L2 bound of each client's update)");
  }
  // Everything the flags alone decide is checked before the device is probed or data loaded.
  SHOAL_ASSIGN_OR_RETURN(const bool standardize, data::WantsStandardization(o_.standardize, o_.dataset));
  OptimizerConfig optimizer = o_.optimizer;
  optimizer.learning_rate = o_.strategy.learning_rate;
  SHOAL_RETURN_IF_ERROR(nn::ValidateOptimizerConfig(optimizer));
  // DeMo's client update is extracted momentum, which only the demo strategy (sign of the
  // mean) turns into a model step; any other pairing would silently train wrong.
  if ((optimizer.name == "demo") != (strategy_->name() == "demo"))
    return Status::InvalidArgument("--client-optimizer demo and --strategy demo go together (got optimizer '" +
                                   optimizer.name + "', strategy '" + strategy_->name() + "')");
  for (const std::string& spec : {o_.codec, o_.codec_down, o_.codec_slow})
    SHOAL_RETURN_IF_ERROR(codec::ParseSpec(spec).status());
  SHOAL_RETURN_IF_ERROR(codec::CheckDemoPresetPairing(o_.codec, optimizer.name, "--client-optimizer demo --strategy demo"));
  if (!o_.codec_slow.empty()) {
    if (!(o_.slow_below_mbps > 0) || !std::isfinite(o_.slow_below_mbps))
      return Status::InvalidArgument("--codec-slow needs --slow-below-mbps R > 0: the upload rate below which a client uses it");
    if (privacy_.secagg)
      return Status::InvalidArgument("--codec-slow with --secagg: masked updates are summed in one encoding");
  } else if (o_.slow_below_mbps != 0) {
    return Status::InvalidArgument("--slow-below-mbps needs --codec-slow (the codec slow clients switch to)");
  }

  SHOAL_ASSIGN_OR_RETURN(backend_, MakeBackend(o_.device));

  // Data: the aggregator only keeps the held-out split, which no client ever receives.
  const std::string data_dir = o_.data_dir.empty() ? data::DefaultDataDir() : o_.data_dir;
  SHOAL_ASSIGN_OR_RETURN(data::Dataset full, data::LoadDataset(o_.dataset, data_dir));
  SHOAL_ASSIGN_OR_RETURN(data::Split split, data::TrainTestSplit(full, o_.test_fraction, o_.seed));
  test_ = std::move(split.test);
  if (standardize) {
    SHOAL_RETURN_IF_ERROR(data::RequireFeatures(full, "--standardize on"));
    const data::Standardization s = data::FitStandardization(split.train);
    SHOAL_RETURN_IF_ERROR(data::Standardize(s, &test_));
    task_.feature_mean = s.mean;
    task_.feature_scale = s.scale;
    spdlog::info("standardizing {} features by the training split's mean and standard deviation (sent to clients; "
                 "--standardize off keeps them as written)", full.dim);
  }
  if (!full.class_names.empty()) {
    std::string mapping;
    for (size_t c = 0; c < full.class_names.size(); ++c)
      mapping += (c ? ", " : "") + std::to_string(c) + " = " + full.class_names[c];
    spdlog::info("dataset {}: labels are names, mapped to classes {}", o_.dataset, mapping);
  }
  majority_class_rate_ = data::MajorityClassRate(test_);

  // Model and task.
  SHOAL_ASSIGN_OR_RETURN(model_, nn::MakeModel(o_.model, nn::InputsOf(full), backend_.get()));
  task_.model = model_->spec();
  task_.layout = model_->Layout();
  task_.dataset = o_.dataset;
  task_.optimizer = optimizer;
  task_.local_epochs = o_.strategy.local_epochs;
  task_.local_steps = o_.strategy.local_steps;
  task_.batch_size = o_.batch_size;
  task_.prox_mu = o_.strategy.name == "fedprox" ? o_.strategy.prox_mu : 0.0f;
  task_.seed = o_.seed;
  task_.test_fraction = o_.test_fraction;
  task_.codec = o_.codec.empty() ? "none" : o_.codec;
  task_.codec_down = o_.codec_down.empty() ? task_.codec : o_.codec_down;
  if (LayoutSize(task_.layout) * sizeof(float) > protocol::kMaxPayloadBytes)
    return Status::InvalidArgument("model is larger than the protocol's payload limit");
  global_ = ParameterArena(task_.layout);
  model_->Init(&global_, o_.seed);

  // Codecs: validated here so a bad --codec fails at start with the parser's message.
  SHOAL_ASSIGN_OR_RETURN(up_codec_, codec::Codec::Create(task_.codec, task_.layout));
  SHOAL_ASSIGN_OR_RETURN(down_codec_, codec::Codec::Create(task_.codec_down, task_.layout));
  task_.codec = up_codec_->spec();
  task_.codec_down = down_codec_->spec();
  if (privacy_.secagg) {
    if (std::string why = up_codec_->SecureSumRefusal(); !why.empty()) return Status::InvalidArgument(why);
    privacy_.secagg_bits = up_codec_->quantizes_int8() ? 16 : 32;
    if (privacy_.secagg_bits == 16 && privacy_.dp_clip > 0)
      return Status::InvalidArgument("distributed DP needs 32-bit secure sums: int8 levels round each value by up to half "
                                     "a level, far beyond the clip's sensitivity; use --codec none or randk:ratio=F");
  }
  // What a client's update goes through: decode with `codec`, then validate.
  auto ingest = [this](const codec::Codec& codec, runtime::UpdatePipeline& stages) {
    stages.Add(runtime::DecodeStage(&codec, o_.seed, global_.size())).Add(runtime::ValidateStage(o_.max_update_norm));
  };
  ingest(*up_codec_, ingest_);
  if (!o_.codec_slow.empty()) {
    SHOAL_ASSIGN_OR_RETURN(slow_codec_, codec::Codec::Create(o_.codec_slow, task_.layout));
    task_.codec_slow = slow_codec_->spec();
    task_.slow_below_mbps = o_.slow_below_mbps;
    ingest(*slow_codec_, ingest_slow_);
  }
  for (const std::string& codec_spec : {task_.codec, task_.codec_down, task_.codec_slow}) {
    if (codec_spec.empty()) continue;
    SHOAL_ASSIGN_OR_RETURN(auto stages, codec::ParseSpec(codec_spec));
    for (const auto& st : stages)
      if (std::find(required_stages_.begin(), required_stages_.end(), st.name) == required_stages_.end())
        required_stages_.push_back(st.name);
  }

  if (edge_) {  // the parent's task, verbatim (its feature map, canonical specs)
    if (edge_->task().layout != task_.layout)
      return Status::InvalidArgument("the parent's model " + edge_->task().model + " has layout " +
                                     LayoutToString(edge_->task().layout) + ", built here as " + LayoutToString(task_.layout));
    task_ = edge_->task();
  }
  // Checkpoint: resume, or refuse to overwrite a committed run.
  if (!o_.checkpoint_dir.empty()) {
    const std::string path = (fs::path(o_.checkpoint_dir) / kCheckpointFile).string();
    auto ck = ReadCheckpoint(path);
    if (ck.ok() && !o_.resume)
      return Status::FailedPrecondition("--checkpoint-dir " + o_.checkpoint_dir + " already holds round " +
                                        std::to_string(ck->round) +
                                        "; pass --resume to continue it, or choose an empty directory");
    if (o_.resume) {
      if (ck.ok()) {
        if (ck->model_spec != task_.model)
          return Status::InvalidArgument("checkpoint " + path + " is of model '" + ck->model_spec +
                                         "', not '" + task_.model + "'; pass --model " + ck->model_spec);
        if (!ck->params.SameLayout(global_))
          return Status::Corruption("checkpoint " + path + " has layout " + LayoutToString(ck->params.Layout()) +
                                    ", expected " + LayoutToString(task_.layout));
        global_ = std::move(ck->params);
        last_completed_ = ck->round;
        for (const auto& [name, blob] : ck->sections) {
          if (name == "strategy") SHOAL_RETURN_IF_ERROR(strategy_->LoadState(blob).WithContext(path));
          if (name == "codec_down")
            SHOAL_RETURN_IF_ERROR(
                down_codec_->LoadState(std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(blob.data()), blob.size()))
                    .WithContext(path + ": the download codec's state (was it written with another --codec-down?)"));
          if (name == "committed_rounds") SHOAL_RETURN_IF_ERROR(LoadCommittedRounds(blob).WithContext(path));
        }
        spdlog::info("resumed from {} at round {} (model_hash {})", path, last_completed_,
                     crypto::ModelHash(global_.span()));
      } else if (ck.status().code() == StatusCode::kNotFound) {
        spdlog::info("--resume: no checkpoint in {} yet; starting at round 1", o_.checkpoint_dir);
      } else {
        return ck.status();
      }
    }
  }
  global_hash_ = crypto::ModelHash(global_.span());

  runtime::RecorderOptions ro;
  ro.metrics_out = o_.metrics_out;
  if (o_.resume) ro.resume_after = last_completed_;
  if (!o_.checkpoint_dir.empty()) ro.checkpoint_path = (fs::path(o_.checkpoint_dir) / kCheckpointFile).string();
  ro.print_table = o_.print_table;
  ro.evaluates = !edge_;  // an edge holds the root's model and leaves evaluation to it
  SHOAL_ASSIGN_OR_RETURN(recorder_, runtime::Recorder::Open(std::move(ro)));

  // Transport last, so a failure above never leaves a bound port behind.
  max_frame_bytes_ = protocol::MaxFrameBytes(o_.chunk_bytes);
  transport::SocketOptions so;
  so.max_frame_bytes = static_cast<int64_t>(max_frame_bytes_);
  so.recv_hwm = static_cast<int>(o_.recv_hwm);
  if (listener) {
    if (!o_.secret_key.empty() || !o_.allow_keys.empty())
      return Status::InvalidArgument("--secret-key/--allow-keys need a ZeroMQ listener, not " + listener->endpoint());
    server_ = std::move(listener);
  } else {
    SHOAL_RETURN_IF_ERROR(InitSecurity(so));
    SHOAL_ASSIGN_OR_RETURN(server_, transport::ZmqListener::Bind(ctx_, o_.listen, so));
  }
  session_ = crypto::RandomU64() | 1;  // never 0, which Hello uses
  spdlog::info("listening on {} (model {}: {} parameters, dataset {}: {} held-out examples, strategy {})",
               server_->endpoint(), task_.model, global_.size(), o_.dataset, test_.n, strategy_->name());
  return Status::Ok();
}

// Secure by default (transport/zmq/security.h): a listener other machines can reach needs a
// key pair and an allow-list, unless the operator explicitly says --insecure.
Status Service::Impl::InitSecurity(transport::SocketOptions& so) {
  if (o_.recv_hwm == 0) return Status::InvalidArgument("--recv-hwm must be at least 1");
  SHOAL_ASSIGN_OR_RETURN(const bool secure,
                         transport::CheckSecurityFlags({.role = "aggregator",
                                                        .secret_key = o_.secret_key,
                                                        .others_flag = "--allow-keys",
                                                        .others = o_.allow_keys,
                                                        .others_what = "the public keys of the clients to admit",
                                                        .insecure = o_.insecure,
                                                        .endpoints = {{"--listen", o_.listen}}}));
  if (!secure) {
    if (!o_.insecure) spdlog::info("no --secret-key: serving {} without encryption (loopback only)", o_.listen);
    return Status::Ok();
  }
  SHOAL_ASSIGN_OR_RETURN(crypto::KeyPair keys, crypto::ReadSecretKeyFile(o_.secret_key));
  SHOAL_ASSIGN_OR_RETURN(allow_list_, transport::LoadAllowList(o_.allow_keys, "client"));
  SHOAL_ASSIGN_OR_RETURN(zap_, transport::ZapHandler::Start(ctx_, allow_list_));
  so.curve = std::make_shared<const crypto::KeyPair>(std::move(keys));
  spdlog::info("CURVE security on: server key {}, {} client keys allowed from {}", crypto::Z85Key(so.curve->curve_public),
               allow_list_->size(), o_.allow_keys);
  return Status::Ok();
}

void Service::Impl::ReloadAllowList() {
  if (!zap_) {
    spdlog::warn("SIGHUP: no --allow-keys to reload (transport security is off)");
    return;
  }
  auto list = crypto::AllowList::Load(o_.allow_keys);
  if (!list.ok()) {
    spdlog::error("SIGHUP: keeping the current allow-list ({} keys): {}", allow_list_->size(), list.status().message());
    return;
  }
  if (list->size() == 0) spdlog::warn("SIGHUP: the new allow-list is empty: no client can connect");
  allow_list_ = std::make_shared<const crypto::AllowList>(std::move(*list));
  zap_->Replace(allow_list_);
  // Connections that authenticated with a key that is gone are cut off now, not at their
  // next handshake.
  std::vector<uint32_t> revoked;
  for (const auto& [id, c] : clients_)
    if (!KeyAllowed(c.identity)) revoked.push_back(id);
  for (uint32_t id : revoked) {
    const ClientState& c = clients_.at(id);
    spdlog::warn("client {} ({}): key {} was removed from the allow-list; dropped", id, c.name, c.identity);
    SendDirect(c.peer, protocol::EncodeError(Header(round_.number), ErrorCode::Refused,
                                             "this client's key was removed from the aggregator's allow-list"));
    DropClient(id, "key revoked");
  }
  spdlog::info("SIGHUP: allow-list reloaded from {}: {} keys, {} live clients revoked", o_.allow_keys,
               allow_list_->size(), revoked.size());
}

void Service::Impl::SendByeToAll(const std::string& reason) {
  closing_ = true;
  auto bye = std::make_shared<const Frame>(protocol::EncodeBye(Header(last_completed_), reason));
  for (const auto& [id, c] : clients_) Enqueue(id, bye);
  // Keep serving until every client has answered with its own Bye (or 3 s pass): a socket
  // closed right after a send does not always deliver it, and a client that misses the Bye
  // would wait for its reconnect timeout instead of exiting.
  const auto until = Clock::now() + std::chrono::seconds(3);
  while (!clients_.empty() && Clock::now() < until) {
    Flush();
    auto in = server_->Recv(std::chrono::milliseconds(OutboxPending() ? 2 : 50));
    if (!in.ok()) break;
    // Everything queued now, before the next Flush.
    while (in.ok() && *in) {
      Handle(**in);
      in = server_->Recv(std::chrono::milliseconds(0));
    }
  }
  if (!clients_.empty()) spdlog::warn("{} clients did not confirm the Bye", clients_.size());
}

// Resumed after the last round: the run's clients may never have heard its Bye (the process
// was killed between the last checkpoint and the Bye), and wait to reconnect. For two
// heartbeat timeouts (by then a client that lost its aggregator has registered again), every
// client that registers is told the run is over instead of waiting out its reconnect timeout.
std::optional<Status> Service::Impl::TellLateClientsTheRunIsOver(Clock::time_point until, std::chrono::milliseconds max_wait) {
  if (Clock::now() >= until) return Status::Ok();
  SHOAL_ASSIGN_OR_RETURN(auto in, server_->Recv(std::min(max_wait, std::chrono::milliseconds(50))));
  if (in) Handle(*in);
  Flush();
  if (!clients_.empty()) SendByeToAll("training finished after " + std::to_string(last_completed_) + " rounds");
  return std::nullopt;
}

Status Service::Impl::Run(const std::atomic<bool>& stop, std::atomic<bool>* reload, const std::atomic<bool>* finish) {
  for (;;) {
    if (auto over = Turn(stop, reload, std::chrono::milliseconds(50), finish)) return *over;
  }
}

std::optional<Status> Service::Impl::Turn(const std::atomic<bool>& stop, std::atomic<bool>* reload,
                                          std::chrono::milliseconds max_wait, const std::atomic<bool>* finish) {
  if (!serving_) {  // the first turn
    serving_ = true;
    round_.number = last_completed_;
    if (evaluator_) SHOAL_RETURN_IF_ERROR(evaluator_->Configure(task_).WithContext("the application's evaluator"));
    if (o_.rounds && last_completed_ >= o_.rounds) {
      spdlog::info("all {} rounds are already done; telling clients that register in the next {} ms", o_.rounds,
                   2 * o_.heartbeat_timeout_ms);
      late_until_ = Clock::now() + 2 * std::chrono::milliseconds(o_.heartbeat_timeout_ms);
    }
  }
  if (late_until_) return stop.load() ? Status::Ok() : TellLateClientsTheRunIsOver(*late_until_, max_wait);
  if (stop.load()) {
    spdlog::info("stopping on request after round {} (checkpointed rounds are kept)", last_completed_);
    return Status::Ok();
  }
  if (finish && finish->load()) {
    const std::string why = "the application ended training after " + std::to_string(last_completed_) + " rounds";
    spdlog::info("{}; sending Bye to {} clients", why, clients_.size());
    SendByeToAll(why);
    return Status::Ok();
  }
  if (reload && reload->exchange(false)) ReloadAllowList();
  if (auto over = edge_ ? edge_->finished() : std::nullopt) {  // the parent's Bye, or a refusal for good
    SendByeToAll(over->ok() ? edge_->bye_reason() : "this edge aggregator's parent refused it: " + over->message());
    return *over;
  }
  // Short polls while outboxes wait for room, so transfers flow without delay.
  const auto timeout = std::min(max_wait, std::chrono::milliseconds(OutboxPending() ? 2 : 50));
  SHOAL_ASSIGN_OR_RETURN(auto in, server_->Recv(timeout));
  if (in) Handle(*in);
  // Drain what else is queued (up to 20 ms) before housekeeping, so heartbeats waiting
  // behind a burst are seen before anyone is declared silent.
  // A full buffer (asynchronous strategies) commits before any further update is read: a
  // commit holds exactly --buffer-size updates.
  const auto drain_until = Clock::now() + std::chrono::milliseconds(20);
  while (in && Clock::now() < drain_until && !(async_ && round_.open && BufferFull())) {
    SHOAL_ASSIGN_OR_RETURN(in, server_->Recv(std::chrono::milliseconds(0)));
    if (in) Handle(*in);
  }
  Flush();
  ExpireClients();
  PublishStatus();
  if (round_.open && round_.secagg) AdvanceSecAgg();  // its stages end the round
  // Never into a full buffer: its model is about to be replaced.
  if (round_.open && async_ && dispatch_pending_ && !RoundResolved()) DispatchIdle();
  // An edge's round also ends when its parent has moved on.
  const bool deadline = async_ ? round_.open && BufferDeadline()
                               : !round_.secagg && (Clock::now() >= round_.deadline ||
                                                    (edge_ && round_.open && edge_->Superseded(round_.number)));
  if (round_.open && (RoundResolved() || deadline)) {
    SHOAL_RETURN_IF_ERROR(CloseRound());
    if (o_.rounds && last_completed_ >= o_.rounds) {
      spdlog::info("completed {} rounds; sending Bye to {} clients", last_completed_, clients_.size());
      SendByeToAll("training finished after " + std::to_string(last_completed_) + " rounds");
      return Status::Ok();
    }
  }
  if (!round_.open) {
    if (auto why = strategy_->StopBefore(last_completed_ + 1)) {
      spdlog::warn("stopping after round {}: {}", last_completed_, *why);
      SendByeToAll(*why);
      return Status::Ok();
    }
    if (MaybeStartRound()) Flush();
  }
  return std::nullopt;
}

StatusOr<std::unique_ptr<Service>> Service::Create(const AggregatorOptions& options) {
  return Create(options, nullptr);
}

StatusOr<std::unique_ptr<Service>> Service::Create(const AggregatorOptions& options,
                                                   std::unique_ptr<transport::Listener> listener) {
  auto impl = std::make_unique<Impl>(options);
  SHOAL_RETURN_IF_ERROR(impl->Init(std::move(listener)));
  return std::unique_ptr<Service>(new Service(std::move(impl)));
}

Service::Service(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Service::~Service() = default;
Status Service::Run(const std::atomic<bool>& stop, std::atomic<bool>* reload, const std::atomic<bool>* finish) {
  return impl_->Run(stop, reload, finish);
}
std::optional<Status> Service::Turn(const std::atomic<bool>& stop, std::atomic<bool>* reload,
                                    std::chrono::milliseconds max_wait, const std::atomic<bool>* finish) {
  return impl_->Turn(stop, reload, max_wait, finish);
}
void Service::SetEvaluator(std::shared_ptr<Evaluator> evaluator) { impl_->set_evaluator(std::move(evaluator)); }
std::string Service::endpoint() const { return impl_->endpoint(); }
uint64_t Service::rounds_completed() const { return impl_->rounds_completed(); }
std::string Service::model_hash() const { return impl_->model_hash(); }

}  // namespace shoal::aggregator
