// The simulator behind shoal-sim: one aggregator Service and N virtual clients in one process,
// running the real Service and Client code and the real wire format over the in-process
// network (transport/inproc), so that a federation of thousands of clients, with link
// latencies, bandwidths, stragglers and churn, runs on one machine; with `edges`, the same
// federation in two tiers (edge aggregators between the clients and the root).
//
// How N clients fit in one process:
//   - Clients are driven by a few threads (`threads`, default: the machine's cores), each
//     polling its share of the clients with Client::Poll(0); a client trains inside its Poll
//     (ClientHooks::train_inline), so no client has a thread of its own.
//   - The dataset is loaded, split and partitioned once; parts are shared. With more clients
//     than parts of at least `min_part` examples, client i trains on part i mod P (P parts):
//     the simulated federation reuses data, which the report states.
//   - A client holds no model copy of its own: replicas of the global model are shared by
//     hash (ReplicaCache), and the built-in trainer's model, optimizer and buffers exist only
//     while the client trains (DeMo, whose momentum must live between rounds, is refused).
//   What stays per client: its Client state, its channel, and codec state (error feedback
//   keeps a residual the size of the model: an `ef` codec costs O(model) per client).
//
// Faults, all drawn from the seed:
//   - links: per client, a one-way latency and up/down rates drawn log-normally around the
//     given medians (`*_spread` is the standard deviation of the log; 0 = all equal);
//   - stragglers: a `stragglers` share of the clients whose updates arrive `straggler_ms`
//     later (modelled as extra upload latency, so a straggler costs no simulator thread);
//   - churn: each round, each selected client dies mid-round with probability `churn` (its
//     training is abandoned and its connection closes without a Bye, like a killed process);
//     it comes back as a fresh connection under the same name `churn_restart_ms` later.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/server/service.h"
#include "runtime/sim/attack.h"

namespace shoal::sim {

struct SimOptions {
  aggregator::AggregatorOptions server;  // task, strategy, rounds, metrics: as shoal-aggregator
  uint32_t clients = 100;                // virtual clients
  std::string partition_scheme = "iid";  // "iid" | "dirichlet:ALPHA"
  int64_t min_part = 10;                 // smallest part, in examples
  uint32_t threads = 0;                  // client-driving threads; Default: hardware cores
  double churn = 0.0;                    // per round, share of the selected clients that die mid-round, [0, 1)
  uint32_t churn_restart_ms = 1000;      // a dead client reconnects this long after it died
  double latency_ms = 0.0;               // median one-way latency of a client's link
  double latency_spread = 0.0;           // standard deviation of log(latency)
  double up_mbps = 0.0;                  // median upload rate in Mbit/s; 0 = unlimited
  double down_mbps = 0.0;                // median download rate in Mbit/s; 0 = unlimited
  double bandwidth_spread = 0.0;         // standard deviation of log(rate)
  double stragglers = 0.0;               // share of clients that are stragglers, [0, 1]
  double straggler_ms = 0.0;             // how much later a straggler's frames arrive
  AttackOptions attack;                  // Byzantine clients (none by default)
  // Hierarchical aggregation: this many edge aggregators (runtime/server/edge.h) between the
  // clients and the root, client i joining edge i mod `edges`; each edge selects --fraction of
  // its clients and the root takes every edge each round. 0 = the clients join the root.
  uint32_t edges = 0;
};

// What a finished simulation reports (the per-round figures are in the server's metrics).
struct SimReport {
  uint64_t rounds = 0;               // completed by the service
  double seconds = 0.0;              // from the start of the first round to the end of the last
  double round_seconds = 0.0;        // mean of the rounds' own seconds (tasks out to close)
  double setup_seconds = 0.0;        // loading data, starting the service, until the first round starts
  double final_accuracy = 0.0;       // held-out accuracy after the last round
  uint32_t parts = 0;                // distinct data parts the clients share
  uint64_t deaths = 0;               // clients killed by churn
  uint32_t attackers = 0;            // clients that sent corrupted updates (--attack)
  uint64_t frames_lost = 0;          // dropped by link loss
  size_t live_replicas_peak = 0;     // most model versions held at once by all clients together
  uint64_t peak_rss_bytes = 0;       // the process's high-water mark (VmHWM)
  // The root aggregator's load per round, mean over the rounds after the first (which also
  // registers everyone): CPU seconds of its service thread, and bytes it received.
  double root_cpu_seconds = 0.0;
  double root_bytes_in = 0.0;
};

class Simulator {
 public:
  // Validates the options, loads and partitions the data, starts the service on an
  // in-process listener and makes the clients.
  static StatusOr<std::unique_ptr<Simulator>> Create(const SimOptions& options);
  ~Simulator();
  Simulator(const Simulator&) = delete;
  Simulator& operator=(const Simulator&) = delete;

  // Runs until the service has completed server.rounds rounds (which must be > 0) or `stop`
  // is set. Errors: the service failed, or every client gave up.
  StatusOr<SimReport> Run(const std::atomic<bool>& stop);

  class Impl;

 private:
  explicit Simulator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shoal::sim
