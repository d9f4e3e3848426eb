// shoal::Server: the aggregator as a library (what shoal-aggregator runs). It binds a ZeroMQ
// endpoint, registers clients, runs rounds with a strategy, evaluates the global model (on
// the dataset's held-out split, or with the application's own Evaluator), checkpoints, and
// reports every round to typed observers. One thread: Run() blocks; Poll() does a slice of
// the work for an application with its own event loop.
//
//   shoal::ServerOptions o;
//   o.listen = "tcp://127.0.0.1:7070";
//   o.rounds = 20;
//   o.on_round = [](const shoal::RoundReport& r) { ... };
//   auto server = shoal::Server::Create(o);   // loads data, builds the model, binds
//   if (!server.ok()) ...;
//   (*server)->SetEvaluator(std::make_unique<MyEvaluator>());   // optional
//   shoal::Status st = (*server)->Run();
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "shoal/status.h"
#include "shoal/trainer.h"

namespace shoal {

// How the aggregator combines each round's updates (the aggregator's --strategy flags).
struct StrategyOptions {
  // "fedavg" | "fedprox" | "demo" | FedOpt: "fedavgm" | "fedadam" | "fedyogi" | "fedadagrad" |
  // robust: "median" | "trimmed_mean" | "krum" | "multi_krum" | "centered_clip" |
  // asynchronous: "fedbuff". Default: "fedavg".
  std::string name = "fedavg";
  float learning_rate = 0.05f;   // client learning rate sent in each round's config
  uint32_t local_epochs = 1;     // local passes over the data per round
  uint32_t local_steps = 0;      // if > 0: exactly this many local minibatch steps per round instead
  float prox_mu = 0.01f;         // fedprox only
  // FedAvg family: scales the averaged delta (1 = plain FedAvg); FedOpt: the server
  // optimizer's step size. 0 = the strategy's default (1, or 0.01 for fedadam/fedyogi and 0.1
  // for fedadagrad).
  float server_learning_rate = 0.0f;
  float server_momentum = 0.9f;  // fedavgm
  float server_beta1 = 0.9f;     // fedadam, fedyogi, fedadagrad (first moment)
  float server_beta2 = 0.99f;    // fedadam, fedyogi (second moment)
  float server_tau = 1e-3f;      // fedadam, fedyogi, fedadagrad: adaptivity, added to sqrt(v)
  // Robust rules: the share of each round's reports assumed Byzantine: trimmed_mean drops
  // floor(b n) values at each end, krum/multi_krum take f = floor(b n).
  float byzantine_fraction = 0.2f;
  float clip_radius = 0.0f;      // centered_clip: tau; 0 = the median distance, each iteration
  uint32_t clip_iterations = 3;  // centered_clip: L
  uint32_t buffer_size = 10;     // fedbuff: K, the updates buffered per commit
  uint32_t max_staleness = 20;   // fedbuff: an update trained from an older model is refused as late
};

// Differential privacy around the strategy (client-level DP-FedAvg; docs/SECURITY.md).
struct DpOptions {
  double clip = 0.0;                // L2 bound C of each client's update; 0 = DP off (the default)
  double noise_multiplier = 0.0;    // noise stddev z * C on the sum of clipped updates
  double target_epsilon = 0.0;      // > 0: choose z so that `rounds` rounds spend this epsilon
  double delta = 1e-5;              // delta of the (epsilon, delta) reported and budgeted
  double epsilon_budget = 0.0;      // no round may take epsilon past it (Bye instead); 0 = no limit
  double clip_quantile = 0.0;       // gamma in (0, 1): adaptive clipping; 0 = fixed C
  double clip_learning_rate = 0.2;  // adaptive clipping's geometric step
  // Distributed DP (with secure aggregation): each client clips its own update and adds its
  // share of discrete Gaussian noise; the aggregator only accounts. The CLI's default: on
  // exactly when secure aggregation is.
  bool distributed = false;
  bool enabled() const { return clip > 0.0; }
};

// Secure aggregation (SecAgg+): the aggregator learns only the sum of the clients' updates.
struct SecAggOptions {
  bool enabled = false;
  double range = 1.0;                 // each masked value is clipped to [-R, R] (counted)
  uint32_t threshold = 0;             // shares that reconstruct a secret; 0 = derived
  uint32_t neighbours = 0;            // graph degree; 0 = derived; >= n-1 = SecAgg's full graph
  double dropout = 0.2;               // share of a round's clients that may drop and the sum still unmasks
  double corrupt = 0.0;               // share of clients that may collude with the aggregator
  uint32_t stage_timeout_ms = 10000;  // each key stage and the unmask stage wait this long
};

// The adaptive round deadline: a round closes at margin x the quantile of recent update times
// (clamped to [min_ms, round_timeout_ms]). Default: off (quantile 0, a fixed round_timeout_ms).
struct DeadlineOptions {
  double quantile = 0.0;   // Q in (0, 1); 0 = a fixed deadline (round_timeout_ms)
  double margin = 1.5;     // multiplies the quantile
  uint32_t window = 5;     // rounds of observations kept
  uint32_t min_ms = 500;   // never closes a round sooner
};

// A named value a strategy (or an Evaluator) reports for a round, e.g. {"epsilon", 1.9}.
struct StrategyMetric {
  std::string name;
  double value = 0.0;
};

// One completed round, as the server reports it: the metrics line (--metrics-out), the
// console table and ServerOptions::on_round all read this value.
struct RoundReport {
  uint64_t round = 0;
  size_t clients_selected = 0, clients_reported = 0, clients_dropped = 0, clients_registered = 0;
  // Of the global model after the round: on the held-out split, or the application
  // Evaluator's (0 on an edge aggregator, which leaves evaluation to its root).
  double test_loss = 0.0, test_accuracy = 0.0;
  std::vector<StrategyMetric> evaluation_metrics;  // the Evaluator's own, "eval_<name>" in the metrics line
  double train_loss = 0.0;                      // clients' reported mean, weighted by examples
  uint64_t bytes_up = 0, bytes_down = 0;        // bytes of frames on the wire this round
  uint64_t bytes_dense_equiv = 0;               // what dense fp32 models both ways would have cost
  double seconds = 0.0;                         // from the tasks going out to the round's close
  std::string model_hash;                       // of the global model after the round (BLAKE2b-256, hex)
  bool model_updated = false;
  std::vector<StrategyMetric> strategy_metrics;  // the strategy's own (DP: epsilon, dp_clip, ...)
  std::string codec_up, codec_down;             // the round's codec specs (canonical)
  double encode_seconds = 0.0;                  // clients' mean encoding time of their update
  double decode_seconds = 0.0;                  // the aggregator's decoding time, all updates
  double deadline_seconds = 0.0;                // the round's deadline
  uint64_t resyncs = 0;                         // clients sent the full model this round
  // Since the server started (counters):
  uint64_t frames_rejected = 0;
  std::map<std::string, uint64_t> rejected_by_code;  // protocol error name -> frames
  uint64_t updates_late = 0;
  uint64_t clients_moved = 0;  // registrations moved to a new connection of the same key
  uint64_t connections = 0, handshakes_failed = 0, handshakes_refused = 0;
  uint64_t evaluations_failed = 0;  // rounds whose Evaluator returned an error (the round still commits)
  bool secure = false;          // CurveZMQ on the listener
  size_t allow_list_keys = 0;
};

// One registered client as the server sees it now (LiveStatus).
struct ClientStatus {
  uint32_t id = 0;
  std::string name;
  double seconds_since_seen = 0.0;        // since its last frame
  uint64_t bytes_up = 0, bytes_down = 0;  // frames from and to it since it registered
  uint64_t rounds_reported = 0;           // its updates that went into a round
  bool selected = false;                  // in the open round, its update still expected
};

// The server between rounds, published every 250 ms at most (ServerOptions::on_status: the
// CLI's live gauges and status page).
struct LiveStatus {
  uint64_t round = 0;           // the round in progress, or the next one
  bool round_open = false;      // its tasks are out
  size_t clients_registered = 0;
  size_t clients_selected = 0;  // of the open round
  size_t updates_received = 0;  // of the open round, so far
  uint64_t last_completed = 0;
  double round_seconds = 0.0;   // since the open round's tasks went out
  std::vector<ClientStatus> clients;  // by id
};

struct ServerOptions {
  // Transport -------------------------------------------------------------------------------
  std::string listen = "tcp://*:7070";     // ZeroMQ endpoint to bind (tcp://127.0.0.1:0: a free port, see endpoint())
  std::string secret_key;                  // this aggregator's PREFIX.key: CurveZMQ on `listen` (needs allow_keys)
  std::string allow_keys;                  // client public keys admitted: a file (one Z85 key per line) or a directory
  bool insecure = false;                   // allow a non-loopback listener without transport security
  uint32_t recv_hwm = 8;                   // frames queued per client connection before ZeroMQ stops reading it

