// The serverless peer (shoal/peer.h; protocol in docs/PROTOCOL.md "Peers"). One thread, one
// event loop: a ROUTER receives from every member, a DEALER per member sends to it (CURVE,
// pinned to the member's key). Local work runs inline through the Trainer: steps are short,
// and heartbeats are only needed every heartbeat interval.
//
// The class is split by concept (gloo style, one concept per file):
//   peer.cc         setup (identity, transport), the event loop, RunPeer
//   membership.cc   joining the swarm, members' Joins, heartbeats, expiry and readmission
//   frames.cc       verifying and dispatching frames, sending, updates as they arrive
//   training.cc     the trainer and held-out evaluation, this peer's update of a step, metrics
//   commit_log.cc   the leader's commit, applying commits, the locally mixed step
//   state_sync.cc   resynchronising the replica from a member (State, StateRequest)
//   ring.cc         the step of the ring modes: a ring all-reduce (ring_allreduce.h) of the
//                   members' updates instead of the commit log's all-gather
//   exchange.h      what differs between modes; exchanges/: one file per mode
#pragma once

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "codec/codec.h"
#include "core/rate_limited_log.h"
#include "crypto/crypto.h"
#include "crypto/keys.h"
#include "nn/model.h"
#include "protocol/messages.h"
#include "runtime/peer/exchange.h"
#include "runtime/peer/ring_allreduce.h"
#include "runtime/peer/ring_inbox.h"
#include "runtime/recorder.h"
#include "runtime/transform_sum.h"
#include "shoal/data.h"
#include "shoal/peer.h"
#include "shoal/trainer.h"
#include "transport/zmq/zap.h"
#include "transport/zmq/zmq_channel.h"

namespace shoal::peer {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using protocol::ErrorCode;

constexpr size_t kLogSteps = 16;               // committed steps whose updates are kept for fetches
constexpr const char* kFinished = "finished";  // the Bye of a member that did the run's last step
constexpr int64_t kDepartedMemoryMs = 120000;  // how long a member dropped for silence may come back

// ZMTP heartbeats (ZeroMQ drops a connection silent for 3 intervals) no stricter than the
// swarm's own member timeout: a saturated slow uplink can hold a PONG back for seconds, and
// a dropped connection costs a reconnect and a re-sent Join.
inline int ZmtpHeartbeatMs(uint32_t member_timeout_ms) {
  return static_cast<int>(std::clamp<uint32_t>(member_timeout_ms / 3, 2000, 60000));
}

inline int64_t MillisSince(Clock::time_point t) {
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
  uint64_t finished_after = 0;  // it said it finished the run at this step (0: it has not)
};


// This peer's ring of the current step: its members in order, and the reduction so far.
struct RingRun {
  uint64_t step = 0;
  std::string hash;  // RingHash(members)
  uint32_t attempt = 0;
  std::vector<std::string> members;
  std::string prev, next;
  std::unique_ptr<RingAllReduce> reduce;
  Clock::time_point progress;  // started, or last received a chunk of this ring
  std::deque<RingHop> outbox;  // pieces for `next` not sent yet (its connection was not up)
  size_t next_chunk = 0;       // of outbox.front()
  crypto::Signature out_signature{};  // outbox.front()'s, made with its first chunk
};

// This peer's update of a step in the ring modes: weight x delta, kept across ring restarts.
struct Contribution {
  uint64_t step = 0;
  std::vector<float> values;
  double weight = 0.0, loss = 0.0;  // loss: weight x training loss
};

// A step a follower applied ahead of its commit (overlap): what it applied, and the replica
// before it, to roll back to when the commit differs.
struct Speculation {
  uint64_t step = 0;
  std::vector<std::pair<std::string, std::string>> entries;  // author, payload hash, as a commit lists them
  std::vector<float> w_before;
  std::vector<float> state_before;  // the exchange's (SaveState)
  std::string hash_before;
  Clock::time_point since;
};

struct PendingCommit {
  std::string from;
  std::vector<std::pair<std::string, std::string>> entries;  // author, payload hash
  std::string model_hash;
  Clock::time_point since;
};

class Peer {
 public:
  // `trainer`: the application's, or null for the built-in trainer on options.data.
  Peer(PeerOptions o, std::unique_ptr<Trainer> trainer) : o_(std::move(o)), trainer_(std::move(trainer)) {}
  Status Run(const std::atomic<bool>& stop);

