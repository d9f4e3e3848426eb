#include "protocol/envelope.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace shoal::protocol {

using flatbuffers::FlatBufferBuilder;

namespace {

// Verifier limits: our tables nest at most 4 deep and a frame carries few tables (one per
// tensor of the layout plus metrics), so these are generous yet far below the defaults.
// Bounds on task fields, so a hostile Welcome cannot make a client allocate without limit.

}  // namespace

Frame Finish(FlatBufferBuilder& fbb, const Header& h, wire::Message kind, flatbuffers::Offset<void> msg) {
  wire::EnvelopeBuilder eb(fbb);
  eb.add_version(kProtocolVersion);
  eb.add_session(h.session);
  eb.add_round(h.round);
  eb.add_sender(h.sender);
  eb.add_sequence(h.sequence);
  eb.add_message_type(kind);
  eb.add_message(msg);
  fbb.Finish(eb.Finish(), wire::EnvelopeIdentifier());
  return Frame(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
}

flatbuffers::Offset<wire::Chunk> BuildChunk(FlatBufferBuilder& fbb, const ChunkRef& c) {
  auto data = fbb.CreateVector(c.data.data(), c.data.size());
  return wire::CreateChunk(fbb, c.index, c.count, c.offset, c.total_bytes, data);
}

namespace {
bool Finite(double v) { return std::isfinite(v); }
}  // namespace

Status CheckString(const flatbuffers::String* s, const char* what, bool required) {
  if (!s) return required ? Status::Protocol(std::string(what) + " is missing") : Status::Ok();
  if (s->size() > kMaxStringBytes) return Status::Protocol(std::string(what) + " is longer than 4096 bytes");
  return Status::Ok();
}

std::string StringOrEmpty(const flatbuffers::String* s) { return s ? s->str() : std::string(); }

bool ValidName(const std::string& s) {
  static_assert(kMaxPeerName == kMaxClientName);
  if (s.empty() || s.size() > kMaxClientName) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c > 32 && c < 127; });
}

Verified VerifyFrame(std::span<const uint8_t> frame, size_t max_frame_bytes) {
  Verified v;
  v.error = wire::ErrorCode::MalformedFrame;
  if (frame.size() < 16) {
    v.reason = "frame of " + std::to_string(frame.size()) + " bytes is too short to be an envelope";
    return v;
  }
  if (frame.size() > max_frame_bytes) {
    v.reason = "frame of " + std::to_string(frame.size()) + " bytes exceeds the limit of " +
               std::to_string(max_frame_bytes);
    return v;
  }
  if (reinterpret_cast<uintptr_t>(frame.data()) % alignof(uint64_t) != 0) {
    v.aligned.reset(new uint64_t[(frame.size() + 7) / 8]);
    std::memcpy(v.aligned.get(), frame.data(), frame.size());
    frame = {reinterpret_cast<const uint8_t*>(v.aligned.get()), frame.size()};
  }
  if (!flatbuffers::BufferHasIdentifier(frame.data(), wire::EnvelopeIdentifier())) {
    v.reason = "not a Shoal envelope (file identifier is not SHOL)";
    return v;
  }
  flatbuffers::Verifier verifier(frame.data(), frame.size(), kMaxDepth, kMaxTables);
  if (!wire::VerifyEnvelopeBuffer(verifier)) {
    v.reason = "envelope failed FlatBuffers verification";
    return v;
  }
  const wire::Envelope* env = wire::GetEnvelope(frame.data());
  if (env->version() != kProtocolVersion) {
    v.error = wire::ErrorCode::VersionMismatch;
    v.reason = "protocol version " + std::to_string(env->version()) + " is not supported; this side speaks version " +
               std::to_string(kProtocolVersion);
    return v;
  }
  if (env->message_type() == wire::Message::NONE || env->message_type() > wire::Message::MAX ||
      env->message() == nullptr) {
    v.reason = "envelope carries no message (or an unknown kind from a newer protocol)";
    return v;
  }
  v.envelope = env;
  v.error = wire::ErrorCode::Unknown;
  return v;
}

