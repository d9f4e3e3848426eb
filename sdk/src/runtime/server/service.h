// The aggregator service: registers clients, runs rounds, aggregates with a Strategy,
// evaluates on the held-out split, checkpoints and writes metrics. One thread, one event
// loop over a transport::Listener (ZeroMQ, or the in-process network): Create does all
// setup, Run() only the loop.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "shoal/status.h"
#include "shoal/trainer.h"
#include "aggregate/strategy.h"
#include "runtime/server/deadline.h"
#include "aggregate/wrappers/dp.h"
#include "aggregate/wrappers/secagg.h"
#include "transport/channel.h"

namespace shoal::aggregator {

// One completed round, as the service reports it: the metrics line (DESIGN.md §6), the
// console table and an observer (on_round: e.g. the Prometheus endpoint) all read this value.
struct RoundReport {
  uint64_t round = 0;
  size_t clients_selected = 0, clients_reported = 0, clients_dropped = 0, clients_registered = 0;
  double test_loss = 0.0, test_accuracy = 0.0;  // of the global model after the round, on the held-out split
  double train_loss = 0.0;                      // clients' reported mean, weighted by examples
  uint64_t bytes_up = 0, bytes_down = 0;        // bytes of frames on the wire this round
  uint64_t bytes_dense_equiv = 0;               // what dense fp32 models both ways would have cost
  double seconds = 0.0;                         // from the tasks going out to the round's close
  std::string model_hash;                       // of the global model after the round
  bool model_updated = false;
  std::vector<StrategyMetric> strategy_metrics;  // the strategy's own (DP: epsilon, dp_clip, ...)
  std::string codec_up, codec_down;             // the round's codec specs (canonical)
  double encode_seconds = 0.0;                  // clients' mean encoding time of their update
  double decode_seconds = 0.0;                  // the aggregator's decoding time, all updates
  double deadline_seconds = 0.0;                // the round's deadline
  uint64_t resyncs = 0;                         // clients sent the full model this round
  // Since the service started (counters):
  uint64_t frames_rejected = 0;
  std::map<std::string, uint64_t> rejected_by_code;  // protocol::ErrorName -> frames
  uint64_t updates_late = 0;
  uint64_t clients_moved = 0;  // registrations moved to a new connection of the same key
  uint64_t connections = 0, handshakes_failed = 0, handshakes_refused = 0;
  bool secure = false;          // CurveZMQ on the listener
  size_t allow_list_keys = 0;
};

// One registered client as the service sees it now (LiveStatus).
struct ClientStatus {
  uint32_t id = 0;
  std::string name;
  double seconds_since_seen = 0.0;        // since its last frame
  uint64_t bytes_up = 0, bytes_down = 0;  // frames from and to it since it registered
  uint64_t rounds_reported = 0;           // its updates that went into a round
  bool selected = false;                  // in the open round, its update still expected
};

// The service between rounds, published every 250 ms at most (on_status: the live gauges and
// the status page).
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

struct AggregatorOptions {
  std::string listen = "tcp://*:7070";     // ZeroMQ endpoint to bind
  uint64_t rounds = 0;                     // stop after this many completed rounds; 0 = run until stopped
  uint32_t min_clients = 2;                // registered clients needed before a round starts
  double fraction = 1.0;                   // share of registered clients selected each round, (0, 1]
  uint32_t min_results = 1;                // fewer reported updates than this keeps the model unchanged
  std::string model = "mlp";               // model spec (DESIGN.md §6)
  std::string dataset = "digits";          // dataset the clients train on; the aggregator evaluates on its held-out split
  std::string data_dir;                    // Default: $SHOAL_DATA_DIR or ~/.cache/shoal
  uint64_t seed = 0;                       // model init, data split, client sampling
  double test_fraction = 0.2;              // held-out share of the dataset
  // Feature standardization: "auto" (on for csv: datasets), "on" or "off". When on, the
  // training split's per-feature mean and standard deviation (of this aggregator's copy of the
  // dataset, which it loads to hold out the test split anyway) go to clients in the task; every
  // client and the held-out split apply that one map. No client data moves.
  std::string standardize = "auto";
  // The client optimizer defaults to the demo's tuned settings (scripts/demo): SGD, learning
  // rate 0.1, momentum 0.9, so a run started by hand trains as fast as the demo does.
  StrategyOptions strategy = {.learning_rate = 0.1f};  // strategy name, client lr, local epochs/steps, prox mu
  DpOptions dp;                            // differential privacy around the strategy (dp.clip > 0 turns it on)
  SecAggOptions secagg;                    // secure aggregation (SecAgg+) of the clients' updates
  OptimizerConfig optimizer = {.momentum = 0.9f};  // client optimizer (its learning_rate is strategy.learning_rate)
  std::string codec = "none";              // upload codec spec (clients encode their updates with it)
  std::string codec_down;                  // download codec for the global delta; Default: same as codec
  std::string codec_slow;                  // upload codec of clients measured below slow_below_mbps; empty = none
  double slow_below_mbps = 0.0;            // Mbit/s; > 0 exactly when codec_slow is set
  uint32_t batch_size = 32;                // client minibatch size
  uint32_t round_timeout_ms = 60000;       // a round closes this long after its tasks went out (at most)
  DeadlineOptions deadline;                // adaptive round deadline (deadline.h); off by default
  uint32_t heartbeat_interval_ms = 1000;   // clients send a heartbeat at least this often
  uint32_t heartbeat_timeout_ms = 10000;   // a client silent this long is dropped
  uint32_t chunk_bytes = 16u << 20;        // payload chunk size on the wire
  uint32_t max_clients = 1000;             // registration cap
  double max_update_norm = 1e4;            // reject updates whose L2 norm is larger; 0 = no bound
  std::string secret_key;                  // this aggregator's PREFIX.key: CurveZMQ on --listen (needs allow_keys)
  std::string allow_keys;                  // client public keys admitted: a file (one Z85 key per line) or a directory
  bool insecure = false;                   // allow a non-loopback listener without transport security
  uint32_t recv_hwm = 8;                   // frames queued per client connection before ZeroMQ stops reading it
  // Hierarchical aggregation (runtime/server/edge.h): the parent aggregator's endpoint. This
  // aggregator then serves the parent's task to its own clients (its own task flags do not
  // apply) and sends the parent their exact partial sum each round. Empty = a root.
  std::string upstream;
  std::string upstream_name;               // this edge's client name at the parent; Default: "edge-<pid>"
  std::string upstream_key;                // this edge's PREFIX.key: CurveZMQ to the parent (with upstream_server_key)
  std::string upstream_server_key;         // the parent's public key (Z85, or its PREFIX.pub)
  uint32_t upstream_timeout_ms = 60000;    // at start, how long to wait for the parent's task
  // Talk to the parent over channels made by this (shoal-sim's in-process network: one per
  // connection attempt) instead of ZeroMQ to `upstream`; the upstream keys must then be empty.
  std::function<std::unique_ptr<transport::Channel>()> upstream_channel;
  std::string metrics_out;                 // JSON lines, one per round; empty = none
  std::string checkpoint_dir;              // checkpoint each completed round here; empty = none
  bool resume = false;                     // continue from checkpoint_dir's last completed round
  std::string device = "cpu";              // backend for evaluation
  bool print_table = true;                 // per-round table on stdout
  // Called on the service's thread after each round is committed (metrics written,
  // checkpoint saved). Optional.
  std::function<void(const RoundReport&)> on_round;
  // Called on the service's thread with the live state, every 250 ms at most. Optional.
  std::function<void(const LiveStatus&)> on_status;
};

class Service {
 public:
  // Loads the dataset, builds the model (or restores the checkpoint), binds the socket.
  // Every failure is one clear message (port in use, missing dataset, bad flag, ...).
  static StatusOr<std::unique_ptr<Service>> Create(const AggregatorOptions& options);
  // The same over a listener the caller made (the in-process network of tests and shoal-sim):
  // options.listen, secret_key, allow_keys and insecure do not apply (InvalidArgument if keys
  // are given: such a listener has no transport security).
  static StatusOr<std::unique_ptr<Service>> Create(const AggregatorOptions& options,
                                                   std::unique_ptr<transport::Listener> listener);
  ~Service();
  Service(const Service&) = delete;
  Service& operator=(const Service&) = delete;

  // Serves until `stop` becomes true (returns OK) or --rounds rounds are done (clients get
  // Bye; returns OK). Errors only for failures that make serving impossible. Whenever
  // `reload` is set (SIGHUP), clears it and re-reads the allow-list: removed keys are refused
  // from the next handshake, and their live connections are dropped at once.
  Status Run(const std::atomic<bool>& stop, std::atomic<bool>* reload = nullptr);

  // The endpoint actually bound (e.g. the port chosen for tcp://127.0.0.1:0).
  std::string endpoint() const;
  // The last completed round (after a resume: counting the checkpointed ones). Read it while
  // Run is not running.
  uint64_t rounds_completed() const;
  // The global model's hash (BLAKE2b-256, hex): after Create, the resumed or initial model's.
  // Read it while Run is not running.
  std::string model_hash() const;

  class Impl;

 private:
  explicit Service(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal::aggregator