 private:
  // Setup (peer.cc, training.cc).
  Status InitIdentity();
  Status InitTransport();
  Status InitTask();     // the exchange, the trainer, the initial replica
  Status InitTrainer(std::vector<float>* init);  // the trainer, held-out set and initial replica

  // Membership (membership.cc).
  Status Join(const std::atomic<bool>& stop, std::vector<transport::Listener::Inbound>* early);
  Status Found();  // this peer founds the swarm
  // Set by Found: this founder fits the feature standardization the swarm's task carries.
  bool fit_standardization_ = false;
  // A peer listed in its own --peers founds the swarm when no other listed peer answers within
  // (its place + 1) times this (Join).
  static constexpr std::chrono::milliseconds kFounderWait{2000};
  Status ConnectMember(const protocol::PeerInfo& info);
  // Sends our Join on the member's new connection once it is up (ZMQ_IMMEDIATE drops frames
  // before that); nothing else goes to a member before it. The member answers with its own
  // Join, which is what we trust.
  void IntroduceTo(Member& m);
  void ServiceConnections();
  void HandleJoin(const transport::Listener::Inbound& in, const protocol::Header& h, const protocol::Join& j);
  void ExpireMembers();
  void Readmit(const std::string& name);
  void Heartbeat();
  std::vector<std::string> LiveNames() const;  // introduced members and self, sorted
  std::string Leader() const { return LiveNames().front(); }
  protocol::SwarmInfo Swarm() const;

  // Frames (frames.cc).
  void Handle(transport::Listener::Inbound& in);
  // `step`: the frame's round.
  void HandleUpdate(const std::string& from, uint64_t step, const protocol::PeerUpdate& u);
  void HandleFetch(const std::string& from, uint64_t step, const protocol::UpdateFetch& f);
  void Reject(const std::string& to, ErrorCode code, const std::string& reason);
  protocol::Header Header(Member& m) { return {swarm_, committed_ + 1, 0, ++m.out_sequence}; }
  // False when the frame could not go (no connection yet, or its queue is full).
  bool SendTo(const std::string& name, const protocol::Frame& frame);
  void Broadcast(const std::function<protocol::Frame(Member&)>& make);
  void SendUpdate(const std::string& to, uint64_t step, const std::string& author, const Update& u);

  // Steps (training.cc, commit_log.cc).
  // This peer's updates due now: each step not sent yet whose update starts from the current
  // replica (the next step; with overlap also the one after it, PeerOptions::overlap).
  void LocalUpdates();
  void LocalUpdate(uint64_t step);
  // The model hash the updates of `step` start from: the replica after step-1, or with overlap
  // after step-2 (the initial replica for steps 1 and 2); empty when this replica never had it.
  std::string BaseHash(uint64_t step) const;
  std::vector<std::string> Eligible(uint64_t step, bool* all);
  bool PastTheEnd(uint64_t step) const { return swarm_info_.steps && step > swarm_info_.steps; }
  void MaybeCommit();
  // Overlap: followers apply the next step ahead of its commit (commit_log.cc).
  void Speculate();
  void RollBack(Speculation s);
  void SettleSpeculation(const std::string& from, protocol::Commit c);
  void CheckSpeculation();
  void BroadcastCommit(uint64_t step, const std::vector<std::string>& authors);
  void HandleCommit(const std::string& from, uint64_t step, protocol::Commit c);
  void TryApplyCommits();
  Status Apply(uint64_t step, const std::vector<std::string>& authors);
  Status CommitStep(uint64_t step, const std::optional<std::vector<float>>& result, Clock::time_point started);
  void MixStep();
  void FinishStep(uint64_t step, size_t included, double loss, double spread);
  void Evaluate(PeerStep* step);
  nlohmann::json StepExtras(const PeerStep& s, double spread) const;  // what the metrics line adds to the PeerStep