std::vector<ChunkRef> SplitPayload(std::span<const uint8_t> payload, size_t chunk_bytes) {
  if (chunk_bytes == 0) chunk_bytes = kDefaultChunkBytes;
  const uint64_t total = payload.size();
  const uint64_t count = total == 0 ? 1 : (total + chunk_bytes - 1) / chunk_bytes;
  const uint64_t stride = total == 0 ? 0 : (total + count - 1) / count;  // balanced chunks
  std::vector<ChunkRef> out;
  out.reserve(count);
  for (uint64_t i = 0; i < count; ++i) {
    uint64_t off = i * stride;
    uint64_t len = std::min<uint64_t>(stride, total - off);
    out.push_back({static_cast<uint32_t>(i), static_cast<uint32_t>(count), off, total, payload.subspan(off, len)});
  }
  return out;
}

ChunkView ViewChunk(const wire::Chunk* c) {
  ChunkView v;
  if (!c) return v;
  v.present = true;
  v.index = c->index();
  v.count = c->count();
  v.offset = c->offset();
  v.total_bytes = c->total_bytes();
  if (c->data()) v.data = std::span<const uint8_t>(c->data()->data(), c->data()->size());
  return v;
}

// What a chunk must be on its own: present, within the limit, its index below its count, the
// count possible for the total without empty chunks, and its offset and length those of a
// balanced split. Returns the split's stride.
StatusOr<uint64_t> ChunkAssembler::Check(const ChunkView& c, uint64_t max_total) {
  if (!c.present) return Status::Protocol("message has no payload chunk");
  const uint64_t total = c.total_bytes;
  const uint32_t count = c.count;
  const uint32_t index = c.index;
  const uint64_t len = c.data.size();
  if (total > max_total)
    return Status::Protocol("payload of " + std::to_string(total) + " bytes exceeds the limit of " +
                            std::to_string(max_total) + " bytes");
  if (count == 0 || index >= count)
    return Status::Protocol("chunk index " + std::to_string(index) + " is not below count " + std::to_string(count));
  if (total > 0 ? count > total : count != 1)
    return Status::Protocol("chunk count " + std::to_string(count) + " is impossible for " + std::to_string(total) +
                            " bytes");
  const uint64_t stride = total == 0 ? 0 : (total + count - 1) / count;
  // A balanced split never leaves a chunk empty; reject counts that would.
  if (total > 0 && stride * (count - 1) >= total)
    return Status::Protocol("chunk count " + std::to_string(count) + " leaves empty chunks for " +
                            std::to_string(total) + " bytes");
  const uint64_t want_off = index * stride;
  const uint64_t want_len = std::min<uint64_t>(stride, total - want_off);
  if (c.offset != want_off || len != want_len)
    return Status::Protocol("chunk " + std::to_string(index) + " has offset " + std::to_string(c.offset) +
                            " and length " + std::to_string(len) + "; expected " + std::to_string(want_off) + " and " +
                            std::to_string(want_len));
  return stride;
}

StatusOr<std::optional<std::span<const uint8_t>>> ChunkAssembler::Whole(const ChunkView& c, uint64_t max_total_bytes) {
  if (!c.present || c.count != 1) return std::optional<std::span<const uint8_t>>();
  SHOAL_RETURN_IF_ERROR(Check(c, max_total_bytes).status());
  return std::optional<std::span<const uint8_t>>(c.data);
}

Status ChunkAssembler::Add(const ChunkView& c) {
  SHOAL_ASSIGN_OR_RETURN(const uint64_t stride, Check(c, max_total_));
  const uint64_t total = c.total_bytes;
  const uint32_t count = c.count;
  const uint32_t index = c.index;
  if (!started_) {
    started_ = true;
    count_ = count;
    total_ = total;
    stride_ = stride;
  } else if (count != count_ || total != total_) {
    return Status::Protocol("chunk disagrees with earlier chunks of the payload (count/total)");
  }
  if (index < next_ || pending_.count(index))
    return Status::Protocol("chunk " + std::to_string(index) + " was already received");
  ++received_;
  // Memory follows the bytes that arrived, never the total a first chunk declares: chunks in
  // order are appended (the buffer grows geometrically, up to the total), a chunk ahead of
  // its turn waits on its own until the ones before it came.
  auto append = [&](std::span<const uint8_t> data) {
    const uint64_t need = bytes_.size() + data.size();
    if (need > bytes_.capacity()) bytes_.reserve(std::min<uint64_t>(total_, std::max<uint64_t>(need, 2 * bytes_.capacity())));
    bytes_.insert(bytes_.end(), data.begin(), data.end());
    ++next_;
  };
  if (index != next_) {
    pending_bytes_ += c.data.size();
    pending_.emplace(index, std::vector<uint8_t>(c.data.begin(), c.data.end()));
    return Status::Ok();
  }
  append(c.data);
  for (auto it = pending_.begin(); it != pending_.end() && it->first == next_; it = pending_.erase(it)) {
    pending_bytes_ -= it->second.size();
    append(it->second);
  }
  return Status::Ok();
}

