// The serverless peer (shoal/peer.h; protocol in docs/PROTOCOL.md "Peers"). One thread, one
// event loop: a ROUTER receives from every member, a DEALER per member sends to it (CURVE,
// pinned to the member's key). Local compute (a gradient, DiLoCo's inner steps) runs inline:
// steps are short, and heartbeats are only needed every heartbeat interval.
#include "shoal/peer.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <deque>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <set>

#include "aggregate/exact_sum.h"
#include "backend/backend.h"
#include "codec/codec.h"
#include "codec/round_context.h"
#include "core/rng.h"
#include "crypto/crypto.h"
#include "crypto/keys.h"
#include "nn/demo_optimizer.h"
#include "nn/evaluate.h"
#include "nn/model.h"
#include "nn/model_registry.h"
#include "nn/optimizer.h"
#include "protocol/peer.h"
#include "shoal/data.h"
#include "transport/zmq/zmq_channel.h"
#include "transport/zmq/zap.h"

namespace shoal {
namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using wire::ErrorCode;

constexpr size_t kLogSteps = 16;                    // committed steps whose updates are kept for fetches
constexpr int64_t kDepartedMemoryMs = 120000;       // how long a member dropped for silence may come back
constexpr uint64_t kShuffleTag = 0x7065'6572'2d73'6875ULL;  // "peer-shu"
constexpr uint64_t kGossipTag = 0x676f'7373'6970'2d6bULL;   // "gossip-k"

// ZMTP heartbeats (ZeroMQ drops a connection silent for 3 intervals) no stricter than the
// swarm's own member timeout: a saturated slow uplink can hold a PONG back for seconds, and
// a dropped connection costs a reconnect and a re-sent Join.
int ZmtpHeartbeatMs(uint32_t member_timeout_ms) {
  return static_cast<int>(std::clamp<uint32_t>(member_timeout_ms / 3, 2000, 60000));
}

int64_t MillisSince(Clock::time_point t) {
  return std::chrono::duration_cast<milliseconds>(Clock::now() - t).count();
}

// One update of one step, as it arrives (chunk by chunk) or as this peer made it.
struct Update {
  std::unique_ptr<protocol::ChunkAssembler> assembler;
  bool complete = false;
  std::vector<uint8_t> payload;
  std::string payload_hash;  // hex BLAKE2b-256
  std::string base_hash;
  uint64_t num_examples = 0;
  double loss = 0.0;
  crypto::Signature signature{};
};

struct Member {
  protocol::PeerInfo info;
  bool introduced = false;  // its own Join arrived: its signing key is trusted
  bool joined_us = false;   // we sent it our Join
  uint64_t join_handshakes = 0;  // out's completed handshakes when the Join went: a later one is a new connection
  std::unique_ptr<transport::Channel> out;
  uint64_t out_sequence = 0;
  Clock::time_point last_heard;
};

struct PendingCommit {
  std::string from;
  std::vector<std::pair<std::string, std::string>> entries;  // author, payload hash
  std::string model_hash;
  Clock::time_point since;
};

class Peer {
 public:
  explicit Peer(PeerOptions o) : o_(std::move(o)) {}
  Status Run(const std::atomic<bool>& stop);

 private:
  // Setup.
  Status InitIdentity();
  Status InitTransport();
  Status Join(const std::atomic<bool>& stop, std::vector<transport::Listener::Inbound>* early);
  Status InitTask();
  Status ConnectMember(const protocol::PeerInfo& info);
  // Sends our Join on the member's new connection once it is up (ZMQ_IMMEDIATE drops frames
  // before that); nothing else goes to a member before it. The member answers with its own
  // Join, which is what we trust.
  void IntroduceTo(Member& m);

  // Frames.
  void Handle(transport::Listener::Inbound& in);
  void HandleJoin(const transport::Listener::Inbound& in, const wire::Envelope* env);
  void HandleUpdate(const std::string& from, const wire::Envelope* env);
  void HandleCommit(const std::string& from, const wire::Envelope* env);
  void HandleState(const std::string& from, const wire::Envelope* env);
  void HandleFetch(const std::string& from, const wire::Envelope* env);
  void Reject(const std::string& to, ErrorCode code, const std::string& reason);
  protocol::Header Header(Member& m) { return {swarm_, committed_ + 1, 0, ++m.out_sequence}; }
  void SendTo(const std::string& name, const protocol::Frame& frame);
  void Broadcast(const std::function<protocol::Frame(Member&)>& make);
  void SendUpdate(const std::string& to, uint64_t step, const std::string& author, const Update& u);
  protocol::SwarmInfo Swarm() const;

  // Membership.
  void ExpireMembers();
  void Readmit(const std::string& name);
  void Heartbeat();
  std::vector<std::string> LiveNames() const;  // introduced members and self, sorted
  std::string Leader() const { return LiveNames().front(); }

  // Steps.
  void LocalUpdate(uint64_t step);
  void MaybeCommit();
  void TryApplyCommits();
  Status Apply(uint64_t step, const std::vector<std::string>& authors);
  void GossipStep();
  std::vector<std::string> GossipTargets(const std::string& who, uint64_t step, const std::vector<std::string>& live) const;
  void Resync(const std::string& from, const std::string& why);
  void RequestState();
  std::vector<float> StatePayload() const;
  void FinishStep(uint64_t step, size_t included, double loss, double spread);
  void Evaluate(nlohmann::json& line);

  PeerOptions o_;
  protocol::PeerInfo self_;
  crypto::KeyPair keys_;
  bool secure_ = false;
  zmq::context_t ctx_{1};
  std::unique_ptr<transport::ZapHandler> zap_;
  std::unique_ptr<transport::Listener> server_;
  size_t max_frame_bytes_ = 0;
  uint64_t swarm_ = 0;
  protocol::SwarmInfo swarm_info_;  // the task and settings every member shares

  std::map<std::string, Member> members_;             // by name, self excluded
  // Members dropped for silence (not those that said Bye), with their connections, for
  // kDepartedMemoryMs: they still get heartbeats, and one heard again on its old route (a
  // stalled link, a paused process) is readmitted (docs/PROTOCOL.md "Peers").
  std::map<std::string, Member> departed_;
  std::map<std::string, std::string> route_to_name_;  // ROUTER routing id -> member name
  std::map<std::string, uint64_t> route_sequence_;    // last sequence seen per routing id

  // Model, data, optimizers.
  std::unique_ptr<Backend> backend_;       // local compute (cpu or cuda)
  std::unique_ptr<Backend> host_;          // the replicated update, always on the CPU (same bits everywhere)
  std::unique_ptr<nn::Model> model_;
  data::Dataset local_, test_;
  std::vector<int64_t> order_;
  size_t order_pos_ = 0;
  uint64_t epoch_ = 0;
  std::unique_ptr<codec::Codec> codec_;
  std::unique_ptr<nn::Optimizer> shared_opt_;  // allgather sgd/adamw, diloco outer Nesterov; on host_
  std::unique_ptr<nn::Optimizer> local_opt_;   // diloco inner AdamW, gossip local SGD; on backend_
  std::unique_ptr<nn::DemoOptimizer> demo_;    // allgather with the "demo" optimizer
  DeviceArray<float> w_dev_, g_dev_, x_dev_;
  DeviceArray<int32_t> y_dev_;
  size_t n_ = 0;

  // Replica and steps.
  std::vector<float> w_;
  std::string hash_;
  uint64_t committed_ = 0;
  bool started_ = false;
  uint64_t sent_step_ = 0;  // the step our own update is for
  Clock::time_point step_started_;
  Clock::time_point last_commit_time_;
  std::map<uint64_t, std::map<std::string, Update>> updates_;  // step -> author -> update
  std::map<uint64_t, PendingCommit> commits_;                  // received, not yet applied
  std::deque<std::pair<uint64_t, std::vector<std::string>>> commit_log_;  // authors of recent commits
  std::set<std::pair<uint64_t, std::string>> fetching_;
  std::map<uint64_t, std::string> hash_log_;  // model hash after recent steps
  std::string last_commit_leader_;
  protocol::Frame last_commit_frame_body_;    // re-broadcast by a new leader

