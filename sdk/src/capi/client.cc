// The C ABI's federated client (shoal_client_*) over shoal::Client.
#include <atomic>
#include <cstring>
#include <memory>
#include <string>

#include "capi/capi.h"
#include "shoal/client.h"

static_assert(static_cast<int>(shoal::ClientEvent::Kind::kFinished) == SHOAL_EVENT_FINISHED);

using shoal::Status;
using shoal::StatusCode;
using namespace shoal::capi;

struct shoal_client {
  shoal::ClientOptions options;
  std::unique_ptr<shoal::Trainer> trainer;  // until the run starts; then owned by `client`
  // Created at the first run/step by the thread that runs the client. `running` publishes it
  // to shoal_client_cancel/get_stats on other threads (lock-free: cancel is signal-safe).
  std::unique_ptr<shoal::Client> client;
  std::atomic<shoal::Client*> running{nullptr};
  std::atomic<bool> cancelled{false};
  bool over = false;  // the run has ended
  std::string last_error;

  // Creates the C++ client at the first run/step.
  Status Start() {
    if (client) return Status::Ok();
    if (!trainer)
      return Status::FailedPrecondition("no trainer: call shoal_client_set_trainer or shoal_client_use_builtin_trainer first");
    client = std::make_unique<shoal::Client>(options, std::move(trainer));
    running.store(client.get());
    if (cancelled.load()) client->Cancel();  // a cancel that saw running == nullptr
    return Status::Ok();
  }
};
static_assert(std::atomic<shoal::Client*>::is_always_lock_free && std::atomic<bool>::is_always_lock_free,
              "shoal_client_cancel must stay async-signal-safe");

namespace {

// What a caller's struct_size must cover: every field of ABI 1. Fields added later are read
// (or written) only when the caller's struct_size covers them.
constexpr size_t kClientOptionsAbi1 = SHOAL_SIZE_THROUGH(shoal_client_options, event_user);
constexpr size_t kClientStatsAbi1 = SHOAL_SIZE_THROUGH(shoal_client_stats, resyncs);
// The privacy policy block, read as one (all of it or none).
constexpr size_t kClientOptionsPolicy = SHOAL_SIZE_THROUGH(shoal_client_options, trusted_roster);

template <typename F>
shoal_status ClientGuard(const char* function, shoal_client* client, F&& body) {
  return HandleGuard(function, "client", client, std::forward<F>(body));
}

}  // namespace