std::vector<uint8_t> ChunkAssembler::Take() {
  std::vector<uint8_t> out = std::move(bytes_);
  started_ = false;
  count_ = received_ = next_ = 0;
  total_ = stride_ = pending_bytes_ = 0;
  pending_.clear();
  bytes_.clear();
  return out;
}

std::span<const uint8_t> AsBytes(std::span<const float> v) {
  return {reinterpret_cast<const uint8_t*>(v.data()), v.size_bytes()};
}

StatusOr<std::vector<float>> DecodeDenseF32(std::span<const uint8_t> bytes, size_t expected_count) {
  if (bytes.size() != expected_count * sizeof(float))
    return Status::Protocol("dense payload has " + std::to_string(bytes.size()) + " bytes; the model needs " +
                            std::to_string(expected_count * sizeof(float)));
  std::vector<float> out(expected_count);
  if (expected_count) std::memcpy(out.data(), bytes.data(), bytes.size());
  for (size_t i = 0; i < out.size(); ++i)
    if (!std::isfinite(out[i]))
      return Status::Protocol("payload value " + std::to_string(i) + " is not finite (NaN or Inf)");
  return out;
}

Frame EncodeHello(const Header& h, const std::string& client_name, uint64_t num_examples, const std::string& trainer,
                  const std::vector<std::string>& codecs, const std::vector<std::string>& features) {
  FlatBufferBuilder fbb(256);
  auto names = fbb.CreateVectorOfStrings(codecs);
  auto extra = features.empty() ? 0 : fbb.CreateVectorOfStrings(features);
  auto msg =
      wire::CreateHello(fbb, fbb.CreateString(client_name), num_examples, fbb.CreateString(trainer), names, extra);
  return Finish(fbb, h, wire::Message::Hello, msg.Union());
}