  // Resync.
  bool syncing_ = false;
  bool state_requested_ = false;  // the StateRequest to sync_from_ has gone out
  std::string sync_reason_;
  std::string sync_from_;
  Clock::time_point sync_started_;
  Clock::time_point sync_progress_;  // the resync began, or its last state chunk arrived
  std::unique_ptr<protocol::ChunkAssembler> state_assembler_;

  // Metrics.
  std::ofstream metrics_;
  uint64_t bytes_sent_ = 0, bytes_sent_at_step_ = 0, bytes_received_at_step_ = 0;
  Clock::time_point step_clock_ = Clock::now();
  uint64_t frames_rejected_ = 0, resyncs_ = 0, divergences_ = 0, readmitted_ = 0;
  double compute_seconds_ = 0, apply_seconds_ = 0;  // this step: local work, and decoding + applying
  std::map<std::string, uint64_t> rejected_by_code_;
  Clock::time_point last_heartbeat_;
};

// ---- setup ----------------------------------------------------------------------------------

Status Peer::InitIdentity() {
  if (o_.secret_key_file.empty() != o_.allow_keys.empty())
    return Status::InvalidArgument(o_.secret_key_file.empty() ? "--allow-keys needs --secret-key (this peer's key file)"
                                                              : "--secret-key needs --allow-keys (the peers' public keys)");
  secure_ = !o_.secret_key_file.empty();
  if (secure_ && o_.insecure) return Status::InvalidArgument("--insecure contradicts --secret-key; give one or the other");
  if (o_.advertise.empty()) o_.advertise = o_.listen;
  if (o_.advertise.find('*') != std::string::npos)
    return Status::InvalidArgument("--listen " + o_.listen + " has a wildcard: give --advertise with the address "
                                   "the other peers reach this one at");
  if (!secure_) {
    const bool local = transport::IsLoopbackEndpoint(o_.listen) && transport::IsLoopbackEndpoint(o_.advertise);
    if (!local && !o_.insecure)
      return Status::FailedPrecondition("--listen " + o_.listen + " is reachable from other machines: give --secret-key "
                                        "and --allow-keys (make keys with shoal-keygen), or pass --insecure");
    // Updates are signed even without transport security (with a key made for this run),
    // so a relayed update still names its author; without CURVE the binding is not authenticated.
    SHOAL_ASSIGN_OR_RETURN(keys_, crypto::GenerateKeyPair());
    if (o_.insecure) spdlog::warn("INSECURE: peer links are neither encrypted nor authenticated (--insecure)");
  } else {
    SHOAL_ASSIGN_OR_RETURN(keys_, crypto::ReadSecretKeyFile(o_.secret_key_file));
  }
  if (!protocol::ValidPeerName(o_.name)) return Status::InvalidArgument("--name must be 1-64 printable characters");
  self_.name = o_.name;
  self_.endpoint = o_.advertise;
  self_.curve_key = secure_ ? crypto::Z85Key(keys_.curve_public) : "";
  self_.sign_key = keys_.sign_public;
  return Status::Ok();
}

Status Peer::InitTransport() {
  max_frame_bytes_ = protocol::MaxFrameBytes(o_.chunk_bytes);
  transport::SocketOptions so;
  so.max_frame_bytes = static_cast<int64_t>(max_frame_bytes_);
  so.zmtp_heartbeat_ms = ZmtpHeartbeatMs(o_.heartbeat_timeout_ms);
  if (secure_) {
    SHOAL_ASSIGN_OR_RETURN(crypto::AllowList list, crypto::AllowList::Load(o_.allow_keys));
    if (list.size() == 0) return Status::FailedPrecondition("--allow-keys " + o_.allow_keys + " holds no keys");
    SHOAL_ASSIGN_OR_RETURN(zap_, transport::ZapHandler::Start(ctx_, std::make_shared<const crypto::AllowList>(std::move(list))));
    so.curve = std::make_shared<const crypto::KeyPair>(keys_);
  }
  SHOAL_ASSIGN_OR_RETURN(server_, transport::ZmqListener::Bind(ctx_, o_.listen, so));
  spdlog::info("peer {} listening on {} ({})", self_.name, server_->endpoint(),
               secure_ ? "CURVE, key " + self_.curve_key : "no transport security");
  return Status::Ok();
}

Status Peer::ConnectMember(const protocol::PeerInfo& info) {
  if (info.name == self_.name || members_.count(info.name)) return Status::Ok();
  transport::SocketOptions so;
  so.max_frame_bytes = static_cast<int64_t>(max_frame_bytes_);
  so.zmtp_heartbeat_ms = ZmtpHeartbeatMs(swarm_info_.heartbeat_timeout_ms);
  if (secure_) {
    if (info.curve_key.empty()) return Status::Protocol("member " + info.name + " has no CURVE key");
    so.curve = std::make_shared<const crypto::KeyPair>(keys_);
    SHOAL_RETURN_IF_ERROR(crypto::Z85DecodeTo(info.curve_key, so.server_key));
  }
  Member m;
  m.info = info;
  m.last_heard = Clock::now();
  SHOAL_ASSIGN_OR_RETURN(m.out, transport::ZmqChannel::Connect(ctx_, info.endpoint, so));
  members_[info.name] = std::move(m);
  IntroduceTo(members_.at(info.name));
  spdlog::info("peer {}: connecting to member {} at {}", self_.name, info.name, info.endpoint);
  return Status::Ok();
}

void Peer::IntroduceTo(Member& m) {
  if (m.joined_us) return;
  protocol::Header h = Header(m);
  if (m.out->Send(protocol::EncodeJoin(h, self_, false), milliseconds(0)).ok()) {
    m.joined_us = true;
    m.join_handshakes = m.out->handshakes().succeeded;
  } else {
    --m.out_sequence;  // not sent: the next try reuses the number
  }
}

protocol::SwarmInfo Peer::Swarm() const {
  protocol::SwarmInfo s = swarm_info_;
  s.members.clear();
  s.members.push_back(self_);
  for (const auto& [name, m] : members_)
    if (m.introduced) s.members.push_back(m.info);
  return s;
}

// The founding peer's task and settings become the swarm's.
Status Peer::InitTask() {
  const protocol::SwarmInfo& s = swarm_info_;
  SHOAL_ASSIGN_OR_RETURN(backend_, MakeBackend(o_.data.device));
  host_ = MakeCpuBackend();
  const std::string data_dir = o_.data.data_dir.empty() ? data::DefaultDataDir() : o_.data.data_dir;
  SHOAL_ASSIGN_OR_RETURN(data::Dataset full, data::LoadDataset(o_.data.dataset, data_dir));
  SHOAL_ASSIGN_OR_RETURN(data::Split split, data::TrainTestSplit(full, s.task.test_fraction, s.task.seed));
  SHOAL_ASSIGN_OR_RETURN(auto parts, data::Partition(split.train.y, split.train.num_classes, o_.data.partition_count,
                                                     o_.data.partition_scheme, s.task.seed));
  if (o_.data.partition_index >= parts.size()) return Status::InvalidArgument("--partition index out of range");
  local_ = data::Subset(split.train, parts[o_.data.partition_index]);
  test_ = std::move(split.test);
  if (local_.n == 0) return Status::InvalidArgument("this peer's partition holds no examples");

  SHOAL_ASSIGN_OR_RETURN(model_, nn::MakeModel(s.task.model, nn::InputsOf(full), backend_.get()));
  if (!s.task.layout.empty() && s.task.layout != model_->Layout())
    return Status::InvalidArgument("the swarm's model layout [" + LayoutToString(s.task.layout) +
                                   "] does not fit this peer's data (" + std::to_string(full.dim) + " features)");
  swarm_info_.task.layout = model_->Layout();
  SHOAL_ASSIGN_OR_RETURN(Precision precision, ParsePrecision(o_.data.precision));
  model_->set_precision(precision);
  n_ = model_->num_params();
  ParameterArena init;
  model_->Init(&init, s.task.seed);
  w_.assign(init.data(), init.data() + init.size());
  hash_ = crypto::ModelHash(w_);

  const TaskConfig& t = s.task;
  SHOAL_RETURN_IF_ERROR(nn::ValidateOptimizerConfig(t.optimizer));
  SHOAL_ASSIGN_OR_RETURN(codec_, codec::Codec::Create(t.codec, model_->Layout()));
  if (s.mode == "allgather") {
    if (t.optimizer.name == "demo") {
      SHOAL_ASSIGN_OR_RETURN(demo_, nn::MakeDemoOptimizer(t.optimizer, model_->Layout(), backend_.get()));
    } else {
      SHOAL_ASSIGN_OR_RETURN(shared_opt_, nn::MakeOptimizer(t.optimizer, n_, host_.get()));
    }
  } else if (s.mode == "diloco") {
    OptimizerConfig outer;
    outer.name = "sgd";
    outer.learning_rate = static_cast<float>(s.Param("outer_lr", 0.7));
    outer.momentum = static_cast<float>(s.Param("outer_momentum", 0.9));
    outer.nesterov = outer.momentum > 0.0f;
    SHOAL_ASSIGN_OR_RETURN(shared_opt_, nn::MakeOptimizer(outer, n_, host_.get()));
    if (t.optimizer.name == "demo") return Status::InvalidArgument("diloco's inner optimizer cannot be demo");
    SHOAL_ASSIGN_OR_RETURN(local_opt_, nn::MakeOptimizer(t.optimizer, n_, backend_.get()));
  } else if (s.mode == "gossip") {
    if (t.optimizer.name == "demo") return Status::InvalidArgument("gossip's local optimizer cannot be demo");
    SHOAL_ASSIGN_OR_RETURN(local_opt_, nn::MakeOptimizer(t.optimizer, n_, backend_.get()));
  } else {
    return Status::InvalidArgument("unknown --mode '" + s.mode + "': expected allgather, diloco or gossip");
  }
  w_dev_ = DeviceArray<float>(backend_.get(), n_);
  g_dev_ = DeviceArray<float>(backend_.get(), n_);
  x_dev_ = DeviceArray<float>(backend_.get(), static_cast<size_t>(t.batch_size) * local_.dim);
  y_dev_ = DeviceArray<int32_t>(backend_.get(), t.batch_size);
  order_.resize(static_cast<size_t>(local_.n));
  std::iota(order_.begin(), order_.end(), int64_t{0});
  order_pos_ = order_.size();
  spdlog::info("peer {}: {} mode, model {} ({} parameters), {} local examples, codec {}, backend {}", self_.name, s.mode,
               t.model, n_, local_.n, codec_->spec(), backend_->name());
  return Status::Ok();
}

// `early` receives the frames that arrive before the member list (members introducing
// themselves); they are handled once the swarm is known.
Status Peer::Join(const std::atomic<bool>& stop, std::vector<transport::Listener::Inbound>* early) {
  if (o_.bootstrap.empty()) {
    // Founding the swarm: its id, task and settings are this peer's.
    swarm_ = crypto::RandomU64() | 1;
    protocol::SwarmInfo& s = swarm_info_;
    s.task = o_.task;
    s.mode = o_.mode;
    s.step_timeout_ms = o_.step_timeout_ms;
    s.heartbeat_interval_ms = o_.heartbeat_interval_ms;
    s.heartbeat_timeout_ms = o_.heartbeat_timeout_ms;
    s.chunk_bytes = o_.chunk_bytes;
    s.steps = o_.steps;
    s.params = {{"diloco_inner_steps", o_.diloco_inner_steps}, {"outer_lr", o_.diloco_outer_lr},
                {"outer_momentum", o_.diloco_outer_momentum}, {"gossip_k", o_.gossip_k},
                {"eval_every", o_.eval_every}, {"min_peers", o_.min_peers}};
    if (s.step_timeout_ms == 0 || s.heartbeat_interval_ms == 0 || s.heartbeat_timeout_ms <= s.heartbeat_interval_ms)
      return Status::InvalidArgument("--heartbeat-timeout must exceed --heartbeat-interval, and timeouts be positive");
    SHOAL_RETURN_IF_ERROR(InitTask());
    spdlog::info("peer {}: founded swarm {:016x}", self_.name, swarm_);
    return Status::Ok();
  }
  // Joining: ask the bootstrap peers for the member list, then introduce ourselves to all.
  std::vector<std::unique_ptr<transport::Channel>> boot;
  std::vector<std::string> boot_names;
  for (const std::string& spec : o_.bootstrap) {
    const size_t at = spec.find('@');
    const std::string endpoint = spec.substr(0, at);
    transport::SocketOptions so;
    so.max_frame_bytes = static_cast<int64_t>(max_frame_bytes_);
    if (secure_) {
      if (at == std::string::npos)
        return Status::InvalidArgument("--peers " + spec + ": with --secret-key, give each peer as ENDPOINT@KEY "
                                       "(its .pub file or Z85 key) so the connection is pinned to it");
      SHOAL_ASSIGN_OR_RETURN(std::string key, crypto::ReadPublicKey(spec.substr(at + 1)));
      SHOAL_RETURN_IF_ERROR(crypto::Z85DecodeTo(key, so.server_key));
      so.curve = std::make_shared<const crypto::KeyPair>(keys_);
    }
    SHOAL_ASSIGN_OR_RETURN(auto ch, transport::ZmqChannel::Connect(ctx_, endpoint, so));
    boot.push_back(std::move(ch));
    boot_names.push_back(endpoint);
  }
  const auto deadline = Clock::now() + milliseconds(o_.join_timeout_ms);
  auto next_try = Clock::now();
  uint64_t seq = 0;
  while (!stop.load()) {
    if (Clock::now() >= deadline)
      return Status::Unavailable("no answer from the bootstrap peers (" + o_.bootstrap[0] + (boot.size() > 1 ? ", ..." : "") +
                                 ") within " + std::to_string(o_.join_timeout_ms / 1000) + " s");
    if (Clock::now() >= next_try) {
      for (auto& ch : boot) (void)ch->Send(protocol::EncodeJoin({0, 0, 0, ++seq}, self_, true), milliseconds(0));
      next_try = Clock::now() + milliseconds(500);
    }
    for (size_t i = 0; i < boot.size(); ++i) {
      (void)boot[i]->Recv(milliseconds(0));  // runs the handshake bookkeeping
      if (boot[i]->handshake_failures_in_a_row() >= 3)
        return transport::HandshakeFailure(*boot[i], "the peer at " + boot_names[i], self_.curve_key);
    }
    auto in = server_->Recv(milliseconds(20));
    if (!in.ok()) return in.status();
    if (!*in) continue;
    const auto v = protocol::VerifyFrame((*in)->frame.bytes(), max_frame_bytes_);
    if (!v.ok()) continue;
    if (v.envelope->message_type() != wire::Message::Members && v.envelope->message_type() != wire::Message::Error) {
      if (early->size() < 1024) early->push_back(std::move(**in));
      continue;
    }
    if (v.envelope->message_type() == wire::Message::Members) {
      auto swarm = protocol::DecodeMembers(v.envelope->message_as_Members());
      if (!swarm.ok()) return swarm.status().WithContext("the swarm's member list is invalid");
      swarm_ = v.envelope->session();
      swarm_info_ = std::move(*swarm);
      for (const auto& m : swarm_info_.members)
        if (m.name == self_.name && m.curve_key != self_.curve_key)
          return Status::FailedPrecondition("the name '" + self_.name + "' is taken in this swarm; pick another --name");
      SHOAL_RETURN_IF_ERROR(InitTask());
      for (const auto& m : swarm_info_.members) SHOAL_RETURN_IF_ERROR(ConnectMember(m));
      spdlog::info("peer {}: joined swarm {:016x} ({} members)", self_.name, swarm_, swarm_info_.members.size());
      // The replica comes from a member (verified by hash); until then this peer only listens.
      Resync(swarm_info_.members.front().name, "joining");
      return Status::Ok();
    }
    if (v.envelope->message_type() == wire::Message::Error) {
      const auto* e = v.envelope->message_as_Error();
      return Status::FailedPrecondition("the swarm refused this peer: " + (e->reason() ? e->reason()->str() : ""));
    }
  }
  return Status::Cancelled("stopped while joining");
}

// ---- frames -------------------------------------------------------------------------------

void Peer::Reject(const std::string& to, ErrorCode code, const std::string& reason) {
  ++frames_rejected_;
  ++rejected_by_code_[wire::EnumNameErrorCode(code)];
  if (frames_rejected_ <= 10 || frames_rejected_ % 1000 == 0)
    spdlog::warn("peer {}: rejected frame #{} ({}): {}", self_.name, frames_rejected_, wire::EnumNameErrorCode(code), reason);
  if (!to.empty() && members_.count(to)) {
    Member& m = members_.at(to);
    SendTo(to, protocol::EncodeError(Header(m), code, reason));
  }
}

void Peer::SendTo(const std::string& name, const protocol::Frame& frame) {
  auto it = members_.find(name);
  // Nothing goes to a member before our Join (the frame's sequence number would overtake it).
  if (it == members_.end() || !it->second.out || !it->second.joined_us) return;
  // A short wait only: a dead member must not stall the loop (it is dropped at its timeout).
  Status st = it->second.out->Send(frame, milliseconds(5));
  if (st.ok()) {
    bytes_sent_ += frame.size();
  } else {
    spdlog::debug("peer {}: send to {} failed: {}", self_.name, name, st.message());
  }
}

void Peer::Broadcast(const std::function<protocol::Frame(Member&)>& make) {
  for (auto& [name, m] : members_)
    if (m.joined_us) SendTo(name, make(m));
}

void Peer::SendUpdate(const std::string& to, uint64_t step, const std::string& author, const Update& u) {
  auto it = members_.find(to);
  if (it == members_.end()) return;
  for (const auto& chunk : protocol::SplitPayload(u.payload, swarm_info_.chunk_bytes)) {
    protocol::Header h = Header(it->second);
    h.round = step;
    SendTo(to, protocol::EncodePeerUpdate(h, author, u.base_hash, u.num_examples, u.loss, chunk, u.signature));
  }
}

void Peer::Handle(transport::Listener::Inbound& in) {
  const std::span<const uint8_t> bytes = in.frame.bytes();
  const protocol::Verified v = protocol::VerifyFrame(bytes, max_frame_bytes_);
  if (!v.ok()) return Reject("", v.error, v.reason);
  const wire::Envelope* env = v.envelope;
  if (env->message_type() == wire::Message::Join) return HandleJoin(in, env);
  auto rit = route_to_name_.find(in.peer);
  if (rit != route_to_name_.end() && !members_.count(rit->second) && departed_.count(rit->second) &&
      (!secure_ || in.user_id == departed_.at(rit->second).info.curve_key))
    Readmit(rit->second);
  if (rit == route_to_name_.end() || !members_.count(rit->second))
    return Reject("", ErrorCode::NotMember, std::string(protocol::MessageName(env->message_type())) + " before Join");
  const std::string& from = rit->second;
  Member& m = members_.at(from);
  if (secure_ && in.user_id != m.info.curve_key)
    return Reject(from, ErrorCode::BadSender, "this connection's key is not member " + from + "'s");
  if (env->session() != swarm_) return Reject(from, ErrorCode::UnknownSession, "frame of another swarm");
  uint64_t& last = route_sequence_[in.peer];
  if (env->sequence() <= last)
    return Reject(from, ErrorCode::Duplicate, "sequence " + std::to_string(env->sequence()) + " is not above " + std::to_string(last));
  last = env->sequence();
  m.last_heard = Clock::now();
  switch (env->message_type()) {
    case wire::Message::Heartbeat: return;
    case wire::Message::PeerUpdate: return HandleUpdate(from, env);
    case wire::Message::Commit: return HandleCommit(from, env);
    case wire::Message::State: return HandleState(from, env);
    case wire::Message::UpdateFetch: return HandleFetch(from, env);
    case wire::Message::StateRequest: {
      if (syncing_) return;  // nothing verified to give yet; the requester retries elsewhere
      const std::vector<float> state = StatePayload();
      const auto bytes_view = protocol::AsBytes(state);
      const std::string state_hash = crypto::HashHex(bytes_view);
      for (const auto& chunk : protocol::SplitPayload(bytes_view, swarm_info_.chunk_bytes)) {
        protocol::Header h = Header(m);
        h.round = committed_;
        SendTo(from, protocol::EncodeState(h, hash_, state_hash, chunk));
      }
      spdlog::info("peer {}: sent the state after step {} to {}", self_.name, committed_, from);
      return;
    }
    case wire::Message::Members:  // a late answer to a Join request this peer repeated while waiting
      return;
    case wire::Message::Bye:
      spdlog::info("peer {}: member {} left", self_.name, from);
      members_.erase(from);
      return;
    case wire::Message::Error: {
      const auto* e = env->message_as_Error();
      spdlog::warn("peer {}: {} reported {}: {}", self_.name, from, wire::EnumNameErrorCode(e->code()),
                   e->reason() ? e->reason()->str() : "");
      return;
    }
    default:
      return Reject(from, ErrorCode::MalformedFrame, std::string("a peer may not send ") + protocol::MessageName(env->message_type()));
  }
}

void Peer::HandleJoin(const transport::Listener::Inbound& in, const wire::Envelope* env) {
  const wire::Join* j = env->message_as_Join();
  auto info = protocol::DecodePeerInfo(j->self());
  if (!info.ok()) return Reject("", ErrorCode::MalformedFrame, info.status().message());
  if (env->session() != 0 && env->session() != swarm_) return Reject("", ErrorCode::UnknownSession, "Join for another swarm");
  // The key in the Join must be the one this connection authenticated with.
  if (secure_ && info->curve_key != in.user_id)
    return Reject("", ErrorCode::BadSender, "Join's key is not the connection's");
  if (info->name == self_.name) return Reject("", ErrorCode::Refused, "name '" + info->name + "' is this peer's");
  if (auto d = departed_.find(info->name); d != departed_.end()) {
    if (d->second.info.curve_key != info->curve_key)
      return Reject("", ErrorCode::Refused, "name '" + info->name + "' belongs to another key");
    departed_.erase(d);  // it rejoins afresh
  }
  auto it = members_.find(info->name);
  if (it != members_.end() && it->second.info.curve_key != info->curve_key)
    return Reject("", ErrorCode::Refused, "name '" + info->name + "' belongs to another key");
  if (it != members_.end() && it->second.info.endpoint != info->endpoint) {  // restarted elsewhere
    members_.erase(it);
    it = members_.end();
  }
  if (it == members_.end()) {
    Status st = ConnectMember(*info);
    if (!st.ok()) return Reject("", ErrorCode::MalformedFrame, st.message());
    it = members_.find(info->name);
  }
  Member& m = it->second;
  // Learned from the member itself: its endpoint and signing key.
  m.info = *info;
  if (!m.introduced) spdlog::info("peer {}: member {} joined ({})", self_.name, info->name, info->endpoint);
  m.introduced = true;
  m.last_heard = Clock::now();
  // One route per member: a Join on a new connection retires the old one.
  for (auto r = route_to_name_.begin(); r != route_to_name_.end();) {
    if (r->second == info->name && r->first != in.peer) {
      route_sequence_.erase(r->first);
      r = route_to_name_.erase(r);
    } else {
      ++r;
    }
  }
  route_to_name_[in.peer] = info->name;
  route_sequence_[in.peer] = env->sequence();
  IntroduceTo(m);  // if its connection is up already; the joiner repeats its request otherwise
  if (j->want_members() && m.joined_us) SendTo(info->name, protocol::EncodeMembers(Header(m), Swarm()));
}

void Peer::HandleUpdate(const std::string& from, const wire::Envelope* env) {
  const wire::PeerUpdate* u = env->message_as_PeerUpdate();
  const uint64_t step = env->round();
  const std::string author = u->author() ? u->author()->str() : "";
  // An update comes from its author, or from a member we asked for it (UpdateFetch); a fetched
  // copy that arrives after the original is simply late.
  if (author != from && !fetching_.count({step, author})) {
    auto s = updates_.find(step);
    if (s != updates_.end() && s->second.count(author) && s->second.at(author).complete) return;
    return Reject(from, ErrorCode::BadSender, "update of " + author + " sent by " + from);
  }
  // Allgather and diloco move in lockstep (one step ahead at most); gossip peers drift apart by
  // a few steps (one that nobody drew finishes its step at once), so they buffer further ahead.
  const uint64_t ahead = swarm_info_.mode == "gossip" ? kLogSteps : 2;
  if (step <= committed_ || step > committed_ + ahead) {
    ++rejected_by_code_["StaleStep"];  // late or far-ahead: expected under churn, not an attack
    return;
  }
  auto mit = members_.find(author);
  if (mit == members_.end() || !mit->second.introduced)
    return Reject(from, ErrorCode::NotMember, "update from " + author + ", who has not joined");
  Update& slot = updates_[step][author];
  if (slot.complete) {
    // A copy of an update already held (the original and a fetched copy can cross): ignored.
    ++rejected_by_code_["DuplicateUpdate"];
    return;
  }
  if (!slot.assembler) {
    if (u->num_examples() == 0 || u->num_examples() > (uint64_t{1} << 40) || !std::isfinite(u->loss()) ||
        !u->signature() || u->signature()->size() != 64 || !u->base_hash() || u->base_hash()->size() != 64) {
      updates_[step].erase(author);
      return Reject(from, ErrorCode::MalformedFrame, "update fields out of range");
    }
    slot.assembler = std::make_unique<protocol::ChunkAssembler>(2 * n_ * sizeof(float) + (64u << 10));
    slot.base_hash = u->base_hash()->str();
    slot.num_examples = u->num_examples();
    slot.loss = u->loss();
    std::memcpy(slot.signature.data(), u->signature()->data(), 64);
  }
  Status st = slot.assembler->Add(u->payload());
  if (!st.ok()) {
    updates_[step].erase(author);
    return Reject(from, ErrorCode::MalformedFrame, st.message());
  }
  if (!slot.assembler->complete()) return;
  slot.payload = slot.assembler->Take();
  slot.assembler.reset();
  const auto digest = crypto::Hash256(slot.payload);
  const auto signed_bytes = protocol::SignedUpdateBytes(swarm_, step, author, slot.base_hash, slot.num_examples, digest);
  if (!crypto::Verify(slot.signature, signed_bytes, mit->second.info.sign_key)) {
    updates_[step].erase(author);
    return Reject(from, ErrorCode::BadSignature, "update of " + author + " for step " + std::to_string(step) +
                                                     " does not verify against its signing key");
  }
  slot.payload_hash = crypto::ToHex(digest);
  slot.complete = true;
  fetching_.erase({step, author});
}

void Peer::HandleCommit(const std::string& from, const wire::Envelope* env) {
  const wire::Commit* c = env->message_as_Commit();
  auto entries = protocol::DecodeCommit(c);
  if (!entries.ok()) return Reject(from, ErrorCode::MalformedFrame, entries.status().message());
  const uint64_t step = env->round();
  const std::string model_hash = c->model_hash()->str();
  if (step <= committed_) {
    // A repeat (a new leader re-announcing its last commit): harmless if we agree.
    auto h = hash_log_.find(step);
    if (h != hash_log_.end() && h->second != model_hash) {
      ++divergences_;
      Resync(from, "step " + std::to_string(step) + " was committed with another result");
    }
    return;
  }
  commits_[step] = PendingCommit{from, std::move(*entries), model_hash, Clock::now()};
}

void Peer::HandleFetch(const std::string& from, const wire::Envelope* env) {
  const uint64_t step = env->round();
  const std::string author = env->message_as_UpdateFetch()->author() ? env->message_as_UpdateFetch()->author()->str() : "";
  auto s = updates_.find(step);
  if (s == updates_.end() || !s->second.count(author) || !s->second.at(author).complete) {
    spdlog::debug("peer {}: {} asked for {}'s update of step {}, which is not held", self_.name, from, author, step);
    return;
  }
  SendUpdate(from, step, author, s->second.at(author));
}

void Peer::HandleState(const std::string& from, const wire::Envelope* env) {
  if (!syncing_ || from != sync_from_) return;
  const wire::State* s = env->message_as_State();
  if (!state_assembler_) state_assembler_ = std::make_unique<protocol::ChunkAssembler>(4 * n_ * sizeof(float) + (1u << 20));
  Status st = state_assembler_->Add(s->payload());
  sync_progress_ = Clock::now();
  if (!st.ok()) {
    state_assembler_.reset();
    return Reject(from, ErrorCode::MalformedFrame, st.message());
  }
  if (!state_assembler_->complete()) return;
  std::vector<uint8_t> bytes = state_assembler_->Take();
  state_assembler_.reset();
  const std::string want_state = s->state_hash() ? s->state_hash()->str() : "";
  const std::string want_model = s->model_hash() ? s->model_hash()->str() : "";
  auto bad = [&](const std::string& why) {
    Reject(from, ErrorCode::ShapeMismatch, why);
    sync_started_ = Clock::now() - milliseconds(10 * swarm_info_.step_timeout_ms);  // retry elsewhere now
  };
  if (crypto::HashHex(bytes) != want_state) return bad("state does not match its hash");
  if (bytes.size() % sizeof(float) != 0 || bytes.size() < n_ * sizeof(float)) return bad("state has the wrong size");
  std::vector<float> state(bytes.size() / sizeof(float));
  std::memcpy(state.data(), bytes.data(), bytes.size());
  std::vector<float> model(state.begin(), state.begin() + static_cast<ptrdiff_t>(n_));
  for (float x : model)
    if (!std::isfinite(x)) return bad("state holds a non-finite parameter");
  if (crypto::ModelHash(model) != want_model) return bad("state's model does not match its hash");
  if (shared_opt_) {
    st = shared_opt_->LoadState(std::span<const float>(state).subspan(n_));
    if (!st.ok()) return bad(st.message());
  } else if (state.size() != n_) {
    return bad("state has the wrong size");
  }
  w_ = std::move(model);
  hash_ = want_model;
  committed_ = env->round();
  hash_log_[committed_] = hash_;
  for (auto it = updates_.begin(); it != updates_.end();) it = it->first <= committed_ ? updates_.erase(it) : std::next(it);
  for (auto it = commits_.begin(); it != commits_.end();) it = it->first <= committed_ ? commits_.erase(it) : std::next(it);
  sent_step_ = 0;
  syncing_ = false;
  if (committed_ > 0) started_ = true;
  ++resyncs_;
  last_commit_time_ = Clock::now();
  spdlog::info("peer {}: replica loaded from {} at step {} (model {})", self_.name, from, committed_, hash_.substr(0, 16));
}

// ---- membership ----------------------------------------------------------------------------

std::vector<std::string> Peer::LiveNames() const {
  std::vector<std::string> names{self_.name};
  for (const auto& [name, m] : members_)
    if (m.introduced) names.push_back(name);
  std::sort(names.begin(), names.end());
  return names;
}

void Peer::ExpireMembers() {
  const std::string leader = Leader();
  std::vector<std::string> gone;
  for (const auto& [name, m] : members_)
    if (MillisSince(m.last_heard) > static_cast<int64_t>(swarm_info_.heartbeat_timeout_ms)) gone.push_back(name);
  for (const auto& name : gone) {
    spdlog::warn("peer {}: member {} silent for over {} ms; dropped", self_.name, name, swarm_info_.heartbeat_timeout_ms);
    Member& m = members_.at(name);
    if (m.introduced && departed_.size() < 64) {
      m.last_heard = Clock::now();  // now: when it departed
      departed_[name] = std::move(m);
    }
    members_.erase(name);
  }
  for (auto d = departed_.begin(); d != departed_.end();)
    d = MillisSince(d->second.last_heard) > kDepartedMemoryMs ? departed_.erase(d) : std::next(d);
  // A new leader re-announces its last commit, for members the old one may have missed.
  if (!gone.empty() && Leader() != leader && Leader() == self_.name && committed_ > 0 && !commit_log_.empty()) {
    spdlog::info("peer {}: now the step leader (after {})", self_.name, leader);
    const auto& [step, authors] = commit_log_.back();
    std::vector<std::string> hashes;
    auto s = updates_.find(step);
    bool have_all = s != updates_.end();
    for (const auto& a : authors) {
      if (!have_all || !s->second.count(a)) {
        have_all = false;
        break;
      }
      hashes.push_back(s->second.at(a).payload_hash);
    }
    if (have_all)
      Broadcast([&](Member& m) {
        protocol::Header h = Header(m);
        h.round = step;
        return protocol::EncodeCommit(h, authors, hashes, hash_);
      });
  }
}

// A member dropped for silence is heard again on the route its Join came by (and, with CURVE,
// with the same key): the link stalled or the process was paused, but it is the same member.
// It is trusted again at once, with the endpoint and signing key of its earlier Join; if its
// replica moved on meanwhile, the next commit's hash check sends one side to resynchronise.
void Peer::Readmit(const std::string& name) {
  auto node = departed_.extract(name);
  Member& m = members_[name] = std::move(node.mapped());
  m.introduced = true;
  m.last_heard = Clock::now();
  ++readmitted_;
  spdlog::info("peer {}: member {} is back; readmitted", self_.name, name);
}

void Peer::Heartbeat() {
  if (MillisSince(last_heartbeat_) < static_cast<int64_t>(swarm_info_.heartbeat_interval_ms)) return;
  last_heartbeat_ = Clock::now();
  Broadcast([&](Member& m) { return protocol::EncodeHeartbeat(Header(m), false, 0.0f); });
  // Departed members hear from us too, so a member that comes back readmits us as we do it.
  for (auto& [name, m] : departed_)
    if (m.joined_us) (void)m.out->Send(protocol::EncodeHeartbeat(Header(m), false, 0.0f), milliseconds(0));
}

// ---- steps ---------------------------------------------------------------------------------

// This peer's contribution to `step`: a gradient (or DeMo components) at the replica, DiLoCo's
// pseudo-gradient after H inner steps, or (gossip) its model after a local step.
void Peer::LocalUpdate(uint64_t step) {
  const auto started = Clock::now();
  const TaskConfig& t = swarm_info_.task;
  const int64_t batch = t.batch_size;
  auto minibatch = [&](double* loss) {
    if (order_pos_ >= order_.size()) {
      Rng rng(t.seed ^ kShuffleTag, (epoch_++ << 32) | o_.data.partition_index);
      rng.Shuffle(std::span<int64_t>(order_));
      order_pos_ = 0;
    }
    const int rows = static_cast<int>(std::min<size_t>(static_cast<size_t>(batch), order_.size() - order_pos_));
    std::vector<float> hx(static_cast<size_t>(rows) * local_.dim);
    std::vector<int32_t> hy(static_cast<size_t>(rows));
    for (int r = 0; r < rows; ++r) {
      const int64_t i = order_[order_pos_ + static_cast<size_t>(r)];
      std::copy_n(local_.x.data() + i * local_.dim, local_.dim, hx.data() + static_cast<int64_t>(r) * local_.dim);
      hy[static_cast<size_t>(r)] = local_.y[static_cast<size_t>(i)];
    }
    order_pos_ += static_cast<size_t>(rows);
    x_dev_.Upload(hx.data(), hx.size());
    y_dev_.Upload(hy.data(), hy.size());
    const double sum =
        model_->ForwardBackward(w_dev_.get(), nn::Batch::Features(x_dev_.get(), y_dev_.get(), rows), g_dev_.get(),
                                /*loss_scale=*/1.0f).loss_sum;
    *loss = sum / rows;
    return rows;
  };

  Update u;
  u.base_hash = hash_;
  std::vector<float> vec(n_);
  w_dev_.Upload(w_.data(), n_);
  double loss = 0.0;
  const std::string& mode = swarm_info_.mode;
  if (mode == "allgather") {
    u.num_examples = static_cast<uint64_t>(minibatch(&loss));
    if (demo_) {
      // DeMo: the components extracted from this peer's own momentum travel; the local step
      // the optimizer would take is thrown away (the replicas move by the shared sign step).
      demo_->Step(w_dev_.get(), g_dev_.get());
      const auto q = demo_->last_extracted();
      std::copy(q.begin(), q.end(), vec.begin());
    } else {
      g_dev_.Download(vec.data(), n_);
    }
  } else if (mode == "diloco") {
    const uint32_t inner = static_cast<uint32_t>(swarm_info_.Param("diloco_inner_steps", 100));
    double total = 0.0;
    uint64_t examples = 0;
    for (uint32_t i = 0; i < inner; ++i) {
      double l = 0.0;
      examples += static_cast<uint64_t>(minibatch(&l));
      total += l;
      local_opt_->Step(w_dev_.get(), g_dev_.get());
    }
    loss = inner ? total / inner : 0.0;
    u.num_examples = std::max<uint64_t>(examples, 1);
    w_dev_.Download(vec.data(), n_);
    for (size_t i = 0; i < n_; ++i) vec[i] = w_[i] - vec[i];  // the pseudo-gradient, w_global - w_local
  } else {  // gossip
    u.num_examples = static_cast<uint64_t>(minibatch(&loss));
    local_opt_->Step(w_dev_.get(), g_dev_.get());
    w_dev_.Download(w_.data(), n_);
    vec = w_;
    u.base_hash = hash_ = crypto::ModelHash(w_);
  }
  u.loss = loss;
  auto payload = codec_->Encode(vec, codec::MakeRoundContext(swarm_info_.task.seed, step, codec::NameSeed(self_.name)));
  if (!payload.ok()) {
    spdlog::error("peer {}: step {}: encoding the update failed: {}", self_.name, step, payload.status().message());
    return;
  }
  u.payload = std::move(*payload);
  const auto digest = crypto::Hash256(u.payload);
  u.payload_hash = crypto::ToHex(digest);
  u.signature = crypto::Sign(protocol::SignedUpdateBytes(swarm_, step, self_.name, u.base_hash, u.num_examples, digest),
                             keys_.sign_secret);
  u.complete = true;
  if (mode == "gossip") {
    for (const auto& to : GossipTargets(self_.name, step, LiveNames())) SendUpdate(to, step, self_.name, u);
  } else {
    for (const auto& [name, m] : members_)
      if (m.introduced) SendUpdate(name, step, self_.name, u);
  }
  updates_[step][self_.name] = std::move(u);
  sent_step_ = step;
  step_started_ = Clock::now();
  compute_seconds_ += std::chrono::duration<double>(step_started_ - started).count();
}

// The leader commits the step once every live member's update is in, or at the deadline.
void Peer::MaybeCommit() {
  const uint64_t step = committed_ + 1;
  if (sent_step_ != step || Leader() != self_.name) return;
  auto& got = updates_[step];
  bool all = true;
  for (const auto& name : LiveNames())
    if (!got.count(name) || !got.at(name).complete) all = false;
  if (!all && MillisSince(step_started_) < static_cast<int64_t>(swarm_info_.step_timeout_ms)) return;
  std::vector<std::string> authors;
  for (const auto& [name, u] : got)
    if (u.complete && u.base_hash == hash_) authors.push_back(name);  // updates from another replica do not count
  Status st = Apply(step, authors);
  if (!st.ok()) {
    spdlog::error("peer {}: step {}: {}", self_.name, step, st.message());
    return;
  }
  std::vector<std::string> hashes;
  for (const auto& a : authors) hashes.push_back(got.at(a).payload_hash);
  Broadcast([&](Member& m) {
    protocol::Header h = Header(m);
    h.round = step;
    return protocol::EncodeCommit(h, authors, hashes, hash_);
  });
}

void Peer::TryApplyCommits() {
  for (auto it = commits_.find(committed_ + 1); it != commits_.end(); it = commits_.find(committed_ + 1)) {
    const uint64_t step = it->first;
    PendingCommit& c = it->second;
    std::vector<std::string> authors;
    bool missing = false;
    for (const auto& [author, payload_hash] : c.entries) {
      authors.push_back(author);
      auto& by_author = updates_[step];
      auto u = by_author.find(author);
      if (u != by_author.end() && u->second.complete && u->second.payload_hash == payload_hash) continue;
      missing = true;
      if (u != by_author.end() && u->second.complete) by_author.erase(u);  // a different update: not the committed one
      if (!fetching_.count({step, author}) && members_.count(c.from)) {
        fetching_.insert({step, author});
        protocol::Header h = Header(members_.at(c.from));
        h.round = step;
        SendTo(c.from, protocol::EncodeUpdateFetch(h, author));
      }
    }
    if (missing) {
      if (MillisSince(c.since) > static_cast<int64_t>(swarm_info_.step_timeout_ms)) Resync(c.from, "committed updates are unavailable");
      return;
    }
    const std::string from = c.from, want = c.model_hash;
    commits_.erase(it);
    Status st = Apply(step, authors);
    if (!st.ok() || hash_ != want) {
      ++divergences_;
      Resync(from, st.ok() ? "model hash " + hash_.substr(0, 16) + " after step " + std::to_string(step) + " differs from " +
                                 from + "'s " + want.substr(0, 16)
                           : st.message());
      return;
    }
  }
  // Commits for later steps but not the next one: this replica fell behind.
  if (!commits_.empty() && commits_.begin()->first > committed_ + 1 &&
      MillisSince(commits_.begin()->second.since) > static_cast<int64_t>(swarm_info_.step_timeout_ms))
    Resync(commits_.begin()->second.from, "missed the commit of step " + std::to_string(committed_ + 1));
}

// Applies `authors`' updates of `step` to the replica: the example-weighted mean of the
// decoded updates from the same exact, order-independent sum the aggregator uses, then the
// mode's shared step (DeMo: the exact sign of the sum).
Status Peer::Apply(uint64_t step, const std::vector<std::string>& authors) {
  const auto started = Clock::now();
  auto& got = updates_[step];
  aggregator::ExactSum sum(n_);
  std::vector<float> decoded(n_);
  double loss = 0.0;
  const auto ctx = codec::MakeRoundContext(swarm_info_.task.seed, step, 0);
  for (const auto& a : authors) {
    const Update& u = got.at(a);
    SHOAL_RETURN_IF_ERROR(codec_->Decode(u.payload, ctx, decoded).WithContext("decoding " + a + "'s update"));
    SHOAL_RETURN_IF_ERROR(sum.Add(decoded, u.num_examples).WithContext(a + "'s update"));
    loss += static_cast<double>(u.num_examples) * u.loss;
  }
  const double weight = static_cast<double>(sum.total_weight());
  if (sum.count() > 0) {
    if (demo_) {
      const float lr = swarm_info_.task.optimizer.learning_rate;
      for (size_t i = 0; i < n_; ++i) w_[i] -= lr * static_cast<float>(sum.Sign(i));
    } else {
      std::vector<float> mean(n_);
      sum.Mean(1.0, mean);
      shared_opt_->Step(w_.data(), mean.data());
    }
  }
  bool finite = true;
  for (float x : w_) finite = finite && std::isfinite(x);
  if (!finite) return Status::Internal("step " + std::to_string(step) + " made the model non-finite");
  hash_ = crypto::ModelHash(w_);
  committed_ = step;
  hash_log_[step] = hash_;
  while (hash_log_.size() > kLogSteps) hash_log_.erase(hash_log_.begin());
  commit_log_.emplace_back(step, authors);
  while (commit_log_.size() > kLogSteps) commit_log_.pop_front();
  while (!updates_.empty() && updates_.begin()->first + kLogSteps < step) updates_.erase(updates_.begin());
  last_commit_time_ = Clock::now();
  apply_seconds_ += std::chrono::duration<double>(last_commit_time_ - started).count();
  FinishStep(step, authors.size(), weight > 0 ? loss / weight : 0.0, -1.0);
  return Status::Ok();
}

// Each peer sends its model to k members drawn from the step's shared seed; everyone can
// compute everyone's draw, so each peer knows whom to wait for.
std::vector<std::string> Peer::GossipTargets(const std::string& who, uint64_t step,
                                             const std::vector<std::string>& live) const {
  std::vector<std::string> others;
  for (const auto& n : live)
    if (n != who) others.push_back(n);
  Rng rng(swarm_info_.task.seed ^ kGossipTag ^ codec::NameSeed(who), step);
  rng.Shuffle(std::span<std::string>(others));
  others.resize(std::min<size_t>(others.size(), static_cast<size_t>(swarm_info_.Param("gossip_k", 2))));
  return others;
}

void Peer::GossipStep() {
  const uint64_t step = committed_ + 1;
  if (sent_step_ != step) LocalUpdate(step);
  if (sent_step_ != step) return;
  const auto live = LiveNames();
  std::vector<std::string> expected;
  for (const auto& n : live)
    if (n != self_.name) {
      const auto t = GossipTargets(n, step, live);
      if (std::find(t.begin(), t.end(), self_.name) != t.end()) expected.push_back(n);
    }
  auto& got = updates_[step];
  size_t have = 0;
  for (const auto& n : expected) have += got.count(n) && got.at(n).complete;
  if (have < expected.size() && MillisSince(step_started_) < static_cast<int64_t>(swarm_info_.step_timeout_ms)) return;
  // w = mean(own model, received models); spread = RMS distance to the received models.
  aggregator::ExactSum sum(n_);
  if (Status own = sum.Add(w_, 1); !own.ok()) {  // cannot happen: every commit checks finiteness
    spdlog::error("step {}: own replica is not averageable: {}", step, own.message());
    return;
  }
  std::vector<float> decoded(n_);
  double spread = 0.0;
  const auto ctx = codec::MakeRoundContext(swarm_info_.task.seed, step, 0);
  for (auto& [name, u] : got) {
    if (name == self_.name || !u.complete) continue;
    if (!codec_->Decode(u.payload, ctx, decoded).ok() || !sum.Add(decoded, 1).ok()) continue;
    double d2 = 0.0;
    for (size_t i = 0; i < n_; ++i)
      d2 += (static_cast<double>(decoded[i]) - w_[i]) * (static_cast<double>(decoded[i]) - w_[i]);
    spread += std::sqrt(d2 / static_cast<double>(n_));
  }
  const size_t count = sum.count();
  const double loss = got.count(self_.name) ? got.at(self_.name).loss : 0.0;
  sum.Mean(1.0, w_);
  hash_ = crypto::ModelHash(w_);
  committed_ = step;
  while (!updates_.empty() && updates_.begin()->first <= step) updates_.erase(updates_.begin());
  FinishStep(step, count, loss, count > 1 ? spread / static_cast<double>(count - 1) : 0.0);
}

void Peer::Resync(const std::string& from, const std::string& why) {
  std::string source = from;
  if (!members_.count(source)) {
    source.clear();
    for (const auto& [name, m] : members_)
      if (m.introduced || source.empty()) source = name;
  }
  if (source.empty()) return;
  spdlog::warn("peer {}: resynchronising from {}: {}", self_.name, source, why);
  if (!syncing_) sync_progress_ = Clock::now();
  syncing_ = true;
  sync_from_ = source;
  sync_reason_ = why;
  sync_started_ = Clock::now();
  state_requested_ = false;
  state_assembler_.reset();
  RequestState();
}

void Peer::RequestState() {
  auto it = members_.find(sync_from_);
  if (state_requested_ || it == members_.end() || !it->second.joined_us) return;  // retried from the loop
  SendTo(sync_from_, protocol::EncodeStateRequest(Header(it->second), sync_reason_));
  state_requested_ = true;
  sync_started_ = Clock::now();
}

std::vector<float> Peer::StatePayload() const {
  std::vector<float> out(w_);
  if (shared_opt_) {
    const auto s = shared_opt_->SaveState();
    out.insert(out.end(), s.begin(), s.end());
  }
  return out;
}

void Peer::Evaluate(nlohmann::json& line) {
  const EvalResult r = nn::Evaluate(*model_, w_, test_);
  line["test_accuracy"] = r.accuracy;
  line["test_loss"] = r.loss;
}

void Peer::FinishStep(uint64_t step, size_t included, double loss, double spread) {
  if (!metrics_.is_open()) return;
  const uint64_t received = server_->traffic().bytes_received;
  const size_t members = LiveNames().size();
  nlohmann::json line = {
      {"step", step},
      {"name", self_.name},
      {"mode", swarm_info_.mode},
      {"members", members},
      {"included", included},
      {"leader", swarm_info_.mode == "gossip" ? "" : Leader()},
      {"loss", loss},
      {"bytes_sent", bytes_sent_ - bytes_sent_at_step_},
      {"bytes_received", received - bytes_received_at_step_},
      {"bytes_dense_equiv", n_ * sizeof(float) * (members > 1 ? members - 1 : 0)},
      {"model_hash", hash_},
      {"seconds", std::chrono::duration<double>(Clock::now() - step_clock_).count()},
      {"compute_seconds", compute_seconds_},
      {"apply_seconds", apply_seconds_},
      {"resyncs", resyncs_},
      {"divergences", divergences_},
      {"readmitted", readmitted_},
      {"frames_rejected", frames_rejected_},
      {"rejected_by_code", rejected_by_code_},
  };
  if (spread >= 0) line["spread"] = spread;
  const uint64_t every = static_cast<uint64_t>(swarm_info_.Param("eval_every", 10));
  const bool last = swarm_info_.steps && step >= swarm_info_.steps;
  if ((every && step % every == 0) || last) Evaluate(line);
  metrics_ << line.dump() << '\n';
  metrics_.flush();
  bytes_sent_at_step_ = bytes_sent_;
  bytes_received_at_step_ = received;
  step_clock_ = Clock::now();
  compute_seconds_ = apply_seconds_ = 0;
}

// ---- the loop ------------------------------------------------------------------------------

Status Peer::Run(const std::atomic<bool>& stop) {
  SHOAL_RETURN_IF_ERROR(InitIdentity());
  if (!o_.metrics_out.empty()) {
    metrics_.open(o_.metrics_out, std::ios::trunc);
    if (!metrics_) return Status::IoError("cannot open --metrics-out " + o_.metrics_out);
  }
  SHOAL_RETURN_IF_ERROR(InitTransport());
  std::vector<transport::Listener::Inbound> early;
  SHOAL_RETURN_IF_ERROR(Join(stop, &early));
  for (auto& in : early) Handle(in);
  const uint64_t steps = swarm_info_.steps;
  const size_t min_peers = static_cast<size_t>(swarm_info_.Param("min_peers", 1));
  last_commit_time_ = Clock::now();
  while (!stop.load()) {
    SHOAL_ASSIGN_OR_RETURN(auto in, server_->Recv(milliseconds(1)));
    for (int i = 0; in && i < 256; ++i) {
      Handle(*in);
      SHOAL_ASSIGN_OR_RETURN(in, server_->Recv(milliseconds(0)));
    }
    for (auto* group : {&members_, &departed_})
      for (auto& [name, m] : *group) {
        (void)m.out->Recv(milliseconds(0));  // DEALER bookkeeping (handshakes)
        // ZeroMQ reconnected (the member restarted, or a stalled link timed out): the member
        // sees a new connection, so introduce ourselves on it again before anything else.
        if (m.joined_us && m.out->handshakes().succeeded > m.join_handshakes) {
          spdlog::info("peer {}: new connection to {}; sending Join again", self_.name, name);
          m.joined_us = false;
        }
        IntroduceTo(m);
      }
    ExpireMembers();
    Heartbeat();
    if (syncing_) {
      // Every member asked in turn, and none sent the model (all are syncing themselves, or
      // gone): this peer cannot take part; say so instead of waiting forever.
      const uint32_t give_up_ms = std::max(o_.join_timeout_ms, 4 * swarm_info_.step_timeout_ms);
      if (MillisSince(sync_progress_) > static_cast<int64_t>(give_up_ms))
        return Status::Unavailable("no member sent this peer the model (" + sync_reason_ + ") within " +
                                   std::to_string(give_up_ms / 1000) + " s; are the other peers still running?");
      RequestState();
      if (MillisSince(sync_started_) > 2 * static_cast<int64_t>(swarm_info_.step_timeout_ms)) {
        // No answer (the member may be syncing itself, or gone): ask the next member in order.
        std::string first, next;
        for (const auto& [name, m] : members_) {  // sorted by name
          if (!m.introduced) continue;
          if (first.empty()) first = name;
          if (next.empty() && name > sync_from_) next = name;
        }
        Resync(!next.empty() ? next : (!first.empty() ? first : sync_from_), "no state from " + sync_from_);
      }
      continue;
    }
    if (steps && committed_ >= steps) break;
    if (!started_ && LiveNames().size() >= min_peers) started_ = true;
    if (!started_) continue;
    if (swarm_info_.mode == "gossip") {
      GossipStep();
      continue;
    }
    TryApplyCommits();
    if (syncing_ || (steps && committed_ >= steps)) continue;
    if (sent_step_ != committed_ + 1) LocalUpdate(committed_ + 1);
    MaybeCommit();
  }
  // Leave: tell every member, give the frames a moment to go.
  Broadcast([&](Member& m) { return protocol::EncodeBye(Header(m), stop.load() ? "stopped" : "finished"); });
  const auto until = Clock::now() + milliseconds(200);
  while (Clock::now() < until) {
    auto in = server_->Recv(milliseconds(10));
    if (in.ok() && *in) Handle(**in);
  }
  spdlog::info("peer {}: leaving after step {} ({} resyncs, {} frames rejected)", self_.name, committed_, resyncs_,
               frames_rejected_);
  return Status::Ok();
}

}  // namespace

Status RunPeer(const PeerOptions& options, const std::atomic<bool>& stop) {
  Peer peer(options);
  return peer.Run(stop);
}

}  // namespace shoal
