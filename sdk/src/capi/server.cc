// The C ABI's aggregator (shoal_server_*) over shoal::Server: the options as the C++
// ServerOptions, the application's evaluator (shoal_evaluator callbacks) behind
// shoal::Evaluator, and the round callback.
#include <cmath>
#include <cstring>
#include <memory>
#include <string>

#include "capi/capi.h"
#include "shoal/server.h"

using shoal::Status;
using shoal::StatusCode;
using namespace shoal::capi;

struct shoal_server {
  std::unique_ptr<shoal::Server> server;
  std::string endpoint;
  std::string last_error;
};

// What evaluate() may add to through shoal_eval_metric: the evaluation being filled.
struct shoal_eval_context {
  shoal::Evaluation* out = nullptr;
};

namespace {

constexpr size_t kServerOptionsAbi3 = SHOAL_SIZE_THROUGH(shoal_server_options, round_user);

template <typename F>
shoal_status ServerGuard(const char* function, shoal_server* server, F&& body) {
  return HandleGuard(function, "server", server, std::forward<F>(body));
}

class CEvaluator final : public shoal::Evaluator {
 public:
  // Copies sizeof(shoal_evaluator): version 1, the only one this library accepts.
  explicit CEvaluator(const shoal_evaluator& e) : e_(e) {}
  ~CEvaluator() override {
    if (e_.destroy) e_.destroy(e_.user);
  }
  CEvaluator(const CEvaluator&) = delete;
  CEvaluator& operator=(const CEvaluator&) = delete;

  Status Configure(const shoal::TaskConfig& task) override {
    if (!e_.configure) return Status::Ok();
    const CTask ct(task);
    char error[kErrorBytes] = "";
    const int rc = e_.configure(e_.user, ct.get(), error, sizeof error);
    error[sizeof error - 1] = '\0';
    return rc == 0 ? Status::Ok() : CallbackStatus("evaluator", "configure", rc, error);
  }

  Status Evaluate(std::span<const float> global, uint64_t round, shoal::Evaluation* out) override {
    shoal_eval_context context{out};
    char error[kErrorBytes] = "";
    double loss = NAN, accuracy = NAN;
    const int rc = e_.evaluate(e_.user, round, global.data(), global.size(), &context, &loss, &accuracy, error,
                               sizeof error);
    error[sizeof error - 1] = '\0';
    if (rc != 0) return CallbackStatus("evaluator", "evaluate", rc, error);
    out->loss = loss;
    out->accuracy = accuracy;
    return Status::Ok();
  }

