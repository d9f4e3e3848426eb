// shoal-peer's command-line options: the swarm, the task its founder sets, the timeouts and the
// data, into PeerOptions.
#pragma once

#include <boost/program_options.hpp>

#include <string>

#include "cli/cli.h"
#include "cli/data_parallel_flags.h"
#include "shoal/peer.h"

namespace shoal::cli {

// What the flags hold before they become the options (text, seconds).
struct PeerFlags {
  std::string partition = "0/1";
  std::string chunk = "16M";
  double step_timeout_s = 2, heartbeat_s = 0.2, heartbeat_timeout_s = 2, join_timeout_s = 30;
  DataParallelFlags data_parallel;
};

// shoal-peer's defaults where they differ from PeerOptions' (a library user's task is theirs):
// the MLP on digits at learning rate 0.1.
inline void PeerCliDefaults(PeerOptions& o) {
  o.task.model = "mlp";
  o.task.dataset = "digits";
  o.task.optimizer.learning_rate = 0.1f;
}

inline boost::program_options::options_description PeerOptionsTable(PeerOptions& o, PeerFlags& f) {
  namespace po = boost::program_options;
  po::options_description d("Peer");
  d.add_options()
      ("name", po::value(&o.name), "this peer's name, unique in the swarm (default: HOST-partI-of-N)")
      ("listen", po::value(&o.listen)->default_value(o.listen), "this peer's endpoint")
      ("advertise", po::value(&o.advertise), "the endpoint other peers reach this one at (default: --listen)")
      ("peers", po::value(&o.bootstrap)->multitoken(), "peers to join through: ENDPOINT, or ENDPOINT@KEY_OR_PUBFILE with --secret-key")
      ("secret-key", po::value(&o.secret_key_file), "this peer's key file (PREFIX.key from shoal-keygen)")
      ("allow-keys", po::value(&o.allow_keys), "the peers' public keys: a file (one per line) or a directory of .pub files")
      ("insecure", po::bool_switch(&o.insecure), "non-loopback links without encryption or authentication")
      ("mode", po::value(&o.mode)->default_value(o.mode), "allgather (DeMo / DDP-like, commit log), allreduce (DDP over a ring all-reduce), diloco or gossip")
      ("steps", po::value(&o.steps)->default_value(o.steps), "stop after N steps (0 = until SIGTERM)")
      ("min-peers", po::value(&o.min_peers)->default_value(o.min_peers), "step 1 waits for this many members")
      ("model", po::value(&o.task.model)->default_value(o.task.model), "model spec: mlp, mlp:H1,H2,..., linear; gpt[:layers=L,dim=D,heads=H,ctx=T] on text")
      ("client-optimizer", po::value(&o.task.optimizer.name)->default_value(o.task.optimizer.name), "sgd, adamw or demo (allgather); diloco's inner optimizer")
      ("lr", po::value(&o.task.optimizer.learning_rate)->default_value(o.task.optimizer.learning_rate), "learning rate")
      ("momentum", po::value(&o.task.optimizer.momentum)->default_value(o.task.optimizer.momentum), "sgd momentum")
      ("weight-decay", po::value(&o.task.optimizer.weight_decay)->default_value(o.task.optimizer.weight_decay), "weight decay")
      ("client-demo-decay", po::value(&o.task.optimizer.demo_decay)->default_value(o.task.optimizer.demo_decay), "demo: momentum decay")
      ("client-demo-chunk", po::value(&o.task.optimizer.demo_chunk)->default_value(o.task.optimizer.demo_chunk), "demo: DCT chunk side")
      ("client-demo-topk", po::value(&o.task.optimizer.demo_topk)->default_value(o.task.optimizer.demo_topk), "demo: coefficients per chunk")
      ("batch-size", po::value(&o.task.batch_size)->default_value(o.task.batch_size), "minibatch size per peer and step")
      ("seed", po::value(&o.task.seed)->default_value(o.task.seed), "model init, data split and partitions")
      ("test-fraction", po::value(&o.task.test_fraction)->default_value(o.task.test_fraction), "held-out share of the dataset")
      ("standardize", po::value(&o.standardize)->default_value(o.standardize),
       "founder: scale each feature by the training split's mean and standard deviation, for every peer: auto (on for csv:), on, off")
      ("codec", po::value(&o.task.codec)->default_value(o.task.codec), "update codec, e.g. demo:chunk=64,topk=8,bits=1, int8, ef|topk:ratio=0.01|int8; on a ring: none, bf16, fp16 or int8")
      ("diloco-inner-steps", po::value(&o.diloco_inner_steps)->default_value(o.diloco_inner_steps), "diloco: inner steps H per outer step")
      ("diloco-outer-lr", po::value(&o.diloco_outer_lr)->default_value(o.diloco_outer_lr), "diloco: outer Nesterov learning rate")
      ("diloco-outer-momentum", po::value(&o.diloco_outer_momentum)->default_value(o.diloco_outer_momentum), "diloco: outer momentum")
      ("diloco-allreduce", po::bool_switch(&o.diloco_allreduce), "diloco: sum the pseudo-gradients with the ring all-reduce (dense, or --codec int8/bf16 per hop)")
      ("overlap", po::bool_switch(&o.overlap), "allgather/diloco: compute step t's update from the replica after step t-2, so the exchange of each step overlaps the next step's work (one step of delay)")
      ("gossip-k", po::value(&o.gossip_k)->default_value(o.gossip_k), "gossip: members each peer averages with per step")
      ("eval-every", po::value(&o.eval_every)->default_value(o.eval_every), "held-out evaluation every N steps (0 = only at the end)")
      ("step-timeout", po::value(&f.step_timeout_s)->default_value(f.step_timeout_s), "seconds the step leader waits for updates")
      ("heartbeat-interval", po::value(&f.heartbeat_s)->default_value(f.heartbeat_s), "seconds between heartbeats")
      ("heartbeat-timeout", po::value(&f.heartbeat_timeout_s)->default_value(f.heartbeat_timeout_s), "seconds of silence before a member is dropped")
      ("join-timeout", po::value(&f.join_timeout_s)->default_value(f.join_timeout_s), "seconds to wait for the bootstrap peers")
      ("chunk-size", po::value(&f.chunk)->default_value(f.chunk), "payload chunk on the wire (bytes, or K/M/G)")
      ("dataset", po::value(&o.data.dataset)->default_value(o.data.dataset), "digits, csv:PATH, idx:IMAGES,LABELS (features); kjv, text:PATH (byte tokens, for gpt)")
      ("data-dir", po::value(&o.data.data_dir), "dataset cache (default $SHOAL_DATA_DIR or ~/.cache/shoal)")
      ("partition", po::value(&f.partition)->default_value(f.partition), "this peer's part i/n, 0-based")
      ("partition-scheme", po::value(&o.data.partition_scheme)->default_value(o.data.partition_scheme), "iid or dirichlet:ALPHA")
      ("device", po::value(&o.data.device)->default_value(o.data.device), "auto, cpu or cuda[:N]")
      ("precision", po::value(&o.data.precision)->default_value(o.data.precision), "fp32, tf32, bf16 or fp16")
      ("metrics-out", po::value(&o.metrics_out), "one JSON object per step to FILE");
  d.add(DataParallelOptions(o.data, f.data_parallel));
  return d;
}

// Moves the parsed flags into the options; InvalidArgument names the flag.
inline Status ApplyPeerFlags(const boost::program_options::variables_map& vm, const PeerFlags& f, PeerOptions& o) {
  SHOAL_RETURN_IF_ERROR(ApplyDataParallelFlags(vm, f.data_parallel, o.data));
  o.task.dataset = o.data.dataset;
  SHOAL_RETURN_IF_ERROR(ApplyPartitionFlag(f.partition, o.data, &o.name));
  auto bytes = ParseByteSize(f.chunk);
  if (!bytes.ok() || *bytes < 1024 || *bytes > (1u << 30)) return Status::InvalidArgument("--chunk-size must be 1K..1G");
  o.chunk_bytes = static_cast<uint32_t>(*bytes);
  if (!(f.step_timeout_s > 0) || !(f.heartbeat_s > 0) || !(f.heartbeat_timeout_s > f.heartbeat_s) || !(f.join_timeout_s > 0))
    return Status::InvalidArgument("timeouts must be positive and --heartbeat-timeout above --heartbeat-interval");
  o.step_timeout_ms = Millis(f.step_timeout_s);
  o.heartbeat_interval_ms = Millis(f.heartbeat_s);
  o.heartbeat_timeout_ms = Millis(f.heartbeat_timeout_s);
  o.join_timeout_ms = Millis(f.join_timeout_s);
  return Status::Ok();
}

}  // namespace shoal::cli