  // Rounds ----------------------------------------------------------------------------------
  uint64_t rounds = 0;                     // stop after this many completed rounds; 0 = run until stopped
  uint32_t min_clients = 2;                // registered clients needed before a round starts
  double fraction = 1.0;                   // share of registered clients selected each round, (0, 1]
  uint32_t min_results = 1;                // fewer reported updates than this keeps the model unchanged
  uint32_t round_timeout_ms = 60000;       // a round closes this long after its tasks went out (at most)
  DeadlineOptions deadline;                // adaptive round deadline; Default: off
  uint32_t heartbeat_interval_ms = 1000;   // clients send a heartbeat at least this often
  uint32_t heartbeat_timeout_ms = 10000;   // a client silent this long is dropped
  uint32_t chunk_bytes = 16u << 20;        // payload chunk size on the wire
  uint32_t max_clients = 1000;             // registration cap
  double max_update_norm = 1e4;            // reject updates whose L2 norm is larger; 0 = no bound

  // Task (sent to every client at Welcome) and strategy ------------------------------------
  std::string model = "mlp";               // model spec (DESIGN.md §6)
  std::string dataset = "digits";          // dataset the clients train on; the server evaluates on its held-out split
  std::string data_dir;                    // Default: $SHOAL_DATA_DIR or ~/.cache/shoal
  uint64_t seed = 0;                       // model init, data split, client sampling
  double test_fraction = 0.2;              // held-out share of the dataset
  // Feature standardization: "auto" (on for csv: datasets), "on" or "off". When on, the
  // training split's per-feature mean and standard deviation (of this server's copy of the
  // dataset, which it loads to hold out the test split anyway) go to clients in the task; every
  // client and the held-out split apply that one map. No client data moves.
  std::string standardize = "auto";
  // The client optimizer defaults to the demo's tuned settings (scripts/demo): SGD, learning
  // rate 0.1, momentum 0.9, so a run started by hand trains as fast as the demo does.
  StrategyOptions strategy = {.learning_rate = 0.1f};  // strategy name, client lr, local epochs/steps, prox mu
  OptimizerConfig optimizer = {.momentum = 0.9f};  // client optimizer (its learning_rate is strategy.learning_rate)
  uint32_t batch_size = 32;                // client minibatch size
  std::string codec = "none";              // upload codec spec (clients encode their updates with it)
  std::string codec_down;                  // download codec for the global delta; Default: same as codec
  std::string codec_slow;                  // upload codec of clients measured below slow_below_mbps; empty = none
  double slow_below_mbps = 0.0;            // Mbit/s; > 0 exactly when codec_slow is set