 private:
  shoal_evaluator e_;
};

Status ToServerOptions(const shoal_server_options& c, shoal::ServerOptions* o) {
  o->listen = Str(c.listen, o->listen.c_str());
  o->secret_key = Str(c.secret_key_file);
  o->allow_keys = Str(c.allow_keys);
  o->insecure = c.insecure != 0;
  o->rounds = c.rounds;
  o->min_clients = c.min_clients;
  o->fraction = c.fraction;
  o->min_results = c.min_results;
  o->round_timeout_ms = c.round_timeout_ms;
  o->heartbeat_interval_ms = c.heartbeat_interval_ms;
  o->heartbeat_timeout_ms = c.heartbeat_timeout_ms;
  o->max_clients = c.max_clients;
  o->max_update_norm = c.max_update_norm;
  o->model = Str(c.model, o->model.c_str());
  o->dataset = Str(c.dataset, o->dataset.c_str());
  o->data_dir = Str(c.data_dir);
  o->seed = c.seed;
  o->test_fraction = c.test_fraction;
  o->standardize = Str(c.standardize, o->standardize.c_str());
  o->strategy.name = Str(c.strategy, o->strategy.name.c_str());
  o->strategy.learning_rate = c.learning_rate;
  o->strategy.local_epochs = c.local_epochs;
  o->strategy.local_steps = c.local_steps;
  o->strategy.server_learning_rate = c.server_learning_rate;
  o->batch_size = c.batch_size;
  o->optimizer.name = Str(c.optimizer, o->optimizer.name.c_str());
  o->optimizer.momentum = c.momentum;
  o->optimizer.weight_decay = c.weight_decay;
  o->codec = Str(c.codec, o->codec.c_str());
  o->codec_down = Str(c.codec_down);
  o->secagg.enabled = c.secagg != 0;
  o->dp.clip = c.dp_clip;
  o->dp.noise_multiplier = c.dp_noise_multiplier;
  o->dp.distributed = o->secagg.enabled;  // the CLI's default (--dp-mode)
  o->metrics_out = Str(c.metrics_out);
  o->checkpoint_dir = Str(c.checkpoint_dir);
  o->resume = c.resume != 0;
  o->print_table = c.print_table != 0;
  if (c.on_round) {
    o->on_round = [fn = c.on_round, user = c.round_user](const shoal::RoundReport& r) {
      shoal_round_report cr{};
      cr.struct_size = sizeof cr;
      cr.round = r.round;
      cr.clients_selected = static_cast<uint32_t>(r.clients_selected);
      cr.clients_reported = static_cast<uint32_t>(r.clients_reported);
      cr.clients_dropped = static_cast<uint32_t>(r.clients_dropped);
      cr.clients_registered = static_cast<uint32_t>(r.clients_registered);
      cr.test_loss = r.test_loss;
      cr.test_accuracy = r.test_accuracy;
      cr.train_loss = r.train_loss;
      cr.bytes_up = r.bytes_up;
      cr.bytes_down = r.bytes_down;
      cr.seconds = r.seconds;
      cr.model_hash = r.model_hash.c_str();
      cr.model_updated = r.model_updated ? 1 : 0;
      cr.evaluations_failed = r.evaluations_failed;
      fn(user, &cr);
    };
  }
  return Status::Ok();
}

}  // namespace

