// shoal-peer: serverless training with other peers, no aggregator (shoal/peer.h).
#include <boost/program_options.hpp>
#include <spdlog/spdlog.h>

#include <cmath>
#include <iostream>

#include "cli/cli.h"
#include "cli/options.h"
#include "cli/data_parallel_flags.h"
#include "shoal/config.h"
#include "shoal/peer.h"
#include "peer_metrics.h"

namespace po = boost::program_options;

namespace {
constexpr const char* kProgram = "shoal-peer";
uint32_t Millis(double s) { return static_cast<uint32_t>(std::llround(s * 1000.0)); }
}  // namespace

int main(int argc, char** argv) {
  shoal::PeerOptions o;
  std::string config_file, log_level, partition = "0/1", chunk = "16M", metrics_listen;
  std::string log_format = "text";
  double step_timeout_s = 2, heartbeat_s = 0.2, heartbeat_timeout_s = 2, join_timeout_s = 30;
  o.task.model = "mlp";
  o.task.dataset = "digits";
  o.task.optimizer.learning_rate = 0.1f;

  po::options_description opts(
      "Usage: shoal-peer [options]\n\n"
      "Trains one model together with other shoal-peer processes, with no aggregator. The first\n"
      "peer (no --peers) founds the swarm and its task; the others join through any member.\n"
      "Every peer may be given the same --peers list, its own address included: the first\n"
      "listed founds the swarm when no other answers.\n"
      "Example (three terminals):\n"
      "  shoal-peer --listen tcp://127.0.0.1:7101 --name p0 --partition 0/3 --min-peers 3 --steps 300\n"
      "  shoal-peer --listen tcp://127.0.0.1:7102 --name p1 --partition 1/3 --peers tcp://127.0.0.1:7101\n"
      "  shoal-peer --listen tcp://127.0.0.1:7103 --name p2 --partition 2/3 --peers tcp://127.0.0.1:7101\n\n"
      "Options");
  opts.add_options()
      ("help,h", "show this help and exit")
      ("version", "print the version and exit")
      ("config", po::value(&config_file), "read options from FILE (key = value lines)")
      ("log-level", po::value(&log_level)->default_value("info"), "trace, debug, info, warn, error or off")
      ("log-format", po::value(&log_format)->default_value(log_format), "text, or json (one object per line)")
      ("name", po::value(&o.name), "this peer's name, unique in the swarm (default: HOST-partI-of-N)")
      ("listen", po::value(&o.listen)->default_value(o.listen), "this peer's endpoint")
      ("advertise", po::value(&o.advertise), "the endpoint other peers reach this one at (default: --listen)")
      ("peers", po::value(&o.bootstrap)->multitoken(), "peers to join through: ENDPOINT, or ENDPOINT@KEY_OR_PUBFILE with --secret-key")
      ("secret-key", po::value(&o.secret_key_file), "this peer's key file (PREFIX.key from shoal-keygen)")
      ("allow-keys", po::value(&o.allow_keys), "the peers' public keys: a file (one per line) or a directory of .pub files")
      ("insecure", po::bool_switch(&o.insecure), "non-loopback links without encryption or authentication")
      ("mode", po::value(&o.mode)->default_value(o.mode), "allgather (DeMo / DDP-like, commit log), allreduce (DDP over a ring all-reduce), diloco or gossip")
      ("steps", po::value(&o.steps)->default_value(0), "stop after N steps (0 = until SIGTERM)")
      ("min-peers", po::value(&o.min_peers)->default_value(o.min_peers), "step 1 waits for this many members")
      ("model", po::value(&o.task.model)->default_value(o.task.model), "model spec: mlp, mlp:H1,H2,..., linear; gpt[:layers=L,dim=D,heads=H,ctx=T] on text")
      ("client-optimizer", po::value(&o.task.optimizer.name)->default_value("sgd"), "sgd, adamw or demo (allgather); diloco's inner optimizer")
      ("lr", po::value(&o.task.optimizer.learning_rate)->default_value(o.task.optimizer.learning_rate), "learning rate")
      ("momentum", po::value(&o.task.optimizer.momentum)->default_value(0.0f), "sgd momentum")
      ("weight-decay", po::value(&o.task.optimizer.weight_decay)->default_value(0.0f), "weight decay")
      ("client-demo-decay", po::value(&o.task.optimizer.demo_decay)->default_value(o.task.optimizer.demo_decay), "demo: momentum decay")
      ("client-demo-chunk", po::value(&o.task.optimizer.demo_chunk)->default_value(o.task.optimizer.demo_chunk), "demo: DCT chunk side")
      ("client-demo-topk", po::value(&o.task.optimizer.demo_topk)->default_value(o.task.optimizer.demo_topk), "demo: coefficients per chunk")
      ("batch-size", po::value(&o.task.batch_size)->default_value(o.task.batch_size), "minibatch size per peer and step")
      ("seed", po::value(&o.task.seed)->default_value(0), "model init, data split and partitions")
      ("test-fraction", po::value(&o.task.test_fraction)->default_value(o.task.test_fraction), "held-out share of the dataset")
      ("standardize", po::value(&o.standardize)->default_value(o.standardize),
       "founder: scale each feature by the training split's mean and standard deviation, for every peer: auto (on for csv:), on, off")
      ("codec", po::value(&o.task.codec)->default_value("none"), "update codec, e.g. demo:chunk=64,topk=8,bits=1, int8, ef|topk:ratio=0.01|int8; on a ring: none, bf16, fp16 or int8")
      ("diloco-inner-steps", po::value(&o.diloco_inner_steps)->default_value(o.diloco_inner_steps), "diloco: inner steps H per outer step")
      ("diloco-outer-lr", po::value(&o.diloco_outer_lr)->default_value(o.diloco_outer_lr), "diloco: outer Nesterov learning rate")
      ("diloco-outer-momentum", po::value(&o.diloco_outer_momentum)->default_value(o.diloco_outer_momentum), "diloco: outer momentum")
      ("diloco-allreduce", po::bool_switch(&o.diloco_allreduce), "diloco: sum the pseudo-gradients with the ring all-reduce (dense, or --codec int8/bf16 per hop)")
      ("overlap", po::bool_switch(&o.overlap), "allgather/diloco: compute step t's update from the replica after step t-2, so the exchange of each step overlaps the next step's work (one step of delay)")
      ("gossip-k", po::value(&o.gossip_k)->default_value(o.gossip_k), "gossip: members each peer averages with per step")
      ("eval-every", po::value(&o.eval_every)->default_value(o.eval_every), "held-out evaluation every N steps (0 = only at the end)")
      ("step-timeout", po::value(&step_timeout_s)->default_value(step_timeout_s), "seconds the step leader waits for updates")
      ("heartbeat-interval", po::value(&heartbeat_s)->default_value(heartbeat_s), "seconds between heartbeats")
      ("heartbeat-timeout", po::value(&heartbeat_timeout_s)->default_value(heartbeat_timeout_s), "seconds of silence before a member is dropped")
      ("join-timeout", po::value(&join_timeout_s)->default_value(join_timeout_s), "seconds to wait for the bootstrap peers")
      ("chunk-size", po::value(&chunk)->default_value(chunk), "payload chunk on the wire (bytes, or K/M/G)")
      ("dataset", po::value(&o.data.dataset)->default_value(o.data.dataset), "digits, csv:PATH, idx:IMAGES,LABELS (features); kjv, text:PATH (byte tokens, for gpt)")
      ("data-dir", po::value(&o.data.data_dir), "dataset cache (default $SHOAL_DATA_DIR or ~/.cache/shoal)")
      ("partition", po::value(&partition)->default_value(partition), "this peer's part i/n, 0-based")
      ("partition-scheme", po::value(&o.data.partition_scheme)->default_value(o.data.partition_scheme), "iid or dirichlet:ALPHA")
      ("device", po::value(&o.data.device)->default_value(o.data.device), "auto, cpu or cuda[:N]")
      ("precision", po::value(&o.data.precision)->default_value(o.data.precision), "fp32, tf32, bf16 or fp16")
      ("metrics-out", po::value(&o.metrics_out), "one JSON object per step to FILE")
      ("metrics-listen", po::value(&metrics_listen),
       "serve Prometheus metrics at http://HOST:PORT/metrics (HOST:PORT, or PORT alone for 127.0.0.1)");

  shoal::cli::DataParallelFlags dp;
  opts.add(shoal::cli::DataParallelOptions(o.data, dp));
  po::variables_map vm;
  if (auto code = shoal::cli::ParseOptions(argc, argv, opts, vm, kProgram)) return *code;
  if (auto st = shoal::cli::InitLogging(log_level, "peer", log_format); !st.ok()) return shoal::cli::Fail(kProgram, st.message(), 2);
  if (auto st = shoal::cli::ApplyDataParallelFlags(vm, dp, o.data); !st.ok()) return shoal::cli::Fail(kProgram, st.message(), 2);
  o.task.dataset = o.data.dataset;
  if (auto st = shoal::cli::ApplyPartitionFlag(partition, o.data, &o.name); !st.ok())
    return shoal::cli::Fail(kProgram, st.message(), 2);
  auto bytes = shoal::cli::ParseByteSize(chunk);
  if (!bytes.ok() || *bytes < 1024 || *bytes > (1u << 30)) return shoal::cli::Fail(kProgram, "--chunk-size must be 1K..1G", 2);
  o.chunk_bytes = static_cast<uint32_t>(*bytes);
  if (!(step_timeout_s > 0) || !(heartbeat_s > 0) || !(heartbeat_timeout_s > heartbeat_s) || !(join_timeout_s > 0))
    return shoal::cli::Fail(kProgram, "timeouts must be positive and --heartbeat-timeout above --heartbeat-interval", 2);
  o.step_timeout_ms = Millis(step_timeout_s);
  o.heartbeat_interval_ms = Millis(heartbeat_s);
  o.heartbeat_timeout_ms = Millis(heartbeat_timeout_s);
  o.join_timeout_ms = Millis(join_timeout_s);
  std::unique_ptr<shoal::telemetry::MetricsEndpoint> endpoint;
  if (!metrics_listen.empty()) {
    auto metrics = std::make_shared<shoal::telemetry::PeerMetrics>();
    auto started = shoal::telemetry::MetricsEndpoint::Start(metrics_listen, kProgram, metrics);
    if (!started.ok()) return shoal::cli::Fail(kProgram, started.status());
    endpoint = std::move(*started);
    o.on_step = [metrics](const shoal::PeerStep& s) { metrics->OnStep(s); };
    spdlog::info("Prometheus metrics at http://{}/metrics", endpoint->address());
  }
  auto& stop = shoal::cli::InstallStopSignals();
  shoal::Status st = shoal::RunPeer(o, stop);
  if (st.ok() || st.code() == shoal::StatusCode::kCancelled) return 0;
  return shoal::cli::Fail(kProgram, st);
}
