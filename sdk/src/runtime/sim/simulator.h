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
//   - churn: each round, each selected client dies with probability `churn`, at the point of
//     its round `churn_at` names (ChurnAt below): from that instant nothing it sends leaves,
//     its connection closes without a Bye, like a killed process, and it comes back as a
//     fresh client under the same name `churn_restart_ms` later;
//   - a partition: a `partition` share of the clients loses its links to the aggregator for
//     `partition_ms` from the close of round `partition_round` - 1 (frames either way are
//     lost; connections stay open, as on a network that stops forwarding), the rest keep theirs;
//   - flapping: a `flapping` share of the clients whose links go down for `flap_ms` and come
//     back for `flap_ms`, alternately, for the whole run (each client at its own phase).
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "runtime/server/service.h"
#include "runtime/sim/attack.h"

namespace shoal::sim {

// Where in its round a churned client dies. Under secure aggregation a round goes task,
// training, key shares, masked update, unmask; keys and unmask need --secagg.
enum class ChurnAt {
  kStart,   // when its task arrives: before it trains or shares keys with its neighbours
  kTrain,   // at the end of its local training, before anything of the update leaves
  kKeys,    // right after its key shares left, before its (masked) update: dropout recovery
  kUpload,  // right after its whole update left, before the round closes (or it unmasks)
  kUnmask,  // when the survivor set arrives, before it signs it or reveals anything
  kRandom,  // at a uniform time within the round: over the previous round's duration from its
            // task's arrival (in the first round, at one of the points above, uniformly)
};
StatusOr<ChurnAt> ParseChurnAt(const std::string& name);  // start|train|keys|upload|unmask|random

// Where a churned client was in its round when it died (SimReport::deaths_at).
enum class DeathPoint { kTask, kTraining, kShares, kUpdate, kUnmask, kCount };
const char* DeathPointName(DeathPoint p);

struct SimOptions {
  aggregator::AggregatorOptions server;  // task, strategy, rounds, metrics: as shoal-aggregator
  uint32_t clients = 100;                // virtual clients
  std::string partition_scheme = "iid";  // "iid" | "dirichlet:ALPHA"
  int64_t min_part = 10;                 // smallest part, in examples
  uint32_t threads = 0;                  // client-driving threads; Default: hardware cores
  double churn = 0.0;                    // per round, share of the selected clients that die mid-round, [0, 1)
  ChurnAt churn_at = ChurnAt::kStart;    // where in its round a churned client dies
  uint32_t churn_restart_ms = 1000;      // a dead client reconnects this long after it died
  double partition = 0.0;                // share of the clients cut off by a partition, [0, 1)
  uint64_t partition_round = 1;          // the partition starts as this round is about to start
  uint32_t partition_ms = 0;             // and lasts this long (0 = no partition)
  double flapping = 0.0;                 // share of the clients with flapping links, [0, 1]
  uint32_t flap_ms = 500;                // a flapping link is down this long, then up this long
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
  uint64_t deaths_at[static_cast<int>(DeathPoint::kCount)] = {};  // of those, by where they were
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
