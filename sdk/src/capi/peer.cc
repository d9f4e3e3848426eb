// The C ABI's serverless peer (shoal_peer_*) over shoal::RunPeer: the options as the C++
// PeerOptions (the layout checked tensor by tensor), the application's or the built-in
// trainer, a stop flag that is safe to set from a signal handler, and the per-step callback.
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "capi/capi.h"
#include "shoal/peer.h"

using shoal::Status;
using shoal::StatusCode;
using namespace shoal::capi;

struct shoal_peer {
  shoal::PeerOptions options;
  std::unique_ptr<shoal::Trainer> trainer;  // the application's; null with the built-in one
  bool builtin = false;                     // shoal_peer_use_builtin_trainer was called
  std::atomic<bool> stop{false};
  bool ran = false;
  std::string last_error;
};
static_assert(std::atomic<bool>::is_always_lock_free, "shoal_peer_stop must stay async-signal-safe");

namespace {

constexpr size_t kPeerOptionsAbi2 = SHOAL_SIZE_THROUGH(shoal_peer_options, step_user);

template <typename F>
shoal_status PeerGuard(const char* function, shoal_peer* peer, F&& body) {
  return HandleGuard(function, "peer", peer, std::forward<F>(body));
}

// The layout as tensors[0..n): named, ranked, sizes the product of the shape, and packed in
// order (offset i = the sum of the sizes before it), as shoal_task hands it out.
shoal::StatusOr<std::vector<shoal::TensorSpec>> Layout(const shoal_tensor* tensors, size_t n) {
  if (n > 0 && !tensors) return Status::InvalidArgument("num_tensors is " + std::to_string(n) + " but tensors is NULL");
  std::vector<shoal::TensorSpec> layout;
  size_t offset = 0;
  for (size_t i = 0; i < n; ++i) {
    const shoal_tensor& t = tensors[i];
    const std::string at = "tensors[" + std::to_string(i) + "]";
    if (!t.name || !t.name[0]) return Status::InvalidArgument(at + " has no name");
    if (t.rank == 0 || t.rank > 8 || !t.shape) return Status::InvalidArgument(at + " (" + t.name + ") needs a rank of 1-8 and a shape");
    shoal::TensorSpec spec{t.name, std::vector<int64_t>(t.shape, t.shape + t.rank)};
    size_t numel = 1;
    for (int64_t d : spec.shape) {
      if (d <= 0 || d > (int64_t{1} << 32)) return Status::InvalidArgument(at + " (" + t.name + ") has a dimension outside 1..2^32");
      numel *= static_cast<size_t>(d);
    }
    if (numel != t.size || t.offset != offset)
      return Status::InvalidArgument(at + " (" + t.name + "): offset " + std::to_string(t.offset) + " and size " +
                                     std::to_string(t.size) + " should be " + std::to_string(offset) + " and " +
                                     std::to_string(numel) + " (tensors packed in order)");
    offset += numel;
    layout.push_back(std::move(spec));
  }
  return layout;
}

Status ToPeerOptions(const shoal_peer_options& c, shoal::PeerOptions* o) {
  o->name = c.name ? std::string(c.name) : "peer-" + std::to_string(::getpid());
  o->listen = Str(c.listen, "tcp://127.0.0.1:7101");
  o->advertise = Str(c.advertise);
  const std::string bootstrap = Str(c.bootstrap);
  for (size_t start = 0; start < bootstrap.size();) {
    size_t end = bootstrap.find(',', start);
    if (end == std::string::npos) end = bootstrap.size();
    std::string one = bootstrap.substr(start, end - start);
    one.erase(0, one.find_first_not_of(' '));
    one.erase(one.find_last_not_of(' ') + 1);
    if (!one.empty()) o->bootstrap.push_back(one);
    start = end + 1;
  }
  o->secret_key_file = Str(c.secret_key_file);
  o->allow_keys = Str(c.allow_keys);
  o->insecure = c.insecure != 0;
  o->mode = Str(c.mode, "allgather");
  o->task.model = Str(c.model, "mlp");
  SHOAL_ASSIGN_OR_RETURN(o->task.layout, Layout(c.tensors, c.num_tensors));
  if (c.initial_params) {
    // Without a layout (the built-in trainer's model gives it), RunPeer checks the size.
    if (!o->task.layout.empty() && c.num_initial_params != shoal::LayoutSize(o->task.layout))
      return Status::InvalidArgument("num_initial_params is " + std::to_string(c.num_initial_params) +
                                     ", the layout holds " + std::to_string(shoal::LayoutSize(o->task.layout)));
    o->initial_params.assign(c.initial_params, c.initial_params + c.num_initial_params);
  }
  o->task.optimizer.name = Str(c.optimizer, "sgd");
  o->task.optimizer.learning_rate = c.learning_rate;
  o->task.optimizer.momentum = c.momentum;
  o->task.optimizer.weight_decay = c.weight_decay;
  o->task.batch_size = c.batch_size;
  o->task.seed = c.seed;
  o->task.codec = Str(c.codec, "none");
  o->steps = c.steps;
  o->min_peers = c.min_peers;
  o->step_timeout_ms = c.step_timeout_ms;
  o->heartbeat_interval_ms = c.heartbeat_interval_ms;
  o->heartbeat_timeout_ms = c.heartbeat_timeout_ms;
  o->join_timeout_ms = c.join_timeout_ms;
  o->diloco_inner_steps = c.diloco_inner_steps;
  o->diloco_outer_lr = c.diloco_outer_lr;
  o->diloco_outer_momentum = c.diloco_outer_momentum;
  o->gossip_k = c.gossip_k;
  o->eval_every = c.eval_every;
  o->metrics_out = Str(c.metrics_out);
  if (c.struct_size >= SHOAL_SIZE_THROUGH(shoal_peer_options, overlap)) o->overlap = c.overlap != 0;
  if (o->step_timeout_ms == 0 || o->heartbeat_interval_ms == 0 || o->join_timeout_ms == 0 ||
      o->heartbeat_timeout_ms <= o->heartbeat_interval_ms)
    return Status::InvalidArgument("timeouts must be positive and heartbeat_timeout_ms above heartbeat_interval_ms");
  if (o->task.batch_size == 0) return Status::InvalidArgument("batch_size must be positive");
  if (c.on_step) {
    o->on_step = [fn = c.on_step, user = c.step_user](const shoal::PeerStep& s) {
      shoal_peer_step cs{};
      cs.struct_size = sizeof cs;
      cs.step = s.step;
      cs.members = static_cast<uint32_t>(s.members);
      cs.included = static_cast<uint32_t>(s.included);
      cs.train_loss = s.loss;
      cs.model_hash = s.model_hash.c_str();
      cs.params = s.params.data();
      cs.num_params = s.params.size();
      fn(user, &cs);
    };
  }
  return Status::Ok();
}

}  // namespace

