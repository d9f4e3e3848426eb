#include "runtime/server/service_impl.h"

namespace shoal::aggregator {

bool Service::Impl::MaybeStartRound() {
  if (clients_.size() < o_.min_clients) {  // an edge's order waits too (its parent's deadline bounds it)
    if (!waiting_logged_) {
      spdlog::info("waiting for clients: {} of {} registered", clients_.size(), o_.min_clients);
      waiting_logged_ = true;
    }
    return false;
  }
  std::optional<EdgeOrder> order;  // an edge aggregator's rounds are its parent's
  if (edge_ && !(order = edge_->TakeOrder())) return false;
  if (order && edge_->Superseded(order->round)) return false;  // the parent has moved on since
  const uint64_t number = order ? order->round : last_completed_ + 1;
  if (order) {
    if (Status adopted = AdoptParentModel(*order); !adopted.ok()) {
      edge_->Fail(order->round, adopted.message());
      return false;
    }
  }
  ResetRound(number);
  round_.open = true;
  round_.started = Clock::now();
  round_.accumulator = order ? std::make_unique<PartialSumAccumulator>(global_.size())
                             : strategy_->StartRound(round_.number, global_.span());
  round_.deadline_ms = async_ ? o_.round_timeout_ms : deadline_.NextMs(o_.round_timeout_ms);
  round_.deadline = round_.started + std::chrono::milliseconds(round_.deadline_ms);
  round_.traffic_at_start = server_->traffic();
  round_config_ = order ? order->config : strategy_->Configure(number);
  ClearTaskFrames();
  resyncs_ = 0;
  if (async_) {
    ExpireStaleTasks();
    DispatchIdle();
    spdlog::info("round {} started: buffering {} updates, {} of {} clients training", number, async_->buffer,
                 TrainingCount(), clients_.size());
    return true;
  }

  // Canonical order (by name), then a seeded shuffle: the same clients are chosen in every
  // run with the same seed and membership.
  std::vector<const ClientState*> eligible;
  for (const auto& [id, c] : clients_) eligible.push_back(&c);
  SortByName(eligible);
  const size_t n = eligible.size();
  size_t k = 0;
  if (strategy_->poisson_sampling()) {
    // Each client independently with probability --fraction, from the OS CSPRNG: the sample
    // stays secret, as the accountant's privacy amplification assumes.
    auto kept = eligible.begin();
    for (const ClientState* c : eligible)
      if (static_cast<double>(crypto::RandomU64() >> 11) * 0x1p-53 < o_.fraction) *kept++ = c;
    eligible.erase(kept, eligible.end());
    k = eligible.size();
  } else {
    k = static_cast<size_t>(std::ceil(o_.fraction * static_cast<double>(n)));
    k = std::min(n, std::max<size_t>(k, 1));
    // An edge mixes its name in: edges with the same seed would otherwise pick the same
    // places in their lists, the same share of clients in the same data order.
    Rng rng(edge_ ? o_.seed ^ codec::NameSeed(o_.upstream_name) : o_.seed, number);
    rng.Shuffle(std::span<const ClientState*>(eligible));
  }

  for (size_t i = 0; i < k; ++i) round_.selected.push_back(eligible[i]->id);
  std::sort(round_.selected.begin(), round_.selected.end());
  for (uint32_t id : round_.selected) SendTask(clients_.at(id), false);
  if (o_.secagg.enabled) StartSecAgg();
  spdlog::info("round {} started: {} of {} clients selected", number, round_.selected.size(), n);
  if (o_.insecure)
    spdlog::warn("INSECURE: --insecure serves {} unencrypted and unauthenticated; anyone who can reach it can read "
                 "and poison updates", o_.listen);
  return true;
}

void Service::Impl::SendTask(ClientState& c, bool force_full) {
  const uint64_t number = round_.number;
  auto share = [](Frame f) { return std::make_shared<const Frame>(std::move(f)); };
  const std::vector<transport::SharedFrame>* frames = nullptr;
  if (!force_full && c.replica_hash == global_hash_) {
    if (unchanged_frames_.empty())
      unchanged_frames_.push_back(share(protocol::EncodeRoundTask(Header(number), round_config_, round_.deadline_ms,
                                                                  global_hash_, protocol::PayloadEncoding::Unchanged,
                                                                  protocol::ChunkRef{})));
    frames = &unchanged_frames_;
  } else if (!force_full && last_delta_ && c.replica_hash == last_delta_->base_hash) {
    if (delta_frames_.empty())
      for (const auto& chunk : protocol::SplitPayload(last_delta_->payload, o_.chunk_bytes))
        delta_frames_.push_back(share(protocol::EncodeRoundTask(Header(number), round_config_, round_.deadline_ms,
                                                                global_hash_, protocol::PayloadEncoding::Codec, chunk,
                                                                last_delta_->base_hash, last_delta_->round)));
    frames = &delta_frames_;
  } else {
    if (full_frames_.empty())
      for (const auto& chunk : protocol::SplitPayload(protocol::AsBytes(global_.span()), o_.chunk_bytes))
        full_frames_.push_back(share(protocol::EncodeRoundTask(Header(number), round_config_, round_.deadline_ms,
                                                               global_hash_, protocol::PayloadEncoding::DenseF32, chunk)));
    frames = &full_frames_;
  }
  for (const auto& f : *frames) Enqueue(c.id, f);
  c.replica_hash = global_hash_;
  c.task_round = number;
  c.training = true;
}

void Service::Impl::HandleResync(ClientState& c, const protocol::Header& h, const protocol::Resync& r) {
  const bool expected = async_ ? c.training && h.round == c.task_round
                               : h.round == round_.number && IsSelected(c.id) && !Settled(c.id);
  if (!round_.open || !expected) return;  // nothing to train now; the next task will carry what the client needs
  ++resyncs_;
  full_frames_.clear();  // encoded now: the client refuses frames older than those it has heard
  spdlog::warn("round {}: client {} ({}) asks for the full model (its replica is {})", round_.number, c.id, c.name,
               r.have_hash.empty() ? "?" : r.have_hash.substr(0, 16));
  SendTask(c, true);
}

void Service::Impl::ResetRound(uint64_t number) {
  RoundState next;
  next.number = number;
  if (async_) {  // an update trained from an older version keeps arriving across commits
    next.assembling = std::move(round_.assembling);
    next.incoming = std::move(round_.incoming);
  }
  round_ = std::move(next);
}

void Service::Impl::SettleContributors(const std::vector<Reported>& results, bool updated) {
  for (const Reported& rep : results) {
    if (updated) {
      std::vector<uint64_t>& rounds = committed_rounds_[rep.client];
      rounds.insert(std::upper_bound(rounds.begin(), rounds.end(), rep.task_round), rep.task_round);
      rounds.erase(std::unique(rounds.begin(), rounds.end()), rounds.end());
      if (rounds.size() > protocol::kMaxCommittedRounds)
        rounds.erase(rounds.begin(), rounds.end() - protocol::kMaxCommittedRounds);
    } else if (clients_.count(rep.client_id)) {
      // Its Ack said the update is in this commit: it is not, and its mass goes back into the
      // client's residual.
      Enqueue(rep.client_id, protocol::EncodeAck(Header(rep.task_round), false, round_.number));
    }
  }
}

Evaluation Service::Impl::EvaluateGlobal() {
  if (!evaluator_) {
    const EvalResult e = nn::Evaluate(*model_, global_.span(), test_);
    return Evaluation{.loss = e.loss, .accuracy = e.accuracy, .metrics = {}};
  }
  Evaluation e;
  Status st = evaluator_->Evaluate(global_.span(), round_.number, &e);
  for (const auto& [name, value] : e.metrics) {
    const bool ok = !name.empty() && name.size() <= protocol::kMaxMetricName &&
                    std::all_of(name.begin(), name.end(), [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'; });
    if (st.ok() && !ok) st = Status::InvalidArgument("metric name '" + name + "' is not 1 to 64 of [a-z0-9_]");
  }
  if (st.ok() && !(std::isfinite(e.loss) && std::isfinite(e.accuracy)))
    st = Status::InvalidArgument("a loss or accuracy that is not finite");
  if (st.ok()) return e;
  ++evaluations_failed_;
  spdlog::error("round {}: the application's evaluator failed ({}); the round is committed without a score",
                round_.number, st.ToString());
  return Evaluation{};
}

// The round ends: the selected clients that neither reported nor failed fail by the
// deadline, the secure aggregate (if any) joins the accumulator, and the results come out
// sorted by client key, so the round's metrics sum in a fixed order (the aggregate itself is
// exact and needs no order).
StatusOr<Service::Impl::ClosedRound> Service::Impl::EndRound() {
  if (!async_) {  // an asynchronous strategy's clients keep training for the next commits
    for (uint32_t id : round_.selected) {
      if (Settled(id)) continue;
      FailClient(id, "deadline");
      deadline_.Observe(round_.deadline_ms / 1000.0);  // censored: it would have taken longer
    }
    deadline_.EndRound();
  }
  ClosedRound c;
  c.secagg_line = nlohmann::json::object();
  if (round_.secagg) SHOAL_RETURN_IF_ERROR(AddSecureAggregate(c.secagg_line));
  round_.open = false;
  for (auto& [id, r] : round_.results) c.results.push_back(std::move(r));
  std::sort(c.results.begin(), c.results.end(), [](const Reported& a, const Reported& b) {
    return std::tie(a.client, a.client_id) < std::tie(b.client, b.client_id);
  });
  for (auto& [id, f] : round_.failures) c.failures.push_back(f);
  return c;
}

// The root's commit: the aggregate through the download codec into the global model (never
// one that holds NaN/Inf), then its hash, and each contributor told whether its update is in.
// An edge commits nothing: its model is the parent's, and its clients' updates are committed
// there.
Status Service::Impl::Commit(ClosedRound& c) {
  if (c.results.size() >= o_.min_results) {
    SHOAL_ASSIGN_OR_RETURN(auto delta, round_.accumulator->Finish(c.failures));
    if (delta) {
      // The model committed is the one every replica makes of the payload (runtime/update.h).
      SHOAL_ASSIGN_OR_RETURN(auto down, runtime::EncodeDownload(*down_codec_, o_.seed, round_.number, *delta, global_.span()));
      if (down.model) {
        SHOAL_RETURN_IF_ERROR(global_.Assign(*down.model));
        last_delta_ = LastDelta{std::move(down.payload), global_hash_, round_.number};
        c.updated = true;
      } else {
        spdlog::error("round {}: the aggregate would make the model non-finite; model unchanged", round_.number);
      }
    }
  } else {
    spdlog::warn("round {}: {} updates, fewer than --min-results {}; model unchanged", round_.number, c.results.size(),
                 o_.min_results);
  }
  global_hash_ = crypto::ModelHash(global_.span());
  SettleContributors(c.results, c.updated);
  return Status::Ok();
}

RoundReport Service::Impl::Report(const ClosedRound& c, const Evaluation& eval) const {
  double train_loss = 0.0, encode_seconds = 0.0;
  uint64_t weight = 0;
  for (const auto& rep : c.results) {
    if (rep.report.train_loss) {
      train_loss += *rep.report.train_loss * static_cast<double>(rep.num_examples);
      weight += rep.num_examples;
    }
    encode_seconds += rep.report.encode_seconds;
  }
  const transport::Traffic& t = server_->traffic();
  RoundReport r;
  r.round = round_.number;
  r.clients_selected = round_.selected.size();
  r.clients_reported = c.results.size();
  r.clients_dropped = c.failures.size();
  r.clients_registered = clients_.size();
  r.test_loss = eval.loss;
  r.test_accuracy = eval.accuracy;
  for (const auto& [name, value] : eval.metrics) r.evaluation_metrics.push_back({name, value});
  r.train_loss = weight ? train_loss / static_cast<double>(weight) : 0.0;
  r.bytes_up = t.bytes_received - round_.traffic_at_start.bytes_received;
  r.bytes_down = t.bytes_sent - round_.traffic_at_start.bytes_sent;
  r.bytes_dense_equiv = global_.size() * sizeof(float) * (round_.selected.size() + c.results.size());
  r.seconds = std::chrono::duration<double>(Clock::now() - round_.started).count();
  r.model_hash = global_hash_;
  r.model_updated = c.updated;
  r.strategy_metrics = strategy_->RoundMetrics();
  r.codec_up = task_.codec;
  r.codec_down = task_.codec_down;
  r.encode_seconds = c.results.empty() ? 0.0 : encode_seconds / static_cast<double>(c.results.size());
  r.decode_seconds = round_.decode_seconds;
  r.deadline_seconds = round_.deadline_ms / 1000.0;
  r.resyncs = resyncs_;
  r.frames_rejected = frames_rejected_;
  r.rejected_by_code = rejected_by_code_;
  r.updates_late = updates_late_;
  r.clients_moved = clients_moved_;
  r.connections = server_->handshakes().connections;
  r.handshakes_failed = server_->handshakes().failed();
  r.handshakes_refused = server_->handshakes().failed_auth;
  r.evaluations_failed = evaluations_failed_;
  r.secure = server_->secure();
  r.allow_list_keys = allow_list_ ? allow_list_->size() : 0;
  return r;
}

// What the metrics line holds beyond the report.
nlohmann::json Service::Impl::LineExtras(const ClosedRound& c, const RoundReport& r) {
  nlohmann::json line = c.secagg_line;
  if (evaluator_) line["evaluations_failed"] = r.evaluations_failed;
  if (slow_codec_) line["updates_slow_codec"] = round_.slow_codec_updates;
  uint64_t via_edges = 0;  // client updates inside edge aggregators' partial sums
  // Federated evaluation: clients whose trainer evaluates report the received global model's
  // loss and accuracy on their own data (before this round's update); weighted by their
  // evaluation examples.
  double eval_loss = 0.0, eval_accuracy = 0.0, eval_weight = 0.0;
  for (const auto& rep : c.results) {
    via_edges += rep.partial_updates;
    if (const auto& e = rep.report.eval) {
      const double n = static_cast<double>(e->num_examples);
      eval_loss += n * e->loss;
      eval_accuracy += n * e->accuracy;
      eval_weight += n;
    }
  }
  if (via_edges) line["updates_via_edges"] = via_edges;
  if (eval_weight > 0) {
    line["client_eval_loss"] = eval_loss / eval_weight;
    line["client_eval_accuracy"] = eval_accuracy / eval_weight;
  }
  if (edge_) return line;  // the rest is of the evaluation, which the root does
  if (model_->batch_kind() == nn::BatchKind::kTokens) line["test_bits_per_byte"] = nn::BitsPerByte(r.test_loss);
  // A model that predicts one class scores the majority class's share: say so, once, with
  // the usual causes (from round 5: the first rounds may sit there briefly).
  if (majority_class_rate_ > 0) {
    line["majority_class_rate"] = majority_class_rate_;
    if (!majority_warned_ && r.round >= 5 && r.test_accuracy <= majority_class_rate_ + 0.005) {
      majority_warned_ = true;
      spdlog::warn("round {}: held-out accuracy {:.4f} is no better than always predicting the majority class ({:.4f}). "
                   "Check the features' scale (--standardize on), the learning rate (--lr) and the label column "
                   "(csv:PATH,label=NAME)", r.round, r.test_accuracy, majority_class_rate_);
    }
  }
  return line;
}

Status Service::Impl::CloseRound() {
  SHOAL_ASSIGN_OR_RETURN(ClosedRound c, EndRound());
  if (!edge_) SHOAL_RETURN_IF_ERROR(Commit(c));
  // The root evaluates the model; an edge holds the root's model and leaves that to it.
  const Evaluation eval = edge_ ? Evaluation{} : EvaluateGlobal();
  last_completed_ = round_.number;
  const RoundReport r = Report(c, eval);
  if (edge_) ReportToParent(r.clients_reported, r.train_loss);
  SHOAL_RETURN_IF_ERROR(recorder_->Record(r, LineExtras(c, r), [this] { return CheckpointState(); }));
  spdlog::info("round {} done: accuracy {:.4f}, loss {:.4f}, {}/{} clients, {:.2f}s", r.round, r.test_accuracy,
               r.test_loss, r.clients_reported, r.clients_selected, r.seconds);
  if (o_.on_round) o_.on_round(r);
  ResetRound(last_completed_);
  PublishStatus(/*now=*/true);
  return Status::Ok();
}

}  // namespace shoal::aggregator