  // Privacy ---------------------------------------------------------------------------------
  DpOptions dp;                            // differential privacy around the strategy (dp.clip > 0 turns it on)
  SecAggOptions secagg;                    // secure aggregation (SecAgg+) of the clients' updates

  // Tiers: this server as an edge of a parent aggregator. It then serves the parent's task to
  // its own clients (its own task options do not apply) and sends the parent their exact
  // partial sum each round. Empty upstream = a root.
  std::string upstream;
  std::string upstream_name;               // this edge's client name at the parent; Default: "edge-<pid>"
  std::string upstream_key;                // this edge's PREFIX.key: CurveZMQ to the parent (with upstream_server_key)
  std::string upstream_server_key;         // the parent's public key (Z85, or its PREFIX.pub)
  uint32_t upstream_timeout_ms = 60000;    // at start, how long to wait for the parent's task

  // Outputs ---------------------------------------------------------------------------------
  std::string metrics_out;                 // JSON lines, one per round; empty = none
  std::string checkpoint_dir;              // checkpoint each completed round here; empty = none
  bool resume = false;                     // continue from checkpoint_dir's last completed round
  std::string device = "cpu";              // backend of the built-in evaluation: cpu, auto, cuda[:N]
  bool print_table = true;                 // per-round table on stdout
  // Called on the server's thread after each round is committed (metrics written,
  // checkpoint saved). Optional.
  std::function<void(const RoundReport&)> on_round;
  // Called on the server's thread with the live state, every 250 ms at most. Optional.
  std::function<void(const LiveStatus&)> on_status;
};

// The global model's score on the application's own data (Evaluator::Evaluate).
struct Evaluation {
  double loss = 0.0;
  double accuracy = 0.0;
  // More values, written to the round's metrics line as "eval_<name>" (names of [a-z0-9_]).
  std::vector<std::pair<std::string, double>> metrics;
};

// Scores the global model each round on the application's data, in place of the built-in
// evaluation on the dataset's held-out split. Called on the server's thread.
class Evaluator {
 public:
  virtual ~Evaluator() = default;
  // Once, before the first Evaluate, with the task (the model spec and its layout).
  // InvalidArgument if this evaluator cannot score that model: Run/Poll then fail with it.
  virtual Status Configure(const TaskConfig& task) { return Status::Ok(); }
  // After each round, on the committed global model (flat, in task.layout order). An error
  // is logged and counted (RoundReport::evaluations_failed) and the round keeps its commit.
  virtual Status Evaluate(std::span<const float> global, uint64_t round, Evaluation* out) = 0;
};

class Server {
 public:
  // Loads the dataset, builds the model (or restores the checkpoint), binds the socket.
  // Every failure is one clear message (port in use, missing dataset, bad option, ...).
  static StatusOr<std::unique_ptr<Server>> Create(const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // The application's evaluator, in place of the held-out split's. Before the first Run or
  // Poll (FailedPrecondition after); nullptr goes back to the built-in evaluation.
  Status SetEvaluator(std::unique_ptr<Evaluator> evaluator);

  // Serves until Stop() (returns OK) or `rounds` rounds are done (clients get Bye; returns
  // OK). Errors only for failures that make serving impossible. Call at most once.
  Status Run();
  // Instead of Run(), for an application with its own event loop: serves for about
  // `timeout_ms`, or until a round is committed if that comes first (so a loop that reads
  // rounds_completed() after each call sees every round), and returns. While the run goes
  // on it returns OK with *finished = false;
  // once it is over, *finished = true and the status is what Run() would have returned (and
  // stays so on later calls). Call from one thread at a time; do not mix with Run().
  Status Poll(uint32_t timeout_ms, bool* finished);
  // Thread-safe and async-signal-safe: makes Run() or Poll() finish promptly (checkpointed
  // rounds are kept). Clients are not told: they wait for this server to come back (a
  // restart with resume).
  void Stop();
  // Thread-safe and async-signal-safe: ends training as if the last round were done: the
  // open round (if any) is abandoned, every client gets Bye, and Run() or Poll() finish.
  void Finish();
  // Thread-safe and async-signal-safe: re-read allow_keys at the next turn of the loop
  // (removed keys are refused from the next handshake, their live connections dropped).
  void ReloadAllowList();

  // The endpoint actually bound (e.g. the port chosen for tcp://127.0.0.1:0).
  std::string endpoint() const;
  // The last completed round (after a resume: counting the checkpointed ones). Read it while
  // Run/Poll is not running.
  uint64_t rounds_completed() const;
  // The global model's hash (BLAKE2b-256, hex). Read it while Run/Poll is not running.
  std::string model_hash() const;

  class Impl;

 private:
  explicit Server(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal
