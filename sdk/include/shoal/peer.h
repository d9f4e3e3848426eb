// Serverless training (DESIGN.md: decentralized mode; docs/PROTOCOL.md "Peers"): peers that
// train one model together with no aggregator, over CurveZMQ links, with the trainer, codecs
// and keys of federated mode.
//
// Every mode trains through a Trainer (shoal/trainer.h): the built-in one on `data`, or the
// application's own (RunPeer's second form), whose Train runs the mode's local work:
//   allgather, allreduce
//              Train(replica, {local_steps = 1, learning_rate = 1}) with the task's optimizer
//              replaced by plain SGD (lr 1, no momentum, no weight decay): delta = -gradient;
//              with "demo", the task's DeMo optimizer: delta = -(extracted components);
//   diloco     Train(replica, {local_steps = diloco_inner_steps}) with the task's optimizer;
//   gossip     Train(replica, {local_steps = 1}) with the task's optimizer.
// Each round asks to keep the optimizer state across rounds (RoundConfig::keep_optimizer_state).
//
// Modes:
//   allgather  every step each member sends its encoded local update (minus its minibatch
//              gradient, or, with the "demo" optimizer, minus its DeMo components) to every member; a step leader commits which
//              updates the step applies, and every replica applies them in canonical order,
//              so the replicas stay bit-identical (checked by hash every step).
//   allreduce  dense data parallelism (DDP): every step the members' gradients are summed by a
//              ring all-reduce (reduce-scatter + all-gather over the live members in name
//              order, each member sending 2 (N-1)/N of the model), and every replica takes the
//              task's optimizer step on the weighted mean. The codec must be dense: none, or
//              bf16/fp16/int8 per hop. A member that vanishes mid-ring is dropped at its
//              heartbeat timeout and the step's ring restarts without it.
//   diloco     DiLoCo: `diloco_inner_steps` local AdamW steps, then the same commit of the
//              encoded pseudo-gradients (or, with diloco_allreduce, their ring all-reduce)
//              and an outer Nesterov step.
//   gossip     D-PSGD: a local step, then an average with `gossip_k` members drawn from the
//              step's shared seed; replicas differ, and the metrics report their spread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "shoal/status.h"
#include "shoal/trainer.h"

namespace shoal {

// One finished step, as this peer's replica stands after it (PeerOptions::on_step).
struct PeerStep {
  uint64_t step = 0;
  size_t members = 0;             // live members, this peer included
  size_t included = 0;            // updates the step applied
  double loss = 0.0;              // mean training loss of the included updates
  std::string model_hash;         // of the replica below (hex BLAKE2b, as in the metrics)
  std::span<const float> params;  // the replica, in task.layout order; valid during the call
  uint64_t bytes_sent = 0, bytes_received = 0;  // this step's frames on the wire
  double seconds = 0.0;                         // the step's wall time
  uint64_t frames_rejected = 0;                 // inbound frames rejected since the start
  uint64_t resyncs = 0;                         // replica transfers since the start
  // Evaluation at this step (every eval_every steps and the last): on the held-out split with
  // the built-in trainer (held_out), else the application trainer's Evaluate when it can.
  std::optional<EvalResult> eval;
  bool eval_held_out = false;
};

struct PeerOptions {
  std::string name;                       // unique in the swarm; Default: HOST-partI-of-N
  std::string listen = "tcp://127.0.0.1:7101";  // this peer's ROUTER endpoint
  std::string advertise;                  // endpoint the others connect to; Default: listen
  // Peers to join through: "ENDPOINT" or, with security, "ENDPOINT@KEY" (KEY: 40 Z85
  // characters or a .pub file, pinning that peer). Empty: this peer founds the swarm.
  std::vector<std::string> bootstrap;
  std::string secret_key_file;            // PREFIX.key (CurveZMQ + Ed25519); needs allow_keys
  std::string allow_keys;                 // the peers' public keys (file or directory)
  bool insecure = false;                  // non-loopback without keys (no encryption, no signatures checked)

  // The swarm's task and settings. The founding peer's are the swarm's; a joining peer
  // receives them (only its data options below are its own).
  TaskConfig task;                        // model, optimizer (the inner one for diloco), batch, seed, codec
  std::string mode = "allgather";         // allgather | allreduce | diloco | gossip
  uint64_t steps = 0;                     // stop after this many steps; 0 = until stopped
  uint32_t min_peers = 1;                 // step 1 waits until this many members are present
  uint32_t step_timeout_ms = 2000;        // the leader commits without updates missing this long
  uint32_t heartbeat_interval_ms = 200;
  uint32_t heartbeat_timeout_ms = 2000;   // a member silent this long is dropped
  uint32_t chunk_bytes = 16u << 20;
  uint32_t diloco_inner_steps = 100;      // H, as OpenDiLoCo / INTELLECT-1
  float diloco_outer_lr = 0.7f;
  float diloco_outer_momentum = 0.9f;
  bool diloco_allreduce = false;          // diloco: pseudo-gradients through the ring all-reduce
  uint32_t gossip_k = 2;                  // members each peer sends its model to per step
  // allgather and diloco (the leader's commit): overlap each step's exchange with the next
  // step's local work, as Psyche does with DeMo. A peer computes its update of step t from the
  // replica after step t-2 (one step of delay; steps 1 and 2 both start from the initial
  // model), so it sends it as soon as step t-2 is committed and steps t-1 and t travel
  // together; step t still applies to the replica after t-1, on every replica alike. Followers
  // apply a step as soon as every live member's update is in, ahead of the leader's commit,
  // and roll back (rare: the commit took other updates) when the commit differs.
  bool overlap = false;
  uint32_t eval_every = 10;               // held-out evaluation every this many steps (0 = never)

  BuiltinTrainerOptions data;             // dataset, partition, device, precision of this peer (built-in trainer)
  // Founding peer, built-in trainer: feature standardization, "auto" (on for csv:), "on" or
  // "off". When on, the founder's training split's per-feature mean and standard deviation go
  // into the swarm's task, and every peer applies that one map (the built-in trainer; an
  // application trainer must say it does, Trainer::standardizes).
  std::string standardize = "auto";
  // The founding peer's starting model, in task.layout order. Default: empty, the registry
  // model's initialisation (built-in trainer) or zeros (an application's trainer).
  std::vector<float> initial_params;
  std::string metrics_out;                // JSON lines, one per step; empty = none
  // Called on the peer's thread after every step (e.g. to checkpoint the replica); must not
  // block for long: the swarm waits. With overlap a follower reports a step it applied ahead
  // of its commit; when that commit differs (the "rollbacks" metric), the step is reported
  // again as committed. Default: none.
  std::function<void(const PeerStep&)> on_step;
  uint32_t join_timeout_ms = 30000;       // give up joining after this long
};

// Runs the peer until `stop` is set (returns OK after leaving gracefully), `steps` steps are
// done (OK), or joining fails (Unavailable / PermissionDenied with one clear message).
Status RunPeer(const PeerOptions& options, const std::atomic<bool>& stop);

// The same with the application's trainer (nullptr: the built-in trainer on options.data).
// The swarm's task must then carry the model's layout (options.task.layout on the founding
// peer), and `data` is unused; held-out evaluation becomes trainer->Evaluate (eval_loss,
// eval_accuracy in the metrics) when the trainer evaluates. A trainer error ends the run
// with that error.
Status RunPeer(const PeerOptions& options, std::unique_ptr<Trainer> trainer, const std::atomic<bool>& stop);

}  // namespace shoal
