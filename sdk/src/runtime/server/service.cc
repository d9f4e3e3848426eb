#include "runtime/server/service.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <vector>

#include "aggregate/exact_sum.h"
#include "backend/backend.h"
#include "codec/codec.h"
#include "codec/round_context.h"
#include "core/checkpoint.h"
#include "core/rng.h"
#include "crypto/crypto.h"
#include "shoal/data.h"
#include "nn/evaluate.h"
#include "nn/model.h"
#include "nn/model_registry.h"
#include "nn/optimizer.h"
#include "crypto/keys.h"
#include "protocol/envelope.h"
#include "runtime/update.h"
#include "transport/zmq/zmq_channel.h"
#include "transport/zmq/zap.h"

namespace shoal::aggregator {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using protocol::Frame;
using wire::ErrorCode;

namespace {

static_assert(protocol::kMaxExamples == ExactSum::kMaxWeight, "every valid example count must be a valid weight");

constexpr const char* kCheckpointFile = "checkpoint.shoal";

int64_t MillisSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// After a restart, metrics lines of rounds past the checkpoint (written just before a crash)
// are dropped, so every round appears once.
Status TrimMetrics(const std::string& path, uint64_t last_round) {
  std::ifstream in(path);
  if (!in) return Status::Ok();
  std::string kept, line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.contains("round") && j["round"].is_number_unsigned() &&
        j["round"].get<uint64_t>() <= last_round)
      kept += line + '\n';
  }
  in.close();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << kept;
    if (!out) return Status::IoError("cannot rewrite --metrics-out " + path);
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) return Status::IoError("cannot rewrite --metrics-out " + path + ": " + ec.message());
  return Status::Ok();
}

bool PrintableName(const std::string& s) {
  if (s.empty() || s.size() > protocol::kMaxClientName) return false;
  return std::all_of(s.begin(), s.end(), [](char c) { return c > 32 && c < 127; });
}

}  // namespace

class Service::Impl {
 public:
  explicit Impl(const AggregatorOptions& o) : o_(o) {}

  // Binds `listener`, or a ZeroMQ listener on options.listen when it is null.
  Status Init(std::unique_ptr<transport::Listener> listener);
  Status Run(const std::atomic<bool>& stop, std::atomic<bool>* reload);
  std::string endpoint() const { return server_->endpoint(); }
  uint64_t rounds_completed() const { return last_completed_; }

 private:
  struct ClientState {
    uint32_t id = 0;
    std::string peer;
    std::string identity;  // CURVE public key (Z85) the connection authenticated with; empty when insecure
    std::string name;
    uint64_t num_examples = 0;
    uint64_t last_sequence = 0;
    Clock::time_point last_seen;
    std::string replica_hash;  // the model this client holds (after its last RoundTask)
  };

  // The last aggregated delta, encoded with the download codec, for clients whose replica
  // is its base.
  struct LastDelta {
    std::vector<uint8_t> payload;
    std::string base_hash;
    uint64_t round = 0;
  };

  // What the round keeps of a client whose update went into the accumulator.
  struct Reported {
    std::string client;
    uint32_t client_id = 0;
    uint64_t num_examples = 0;
    protocol::UpdateReport report;
  };

  struct RoundState {
    uint64_t number = 0;
    bool open = false;
    Clock::time_point started;
    Clock::time_point deadline;
    std::vector<uint32_t> selected;
    std::map<uint32_t, protocol::ChunkAssembler> assembling;
    // From the first chunk of each update in transfer: its weight and report.
    std::map<uint32_t, std::pair<uint64_t, protocol::UpdateReport>> incoming;
    std::map<uint32_t, Reported> results;          // reported; their updates are in `accumulator`
    std::unique_ptr<Accumulator> accumulator;      // this round's aggregate, fed on arrival
    std::map<uint32_t, ClientFailure> failures;
    transport::Traffic traffic_at_start;
    double decode_seconds = 0.0;  // time spent decoding this round's updates
  };

  // Transport security.
  Status InitSecurity(transport::SocketOptions& so);
  void ReloadAllowList();
  bool KeyAllowed(const std::string& identity) const { return !allow_list_ || allow_list_->Contains(identity); }

  // Frame handling.
  void Handle(transport::Listener::Inbound& in);
  void HandleHello(const transport::Listener::Inbound& in, const wire::Envelope* env);
  protocol::WelcomeInfo MakeWelcome(uint32_t id) const;
  void HandleUpdate(ClientState& c, const wire::Envelope* env);
  void HandleResync(ClientState& c, const wire::Envelope* env);
  // Sends this round's task to one client: the delta, "unchanged" or the full model,
  // whichever its replica needs. Frames are encoded once per kind and shared.
  void SendTask(ClientState& c, bool force_full);
  void Reject(const std::string& peer, ErrorCode code, const std::string& reason, uint64_t round = 0);
  // Replies to a peer that is not (yet) a client: best effort, dropped if its queue is full.
  void SendDirect(const std::string& peer, Frame frame);
  // Everything to a registered client goes through its outbox, in order, so a model of any
  // number of chunks flows as fast as the peer takes it (ZeroMQ back-pressure), never failing
  // on a full queue.
  void Enqueue(uint32_t id, transport::SharedFrame frame);
  void Enqueue(uint32_t id, Frame frame) { Enqueue(id, std::make_shared<const Frame>(std::move(frame))); }
  void Flush();
  bool OutboxPending() const;
  protocol::Header Header(uint64_t round) { return {session_, round, 0, ++sequence_}; }

