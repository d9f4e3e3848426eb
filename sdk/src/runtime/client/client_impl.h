// The client runtime: one thread runs the protocol loop (client.cc); local training runs on a
// worker thread so heartbeats and a Bye keep flowing while it does. The worker is one thread
// for the client's lifetime (started at the first round), so an application's trainer always
// runs on the same thread: JNI attachment, a CUDA current device and thread-locals persist.
// The class and its state; the work is split over client.cc (the loop, connecting, security),
// training.cc (the worker and the update stages), frames.cc (what the aggregator sends) and
// secagg.cc (a secure-aggregation round's client side).
#pragma once

#include "shoal/client.h"

#include <spdlog/spdlog.h>
#include <unistd.h>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>
#include "codec/codec.h"
#include "codec/round_context.h"
#include "crypto/crypto.h"
#include "crypto/keys.h"
#include "protocol/federated.h"
#include "protocol/messages.h"
#include "runtime/client/hooks.h"
#include "runtime/client/journal.h"
#include "privacy/dp/noise.h"
#include "privacy/secagg/protocol.h"
#include "runtime/secure_sum.h"
#include "runtime/update.h"
#include "transport/zmq/zmq_channel.h"

namespace shoal {

using Clock = std::chrono::steady_clock;

using std::chrono::milliseconds;
using protocol::ErrorCode;

class Client::Impl {
 public:
  Impl(ClientOptions o, std::unique_ptr<Trainer> t, ClientHooks hooks)
      : o_(std::move(o)), trainer_(std::move(t)), hooks_(std::move(hooks)) {
    if (o_.name.empty()) o_.name = "client-" + std::to_string(::getpid());
  }
  ~Impl() {
    StopTraining();
    {
      std::lock_guard<std::mutex> lock(work_mu_);
      quit_ = true;
    }
    work_cv_.notify_all();
    if (worker_.joinable()) worker_.join();
  }

  Status Run();
  Status Poll(milliseconds timeout, bool* finished);
  void Cancel() {
    cancel_ = true;
    train_cancel_ = true;
  }
  Stats stats() const {
    std::lock_guard<std::mutex> lock(stats_mu_);
    return stats_;
  }

 private:
  // One message out, with the next sequence number of this session.
  Status Send(const protocol::Frame& f, milliseconds timeout = milliseconds(2000)) {
    Status st = channel_->Send(f, timeout);
    if (st.ok()) last_sent_ = Clock::now();
    return st;
  }
  protocol::Header NextHeader(uint64_t round) { return {session_, round, client_id_, ++sequence_}; }
  void Emit(ClientEvent e) {
    if (!o_.on_event) return;
    e.bytes_sent = channel_->traffic().bytes_sent;
    e.bytes_received = channel_->traffic().bytes_received;
    o_.on_event(e);
  }
  void Reached(RoundPoint point, uint64_t round) {
    if (hooks_.at_point) hooks_.at_point(point, round);
  }
  void UpdateStats() {
    std::lock_guard<std::mutex> lock(stats_mu_);
    stats_.bytes_sent = channel_->traffic().bytes_sent;
    stats_.bytes_received = channel_->traffic().bytes_received;
  }

  // Transport security from the options: CURVE keys, or plain on loopback / with insecure.
  Status ConfigureSecurity(transport::SocketOptions& so);
  // The error to stop with once the handshake has failed too often.
  Status HandshakeError() const;

  // Returns a non-OK status when the client must stop (Bye is OK + finished_ = true).
  Status HandleFrame(const transport::Message& m);
  Status HandleWelcome(const protocol::Header& h, protocol::WelcomeInfo w);
  Status HandleRoundTask(const protocol::Header& h, const protocol::RoundTask& t);
  Status RequestResync(uint64_t round, const std::string& why);
  // A round's training as the worker hands it to the loop.
  struct Trained {
    uint64_t round = 0;
    Status status;
    TrainResult result;
    std::optional<EvalResult> eval;  // of the model received, before training
  };
  // Where a trained round goes, chosen once per registration (HandleWelcome): encoded through
  // the upload stages; held until this client's shares arrive, then masked (secure
  // aggregation, secagg.cc); or, on an edge aggregator, replaced by its clients' partial sum.
  enum class Upload { kEncoded, kMasked, kPartialSum };
  Upload upload_ = Upload::kEncoded;
  // The worker's result once it is done (and then training_ is over), else nullopt.
  std::optional<Trained> TakeTrained();
  Status FinishTraining(Trained t);
  Status SendPartialSum(const Trained& t);
  Status EncodeAndSend(runtime::Update u);
  // Sends a round's update payload in chunks, each framed by `frame` (Update, or the masked
  // input); once every chunk is out the client awaits its Ack and counts the round trained.
  // `what` names the payload in the warning when sending fails.
  void SendUpdatePayload(const runtime::Update& u, std::span<const uint8_t> payload, const char* what,
                         const std::function<protocol::Frame(const protocol::Header&, const protocol::ChunkRef&)>& frame);
  void StartTraining(ReplicaCache::Replica global, RoundConfig config);
  void StopTraining();
  void WorkerLoop();
  Trained TrainJob(std::span<const float> global, const RoundConfig& config);
  void Unregister(const std::string& why);
  // Secure aggregation (secagg.cc).
  void StartSecAgg(uint64_t round);
  Status HandleSecAgg(const protocol::Header& h, protocol::Message& m);
  void SendMaskedIfReady();

