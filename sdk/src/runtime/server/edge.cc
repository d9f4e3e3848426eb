// An edge aggregator's side of the service (edge.h: the tree, and the link to the parent).
#include "runtime/server/service_impl.h"

#include <unistd.h>

#include "transport/zmq/security.h"

namespace shoal::aggregator {

Status Service::Impl::StartEdge() {
  if (o_.secagg.enabled || o_.dp.enabled() || o_.dp.distributed)
    return Status::InvalidArgument("--upstream with --secagg/--dp-*: secure aggregation and DP do not run per tier yet; "
                                   "see docs/DEPLOY.md, \"Aggregation in tiers\"");
  if (!o_.checkpoint_dir.empty() || o_.resume)
    return Status::InvalidArgument("--checkpoint-dir/--resume with --upstream: an edge keeps no model of its own (its "
                                   "parent checkpoints, and a restarted edge takes the parent's model at its next round)");
  if (o_.rounds) return Status::InvalidArgument("--rounds with --upstream: the parent decides the rounds");
  ClientOptions co;
  co.connect = o_.upstream;
  if (o_.upstream_name.empty()) o_.upstream_name = "edge-" + std::to_string(::getpid());
  co.name = o_.upstream_name;
  co.secret_key_file = o_.upstream_key;
  co.server_key = o_.upstream_server_key;
  co.insecure = o_.insecure;
  // The link's security rules, named by this program's flags (keys both or neither; a plain
  // link only to loopback, or with --insecure); an in-process link has no transport security.
  if (o_.upstream_channel) {
    if (!co.secret_key_file.empty() || !co.server_key.empty())
      return Status::InvalidArgument("--upstream-key/--upstream-server-key need a ZeroMQ link, not " + co.connect);
  } else {
    SHOAL_RETURN_IF_ERROR(transport::CheckSecurityFlags({.role = "edge aggregator",
                                                         .secret_key = co.secret_key_file,
                                                         .others_flag = "--upstream-server-key",
                                                         .others = co.server_key,
                                                         .others_what = "the parent's public key or .pub file",
                                                         .insecure = co.insecure,
                                                         .endpoints = {{"--upstream", co.connect}},
                                                         .secret_key_flag = "--upstream-key"})
                              .status());
    SHOAL_RETURN_IF_ERROR(ValidateClientOptions(co));
  }
  spdlog::info("edge: joining the parent aggregator {} as {}", co.connect, co.name);
  SHOAL_ASSIGN_OR_RETURN(edge_, EdgeLink::Start(co, o_.upstream_timeout_ms, o_.upstream_channel));

  // The parent's task becomes this aggregator's (Init builds the model, codecs and ingest
  // from the options; it then serves the parent's TaskConfig itself, verbatim).
  const TaskConfig& t = edge_->task();
  o_.model = t.model;
  o_.dataset = t.dataset;
  o_.seed = t.seed;
  o_.test_fraction = t.test_fraction;
  o_.codec = t.codec;
  o_.codec_down = t.codec_down;
  o_.codec_slow = t.codec_slow;
  o_.slow_below_mbps = t.slow_below_mbps;
  o_.batch_size = t.batch_size;
  o_.optimizer = t.optimizer;
  o_.strategy.learning_rate = t.optimizer.learning_rate;
  o_.strategy.local_epochs = t.local_epochs;
  o_.strategy.local_steps = t.local_steps;
  o_.strategy.name = t.optimizer.name == "demo" ? "demo" : "fedavg";  // validated in pairs; the sum is plain
  o_.standardize = t.feature_mean.empty() ? "off" : "on";
  spdlog::info("edge: serving the parent's task to its clients (this edge's own task flags do not apply): model {}, "
               "dataset {}, codec {}, codec-down {}", t.model, t.dataset, t.codec, t.codec_down);
  return Status::Ok();
}

Status Service::Impl::AdoptParentModel(EdgeOrder& order) {
  const std::string previous = global_hash_;
  SHOAL_RETURN_IF_ERROR(global_.Assign(order.model).WithContext("the parent's model"));
  global_hash_ = order.model_hash;
  // The parent's delta payload is relayed as it came: a client whose replica is its base
  // applies it exactly as this edge did, and holds the parent's model bit for bit.
  ReceivedModel* r = order.received ? &*order.received : nullptr;
  if (r && r->delta) {
    last_delta_ = LastDelta{std::move(r->payload), r->base_hash, r->delta_round};
  } else if (previous != global_hash_) {
    last_delta_.reset();  // the model came whole: clients not holding it get it whole
  }
  return Status::Ok();
}

void Service::Impl::ReportToParent(size_t reported, double train_loss) {
  if (reported < o_.min_results)
    return edge_->Fail(round_.number,
                       std::to_string(reported) + " updates, fewer than --min-results " + std::to_string(o_.min_results));
  const auto* partial = dynamic_cast<const PartialSumAccumulator*>(round_.accumulator.get());
  if (!partial) return edge_->Fail(round_.number, "internal: the edge's round has no partial sum");
  const ExactSum& sum = partial->sum();
  spdlog::info("edge: round {}: the partial sum of {} updates ({} examples) goes up", round_.number, sum.count(),
               sum.total_weight());
  edge_->Deliver(round_.number, sum.Serialize(), sum.total_weight(), train_loss);
}

}  // namespace shoal::aggregator