flatbuffers::Offset<wire::TaskConfig> BuildTask(FlatBufferBuilder& fbb, const TaskConfig& t) {
  std::vector<flatbuffers::Offset<wire::TensorDesc>> layout;
  for (const auto& spec : t.layout) layout.push_back(wire::CreateTensorDescDirect(fbb, spec.name.c_str(), &spec.shape));
  const OptimizerConfig& o = t.optimizer;
  auto opt = wire::CreateOptimizerConfigDirect(fbb, o.name.c_str(), o.learning_rate, o.momentum, o.nesterov,
                                               o.weight_decay, o.beta1, o.beta2, o.eps, o.demo_decay, o.demo_chunk,
                                               o.demo_topk);
  return wire::CreateTaskConfigDirect(fbb, t.model.c_str(), &layout, t.dataset.c_str(), opt, t.local_epochs,
                                      t.local_steps, t.batch_size, t.prox_mu, t.seed, t.test_fraction,
                                      t.codec.c_str(), t.codec_down.c_str(),
                                      t.codec_slow.empty() ? nullptr : t.codec_slow.c_str(), t.slow_below_mbps,
                                      t.feature_mean.empty() ? nullptr : &t.feature_mean,
                                      t.feature_scale.empty() ? nullptr : &t.feature_scale);
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

StatusOr<TaskConfig> DecodeTask(const wire::TaskConfig* t) {
  if (!t) return Status::Protocol("Welcome carries no task");
  SHOAL_RETURN_IF_ERROR(CheckString(t->model(), "task.model", true));
  SHOAL_RETURN_IF_ERROR(CheckString(t->dataset(), "task.dataset", false));
  SHOAL_RETURN_IF_ERROR(CheckString(t->codec(), "task.codec", false));
  TaskConfig out;
  out.model = t->model()->str();
  if (t->dataset()) out.dataset = t->dataset()->str();
  if (t->codec()) out.codec = t->codec()->str();
  SHOAL_RETURN_IF_ERROR(CheckString(t->codec_down(), "task.codec_down", false));
  if (t->codec_down()) out.codec_down = t->codec_down()->str();
  SHOAL_RETURN_IF_ERROR(CheckString(t->codec_slow(), "task.codec_slow", false));
  if (t->codec_slow()) out.codec_slow = t->codec_slow()->str();
  out.slow_below_mbps = t->slow_below_mbps();
  if (!std::isfinite(out.slow_below_mbps) || out.slow_below_mbps < 0 || (!out.codec_slow.empty() && out.slow_below_mbps == 0))
    return Status::Protocol("task.slow_below_mbps must be finite, >= 0, and > 0 with a codec_slow");
  if (!t->layout() || t->layout()->size() == 0) return Status::Protocol("task has an empty model layout");
  if (t->layout()->size() > kMaxLayoutTensors) return Status::Protocol("task layout has too many tensors");
  uint64_t total = 0;
  for (const auto* d : *t->layout()) {
    SHOAL_RETURN_IF_ERROR(CheckString(d->name(), "tensor name", true));
    if (!d->shape() || d->shape()->size() == 0 || d->shape()->size() > kMaxTensorRank)
      return Status::Protocol("tensor '" + d->name()->str() + "' has a missing or too long shape");
    TensorSpec spec{d->name()->str(), {}};
    uint64_t n = 1;
    constexpr uint64_t kMaxFloats = kMaxPayloadBytes / sizeof(float);
    for (int64_t dim : *d->shape()) {
      if (dim <= 0) return Status::Protocol("tensor '" + spec.name + "' has a dimension <= 0");
      // Checked before multiplying, so no product can wrap around.
      if (static_cast<uint64_t>(dim) > kMaxFloats / n)
        return Status::Protocol("model is larger than the protocol allows");
      spec.shape.push_back(dim);
      n *= static_cast<uint64_t>(dim);
    }
    total += n;
    if (total * sizeof(float) > kMaxPayloadBytes) return Status::Protocol("model is larger than the protocol allows");
    out.layout.push_back(std::move(spec));
  }
  const auto* o = t->optimizer();
  if (!o) return Status::Protocol("task has no optimizer");
  SHOAL_RETURN_IF_ERROR(CheckString(o->name(), "optimizer name", true));
  out.optimizer.name = o->name()->str();
  out.optimizer.learning_rate = o->learning_rate();
  out.optimizer.momentum = o->momentum();
  out.optimizer.nesterov = o->nesterov();
  out.optimizer.weight_decay = o->weight_decay();
  out.optimizer.beta1 = o->beta1();
  out.optimizer.beta2 = o->beta2();
  out.optimizer.eps = o->eps();
  out.optimizer.demo_decay = o->demo_decay();
  out.optimizer.demo_chunk = o->demo_chunk();
  out.optimizer.demo_topk = o->demo_topk();
  for (double v : {double(o->learning_rate()), double(o->momentum()), double(o->weight_decay()), double(o->beta1()),
                   double(o->beta2()), double(o->eps()), double(o->demo_decay()), double(t->prox_mu()), t->test_fraction()})
    if (!Finite(v)) return Status::Protocol("task has a non-finite number");
  out.local_epochs = t->local_epochs();
  out.local_steps = t->local_steps();
  out.batch_size = t->batch_size();
  if (out.batch_size == 0) return Status::Protocol("task batch_size is 0");
  if (out.local_epochs == 0 && out.local_steps == 0) return Status::Protocol("task has neither local epochs nor steps");
  out.prox_mu = t->prox_mu();
  out.seed = t->seed();
  out.test_fraction = t->test_fraction();
  if (out.test_fraction < 0.0 || out.test_fraction >= 1.0) return Status::Protocol("task test_fraction not in [0, 1)");
  const auto* mean = t->feature_mean();
  const auto* scale = t->feature_scale();
  if ((mean ? mean->size() : 0) != (scale ? scale->size() : 0))
    return Status::Protocol("task feature_mean and feature_scale differ in length");
  if (mean && mean->size() > kMaxFeatures) return Status::Protocol("task standardizes more features than the limit");
  for (size_t j = 0; mean && j < mean->size(); ++j) {
    if (!Finite(mean->Get(j)) || !Finite(scale->Get(j)) || !(scale->Get(j) > 0))
      return Status::Protocol("task standardization of feature " + std::to_string(j) +
                              " is not finite, or its scale is not > 0");
    out.feature_mean.push_back(mean->Get(j));
    out.feature_scale.push_back(scale->Get(j));
  }
  return out;
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

const char* MessageName(wire::Message kind) {
  const char* name = wire::EnumNameMessage(kind);
  return (name && *name) ? name : "Unknown";
}

}  // namespace shoal::protocol
