#include "protocol/federated.h"

#include <cmath>
#include <string>

#include "protocol/task.h"

namespace shoal::protocol {

using flatbuffers::FlatBufferBuilder;

namespace {
bool Finite(double v) { return std::isfinite(v); }
}  // namespace

Frame EncodeHello(const Header& h, const std::string& client_name, uint64_t num_examples, const std::string& trainer,
                  const std::vector<std::string>& codecs, const std::vector<std::string>& features) {
  FlatBufferBuilder fbb(256);
  auto names = fbb.CreateVectorOfStrings(codecs);
  auto extra = features.empty() ? 0 : fbb.CreateVectorOfStrings(features);
  auto msg =
      wire::CreateHello(fbb, fbb.CreateString(client_name), num_examples, fbb.CreateString(trainer), names, extra);
  return Finish(fbb, h, wire::Message::Hello, msg.Union());
}

Frame EncodeWelcome(const Header& h, const WelcomeInfo& w) {
  FlatBufferBuilder fbb(1024);
  auto task = BuildTask(fbb, w.task);
  flatbuffers::Offset<wire::PrivacyConfig> privacy;
  const PrivacyConfig& p = w.privacy;
  if (p.secagg || p.dp_clip > 0)
    privacy = wire::CreatePrivacyConfig(fbb, p.secagg, p.secagg_range, static_cast<uint8_t>(p.secagg_bits), p.dp_clip,
                                        p.dp_noise_multiplier);
  auto committed = w.committed_rounds ? fbb.CreateVector(*w.committed_rounds) : 0;
  auto msg = wire::CreateWelcome(fbb, w.client_id, task, w.heartbeat_interval_ms, w.heartbeat_timeout_ms,
                                 w.chunk_bytes, w.max_frame_bytes, privacy, committed);
  return Finish(fbb, h, wire::Message::Welcome, msg.Union());
}

Frame EncodeRoundTask(const Header& h, const RoundConfig& c, uint32_t deadline_ms, const std::string& model_hash,
                      wire::PayloadEncoding encoding, const ChunkRef& chunk, const std::string& base_hash,
                      uint64_t delta_round) {
  FlatBufferBuilder fbb(chunk.data.size() + 512);
  auto cfg = wire::CreateRoundConfig(fbb, c.learning_rate, c.local_epochs, c.local_steps, c.prox_mu);
  auto hash = fbb.CreateString(model_hash);
  auto payload = BuildChunk(fbb, chunk);
  auto base = fbb.CreateString(base_hash);
  auto msg = wire::CreateRoundTask(fbb, cfg, deadline_ms, hash, encoding, payload, base, delta_round);
  return Finish(fbb, h, wire::Message::RoundTask, msg.Union());
}

namespace {
// The metric names of an UpdateReport on the wire.
constexpr const char* kTrainLoss = "train_loss";
constexpr const char* kEncodeSeconds = "encode_seconds";
constexpr const char* kEvalLoss = "eval_loss";
constexpr const char* kEvalAccuracy = "eval_accuracy";
constexpr const char* kEvalExamples = "eval_examples";
}  // namespace

UpdateReport UpdateReport::FromTrainer(const std::vector<std::pair<std::string, double>>& metrics) {
  UpdateReport r;
  for (const auto& [name, value] : metrics) {
    if (name == kTrainLoss) r.train_loss = value;
    else r.other.emplace_back(name, value);
  }
  return r;
}

Frame EncodeUpdate(const Header& h, uint64_t num_examples, const UpdateReport& report, wire::PayloadEncoding encoding,
                   const ChunkRef& chunk) {
  FlatBufferBuilder fbb(chunk.data.size() + 512);
  std::vector<flatbuffers::Offset<wire::Metric>> ms;
  auto add = [&](const std::string& name, double value) { ms.push_back(wire::CreateMetricDirect(fbb, name.c_str(), value)); };
  if (report.train_loss) add(kTrainLoss, *report.train_loss);
  for (const auto& [name, value] : report.other) add(name, value);
  if (report.eval) {
    add(kEvalLoss, report.eval->loss);
    add(kEvalAccuracy, report.eval->accuracy);
    add(kEvalExamples, static_cast<double>(report.eval->num_examples));
  }
  add(kEncodeSeconds, report.encode_seconds);
  auto mv = fbb.CreateVector(ms);
  auto payload = BuildChunk(fbb, chunk);
  auto msg = wire::CreateUpdate(fbb, num_examples, mv, encoding, payload);
  return Finish(fbb, h, wire::Message::Update, msg.Union());
}

Frame EncodeResync(const Header& h, const std::string& have_hash) {
  FlatBufferBuilder fbb(128);
  auto msg = wire::CreateResyncDirect(fbb, have_hash.c_str());
  return Finish(fbb, h, wire::Message::Resync, msg.Union());
}

Frame EncodeAck(const Header& h, bool accepted, uint64_t commit_round) {
  FlatBufferBuilder fbb(64);
  auto msg = wire::CreateAck(fbb, accepted, commit_round);
  return Finish(fbb, h, wire::Message::Ack, msg.Union());
}

Frame EncodeError(const Header& h, wire::ErrorCode code, const std::string& reason) {
  FlatBufferBuilder fbb(256);
  auto msg = wire::CreateErrorDirect(fbb, code, reason.substr(0, kMaxStringBytes).c_str());
  return Finish(fbb, h, wire::Message::Error, msg.Union());
}

Frame EncodeHeartbeat(const Header& h, bool busy, float progress) {
  FlatBufferBuilder fbb(64);
  auto msg = wire::CreateHeartbeat(fbb, busy, progress);
  return Finish(fbb, h, wire::Message::Heartbeat, msg.Union());
}

Frame EncodeBye(const Header& h, const std::string& reason) {
  FlatBufferBuilder fbb(128);
  auto msg = wire::CreateByeDirect(fbb, reason.c_str());
  return Finish(fbb, h, wire::Message::Bye, msg.Union());
}

StatusOr<WelcomeInfo> DecodeWelcome(const wire::Welcome* w) {
  WelcomeInfo out;
  if (w->client_id() == 0) return Status::Protocol("Welcome assigns client id 0");
  out.client_id = w->client_id();
  SHOAL_ASSIGN_OR_RETURN(out.task, DecodeTask(w->task()));
  out.heartbeat_interval_ms = w->heartbeat_interval_ms();
  out.heartbeat_timeout_ms = w->heartbeat_timeout_ms();
  out.chunk_bytes = w->chunk_bytes();
  out.max_frame_bytes = w->max_frame_bytes();
  if (out.heartbeat_interval_ms == 0 || out.heartbeat_timeout_ms <= out.heartbeat_interval_ms)
    return Status::Protocol("Welcome has inconsistent heartbeat settings");
  if (out.chunk_bytes == 0) return Status::Protocol("Welcome has chunk size 0");
  if (const wire::PrivacyConfig* p = w->privacy()) {
    PrivacyConfig& q = out.privacy;
    q = {p->secagg(), p->secagg_range(), p->secagg_bits(), p->dp_clip(), p->dp_noise_multiplier()};
    if (q.secagg && (!(q.secagg_range > 0) || !Finite(q.secagg_range) || (q.secagg_bits != 16 && q.secagg_bits != 32)))
      return Status::Protocol("Welcome's secure aggregation needs a positive range and 16 or 32 bits");
    if (!(q.dp_clip >= 0) || !Finite(q.dp_clip) || !(q.dp_noise_multiplier >= 0) || !Finite(q.dp_noise_multiplier) ||
        (q.dp_clip > 0 && !q.secagg))
      return Status::Protocol("Welcome's distributed DP settings are out of range (or come without secure aggregation)");
  }
  if (const auto* committed = w->committed_rounds()) {
    if (committed->size() > kMaxCommittedRounds)
      return Status::Protocol("Welcome lists " + std::to_string(committed->size()) + " committed rounds, more than " +
                              std::to_string(kMaxCommittedRounds));
    std::vector<uint64_t>& rounds = out.committed_rounds.emplace(committed->begin(), committed->end());
    for (size_t i = 0; i < rounds.size(); ++i)
      if (rounds[i] == 0 || (i && rounds[i] <= rounds[i - 1]))
        return Status::Protocol("Welcome's committed rounds are not positive and increasing");
  }
  return out;
}

StatusOr<RoundConfig> DecodeRoundConfig(const wire::RoundConfig* c, uint64_t round) {
  if (!c) return Status::Protocol("RoundTask carries no round config");
  RoundConfig out;
  out.round = round;
  out.learning_rate = c->learning_rate();
  out.local_epochs = c->local_epochs();
  out.local_steps = c->local_steps();
  out.prox_mu = c->prox_mu();
  if (!Finite(out.learning_rate) || out.learning_rate <= 0.0f) return Status::Protocol("round learning rate must be > 0");
  if (!Finite(out.prox_mu) || out.prox_mu < 0.0f) return Status::Protocol("round prox_mu must be >= 0");
  if (out.local_epochs == 0 && out.local_steps == 0) return Status::Protocol("round has neither local epochs nor steps");
  return out;
}

StatusOr<std::vector<std::pair<std::string, double>>> DecodeMetrics(
    const flatbuffers::Vector<flatbuffers::Offset<wire::Metric>>* metrics) {
  std::vector<std::pair<std::string, double>> out;
  if (!metrics) return out;
  if (metrics->size() > kMaxMetrics) return Status::Protocol("too many metrics (limit 64)");
  for (const auto* m : *metrics) {
    if (!m->name() || m->name()->size() == 0 || m->name()->size() > kMaxMetricName)
      return Status::Protocol("metric without a name or with a name over 64 bytes");
    if (!Finite(m->value())) return Status::Protocol("metric '" + m->name()->str() + "' is not finite");
    out.emplace_back(m->name()->str(), m->value());
  }
  return out;
}

StatusOr<UpdateReport> DecodeUpdateReport(const wire::Update* u) {
  SHOAL_ASSIGN_OR_RETURN(auto metrics, DecodeMetrics(u->metrics()));
  UpdateReport r;
  double e_loss = 0.0, e_acc = -1.0, e_n = 0.0;
  for (auto& [name, value] : metrics) {
    if (name == kTrainLoss) r.train_loss = value;
    else if (name == kEncodeSeconds) r.encode_seconds = value;
    else if (name == kEvalLoss) e_loss = value;
    else if (name == kEvalAccuracy) e_acc = value;
    else if (name == kEvalExamples) e_n = value;
    else r.other.emplace_back(std::move(name), value);
  }
  if (e_n >= 1 && e_n <= 1e12 && e_acc >= 0 && e_acc <= 1)
    r.eval = EvalResult{e_loss, e_acc, static_cast<uint64_t>(e_n)};
  return r;
}

}  // namespace shoal::protocol