  // Client bookkeeping.
  void DropClient(uint32_t id, const std::string& reason);
  void ExpireClients();
  bool IsSelected(uint32_t id) const {
    return round_.open && std::find(round_.selected.begin(), round_.selected.end(), id) != round_.selected.end();
  }
  void FailClient(uint32_t id, const std::string& reason);

  // Rounds.
  bool MaybeStartRound();
  bool RoundResolved() const { return round_.results.size() + round_.failures.size() >= round_.selected.size(); }
  Status CloseRound();
  Status WriteMetrics(const nlohmann::json& line);
  void PrintTableRow(const RoundReport& r);
  Status SaveCheckpoint();
  void SendByeToAll(const std::string& reason);

  AggregatorOptions o_;
  zmq::context_t ctx_{1};
  // Declared after ctx_ and before server_: the ZAP handler starts before the socket binds
  // and stops after it closes.
  std::unique_ptr<transport::ZapHandler> zap_;
  std::shared_ptr<const crypto::AllowList> allow_list_;  // null when insecure
  std::map<std::string, std::string> name_keys_;         // client name -> the key that first used it (this session)
  std::unique_ptr<transport::Listener> server_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Strategy> strategy_;
  std::unique_ptr<nn::Model> model_;
  std::unique_ptr<codec::Codec> up_codec_;    // decodes client updates
  std::unique_ptr<codec::Codec> down_codec_;  // encodes the global delta (error feedback here) and decodes it
  runtime::UpdatePipeline ingest_;            // what a client's update goes through: decode, validate
  std::vector<std::string> required_stages_;  // codec stages a client must support
  std::optional<LastDelta> last_delta_;
  RoundConfig round_config_;
  // This round's task frames by kind, encoded on first use and shared by every client.
  std::vector<transport::SharedFrame> full_frames_, delta_frames_, unchanged_frames_;
  data::Dataset test_;
  TaskConfig task_;
  ParameterArena global_;
  std::string global_hash_;
  size_t max_frame_bytes_ = 0;

  uint64_t session_ = 0;
  uint64_t sequence_ = 0;
  uint32_t next_client_id_ = 1;
  std::map<uint32_t, ClientState> clients_;
  std::map<uint32_t, std::deque<transport::SharedFrame>> outbox_;
  std::map<std::string, uint32_t> by_peer_;
  uint64_t last_completed_ = 0;
  RoundState round_;
  bool waiting_logged_ = false;
  bool table_header_printed_ = false;

  std::ofstream metrics_;
  uint64_t frames_rejected_ = 0;
  std::map<std::string, uint64_t> rejected_by_code_;
  uint64_t resyncs_ = 0;  // this round
};