  ClientOptions o_;
  std::unique_ptr<Trainer> trainer_;
  ClientHooks hooks_;
  std::atomic<bool> cancel_{false};
  std::unique_ptr<zmq::context_t> ctx_;  // only for a ZeroMQ connection (not with hooks_.channel)
  std::unique_ptr<transport::Channel> channel_;
  std::string public_key_;  // this client's CURVE public key (Z85); empty without security
  // The long-term key pair of its key file (signs secure aggregation's adverts); null without one.
  std::shared_ptr<const crypto::KeyPair> identity_;
  privacy::secagg::ClientPolicy secagg_policy_;  // from o_.privacy, at Start

  // The loop (Start, then Iterate until it returns the run's result).
  Status Start();
  std::optional<Status> Iterate(milliseconds max_wait);
  std::optional<Status> result_;
  uint64_t num_examples_ = 0;
  Clock::time_point give_up_at_;
  bool ever_registered_ = false;
  milliseconds hello_backoff_{250};
  Clock::time_point next_hello_;
  Clock::time_point last_progress_event_;

  // Registration.
  bool registered_ = false;
  // The channel's completed handshakes when the Welcome came: one more means ZeroMQ opened a
  // new connection (a cut link), which the aggregator does not know yet.
  uint64_t registered_handshakes_ = 0;
  bool finished_ = false;
  uint64_t session_ = 0;
  uint32_t client_id_ = 0;
  uint64_t sequence_ = 0;
  uint64_t last_server_sequence_ = 0;
  std::string last_error_;  // the aggregator's last Error reason, for the give-up message
  std::optional<protocol::WelcomeInfo> welcome_;
  std::optional<TaskConfig> configured_task_;
  Clock::time_point last_heard_;
  Clock::time_point last_sent_;

  // Codecs of the task (upload: encode with error feedback; download: decode the global delta).
  std::unique_ptr<codec::Codec> up_codec_;
  std::unique_ptr<codec::Codec> down_codec_;
  // This client's copy of the global model, kept bit-identical to the aggregator's; immutable
  // once made (shared with the training job, and through hooks_.replicas with other clients).
  ReplicaCache::Replica replica_;
  std::string replica_hash_;
  size_t replica_size() const { return replica_ ? replica_->size() : 0; }
  void SetReplica(std::vector<float> model) {
    replica_hash_ = crypto::ModelHash(model);
    replica_ = hooks_.replicas ? hooks_.replicas->Intern(replica_hash_, std::move(model))
                               : std::make_shared<const std::vector<float>>(std::move(model));
  }

  // The round being received / trained.
  uint64_t task_round_ = 0;
  std::optional<protocol::ChunkAssembler> assembler_;
  protocol::PayloadEncoding assembler_encoding_ = protocol::PayloadEncoding::DenseF32;
  bool awaiting_full_ = false;
  Clock::time_point round_started_;
  // The training thread and the one round handed to it.
  struct Job {
    ReplicaCache::Replica global;
    RoundConfig config;
  };
  std::thread worker_;
  std::mutex work_mu_;
  std::condition_variable work_cv_;
  std::optional<Job> job_;          // guarded by work_mu_
  std::optional<Trained> trained_;  // guarded by work_mu_: the worker's result, until taken
  bool quit_ = false;               // guarded by work_mu_
  bool training_ = false;   // loop thread only: a round is with the worker and not yet collected
  std::atomic<bool> train_cancel_{false};
  std::atomic<float> progress_{0.0f};
  uint64_t training_round_ = 0;
  runtime::UpdatePipeline update_stages_;  // what an update goes through before it is sent
  // The per-client upload codec (task.codec_slow, training.cc): its stages, and the measured
  // upload rate that chooses it: an update's bytes over the time from its first chunk sent to
  // its Ack, less the smallest heartbeat round trip seen (the link's latency), smoothed. The
  // slow codec until the first measure.
  std::unique_ptr<codec::Codec> slow_codec_;
  runtime::UpdatePipeline slow_stages_;
  // The state each round changes (codec residuals, the trainer's), kept until the aggregator
  // has closed the round (journal.h): settled at each task, before the client trains.
  runtime::RoundJournal journal_;
  runtime::RoundState RoundStateNow() {
    return {up_codec_.get(), slow_codec_.get(), &sent_slow_, trainer_.get()};
  }
  Status SettleRounds(uint64_t round);
  std::optional<double> upload_mbps_;
  bool sent_slow_ = true;                  // the last update went with the slow codec (for the log)
  Clock::time_point upload_started_;
  uint64_t upload_bytes_ = 0;
  // Heartbeats awaiting their echo, oldest first (echoes come back in order; a lost one only
  // makes later round trips look longer, which the minimum ignores).
  std::deque<Clock::time_point> heartbeats_sent_;
  std::optional<double> min_rtt_s_;
  void MeasureUpload();                    // at the Ack of the update in flight
  bool UseSlowCodec() const;
  // The encode stages of `spec` for `task` with a fresh codec (and so a fresh error-feedback
  // residual).
  static Status MakeUploadStages(const TaskConfig& task, const std::string& spec, std::unique_ptr<codec::Codec>& codec,
                                 runtime::UpdatePipeline& stages);
  // Secure aggregation: the state machine (per registration), the round it runs, its Setup,
  // the shares addressed to this client, and the trained update waiting for them.
  std::unique_ptr<privacy::secagg::Client> secagg_;
  privacy::SecureRandom dp_random_;
  uint64_t secagg_round_ = 0;
  std::optional<privacy::secagg::Setup> secagg_setup_;
  runtime::SecureSumPlan secagg_plan_;  // of secagg_round_, from its Setup
  std::optional<privacy::secagg::SharesFor> secagg_shares_;
  std::optional<runtime::Update> secagg_pending_;
  double acked_train_loss_ = 0.0;          // of the update awaiting its Ack (for the event)
  uint64_t awaiting_ack_round_ = 0;

  mutable std::mutex stats_mu_;
  Stats stats_;
};

}  // namespace shoal
