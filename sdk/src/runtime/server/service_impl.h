// The aggregator service's event loop and its state (service.h is the public face). Its work
// is split by concept over the files of this folder:
//   service.cc       setup (Init, transport security), the Run loop, Bye at the end
//   dispatch.cc      every inbound frame checked and routed; the per-client outboxes
//   registration.cc  Hello/Welcome, client names and keys, failures, drops, heartbeat expiry
//   rounds.cc        selection, tasks (full / delta / unchanged), resync, closing a round
//   buffered.cc      asynchronous strategies (FedBuff): tasks to idle clients, stale updates
//   ingest.cc        an update's chunks through the ingest stages into the accumulator
//   secagg.cc        a secure-aggregation round's stages, from the keys to the unmasked sum
//   recorder.cc      the round's report: metrics line, console table, checkpoint
//   edge.cc          an edge aggregator's rounds: the parent's task, model and partial sum
#pragma once

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
#include <set>
#include <vector>
#include "aggregate/exact_sum.h"
#include "backend/backend.h"
#include "codec/codec.h"
#include "codec/round_context.h"
#include "core/checkpoint.h"
#include "core/rate_limited_log.h"
#include "core/rng.h"
#include "crypto/crypto.h"
#include "shoal/data.h"
#include "nn/evaluate.h"
#include "nn/model.h"
#include "nn/model_registry.h"
#include "nn/optimizer.h"
#include "crypto/keys.h"
#include "protocol/federated.h"
#include "protocol/messages.h"
#include "privacy/secagg/protocol.h"
#include "runtime/recorder.h"
#include "runtime/secure_sum.h"
#include "runtime/server/edge.h"
#include "runtime/update.h"
#include "transport/zmq/zmq_channel.h"
#include "transport/zmq/zap.h"