Status Service::Impl::Init(std::unique_ptr<transport::Listener> listener) {
  if (o_.min_clients == 0) return Status::InvalidArgument("--min-clients must be at least 1");
  if (!(o_.fraction > 0.0 && o_.fraction <= 1.0)) return Status::InvalidArgument("--fraction must be in (0, 1]");
  if (o_.batch_size == 0) return Status::InvalidArgument("--batch-size must be at least 1");
  if (o_.round_timeout_ms == 0) return Status::InvalidArgument("--round-timeout must be positive");
  if (o_.heartbeat_interval_ms == 0 || o_.heartbeat_timeout_ms <= o_.heartbeat_interval_ms)
    return Status::InvalidArgument("--heartbeat-timeout must be larger than --heartbeat-interval");
  if (o_.chunk_bytes < 1024) return Status::InvalidArgument("--chunk-bytes must be at least 1024");
  if (o_.resume && o_.checkpoint_dir.empty()) return Status::InvalidArgument("--resume needs --checkpoint-dir");
  if (!(o_.test_fraction > 0.0 && o_.test_fraction < 1.0))
    return Status::InvalidArgument("--test-fraction must be in (0, 1)");

  SHOAL_ASSIGN_OR_RETURN(strategy_, MakeStrategy(o_.strategy));
  SHOAL_ASSIGN_OR_RETURN(backend_, MakeBackend(o_.device));

  // Data: the aggregator only keeps the held-out split, which no client ever receives.
  const std::string data_dir = o_.data_dir.empty() ? data::DefaultDataDir() : o_.data_dir;
  SHOAL_ASSIGN_OR_RETURN(data::Dataset full, data::LoadDataset(o_.dataset, data_dir));
  SHOAL_ASSIGN_OR_RETURN(data::Split split, data::TrainTestSplit(full, o_.test_fraction, o_.seed));
  test_ = std::move(split.test);

  // Model and task.
  SHOAL_ASSIGN_OR_RETURN(model_, nn::MakeModel(o_.model, nn::InputsOf(full), backend_.get()));
  task_.model = model_->spec();
  task_.layout = model_->Layout();
  task_.dataset = o_.dataset;
  task_.optimizer = o_.optimizer;
  task_.optimizer.learning_rate = o_.strategy.learning_rate;
  task_.local_epochs = o_.strategy.local_epochs;
  task_.local_steps = o_.strategy.local_steps;
  task_.batch_size = o_.batch_size;
  task_.prox_mu = o_.strategy.name == "fedprox" ? o_.strategy.prox_mu : 0.0f;
  task_.seed = o_.seed;
  task_.test_fraction = o_.test_fraction;
  task_.codec = o_.codec.empty() ? "none" : o_.codec;
  task_.codec_down = o_.codec_down.empty() ? task_.codec : o_.codec_down;
  SHOAL_RETURN_IF_ERROR(nn::ValidateOptimizerConfig(task_.optimizer));
  // DeMo's client update is extracted momentum, which only the demo strategy (sign of the
  // mean) turns into a model step; any other pairing would silently train wrong.
  if ((task_.optimizer.name == "demo") != (strategy_->name() == "demo"))
    return Status::InvalidArgument("--client-optimizer demo and --strategy demo go together (got optimizer '" +
                                   task_.optimizer.name + "', strategy '" + strategy_->name() + "')");
  if (LayoutSize(task_.layout) * sizeof(float) > protocol::kMaxPayloadBytes)
    return Status::InvalidArgument("model is larger than the protocol's payload limit");
  global_ = ParameterArena(task_.layout);
  model_->Init(&global_, o_.seed);

  // Codecs: validated here so a bad --codec fails at start with the parser's message.
  SHOAL_ASSIGN_OR_RETURN(up_codec_, codec::Codec::Create(task_.codec, task_.layout));
  SHOAL_ASSIGN_OR_RETURN(down_codec_, codec::Codec::Create(task_.codec_down, task_.layout));
  task_.codec = up_codec_->spec();
  task_.codec_down = down_codec_->spec();
  ingest_.Add(runtime::DecodeStage(up_codec_.get(), o_.seed, global_.size())).Add(runtime::ValidateStage(o_.max_update_norm));
  for (const std::string& codec_spec : {task_.codec, task_.codec_down}) {
    SHOAL_ASSIGN_OR_RETURN(auto stages, codec::ParseSpec(codec_spec));
    for (const auto& st : stages)
      if (std::find(required_stages_.begin(), required_stages_.end(), st.name) == required_stages_.end())
        required_stages_.push_back(st.name);
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
        for (const auto& [name, blob] : ck->sections)
          if (name == "strategy") SHOAL_RETURN_IF_ERROR(strategy_->LoadState(blob).WithContext(path));
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

  if (!o_.metrics_out.empty()) {
    if (o_.resume) SHOAL_RETURN_IF_ERROR(TrimMetrics(o_.metrics_out, last_completed_));
    metrics_.open(o_.metrics_out, o_.resume ? std::ios::app : std::ios::trunc);
    if (!metrics_) return Status::IoError("cannot open --metrics-out " + o_.metrics_out + " for writing");
  }

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

// Secure by default: a listener other machines can reach needs a key pair and an allow-list,
// unless the operator explicitly says --insecure.
Status Service::Impl::InitSecurity(transport::SocketOptions& so) {
  if (o_.recv_hwm == 0) return Status::InvalidArgument("--recv-hwm must be at least 1");
  if (o_.secret_key.empty() != o_.allow_keys.empty())
    return Status::InvalidArgument(o_.secret_key.empty()
                                       ? "--allow-keys needs --secret-key (this aggregator's key file from shoal-keygen)"
                                       : "--secret-key needs --allow-keys (the public keys of the clients to admit)");
  if (o_.secret_key.empty()) {
    if (!transport::IsLoopbackEndpoint(o_.listen) && !o_.insecure)
      return Status::FailedPrecondition(
          "--listen " + o_.listen +
          " accepts connections from other machines: give --secret-key and --allow-keys (make keys with "
          "shoal-keygen), or pass --insecure to serve unencrypted and unauthenticated");
    if (o_.insecure)
      spdlog::warn("INSECURE: {} serves without encryption or authentication (--insecure)", o_.listen);
    else
      spdlog::info("no --secret-key: serving {} without encryption (loopback only)", o_.listen);
    return Status::Ok();
  }
  if (o_.insecure) return Status::InvalidArgument("--insecure contradicts --secret-key; give one or the other");
  SHOAL_ASSIGN_OR_RETURN(crypto::KeyPair keys, crypto::ReadSecretKeyFile(o_.secret_key));
  SHOAL_ASSIGN_OR_RETURN(crypto::AllowList list, crypto::AllowList::Load(o_.allow_keys));
  if (list.size() == 0)
    return Status::FailedPrecondition("--allow-keys " + o_.allow_keys + " holds no keys, so no client could join");
  allow_list_ = std::make_shared<const crypto::AllowList>(std::move(list));
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

void Service::Impl::SendDirect(const std::string& peer, Frame frame) {
  auto sent = server_->Send(peer, std::make_shared<const Frame>(std::move(frame)));
  if (!sent.ok() || !*sent) spdlog::debug("reply to a peer dropped: {}", sent.ok() ? "queue full" : sent.status().message());
}

void Service::Impl::Enqueue(uint32_t id, transport::SharedFrame frame) { outbox_[id].push_back(std::move(frame)); }

bool Service::Impl::OutboxPending() const {
  for (const auto& [id, q] : outbox_)
    if (!q.empty()) return true;
  return false;
}

void Service::Impl::Flush() {
  std::vector<uint32_t> gone;
  for (auto& [id, q] : outbox_) {
    auto cit = clients_.find(id);
    if (cit == clients_.end()) {
      q.clear();
      continue;
    }
    while (!q.empty()) {
      auto sent = server_->Send(cit->second.peer, q.front());
      if (!sent.ok()) {
        gone.push_back(id);
        break;
      }
      if (!*sent) break;  // the peer's queue is full: continue on a later pass
      q.pop_front();
    }
  }
  for (uint32_t id : gone) {
    spdlog::warn("client {} is no longer connected; dropped", id);
    DropClient(id, "disconnected");
  }
}

void Service::Impl::Reject(const std::string& peer, ErrorCode code, const std::string& reason, uint64_t round) {
  ++frames_rejected_;
  ++rejected_by_code_[wire::EnumNameErrorCode(code)];
  // Log the first few in full, then only every 1000th, so a flood cannot fill the disk.
  if (frames_rejected_ <= 10 || frames_rejected_ % 1000 == 0)
    spdlog::warn("rejected frame #{} ({}): {}", frames_rejected_, wire::EnumNameErrorCode(code), reason);
  if (auto it = by_peer_.find(peer); it != by_peer_.end())
    Enqueue(it->second, protocol::EncodeError(Header(round), code, reason));
  else
    SendDirect(peer, protocol::EncodeError(Header(round), code, reason));
}

void Service::Impl::Handle(transport::Listener::Inbound& in) {
  std::span<const uint8_t> bytes = in.frame.bytes();
  protocol::Verified v = protocol::VerifyFrame(bytes, max_frame_bytes_);
  if (!v.ok()) return Reject(in.peer, v.error, v.reason);
  const wire::Envelope* env = v.envelope;

  // The connection's authenticated key must still be allowed (a SIGHUP may have removed it
  // after the handshake), and a registered connection must keep the key it registered with.
  if (!KeyAllowed(in.user_id)) {
    if (auto it = by_peer_.find(in.peer); it != by_peer_.end()) DropClient(it->second, "key revoked");
    return Reject(in.peer, ErrorCode::Refused, "this client's key is not on the aggregator's allow-list");
  }
  if (auto it = by_peer_.find(in.peer); it != by_peer_.end() && clients_.at(it->second).identity != in.user_id)
    return Reject(in.peer, ErrorCode::BadSender, "this connection's key is not the one its client registered with");

  if (env->message_type() == wire::Message::Hello) return HandleHello(in, env);

  // Everything else belongs to a registered client of this session.
  if (env->session() != session_)
    return Reject(in.peer, ErrorCode::UnknownSession, "session is not this aggregator's (it restarted?); send Hello");
  auto pit = by_peer_.find(in.peer);
  if (pit == by_peer_.end()) return Reject(in.peer, ErrorCode::NotRegistered, "this connection has not sent Hello");
  ClientState& c = clients_.at(pit->second);
  if (env->sender() != c.id)
    return Reject(in.peer, ErrorCode::BadSender,
                  "sender " + std::to_string(env->sender()) + " is not this connection's client id " + std::to_string(c.id));
  if (env->sequence() <= c.last_sequence)
    return Reject(in.peer, ErrorCode::Duplicate,
                  "sequence " + std::to_string(env->sequence()) + " is not above " + std::to_string(c.last_sequence));
  c.last_sequence = env->sequence();
  c.last_seen = Clock::now();

  switch (env->message_type()) {
    case wire::Message::Heartbeat:
      Enqueue(c.id, protocol::EncodeHeartbeat(Header(round_.number), false, 0.0f));
      return;
    case wire::Message::Update:
      return HandleUpdate(c, env);
    case wire::Message::Resync:
      return HandleResync(c, env);
    case wire::Message::Bye:
      spdlog::info("client {} ({}) left", c.id, c.name);
      DropClient(c.id, "left");
      return;
    default:
      return Reject(in.peer, ErrorCode::MalformedFrame,
                    std::string("a client may not send ") + protocol::MessageName(env->message_type()));
  }
}

protocol::WelcomeInfo Service::Impl::MakeWelcome(uint32_t id) const {
  protocol::WelcomeInfo w;
  w.client_id = id;
  w.task = task_;
  w.heartbeat_interval_ms = o_.heartbeat_interval_ms;
  w.heartbeat_timeout_ms = o_.heartbeat_timeout_ms;
  w.chunk_bytes = o_.chunk_bytes;
  w.max_frame_bytes = static_cast<uint32_t>(max_frame_bytes_);
  return w;
}

void Service::Impl::HandleHello(const transport::Listener::Inbound& in, const wire::Envelope* env) {
  const std::string& peer = in.peer;
  const wire::Hello* h = env->message_as_Hello();
  const std::string name = h->client_name() ? h->client_name()->str() : "";
  if (!PrintableName(name))
    return Reject(peer, ErrorCode::MalformedFrame, "Hello needs a client name of 1-64 printable characters");
  // A Hello repeated on the same connection (the client retries while the Welcome is in
  // flight) gets the same registration again: ids must not change under the client.
  if (auto it = by_peer_.find(peer); it != by_peer_.end()) {
    ClientState& c = clients_.at(it->second);
    if (c.name == name) {
      c.last_seen = Clock::now();
      c.last_sequence = std::max(c.last_sequence, env->sequence());
      Enqueue(c.id, protocol::EncodeWelcome(Header(0), MakeWelcome(c.id)));
      return;
    }
    DropClient(it->second, "re-registered under another name");
  }
  // With CURVE a name belongs, for this session, to the key that first used it (while that key
  // stays allowed): a listed client cannot take over another's name, and with it its place in
  // the canonical order and its metrics.
  // (A revoked owner frees the name.)
  if (auto owner = name_keys_.find(name);
      allow_list_ && owner != name_keys_.end() && owner->second != in.user_id && KeyAllowed(owner->second))
    return Reject(peer, ErrorCode::Refused, "client name '" + name + "' belongs to another key; use --name to pick another");
  // A known name on a new connection is a restarted client. The same key proves it; without
  // keys, a holder heard from recently means two clients share a name, and the newcomer must
  // wait (it retries) or pick another --name.
  for (auto& [id, c] : clients_)
    if (c.name == name) {
      const bool same_key = allow_list_ && c.identity == in.user_id;
      if (!same_key && MillisSince(c.last_seen) <= 2 * static_cast<int64_t>(o_.heartbeat_interval_ms))
        return Reject(peer, ErrorCode::Duplicate,
                      "client name '" + name + "' is in use by a live client; retrying (use --name to pick another)");
      DropClient(id, "reconnected");
      break;
    }
  if (clients_.size() >= o_.max_clients)
    return Reject(peer, ErrorCode::Refused, "the aggregator is full (" + std::to_string(o_.max_clients) + " clients)");
  // Negotiation: the client lists the codec stages it can run; every stage of the task's
  // codecs must be among them.
  std::vector<std::string> supported;
  if (h->codecs())
    for (const auto* s : *h->codecs())
      if (s && s->size() <= 64) supported.push_back(s->str());
  for (const std::string& stage : required_stages_)
    if (std::find(supported.begin(), supported.end(), stage) == supported.end())
      return Reject(peer, ErrorCode::UnsupportedCodec,
                    "client '" + name + "' cannot run codec stage '" + stage + "' of this task (codec '" + task_.codec +
                        "', codec-down '" + task_.codec_down + "'); upgrade the client or choose another --codec");

  ClientState c;
  c.id = next_client_id_++;
  c.peer = peer;
  c.identity = in.user_id;
  c.name = name;
  c.num_examples = h->num_examples();
  c.last_sequence = env->sequence();
  c.last_seen = Clock::now();
  spdlog::info("client {} registered as id {} ({} examples, trainer {}{})", name, c.id, c.num_examples,
               h->trainer() ? h->trainer()->str() : "?", c.identity.empty() ? "" : ", key " + c.identity);
  const uint32_t id = c.id;
  if (allow_list_) name_keys_[name] = c.identity;
  by_peer_[peer] = id;
  clients_[id] = std::move(c);
  Enqueue(id, protocol::EncodeWelcome(Header(0), MakeWelcome(id)));
  waiting_logged_ = false;
}

void Service::Impl::HandleUpdate(ClientState& c, const wire::Envelope* env) {
  const wire::Update* u = env->message_as_Update();
  if (!round_.open || env->round() != round_.number)
    return Reject(c.peer, ErrorCode::StaleRound,
                  "update for round " + std::to_string(env->round()) + " but " +
                      (round_.open ? "round " + std::to_string(round_.number) + " is open" : "no round is open"),
                  env->round());
  if (!IsSelected(c.id)) return Reject(c.peer, ErrorCode::StaleRound, "client was not selected this round", round_.number);
  if (round_.results.count(c.id) || round_.failures.count(c.id))
    return Reject(c.peer, ErrorCode::Duplicate, "this round's update was already settled", round_.number);
  if (u->encoding() != wire::PayloadEncoding::Codec) {
    Reject(c.peer, ErrorCode::MalformedFrame, "an update must be encoded with the task's codec", round_.number);
    return FailClient(c.id, "rejected: wrong encoding");
  }
  const uint64_t max_bytes = protocol::MaxCodecPayloadBytes(global_.size());
  auto [it, inserted] = round_.assembling.try_emplace(c.id, max_bytes);
  if (inserted) {
    if (u->num_examples() == 0 || u->num_examples() > protocol::kMaxExamples) {
      Reject(c.peer, ErrorCode::MalformedFrame, "num_examples must be in [1, 2^40]", round_.number);
      return FailClient(c.id, "rejected: bad num_examples");
    }
    auto report = protocol::DecodeUpdateReport(u);
    if (!report.ok()) {
      Reject(c.peer, ErrorCode::MalformedFrame, report.status().message(), round_.number);
      return FailClient(c.id, "rejected: " + report.status().message());
    }
    round_.incoming[c.id] = {u->num_examples(), std::move(*report)};
  }
  Status st = it->second.Add(u->payload());
  if (!st.ok()) {
    Reject(c.peer, ErrorCode::MalformedFrame, st.message(), round_.number);
    return FailClient(c.id, "rejected: " + st.message());
  }
  if (!it->second.complete()) return;
  runtime::Update update;
  update.author = c.name;
  update.round = round_.number;
  update.payload = it->second.Take();
  round_.assembling.erase(it);
  std::tie(update.num_examples, update.report) = std::move(round_.incoming[c.id]);
  round_.incoming.erase(c.id);
  // The ingest stages: decode, then validate (finite, within the norm bound).
  const auto decode_start = Clock::now();
  std::optional<runtime::UpdatePipeline::Failure> failed = ingest_.Run(update);
  round_.decode_seconds += std::chrono::duration<double>(Clock::now() - decode_start).count();
  if (!failed) {
    if (Status added = round_.accumulator->Add({c.name, c.id, update.num_examples, update.delta}); !added.ok())
      failed = runtime::UpdatePipeline::Failure{runtime::Refusal::kShapeMismatch, added.WithContext("accumulate")};
  }
  if (failed) {
    const ErrorCode code = failed->refusal == runtime::Refusal::kTooLarge       ? ErrorCode::UpdateTooLarge
                           : failed->refusal == runtime::Refusal::kShapeMismatch ? ErrorCode::ShapeMismatch
                                                                                 : ErrorCode::MalformedFrame;
    Reject(c.peer, code, "update refused: " + failed->status.message(), round_.number);
    return FailClient(c.id, "rejected: " + failed->status.message());
  }
  round_.results[c.id] = Reported{c.name, c.id, update.num_examples, std::move(update.report)};
  Enqueue(c.id, protocol::EncodeAck(Header(round_.number), true));
}

void Service::Impl::FailClient(uint32_t id, const std::string& reason) {
  if (!IsSelected(id) || round_.results.count(id) || round_.failures.count(id)) return;
  round_.assembling.erase(id);
  auto it = clients_.find(id);
  round_.failures[id] = ClientFailure{it != clients_.end() ? it->second.name : "?", id, reason};
  spdlog::warn("round {}: client {} failed: {}", round_.number, id, reason);
}

void Service::Impl::DropClient(uint32_t id, const std::string& reason) {
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  FailClient(id, reason);
  by_peer_.erase(it->second.peer);
  clients_.erase(it);
  outbox_.erase(id);
}

void Service::Impl::ExpireClients() {
  std::vector<uint32_t> expired;
  for (const auto& [id, c] : clients_)
    if (MillisSince(c.last_seen) > o_.heartbeat_timeout_ms) expired.push_back(id);
  for (uint32_t id : expired) {
    spdlog::warn("client {} ({}) silent for over {} ms; dropped", id, clients_[id].name, o_.heartbeat_timeout_ms);
    DropClient(id, "disconnected (heartbeat timeout)");
  }
}

bool Service::Impl::MaybeStartRound() {
  if (clients_.size() < o_.min_clients) {
    if (!waiting_logged_) {
      spdlog::info("waiting for clients: {} of {} registered", clients_.size(), o_.min_clients);
      waiting_logged_ = true;
    }
    return false;
  }
  // Canonical order (by name), then a seeded shuffle: the same clients are chosen in every
  // run with the same seed and membership.
  std::vector<const ClientState*> eligible;
  for (const auto& [id, c] : clients_) eligible.push_back(&c);
  std::sort(eligible.begin(), eligible.end(),
            [](const ClientState* a, const ClientState* b) { return std::tie(a->name, a->id) < std::tie(b->name, b->id); });
  const size_t n = eligible.size();
  size_t k = static_cast<size_t>(std::ceil(o_.fraction * static_cast<double>(n)));
  k = std::min(n, std::max<size_t>(k, 1));
  const uint64_t number = last_completed_ + 1;
  Rng rng(o_.seed, number);
  rng.Shuffle(std::span<const ClientState*>(eligible));

  round_ = RoundState{};
  round_.number = number;
  round_.open = true;
  round_.started = Clock::now();
  round_.accumulator = strategy_->StartRound(round_.number, global_.span());
  round_.deadline = round_.started + std::chrono::milliseconds(o_.round_timeout_ms);
  round_.traffic_at_start = server_->traffic();
  for (size_t i = 0; i < k; ++i) round_.selected.push_back(eligible[i]->id);
  std::sort(round_.selected.begin(), round_.selected.end());

  round_config_ = strategy_->Configure(number);
  full_frames_.clear();
  delta_frames_.clear();
  unchanged_frames_.clear();
  resyncs_ = 0;
  for (uint32_t id : round_.selected) SendTask(clients_.at(id), false);
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
      unchanged_frames_.push_back(share(protocol::EncodeRoundTask(Header(number), round_config_, o_.round_timeout_ms,
                                                                  global_hash_, wire::PayloadEncoding::Unchanged,
                                                                  protocol::ChunkRef{})));
    frames = &unchanged_frames_;
  } else if (!force_full && last_delta_ && c.replica_hash == last_delta_->base_hash) {
    if (delta_frames_.empty())
      for (const auto& chunk : protocol::SplitPayload(last_delta_->payload, o_.chunk_bytes))
        delta_frames_.push_back(share(protocol::EncodeRoundTask(Header(number), round_config_, o_.round_timeout_ms,
                                                                global_hash_, wire::PayloadEncoding::Codec, chunk,
                                                                last_delta_->base_hash, last_delta_->round)));
    frames = &delta_frames_;
  } else {
    if (full_frames_.empty())
      for (const auto& chunk : protocol::SplitPayload(protocol::AsBytes(global_.span()), o_.chunk_bytes))
        full_frames_.push_back(share(protocol::EncodeRoundTask(Header(number), round_config_, o_.round_timeout_ms,
                                                               global_hash_, wire::PayloadEncoding::DenseF32, chunk)));
    frames = &full_frames_;
  }
  for (const auto& f : *frames) Enqueue(c.id, f);
  c.replica_hash = global_hash_;
}

void Service::Impl::HandleResync(ClientState& c, const wire::Envelope* env) {
  const wire::Resync* r = env->message_as_Resync();
  if (!round_.open || env->round() != round_.number || !IsSelected(c.id) || round_.results.count(c.id) ||
      round_.failures.count(c.id))
    return;  // nothing to train this round; the next task will carry what the client needs
  ++resyncs_;
  spdlog::warn("round {}: client {} ({}) asks for the full model (its replica is {})", round_.number, c.id, c.name,
               r->have_hash() ? r->have_hash()->str().substr(0, 16) : "?");
  SendTask(c, true);
}

Status Service::Impl::CloseRound() {
  for (uint32_t id : round_.selected)
    if (!round_.results.count(id) && !round_.failures.count(id)) FailClient(id, "deadline");
  round_.open = false;

  // Sorted by client key so the round's metrics sum in a fixed order (the aggregate itself is
  // exact and needs no order).
  std::vector<Reported> results;
  for (auto& [id, r] : round_.results) results.push_back(std::move(r));
  std::sort(results.begin(), results.end(),
            [](const Reported& a, const Reported& b) { return std::tie(a.client, a.client_id) < std::tie(b.client, b.client_id); });
  std::vector<ClientFailure> failures;
  for (auto& [id, f] : round_.failures) failures.push_back(f);

  bool updated = false;
  if (results.size() >= o_.min_results) {
    SHOAL_ASSIGN_OR_RETURN(auto delta, round_.accumulator->Finish(failures));
    if (delta) {
      // The download codec compresses the global delta. The aggregator applies the DECODED
      // delta to its own model, exactly as every client applies it to its replica, so all
      // replicas stay bit-identical (checked by hash at the next RoundTask). It is applied to
      // a copy first: a model that would hold NaN/Inf is never committed.
      const auto ctx = codec::MakeRoundContext(o_.seed, round_.number, 0);
      SHOAL_ASSIGN_OR_RETURN(auto payload, down_codec_->Encode(*delta, ctx));
      std::vector<float> applied(global_.size());
      SHOAL_RETURN_IF_ERROR(down_codec_->Decode(payload, ctx, applied).WithContext("decoding our own download delta"));
      std::vector<float> next(global_.span().begin(), global_.span().end());
      bool finite = true;
      for (size_t i = 0; i < next.size(); ++i) {
        next[i] += applied[i];
        finite = finite && std::isfinite(next[i]);
      }
      if (finite) {
        SHOAL_RETURN_IF_ERROR(global_.Assign(next));
        last_delta_ = LastDelta{std::move(payload), global_hash_, round_.number};
        updated = true;
      } else {
        spdlog::error("round {}: the aggregate would make the model non-finite; model unchanged", round_.number);
      }
    }
  } else {
    spdlog::warn("round {}: {} updates, fewer than --min-results {}; model unchanged", round_.number, results.size(),
                 o_.min_results);
  }
  global_hash_ = crypto::ModelHash(global_.span());
  EvalResult eval = nn::Evaluate(*model_, global_.span(), test_);
  last_completed_ = round_.number;
  const double seconds = std::chrono::duration<double>(Clock::now() - round_.started).count();
  const transport::Traffic& t = server_->traffic();
  const uint64_t bytes_up = t.bytes_received - round_.traffic_at_start.bytes_received;
  const uint64_t bytes_down = t.bytes_sent - round_.traffic_at_start.bytes_sent;
  const uint64_t model_bytes = global_.size() * sizeof(float);
  const uint64_t dense_equiv = model_bytes * (round_.selected.size() + results.size());

  double train_loss = 0.0, encode_seconds = 0.0;
  uint64_t weight = 0;
  // Federated evaluation: clients whose trainer evaluates report the received global model's
  // loss and accuracy on their own data; weighted by their evaluation examples.
  double eval_loss = 0.0, eval_accuracy = 0.0, eval_weight = 0.0;
  for (const auto& rep : results) {
    const protocol::UpdateReport& u = rep.report;
    if (u.train_loss) {
      train_loss += *u.train_loss * static_cast<double>(rep.num_examples);
      weight += rep.num_examples;
    }
    encode_seconds += u.encode_seconds;
    if (u.eval) {
      const double n = static_cast<double>(u.eval->num_examples);
      eval_loss += n * u.eval->loss;
      eval_accuracy += n * u.eval->accuracy;
      eval_weight += n;
    }
  }

  RoundReport r;
  r.round = round_.number;
  r.clients_selected = round_.selected.size();
  r.clients_reported = results.size();
  r.clients_dropped = failures.size();
  r.clients_registered = clients_.size();
  r.test_loss = eval.loss;
  r.test_accuracy = eval.accuracy;
  r.train_loss = weight ? train_loss / static_cast<double>(weight) : 0.0;
  r.bytes_up = bytes_up;
  r.bytes_down = bytes_down;
  r.bytes_dense_equiv = dense_equiv;
  r.seconds = seconds;
  r.model_hash = global_hash_;
  r.model_updated = updated;
  nlohmann::json line = {
      {"round", r.round},
      {"clients_selected", r.clients_selected},
      {"clients_reported", r.clients_reported},
      {"clients_dropped", r.clients_dropped},
      {"clients_registered", r.clients_registered},
      {"test_loss", r.test_loss},
      {"test_accuracy", r.test_accuracy},
      {"train_loss", r.train_loss},
      {"bytes_up", r.bytes_up},
      {"bytes_down", r.bytes_down},
      {"bytes_dense_equiv", r.bytes_dense_equiv},
      {"seconds", r.seconds},
      {"model_hash", r.model_hash},
      {"model_updated", r.model_updated},
      {"resyncs", resyncs_},
      {"encode_seconds", results.empty() ? 0.0 : encode_seconds / static_cast<double>(results.size())},
      {"decode_seconds", round_.decode_seconds},
      {"frames_rejected", frames_rejected_},
      {"rejected_by_code", rejected_by_code_},
      {"secure", server_->secure()},
      {"connections", server_->handshakes().connections},
      {"handshakes_failed", server_->handshakes().failed()},
      {"handshakes_refused", server_->handshakes().failed_auth},
      {"allow_list_keys", allow_list_ ? allow_list_->size() : 0},
  };
  if (eval_weight > 0) {  // of the model the clients received this round (before the update)
    line["client_eval_loss"] = eval_loss / eval_weight;
    line["client_eval_accuracy"] = eval_accuracy / eval_weight;
  }
  SHOAL_RETURN_IF_ERROR(WriteMetrics(line));
  SHOAL_RETURN_IF_ERROR(SaveCheckpoint());
  if (o_.print_table) PrintTableRow(r);
  spdlog::info("round {} done: accuracy {:.4f}, loss {:.4f}, {}/{} clients, {:.2f}s", r.round, r.test_accuracy,
               r.test_loss, r.clients_reported, r.clients_selected, r.seconds);
  if (o_.on_round) o_.on_round(r);
  round_ = RoundState{};
  round_.number = last_completed_;
  return Status::Ok();
}

void Service::Impl::PrintTableRow(const RoundReport& r) {
  if (r.round == 1 || r.round % 20 == 1 || !table_header_printed_)
    std::printf("%6s %9s %9s %12s %12s %8s %5s\n", "round", "accuracy", "loss", "bytes_up", "bytes_down", "seconds", "ok");
  table_header_printed_ = true;
  std::printf("%6llu %9.4f %9.4f %12llu %12llu %8.2f %2zu/%zu\n", static_cast<unsigned long long>(r.round),
              r.test_accuracy, r.test_loss, static_cast<unsigned long long>(r.bytes_up),
              static_cast<unsigned long long>(r.bytes_down), r.seconds, r.clients_reported, r.clients_selected);
  std::fflush(stdout);
}

Status Service::Impl::WriteMetrics(const nlohmann::json& line) {
  if (!metrics_.is_open()) return Status::Ok();
  metrics_ << line.dump() << '\n';
  metrics_.flush();
  if (!metrics_) return Status::IoError("writing --metrics-out " + o_.metrics_out + " failed");
  return Status::Ok();
}

Status Service::Impl::SaveCheckpoint() {
  if (o_.checkpoint_dir.empty()) return Status::Ok();
  Checkpoint ck;
  ck.round = last_completed_;
  ck.model_spec = task_.model;
  ck.params = global_;
  ck.sections.emplace_back("strategy", strategy_->SaveState());
  return WriteCheckpoint((fs::path(o_.checkpoint_dir) / kCheckpointFile).string(), ck);
}

void Service::Impl::SendByeToAll(const std::string& reason) {
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
    if (*in) Handle(**in);
  }
  if (!clients_.empty()) spdlog::warn("{} clients did not confirm the Bye", clients_.size());
}

Status Service::Impl::Run(const std::atomic<bool>& stop, std::atomic<bool>* reload) {
  round_.number = last_completed_;
  if (o_.rounds && last_completed_ >= o_.rounds) {
    spdlog::info("all {} rounds are already done", o_.rounds);
    return Status::Ok();
  }
  while (!stop.load()) {
    if (reload && reload->exchange(false)) ReloadAllowList();
    // Short polls while outboxes wait for room, so transfers flow without delay.
    const auto timeout = std::chrono::milliseconds(OutboxPending() ? 2 : 50);
    SHOAL_ASSIGN_OR_RETURN(auto in, server_->Recv(timeout));
    if (in) Handle(*in);
    // Drain what else is queued (up to 20 ms) before housekeeping, so heartbeats waiting
    // behind a burst are seen before anyone is declared silent.
    const auto drain_until = Clock::now() + std::chrono::milliseconds(20);
    while (in && Clock::now() < drain_until) {
      SHOAL_ASSIGN_OR_RETURN(in, server_->Recv(std::chrono::milliseconds(0)));
      if (in) Handle(*in);
    }
    Flush();
    ExpireClients();
    if (round_.open && (RoundResolved() || Clock::now() >= round_.deadline)) {
      SHOAL_RETURN_IF_ERROR(CloseRound());
      if (o_.rounds && last_completed_ >= o_.rounds) {
        spdlog::info("completed {} rounds; sending Bye to {} clients", last_completed_, clients_.size());
        SendByeToAll("training finished after " + std::to_string(last_completed_) + " rounds");
        return Status::Ok();
      }
    }
    if (!round_.open && MaybeStartRound()) Flush();
  }
  spdlog::info("stopping on request after round {} (checkpointed rounds are kept)", last_completed_);
  return Status::Ok();
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
Status Service::Run(const std::atomic<bool>& stop, std::atomic<bool>* reload) { return impl_->Run(stop, reload); }
std::string Service::endpoint() const { return impl_->endpoint(); }
uint64_t Service::rounds_completed() const { return impl_->rounds_completed(); }

}  // namespace shoal::aggregator