extern "C" {

shoal_status shoal_peer_options_init(shoal_peer_options* options, size_t struct_size) {
  return Guard([&]() -> shoal_status {
    if (!options) return Fail(StatusCode::kInvalidArgument, "shoal_peer_options_init: options is NULL");
    SHOAL_RETURN_IF_ERROR_C(CheckSize<shoal_peer_options>("shoal_peer_options", struct_size, kPeerOptionsAbi2));
    const shoal::PeerOptions d;
    std::memset(options, 0, struct_size);
    options->struct_size = struct_size;
    options->listen = "tcp://127.0.0.1:7101";
    options->mode = "allgather";
    options->model = "mlp";
    options->optimizer = "sgd";
    options->learning_rate = d.task.optimizer.learning_rate;
    options->momentum = d.task.optimizer.momentum;
    options->weight_decay = d.task.optimizer.weight_decay;
    options->batch_size = d.task.batch_size;
    options->codec = "none";
    options->min_peers = d.min_peers;
    options->step_timeout_ms = d.step_timeout_ms;
    options->heartbeat_interval_ms = d.heartbeat_interval_ms;
    options->heartbeat_timeout_ms = d.heartbeat_timeout_ms;
    options->join_timeout_ms = d.join_timeout_ms;
    options->diloco_inner_steps = d.diloco_inner_steps;
    options->diloco_outer_lr = d.diloco_outer_lr;
    options->diloco_outer_momentum = d.diloco_outer_momentum;
    options->gossip_k = d.gossip_k;
    options->eval_every = d.eval_every;
    return SHOAL_OK;
  });
}

shoal_status shoal_peer_create(const shoal_peer_options* options, shoal_peer** peer) {
  return Guard([&]() -> shoal_status {
    if (!peer) return Fail(StatusCode::kInvalidArgument, "shoal_peer_create: peer (the out pointer) is NULL");
    *peer = nullptr;
    if (!options) return Fail(StatusCode::kInvalidArgument, "shoal_peer_create: options is NULL");
    SHOAL_RETURN_IF_ERROR_C(CheckSize<shoal_peer_options>("shoal_peer_options", options->struct_size, kPeerOptionsAbi2));
    InitLogRouting();
    auto p = std::make_unique<shoal_peer>();
    SHOAL_RETURN_IF_ERROR_C(ToPeerOptions(*options, &p->options));
    *peer = p.release();
    return SHOAL_OK;
  });
}

shoal_status shoal_peer_set_trainer(shoal_peer* peer, const shoal_trainer* trainer) {
  return PeerGuard("shoal_peer_set_trainer", peer, [&]() -> shoal_status {
    if (!trainer) return Fail(StatusCode::kInvalidArgument, "shoal_peer_set_trainer: trainer is NULL");
    SHOAL_RETURN_IF_ERROR_C(CheckCTrainer(*trainer));
    if (peer->ran) return Fail(StatusCode::kFailedPrecondition, "the peer has run; set the trainer before running it");
    peer->trainer = MakeCTrainer(*trainer);
    peer->builtin = false;
    return SHOAL_OK;
  });
}

shoal_status shoal_peer_use_builtin_trainer(shoal_peer* peer, const shoal_builtin_options* options) {
  return PeerGuard("shoal_peer_use_builtin_trainer", peer, [&]() -> shoal_status {
    if (!options) return Fail(StatusCode::kInvalidArgument, "shoal_peer_use_builtin_trainer: options is NULL");
    auto b = BuiltinOptions(options);
    if (!b.ok()) return Fail(b.status());
    if (peer->ran) return Fail(StatusCode::kFailedPrecondition, "the peer has run; choose the trainer before running it");
    peer->options.data = std::move(*b);
    peer->options.task.dataset = peer->options.data.dataset;
    peer->trainer.reset();
    peer->builtin = true;
    return SHOAL_OK;
  });
}

shoal_status shoal_peer_run(shoal_peer* peer) {
  return PeerGuard("shoal_peer_run", peer, [&]() -> shoal_status {
    if (peer->ran) return Fail(StatusCode::kFailedPrecondition, "this peer has run; create a new peer");
    if (!peer->trainer && !peer->builtin)
      return Fail(StatusCode::kFailedPrecondition,
                  "no trainer: call shoal_peer_set_trainer or shoal_peer_use_builtin_trainer first");
    peer->ran = true;
    const Status st = shoal::RunPeer(peer->options, std::move(peer->trainer), peer->stop);
    return Result(st.code() == StatusCode::kCancelled && peer->stop.load() ? Status::Ok() : st);
  });
}

shoal_status shoal_peer_stop(shoal_peer* peer) {
  if (!peer) return Guard([] { return Fail(StatusCode::kInvalidArgument, "shoal_peer_stop: peer is NULL"); });
  peer->stop.store(true);  // an atomic store only: callable from a signal handler
  return SHOAL_OK;
}

const char* shoal_peer_last_error(const shoal_peer* peer) {
  if (!peer) return "shoal_peer_last_error: peer is NULL";
  return peer->last_error.c_str();
}

void shoal_peer_destroy(shoal_peer* peer) { delete peer; }

}  // extern "C"