namespace shoal::aggregator {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using protocol::Frame;
using protocol::ErrorCode;

inline constexpr const char* kCheckpointFile = "checkpoint.shoal";

inline int64_t MillisSince(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

class Service::Impl {
 public:
  explicit Impl(const AggregatorOptions& o) : o_(o) {}

  // Binds `listener`, or a ZeroMQ listener on options.listen when it is null.
  Status Init(std::unique_ptr<transport::Listener> listener);
  Status Run(const std::atomic<bool>& stop, std::atomic<bool>* reload, const std::atomic<bool>* finish = nullptr);
  std::optional<Status> Turn(const std::atomic<bool>& stop, std::atomic<bool>* reload, std::chrono::milliseconds max_wait,
                             const std::atomic<bool>* finish = nullptr);
  void set_evaluator(std::shared_ptr<Evaluator> evaluator) { evaluator_ = std::move(evaluator); }
  std::string endpoint() const { return server_->endpoint(); }
  uint64_t rounds_completed() const { return last_completed_; }
  const std::string& model_hash() const { return global_hash_; }

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
    uint64_t task_round = 0;   // the round of its latest task
    bool training = false;     // that task's update is still expected (asynchronous strategies)
    uint64_t bytes_up = 0, bytes_down = 0;  // frames from and to it, since it registered
    uint64_t rounds_reported = 0;           // its updates that went into a round
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
    uint64_t partial_updates = 0;  // an edge aggregator's partial sum: the clients' updates in it
    uint64_t task_round = 0;       // the round of the task it answers (earlier than this one under FedBuff)
  };

  struct RoundState {
    uint64_t number = 0;
    bool open = false;
    Clock::time_point started;
    Clock::time_point deadline;
    uint32_t deadline_ms = 0;     // deadline - started, as the tasks announce it
    std::vector<uint32_t> selected;
    std::map<uint32_t, protocol::ChunkAssembler> assembling;
    // From the first chunk of each update in transfer: its weight, report and encoding.
    struct Incoming {
      uint64_t num_examples = 0;
      protocol::UpdateReport report;
      protocol::PayloadEncoding encoding = protocol::PayloadEncoding::Codec;
    };
    std::map<uint32_t, Incoming> incoming;
    uint64_t slow_codec_updates = 0;  // taken in --codec-slow
    // Reported; their updates are in `accumulator`. One per client in synchronous rounds; an
    // asynchronous commit may hold two of a client, trained from different model versions.
    std::multimap<uint32_t, Reported> results;
    std::unique_ptr<Accumulator> accumulator;      // this round's aggregate, fed on arrival
    std::map<uint32_t, ClientFailure> failures;
    transport::Traffic traffic_at_start;
    double decode_seconds = 0.0;  // time spent decoding this round's updates
    // Secure aggregation (secagg.cc): the round's state machine and where it stands.
    struct SecAgg {
      enum class Stage { kKeys, kShares, kMasked, kCheck, kUnmask, kDone };
      // User-provided: clang 14 decides is_constructible for std::optional<SecAgg> below before
      // it has read the default member initializers, and then refuses emplace().
      SecAgg() {}
      std::unique_ptr<privacy::secagg::Server> server;
      Stage stage = Stage::kKeys;
      Clock::time_point stage_deadline;
      std::set<uint32_t> waiting;             // client ids the stage waits for
      runtime::SecureSumPlan plan;            // coordinates from the start, encoding from Setup
      std::optional<privacy::secagg::Result> result;
      std::string failure;                    // why the round yields no sum
    };
    std::optional<SecAgg> secagg;
  };

 public:
  using SecAggStage = RoundState::SecAgg::Stage;  // for secagg.cc's helpers

 private:

  // Transport security.
  Status InitSecurity(transport::SocketOptions& so);
  void ReloadAllowList();
  bool KeyAllowed(const std::string& identity) const { return !allow_list_ || allow_list_->Contains(identity); }

  // Frame handling.
  void Handle(transport::Listener::Inbound& in);
  void HandleHello(const transport::Listener::Inbound& in, const protocol::Header& h, const protocol::Hello& hello);
  protocol::WelcomeInfo MakeWelcome(uint32_t id) const;
  void HandleUpdate(ClientState& c, const protocol::Header& h, protocol::UpdateChunk& u);
  // An edge aggregator's assembled partial sum into the round's accumulator (ingest.cc); the
  // refusal, or nullopt and *updates = the client updates it sums.
  std::optional<runtime::UpdatePipeline::Failure> AddPartialSum(const runtime::Update& update, uint64_t* updates);
  void HandleResync(ClientState& c, const protocol::Header& h, const protocol::Resync& r);
  // Secure aggregation (secagg.cc): a stage message from a selected client; the round's
  // stages advanced when complete or past their deadline; the unmasked mean at the close.
  void HandleSecAgg(ClientState& c, const protocol::Header& h, protocol::Message& m);
  void StartSecAgg();
  void AdvanceSecAgg();
  void AbortSecAgg(const std::string& why);
  // Sends `message` to the roster members at `indices`, waits for each, and moves to `next`
  // with a fresh stage deadline.
  void AwaitStage(SecAggStage next, Frame message, std::span<const uint32_t> indices);
  Status AddSecureAggregate(nlohmann::json& line);
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
  // The client `id` on a new connection of its own key (a cut link, or a restarted process):
  // its registration, id and place in the open round move there; the task goes out again.
  void MoveClient(uint32_t id, const transport::Listener::Inbound& in, const protocol::Header& header,
                  const protocol::Hello& hello);
  void ExpireClients();
  // Whether the client holds a task whose update the service still expects.
  bool IsSelected(uint32_t id) const {
    if (async_) {
      auto it = clients_.find(id);
      return it != clients_.end() && it->second.training;
    }
    return round_.open && std::find(round_.selected.begin(), round_.selected.end(), id) != round_.selected.end();
  }
  void FailClient(uint32_t id, const std::string& reason);
  // Whether the open round already has this client's update or failure (synchronous rounds).
  bool Settled(uint32_t id) const { return round_.results.count(id) || round_.failures.count(id); }

  // Rounds.
  // Canonical order (by name, then id), the base of every seeded selection.
  static void SortByName(std::vector<const ClientState*>& clients) {
    std::sort(clients.begin(), clients.end(), [](const ClientState* a, const ClientState* b) {
      return std::tie(a->name, a->id) < std::tie(b->name, b->id);
    });
  }
  bool MaybeStartRound();
  bool RoundResolved() const {
    if (async_) return BufferResolved();
    if (round_.secagg) return round_.secagg->stage == RoundState::SecAgg::Stage::kDone;
    return round_.results.size() + round_.failures.size() >= round_.selected.size();
  }
  // A round's close, in order (rounds.cc): EndRound collects it as a typed value, Commit
  // applies it (the root), Report and LineExtras describe it, the recorder records it.
  struct ClosedRound {
    std::vector<Reported> results;      // sorted by client key
    std::vector<ClientFailure> failures;
    bool updated = false;                // the global model moved
    nlohmann::json secagg_line;          // the secure aggregation's own fields
  };
  Status CloseRound();
  StatusOr<ClosedRound> EndRound();
  Status Commit(ClosedRound& c);
  RoundReport Report(const ClosedRound& c, const Evaluation& eval) const;
  nlohmann::json LineExtras(const ClosedRound& c, const RoundReport& r);
  // The global model's score: the application's evaluator's, or the held-out split's.
  Evaluation EvaluateGlobal();
  // A fresh round `number`; an asynchronous strategy's uploads in flight carry over to it.
  void ResetRound(uint64_t number);

  // An edge aggregator (edge.cc): joins the parent and takes its task into the options (Init,
  // before anything is built from them); takes the parent's model for a round and the
  // delta to relay; sends the round's partial sum up (or says why there is none).
  Status StartEdge();
  Status AdoptParentModel(EdgeOrder& order);
  // `reported`: the round's updates; `train_loss`: their example-weighted mean loss.
  void ReportToParent(size_t reported, double train_loss);

  // Asynchronous strategies (buffered.cc).
  // Gives the current round's task to idle clients that have not trained on this model yet,
  // until ceil(--fraction * registered) clients are training.
  void DispatchIdle();
  // Fails (and so frees) every client whose task is now beyond --max-staleness: its update
  // would be refused, and a client that abandoned its task (its training failed, a transfer
  // broke) would otherwise hold it forever.
  void ExpireStaleTasks();
  // The buffer holds --buffer-size updates (then no further update is read before the commit).
  bool BufferFull() const { return round_.results.size() >= async_->buffer; }
  // The buffer is full, or it holds updates and no client is training towards it.
  bool BufferResolved() const;
  // Clients holding a task whose update is still expected.
  size_t TrainingCount() const;
  // At the round's deadline: commit what is buffered; an empty buffer waits another
  // --round-timeout instead (an empty commit would age every update in flight).
  bool BufferDeadline();
  // Whether an update for task round `round` may be taken from this client; refuses it otherwise.
  bool AdmitBuffered(ClientState& c, uint64_t round, bool first_chunk);
  // An assembled update's staleness, or nullopt (refused as late, counted) when it is beyond
  // --max-staleness or no commit is being filled.
  std::optional<uint64_t> BufferedStaleness(ClientState& c, uint64_t round);
  // on_status: every 250 ms at most, and at once when `now` (a round has just closed).
  void PublishStatus(bool now = false);
  // What the checkpoint holds after the last completed round (state.cc).
  Checkpoint CheckpointState() const;
  void SendByeToAll(const std::string& reason);
  // After a resume with every round done: Bye to whoever registers until `until`.
  std::optional<Status> TellLateClientsTheRunIsOver(Clock::time_point until, std::chrono::milliseconds max_wait);

  AggregatorOptions o_;
  std::optional<AsyncPolicy> async_;  // set for an asynchronous strategy (FedBuff)
  bool dispatch_pending_ = false;     // an idle client may be waiting for a task
  uint64_t dispatches_ = 0;           // DispatchIdle calls that sent tasks (seeds their shuffle)
  zmq::context_t ctx_{1};
  // Declared after ctx_ and before server_: the ZAP handler starts before the socket binds
  // and stops after it closes.
  std::unique_ptr<transport::ZapHandler> zap_;
  std::shared_ptr<const crypto::AllowList> allow_list_;  // null when insecure
  std::map<std::string, std::string> name_keys_;         // client name -> the key that first used it (this session)
  std::unique_ptr<transport::Listener> server_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Strategy> strategy_;
  std::unique_ptr<EdgeLink> edge_;  // set for an edge aggregator (--upstream)
  std::unique_ptr<nn::Model> model_;
  std::unique_ptr<codec::Codec> up_codec_;    // decodes client updates
  std::unique_ptr<codec::Codec> down_codec_;  // encodes the global delta (error feedback here) and decodes it
  runtime::UpdatePipeline ingest_;            // what a client's update goes through: decode, validate
  std::unique_ptr<codec::Codec> slow_codec_;  // --codec-slow: decodes the updates of slow clients; null without
  runtime::UpdatePipeline ingest_slow_;       // the same stages with slow_codec_
  std::vector<std::string> required_stages_;  // codec stages a client must support
  protocol::PrivacyConfig privacy_;           // what every client's update goes through (Welcome)
  std::optional<LastDelta> last_delta_;
  // By client name, the task rounds of its newest updates that a commit holds (increasing, at
  // most protocol::kMaxCommittedRounds), saved with the checkpoint: the Welcome tells a client
  // which of the updates it sent before a restart are in the model (runtime/client/journal.h).
  std::map<std::string, std::vector<uint64_t>> committed_rounds_;
  // After the commit: its updates' rounds recorded, or, when it left the model unchanged,
  // each contributor told its update was discarded.
  void SettleContributors(const std::vector<Reported>& results, bool updated);
  Status LoadCommittedRounds(const std::string& json);  // the checkpoint's section
  RoundConfig round_config_;
  // This round's task frames by kind, encoded on first use and shared by every client.
  std::vector<transport::SharedFrame> full_frames_, delta_frames_, unchanged_frames_;
  // Drops the cached task frames: the next tasks are encoded afresh.
  void ClearTaskFrames() {
    full_frames_.clear();
    delta_frames_.clear();
    unchanged_frames_.clear();
  }
  data::Dataset test_;
  std::shared_ptr<Evaluator> evaluator_;  // the application's, in place of test_ (Server::SetEvaluator)
  uint64_t evaluations_failed_ = 0;
  bool serving_ = false;                          // Turn has run once
  std::optional<Clock::time_point> late_until_;   // every round was done at start: Bye until then
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
  std::map<std::string, uint32_t> by_name_;  // registered clients by name (one each)
  Clock::time_point last_expiry_scan_;
  uint64_t last_completed_ = 0;
  RoundState round_;
  bool waiting_logged_ = false;
  Clock::time_point last_status_;
  bool closing_ = false;  // Bye sent to everyone: connections closing is expected

  std::unique_ptr<runtime::Recorder> recorder_;  // metrics line, checkpoint, table row
  uint64_t frames_rejected_ = 0;
  // Updates for a round already closed (counted at their first chunk); asynchronous: updates
  // beyond --max-staleness.
  uint64_t updates_late_ = 0;
  uint64_t clients_moved_ = 0;  // registrations moved to a new connection (MoveClient)
  AdaptiveDeadline deadline_{o_.deadline};
  std::map<std::string, uint64_t> rejected_by_code_;
  uint64_t resyncs_ = 0;  // this round
  double majority_class_rate_ = 0;  // of the held-out split: the accuracy of predicting one class
  bool majority_warned_ = false;
};

}  // namespace shoal::aggregator