extern "C" {

shoal_status shoal_client_options_init(shoal_client_options* options, size_t struct_size) {
  return Guard([&]() -> shoal_status {
    if (!options) return Fail(StatusCode::kInvalidArgument, "shoal_client_options_init: options is NULL");
    SHOAL_RETURN_IF_ERROR_C(CheckSize<shoal_client_options>("shoal_client_options", struct_size, kClientOptionsAbi1));
    const shoal::ClientOptions d;
    std::memset(options, 0, struct_size);
    options->struct_size = struct_size;
    options->connect = "tcp://127.0.0.1:7070";
    options->connect_timeout_ms = d.connect_timeout_ms;
    options->reconnect_timeout_ms = d.reconnect_timeout_ms;
    options->max_handshake_failures = d.max_handshake_failures;
    if (struct_size >= kClientOptionsPolicy) {
      options->min_neighbours = d.privacy.min_neighbours;
      options->min_threshold = d.privacy.min_threshold;
      options->min_roster = d.privacy.min_roster;
    }
    return SHOAL_OK;
  });
}

shoal_status shoal_client_create(const shoal_client_options* options, shoal_client** client) {
  return Guard([&]() -> shoal_status {
    if (!client) return Fail(StatusCode::kInvalidArgument, "shoal_client_create: client (the out pointer) is NULL");
    *client = nullptr;
    if (!options) return Fail(StatusCode::kInvalidArgument, "shoal_client_create: options is NULL");
    SHOAL_RETURN_IF_ERROR_C(CheckSize<shoal_client_options>("shoal_client_options", options->struct_size, kClientOptionsAbi1));
    if (options->connect_timeout_ms == 0 || options->reconnect_timeout_ms == 0)
      return Fail(StatusCode::kInvalidArgument, "connect_timeout_ms and reconnect_timeout_ms must be positive");
    InitLogRouting();
    auto c = std::make_unique<shoal_client>();
    c->options.connect = Str(options->connect, "tcp://127.0.0.1:7070");
    c->options.name = Str(options->name);
    c->options.secret_key_file = Str(options->secret_key_file);
    c->options.server_key = Str(options->server_key);
    c->options.insecure = options->insecure != 0;
    c->options.connect_timeout_ms = options->connect_timeout_ms;
    c->options.reconnect_timeout_ms = options->reconnect_timeout_ms;
    c->options.max_handshake_failures = options->max_handshake_failures;
    if (options->struct_size >= kClientOptionsPolicy) {
      shoal::ClientPrivacyPolicy& p = c->options.privacy;
      p.require_secagg = options->require_secagg != 0;
      p.min_noise_multiplier = options->min_noise_multiplier;
      p.max_clip = options->max_clip;
      p.min_neighbours = options->min_neighbours;
      p.min_threshold = options->min_threshold;
      p.min_roster = options->min_roster;
      p.colluding_fraction = options->colluding_fraction;
      p.trusted_roster = Str(options->trusted_roster);
    }
    if (options->on_event) {
      c->options.on_event = [fn = options->on_event, user = options->event_user](const shoal::ClientEvent& e) {
        shoal_event ce{};
        ce.struct_size = sizeof ce;
        ce.kind = static_cast<int>(e.kind);
        ce.round = e.round;
        ce.progress = e.progress;
        ce.train_loss = e.train_loss;
        ce.bytes_sent = e.bytes_sent;
        ce.bytes_received = e.bytes_received;
        ce.seconds = e.seconds;
        ce.message = e.message.c_str();
        fn(user, &ce);
      };
    }
    *client = c.release();
    return SHOAL_OK;
  });
}

shoal_status shoal_client_set_trainer(shoal_client* client, const shoal_trainer* trainer) {
  return ClientGuard("shoal_client_set_trainer", client, [&]() -> shoal_status {
    if (!trainer) return Fail(StatusCode::kInvalidArgument, "shoal_client_set_trainer: trainer is NULL");
    SHOAL_RETURN_IF_ERROR_C(CheckCTrainer(*trainer));
    if (client->client)
      return Fail(StatusCode::kFailedPrecondition, "the client has started; set the trainer before running it");
    client->trainer = MakeCTrainer(*trainer);
    return SHOAL_OK;
  });
}

shoal_status shoal_client_use_builtin_trainer(shoal_client* client, const shoal_builtin_options* options) {
  return ClientGuard("shoal_client_use_builtin_trainer", client, [&]() -> shoal_status {
    if (!options) return Fail(StatusCode::kInvalidArgument, "shoal_client_use_builtin_trainer: options is NULL");
    auto b = BuiltinOptions(options);
    if (!b.ok()) return Fail(b.status());
    if (client->client)
      return Fail(StatusCode::kFailedPrecondition, "the client has started; choose the trainer before running it");
    auto trainer = shoal::MakeBuiltinTrainer(*b);
    if (!trainer.ok()) return Fail(trainer.status());
    client->trainer = std::move(*trainer);
    return SHOAL_OK;
  });
}

shoal_status shoal_client_run(shoal_client* client) {
  return ClientGuard("shoal_client_run", client, [&]() -> shoal_status {
    if (client->over) return Fail(StatusCode::kFailedPrecondition, "this client's run is over; create a new client");
    SHOAL_RETURN_IF_ERROR_C(client->Start());
    client->over = true;  // also if Run throws: a client that failed that way is not run again
    return Result(client->client->Run());
  });
}

shoal_status shoal_client_step(shoal_client* client, uint32_t timeout_ms, int* finished) {
  if (finished) *finished = 1;  // until the step has run: any failure ends the caller's loop
  return ClientGuard("shoal_client_step", client, [&]() -> shoal_status {
    SHOAL_RETURN_IF_ERROR_C(client->Start());
    bool done = false;
    const Status st = client->client->Poll(timeout_ms, &done);
    if (done) client->over = true;
    // Poll fails only with the run's result (done); anything else would be a bug, and ends it.
    if (finished && st.ok() && !done) *finished = 0;
    return Result(st);
  });
}

shoal_status shoal_client_cancel(shoal_client* client) {
  if (!client) return Guard([] { return Fail(StatusCode::kInvalidArgument, "shoal_client_cancel: client is NULL"); });
  // Atomics only: callable from a signal handler. Start() rechecks `cancelled` after it
  // publishes `running`, so a cancel racing with the start is never lost.
  client->cancelled.store(true);
  if (shoal::Client* c = client->running.load()) c->Cancel();
  return SHOAL_OK;
}

shoal_status shoal_client_get_stats(const shoal_client* client, shoal_client_stats* stats) {
  if (!client) return Guard([] { return Fail(StatusCode::kInvalidArgument, "shoal_client_get_stats: client is NULL"); });
  return Guard([&]() -> shoal_status {
    if (!stats) return Fail(StatusCode::kInvalidArgument, "shoal_client_get_stats: stats is NULL");
    SHOAL_RETURN_IF_ERROR_C(CheckSize<shoal_client_stats>("shoal_client_stats", stats->struct_size, kClientStatsAbi1));
    shoal::Client::Stats s;
    if (const shoal::Client* c = client->running.load()) s = c->stats();
    // Every field below is ABI 1, inside kClientStatsAbi1; later fields go only where the
    // caller's struct_size covers them.
    stats->rounds_trained = s.rounds_trained;
    stats->bytes_sent = s.bytes_sent;
    stats->bytes_received = s.bytes_received;
    stats->reconnects = s.reconnects;
    stats->errors_received = s.errors_received;
    stats->resyncs = s.resyncs;
    return SHOAL_OK;
  });
}

const char* shoal_client_last_error(const shoal_client* client) {
  if (!client) return "shoal_client_last_error: client is NULL";
  return client->last_error.c_str();
}

void shoal_client_destroy(shoal_client* client) {
  if (!client) return;
  // Cancel (atomics), then delete: the C++ client's destructor stops and joins its training
  // thread, and the trainer's destroy callback runs. Destructors are noexcept.
  if (shoal::Client* c = client->running.load()) c->Cancel();
  delete client;
}

}  // extern "C"