extern "C" {

shoal_status shoal_eval_metric(shoal_eval_context* context, const char* name, double value) {
  return Guard([&]() -> shoal_status {
    if (!context || !context->out) return Fail(StatusCode::kInvalidArgument, "shoal_eval_metric: context is NULL");
    if (!name) return Fail(StatusCode::kInvalidArgument, "shoal_eval_metric: name is NULL");
    context->out->metrics.emplace_back(name, value);  // the server checks the name
    return SHOAL_OK;
  });
}

shoal_status shoal_server_options_init(shoal_server_options* options, size_t struct_size) {
  return Guard([&]() -> shoal_status {
    if (!options) return Fail(StatusCode::kInvalidArgument, "shoal_server_options_init: options is NULL");
    SHOAL_RETURN_IF_ERROR_C(CheckSize<shoal_server_options>("shoal_server_options", struct_size, kServerOptionsAbi3));
    const shoal::ServerOptions d;
    std::memset(options, 0, struct_size);
    options->struct_size = struct_size;
    options->listen = "tcp://0.0.0.0:7070";  // = the C++ default tcp://*:7070 (all interfaces)
    options->rounds = d.rounds;
    options->min_clients = d.min_clients;
    options->fraction = d.fraction;
    options->min_results = d.min_results;
    options->round_timeout_ms = d.round_timeout_ms;
    options->heartbeat_interval_ms = d.heartbeat_interval_ms;
    options->heartbeat_timeout_ms = d.heartbeat_timeout_ms;
    options->max_clients = d.max_clients;
    options->max_update_norm = d.max_update_norm;
    options->model = "mlp";
    options->dataset = "digits";
    options->seed = d.seed;
    options->test_fraction = d.test_fraction;
    options->standardize = "auto";
    options->strategy = "fedavg";
    options->learning_rate = d.strategy.learning_rate;
    options->local_epochs = d.strategy.local_epochs;
    options->local_steps = d.strategy.local_steps;
    options->batch_size = d.batch_size;
    options->optimizer = "sgd";
    options->momentum = d.optimizer.momentum;
    options->weight_decay = d.optimizer.weight_decay;
    options->server_learning_rate = d.strategy.server_learning_rate;
    options->codec = "none";
    options->dp_clip = d.dp.clip;
    options->dp_noise_multiplier = d.dp.noise_multiplier;
    options->print_table = 0;  // a library does not write to the application's stdout unasked
    return SHOAL_OK;
  });
}

shoal_status shoal_server_create(const shoal_server_options* options, shoal_server** server) {
  return Guard([&]() -> shoal_status {
    if (!server) return Fail(StatusCode::kInvalidArgument, "shoal_server_create: server (the out pointer) is NULL");
    *server = nullptr;
    if (!options) return Fail(StatusCode::kInvalidArgument, "shoal_server_create: options is NULL");
    SHOAL_RETURN_IF_ERROR_C(
        CheckSize<shoal_server_options>("shoal_server_options", options->struct_size, kServerOptionsAbi3));
    InitLogRouting();
    shoal::ServerOptions o;
    SHOAL_RETURN_IF_ERROR_C(ToServerOptions(*options, &o));
    auto s = std::make_unique<shoal_server>();
    auto created = shoal::Server::Create(o);
    if (!created.ok()) return Fail(created.status());
    s->server = std::move(*created);
    s->endpoint = s->server->endpoint();
    *server = s.release();
    return SHOAL_OK;
  });
}

shoal_status shoal_server_set_evaluator(shoal_server* server, const shoal_evaluator* evaluator) {
  return ServerGuard("shoal_server_set_evaluator", server, [&]() -> shoal_status {
    if (!evaluator) return Result(server->server->SetEvaluator(nullptr));
    if (evaluator->version != SHOAL_EVALUATOR_VERSION)
      return Fail(StatusCode::kInvalidArgument, "shoal_evaluator.version is " + std::to_string(evaluator->version) +
                                                    "; this library knows version " +
                                                    std::to_string(SHOAL_EVALUATOR_VERSION) +
                                                    " (set it to SHOAL_EVALUATOR_VERSION)");
    if (!evaluator->evaluate) return Fail(StatusCode::kInvalidArgument, "shoal_evaluator.evaluate is NULL (required)");
    // Checked before the evaluator is wrapped, so that a refusal leaves `user` to the caller.
    if (Status st = server->server->SetEvaluator(nullptr); !st.ok()) return Fail(st);
    return Result(server->server->SetEvaluator(std::make_unique<CEvaluator>(*evaluator)));
  });
}

shoal_status shoal_server_run(shoal_server* server) {
  return ServerGuard("shoal_server_run", server, [&]() -> shoal_status { return Result(server->server->Run()); });
}

shoal_status shoal_server_step(shoal_server* server, uint32_t timeout_ms, int* finished) {
  return ServerGuard("shoal_server_step", server, [&]() -> shoal_status {
    if (!finished) return Fail(StatusCode::kInvalidArgument, "shoal_server_step: finished is NULL");
    bool done = false;
    const Status st = server->server->Poll(timeout_ms, &done);
    *finished = done ? 1 : 0;
    return Result(st);
  });
}

shoal_status shoal_server_stop(shoal_server* server) {
  if (!server) return Guard([] { return Fail(StatusCode::kInvalidArgument, "shoal_server_stop: server is NULL"); });
  server->server->Stop();  // an atomic store only: callable from a signal handler
  return SHOAL_OK;
}

shoal_status shoal_server_finish(shoal_server* server) {
  if (!server) return Guard([] { return Fail(StatusCode::kInvalidArgument, "shoal_server_finish: server is NULL"); });
  server->server->Finish();  // an atomic store only: callable from a signal handler
  return SHOAL_OK;
}

const char* shoal_server_endpoint(const shoal_server* server) { return server ? server->endpoint.c_str() : nullptr; }

const char* shoal_server_last_error(const shoal_server* server) {
  if (!server) return "shoal_server_last_error: server is NULL";
  return server->last_error.c_str();
}

void shoal_server_destroy(shoal_server* server) { delete server; }

}  // extern "C"