  // Ring all-reduce steps (ring.cc).
  void RingStep();
  void StartRing(uint64_t step, const std::vector<std::string>& live, const std::string& hash, uint32_t attempt);
  void SendRingHop(RingHop hop);
  void FlushRing();
  void FinishRing();
  // `frame`: the frame `r` came in (a piece in one chunk is kept as a view into it).
  void HandleRingSegment(const std::string& from, uint64_t step, const protocol::RingSegment& r,
                         const transport::Message& frame);
  void PruneRingInbox();
  // The member before this peer on ring `hash` of `step`: known for the ring it runs and the
  // ring of its current view; nullopt for a ring it does not see (yet).
  std::optional<std::string> RingPredecessor(uint64_t step, const std::string& hash) const;
  int64_t RingStallMs() const;

  // State transfer (state_sync.cc).
  void Resync(const std::string& from, const std::string& why);
  void RetrySync();  // asks the next member when the one asked does not answer
  void RequestState();
  void SendState(const std::string& to);
  void HandleState(const std::string& from, uint64_t step, const protocol::State& s);

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

  // Local work and evaluation.
  std::unique_ptr<Trainer> trainer_;       // the application's or the built-in one
  std::unique_ptr<Exchange> exchange_;     // the mode, chosen once at start
  std::unique_ptr<codec::Codec> codec_;
  std::unique_ptr<Backend> eval_backend_;  // built-in trainer only: the held-out evaluation
  std::unique_ptr<nn::Model> eval_model_;  // (nn::Evaluate on the registry's model)
  data::Dataset test_;
  size_t n_ = 0;

  // Replica and steps.
  std::vector<float> w_;
  std::string hash_;
  uint64_t committed_ = 0;
  bool started_ = false;
  uint64_t sent_step_ = 0;  // the latest step our own update is for
  bool overlap_ = false;    // the swarm's "overlap": updates start from the replica after step t-2
  std::optional<Speculation> speculation_;  // the step applied ahead of its commit
  uint64_t failed_speculation_ = 0;         // a step that could not be applied ahead
  Clock::time_point step_started_;
  Clock::time_point last_commit_time_;
  std::map<uint64_t, std::map<std::string, Update>> updates_;  // step -> author -> update
  std::map<uint64_t, PendingCommit> commits_;                  // received, not yet applied
  std::deque<std::pair<uint64_t, std::vector<std::string>>> commit_log_;  // authors of recent commits
  std::set<std::pair<uint64_t, std::string>> fetching_;
  // Ring modes.
  std::unique_ptr<SegmentCodec> ring_codec_;
  std::unique_ptr<RingRun> ring_;
  Contribution own_;
  RingInbox ring_inbox_;  // hops received for this or later rings
  std::unique_ptr<runtime::TransformSum> step_mean_;  // Apply's sum in the transform domain, reused
  std::map<uint64_t, std::string> hash_log_;  // model hash after recent steps
  const std::atomic<bool>* stop_ = nullptr;   // the trainer's cancellation flag
  Status train_error_;                        // the trainer failed: the peer stops with this

  // Resync.
  bool syncing_ = false;
  bool state_requested_ = false;  // the StateRequest to sync_from_ has gone out
  std::string sync_reason_;
  std::string sync_from_;
  Clock::time_point sync_started_;
  Clock::time_point sync_progress_;  // the resync began, or its last state chunk arrived
  std::unique_ptr<protocol::ChunkAssembler> state_assembler_;

  // Metrics.
  std::unique_ptr<runtime::Recorder> recorder_;  // the --metrics-out lines
  uint64_t bytes_sent_ = 0, bytes_sent_at_step_ = 0, bytes_received_at_step_ = 0;
  Clock::time_point step_clock_ = Clock::now();
  uint64_t frames_rejected_ = 0, resyncs_ = 0, divergences_ = 0, readmitted_ = 0, ring_restarts_ = 0;
  uint64_t applied_ahead_ = 0, rollbacks_ = 0;  // overlap: steps applied ahead of their commit, and rolled back
  double compute_seconds_ = 0, apply_seconds_ = 0;  // this step: local work, and decoding + applying
  double ring_seconds_ = 0;          // this step's ring all-reduce, from its first start to done
  Clock::time_point ring_started_;   // the first start of this step's ring
  std::map<std::string, uint64_t> rejected_by_code_;
  Clock::time_point last_heartbeat_;
};

}  // namespace shoal::peer
