// The C ABI (shoal/shoal.h) over the C++ API. Every entry point catches everything: no C++
// exception crosses into C, and misuse becomes a status with a message.
#include "shoal/shoal.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "shoal/client.h"
#include "shoal/config.h"
#include "shoal/data.h"
#include "shoal/trainer.h"

static_assert(SHOAL_OK == static_cast<int>(shoal::StatusCode::kOk));
static_assert(SHOAL_INVALID_ARGUMENT == static_cast<int>(shoal::StatusCode::kInvalidArgument));
static_assert(SHOAL_NOT_FOUND == static_cast<int>(shoal::StatusCode::kNotFound));
static_assert(SHOAL_IO_ERROR == static_cast<int>(shoal::StatusCode::kIoError));
static_assert(SHOAL_CORRUPTION == static_cast<int>(shoal::StatusCode::kCorruption));
static_assert(SHOAL_PROTOCOL == static_cast<int>(shoal::StatusCode::kProtocol));
static_assert(SHOAL_UNAVAILABLE == static_cast<int>(shoal::StatusCode::kUnavailable));
static_assert(SHOAL_CANCELLED == static_cast<int>(shoal::StatusCode::kCancelled));
static_assert(SHOAL_FAILED_PRECONDITION == static_cast<int>(shoal::StatusCode::kFailedPrecondition));
static_assert(SHOAL_INTERNAL == static_cast<int>(shoal::StatusCode::kInternal));
static_assert(SHOAL_PERMISSION_DENIED == static_cast<int>(shoal::StatusCode::kPermissionDenied));
static_assert(static_cast<int>(shoal::ClientEvent::Kind::kFinished) == SHOAL_EVENT_FINISHED);

namespace {

using shoal::Status;
using shoal::StatusCode;

thread_local std::string t_last_error;

// Inside a Guard body: returns a failed Status as a shoal_status (setting the last error).
#define SHOAL_RETURN_IF_ERROR_C(expr)       \
  do {                                      \
    const ::shoal::Status st_ = (expr);     \
    if (!st_.ok()) return Fail(st_);        \
  } while (0)

// The size of a struct up to and including `field`: what a caller's struct_size must cover.
#define SHOAL_SIZE_THROUGH(type, field) (offsetof(type, field) + sizeof(((type*)nullptr)->field))

std::string Str(const char* s, const char* fallback = "") { return s ? std::string(s) : std::string(fallback); }

shoal_status Fail(StatusCode code, std::string message) {
  t_last_error = std::move(message);
  return static_cast<shoal_status>(code);
}
shoal_status Fail(const Status& st) { return Fail(st.code(), st.message()); }
// A call's own result: OK, or a failure with its message.
shoal_status Result(const Status& st) { return st.ok() ? SHOAL_OK : Fail(st); }

// What a caller's struct_size must cover: every field of ABI 1. Fields added later are read
// (or written) only when the caller's struct_size covers them.
constexpr size_t kClientOptionsAbi1 = SHOAL_SIZE_THROUGH(shoal_client_options, event_user);
constexpr size_t kBuiltinOptionsAbi1 = SHOAL_SIZE_THROUGH(shoal_builtin_options, precision);
constexpr size_t kClientStatsAbi1 = SHOAL_SIZE_THROUGH(shoal_client_stats, resyncs);

// Checks a struct_size field: the caller's struct must hold every ABI-1 field, and may not
// claim fields this library does not know (an application built against a newer header).
template <typename T>
Status CheckSize(const char* what, size_t got, size_t minimum) {
  if (got < minimum || got > sizeof(T))
    return Status::InvalidArgument(std::string(what) + ".struct_size is " + std::to_string(got) + "; this library (ABI " +
                                   std::to_string(SHOAL_ABI_VERSION) + ") expects " +
                                   (minimum == sizeof(T) ? std::to_string(sizeof(T))
                                                         : std::to_string(minimum) + ".." + std::to_string(sizeof(T))) +
                                   " (use the matching _init function, or sizeof)");
  return Status::Ok();
}

// A callback's failure as a Status: its return value (a shoal_status, or any nonzero as
// Internal) and the reason it wrote.
Status CallbackStatus(const char* callback, int rc, const char* error) {
  const StatusCode code = rc > 0 && rc <= SHOAL_PERMISSION_DENIED ? static_cast<StatusCode>(rc) : StatusCode::kInternal;
  std::string reason = error && error[0] ? std::string(error) : "no reason given";
  return Status(code, std::string("the trainer's ") + callback + " callback failed (" + std::to_string(rc) + "): " + reason);
}

constexpr size_t kErrorBytes = 1024;

// The application's callbacks behind shoal::Trainer.
class CTrainer final : public shoal::Trainer {
 public:
  // Copies sizeof(shoal_trainer): right for version 1, the only version this library accepts.
  // A later library must copy only as much as the caller's version has.
  explicit CTrainer(const shoal_trainer& t) : t_(t), name_(Str(t.name, "c-application")) { t_.name = nullptr; }
  ~CTrainer() override {
    if (t_.destroy) t_.destroy(t_.user);
  }
  CTrainer(const CTrainer&) = delete;
  CTrainer& operator=(const CTrainer&) = delete;

  std::string name() const override { return name_; }
  uint64_t num_examples() const override { return t_.num_examples; }

  Status Configure(const shoal::TaskConfig& task) override {
    // Everything the shoal_task points at lives here for the call.
    std::vector<shoal_tensor> tensors;
    size_t offset = 0;
    for (const auto& spec : task.layout) {
      const size_t n = static_cast<size_t>(spec.numel());
      tensors.push_back({spec.name.c_str(), offset, n, spec.shape.size(), spec.shape.data()});
      offset += n;
    }
    shoal_task ct{};
    ct.struct_size = sizeof ct;
    ct.model = task.model.c_str();
    ct.dataset = task.dataset.c_str();
    ct.num_params = offset;
    ct.num_tensors = tensors.size();
    ct.tensors = tensors.data();
    ct.optimizer = task.optimizer.name.c_str();
    ct.learning_rate = task.optimizer.learning_rate;
    ct.momentum = task.optimizer.momentum;
    ct.weight_decay = task.optimizer.weight_decay;
    ct.local_epochs = task.local_epochs;
    ct.local_steps = task.local_steps;
    ct.batch_size = task.batch_size;
    ct.seed = task.seed;
    ct.test_fraction = task.test_fraction;
    char error[kErrorBytes] = "";
    const int rc = t_.configure(t_.user, &ct, error, sizeof error);
    error[sizeof error - 1] = '\0';
    if (rc != 0) return CallbackStatus("configure", rc, error);
    return Status::Ok();
  }

  Status Train(std::span<const float> global, const shoal::RoundConfig& round, const shoal::TrainContext& ctx,
               shoal::TrainResult* out) override {
    char error[kErrorBytes] = "";
    SHOAL_RETURN_IF_ERROR(SetParameters(global, error));
    shoal_round r{};
    r.struct_size = sizeof r;
    r.round = round.round;
    r.learning_rate = round.learning_rate;
    r.local_epochs = round.local_epochs;
    r.local_steps = round.local_steps;
    r.prox_mu = round.prox_mu;
    shoal_train_context* context = reinterpret_cast<shoal_train_context*>(const_cast<shoal::TrainContext*>(&ctx));
    uint64_t examples = 0;
    double loss = NAN;
    int rc = t_.train(t_.user, &r, context, &examples, &loss, error, sizeof error);
    error[sizeof error - 1] = '\0';
    if (rc != 0) return ctx.cancelled() ? Status::Cancelled("cancelled") : CallbackStatus("train", rc, error);
    std::vector<float> local(global.size());
    rc = t_.get_parameters(t_.user, local.data(), local.size(), error, sizeof error);
    error[sizeof error - 1] = '\0';
    if (rc != 0) return CallbackStatus("get_parameters", rc, error);
    out->delta.resize(local.size());
    for (size_t i = 0; i < local.size(); ++i) out->delta[i] = local[i] - global[i];
    out->num_examples = examples;
    if (std::isfinite(loss)) out->metrics.emplace_back("train_loss", loss);
    return Status::Ok();
  }

  Status Evaluate(std::span<const float> params, shoal::EvalResult* out) override {
    if (!t_.evaluate) return Status::FailedPrecondition("this trainer does not evaluate");
    char error[kErrorBytes] = "";
    SHOAL_RETURN_IF_ERROR(SetParameters(params, error));
    double loss = NAN, accuracy = NAN;
    uint64_t n = 0;
    const int rc = t_.evaluate(t_.user, &loss, &accuracy, &n, error, sizeof error);
    error[sizeof error - 1] = '\0';
    if (rc != 0) return CallbackStatus("evaluate", rc, error);
    *out = shoal::EvalResult{loss, accuracy, n};
    return Status::Ok();
  }

 private:
  Status SetParameters(std::span<const float> params, char* error) {
    const int rc = t_.set_parameters(t_.user, params.data(), params.size(), error, kErrorBytes);
    error[kErrorBytes - 1] = '\0';
    return rc == 0 ? Status::Ok() : CallbackStatus("set_parameters", rc, error);
  }

  shoal_trainer t_;
  std::string name_;
};

// Shoal's log lines in a process that uses the C ABI: to stderr (spdlog's usual format) or to
// the application's callback. One sink for the process's lifetime, installed as spdlog's
// default logger once; shoal_set_log_callback only swaps (fn, user) under the sink's mutex,
// which every line holds while it is written, so once the swap returns the old callback is
// never called again, and no logger is ever freed under a thread that is logging.
class RoutingSink final : public spdlog::sinks::base_sink<std::mutex> {
 public:
  RoutingSink()
      : stderr_(std::make_shared<spdlog::sinks::stderr_color_sink_mt>()),
        plain_(std::make_unique<spdlog::pattern_formatter>("%v")) {}
  void Route(shoal_log_fn fn, void* user) {
    std::lock_guard<std::mutex> lock(mutex_);
    fn_ = fn;
    user_ = user;
  }

 protected:
  void sink_it_(const spdlog::details::log_msg& msg) override {
    if (!fn_) {
      stderr_->log(msg);
      return;
    }
    spdlog::memory_buf_t line;
    plain_->format(msg, line);
    std::string text(line.data(), line.size());
    while (!text.empty() && (text.back() == '\n' || text.back() == '\r')) text.pop_back();
    fn_(user_, static_cast<int>(msg.level), text.c_str());
  }
  void flush_() override {
    if (!fn_) stderr_->flush();
  }

 private:
  std::shared_ptr<spdlog::sinks::sink> stderr_;
  std::unique_ptr<spdlog::formatter> plain_;
  shoal_log_fn fn_ = nullptr;
  void* user_ = nullptr;
};

struct Routing {
  std::shared_ptr<RoutingSink> sink;
  std::shared_ptr<spdlog::logger> logger;
};
// Installs the routing logger at the first C-ABI call that can log (before any client of this
// process exists, so nothing is logging while the default logger is replaced).
Routing& LogRouting() {
  static Routing routing = [] {
    Routing r;
    r.sink = std::make_shared<RoutingSink>();
    r.logger = std::make_shared<spdlog::logger>("", r.sink);
    const spdlog::logger* old = spdlog::default_logger_raw();
    r.logger->set_level(old ? old->level() : spdlog::level::info);
    spdlog::set_default_logger(r.logger);
    return r;
  }();
  return routing;
}

// Runs `body`, turning any exception into Internal (nothing may unwind into C).
template <typename F>
shoal_status Guard(F&& body) {
  try {
    return body();
  } catch (const std::bad_alloc&) {
    return Fail(StatusCode::kInternal, "out of memory");
  } catch (const std::exception& e) {
    return Fail(StatusCode::kInternal, std::string("unexpected error: ") + e.what());
  } catch (...) {
    return Fail(StatusCode::kInternal, "unexpected error");
  }
}

}  // namespace

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
shoal_status NullClient(const char* function) {
  return Guard([&] { return Fail(StatusCode::kInvalidArgument, std::string(function) + ": client is NULL"); });
}

// Guard for a call on a client (`function`, for the message when `client` is NULL): a
// failure's message also becomes the client's last error.
template <typename F>
shoal_status ClientGuard(const char* function, shoal_client* client, F&& body) {
  if (!client) return NullClient(function);
  const shoal_status status = Guard(std::forward<F>(body));
  try {
    if (status == SHOAL_OK)
      client->last_error.clear();
    else
      client->last_error = t_last_error;
  } catch (...) {  // out of memory copying the message: the thread's last error still has it
  }
  return status;
}
}  // namespace

struct shoal_dataset {
  shoal::data::Dataset data;
};

// ---- status, version, errors, logging ---------------------------------------------------

extern "C" {

const char* shoal_version(void) { return SHOAL_VERSION_STRING; }
int shoal_abi_version(void) { return SHOAL_ABI_VERSION; }

const char* shoal_status_name(int status) {
  static const char* const kNames[] = {"OK",          "InvalidArgument", "NotFound",           "IoError",
                                       "Corruption",  "Protocol",        "Unavailable",        "Cancelled",
                                       "FailedPrecondition", "Internal", "PermissionDenied"};
  return status >= 0 && status <= SHOAL_PERMISSION_DENIED ? kNames[status] : "Unknown";
}

const char* shoal_last_error(void) { return t_last_error.c_str(); }

shoal_status shoal_set_log_callback(shoal_log_fn fn, void* user, int min_level) {
  return Guard([&]() -> shoal_status {
    if (min_level < SHOAL_LOG_TRACE || min_level > SHOAL_LOG_OFF)
      return Fail(StatusCode::kInvalidArgument, "min_level " + std::to_string(min_level) + " is outside " +
                                                    std::to_string(SHOAL_LOG_TRACE) + ".." + std::to_string(SHOAL_LOG_OFF));
    Routing& routing = LogRouting();
    routing.sink->Route(fn, user);
    routing.logger->set_level(static_cast<spdlog::level::level_enum>(min_level));
    return SHOAL_OK;
  });
}

// ---- training context --------------------------------------------------------------------

int shoal_train_cancelled(const shoal_train_context* context) {
  if (!context) return 0;
  return reinterpret_cast<const shoal::TrainContext*>(context)->cancelled() ? 1 : 0;
}

void shoal_train_progress(shoal_train_context* context, float fraction) {
  if (!context || !std::isfinite(fraction)) return;
  const auto* ctx = reinterpret_cast<const shoal::TrainContext*>(context);
  if (ctx->progress) ctx->progress(std::min(1.0f, std::max(0.0f, fraction)));
}

// ---- the client --------------------------------------------------------------------------

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
    LogRouting();
    auto c = std::make_unique<shoal_client>();
    c->options.connect = Str(options->connect, "tcp://127.0.0.1:7070");
    c->options.name = Str(options->name);
    c->options.secret_key_file = Str(options->secret_key_file);
    c->options.server_key = Str(options->server_key);
    c->options.insecure = options->insecure != 0;
    c->options.connect_timeout_ms = options->connect_timeout_ms;
    c->options.reconnect_timeout_ms = options->reconnect_timeout_ms;
    c->options.max_handshake_failures = options->max_handshake_failures;
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
    if (trainer->version != SHOAL_TRAINER_VERSION)
      return Fail(StatusCode::kInvalidArgument, "shoal_trainer.version is " + std::to_string(trainer->version) +
                                                    "; this library (ABI " + std::to_string(SHOAL_ABI_VERSION) +
                                                    ") knows version " + std::to_string(SHOAL_TRAINER_VERSION));
    std::string missing;
    if (!trainer->configure) missing += " configure";
    if (!trainer->set_parameters) missing += " set_parameters";
    if (!trainer->get_parameters) missing += " get_parameters";
    if (!trainer->train) missing += " train";
    if (!missing.empty()) return Fail(StatusCode::kInvalidArgument, "shoal_trainer lacks required callbacks:" + missing);
    if (client->client)
      return Fail(StatusCode::kFailedPrecondition, "the client has started; set the trainer before running it");
    client->trainer = std::make_unique<CTrainer>(*trainer);
    return SHOAL_OK;
  });
}

shoal_status shoal_builtin_options_init(shoal_builtin_options* options, size_t struct_size) {
  return Guard([&]() -> shoal_status {
    if (!options) return Fail(StatusCode::kInvalidArgument, "shoal_builtin_options_init: options is NULL");
    SHOAL_RETURN_IF_ERROR_C(CheckSize<shoal_builtin_options>("shoal_builtin_options", struct_size, kBuiltinOptionsAbi1));
    std::memset(options, 0, struct_size);
    options->struct_size = struct_size;
    options->dataset = "digits";
    options->partition_index = 0;
    options->partition_count = 1;
    options->partition_scheme = "iid";
    options->device = "auto";
    options->precision = "fp32";
    return SHOAL_OK;
  });
}

shoal_status shoal_client_use_builtin_trainer(shoal_client* client, const shoal_builtin_options* options) {
  return ClientGuard("shoal_client_use_builtin_trainer", client, [&]() -> shoal_status {
    if (!options) return Fail(StatusCode::kInvalidArgument, "shoal_client_use_builtin_trainer: options is NULL");
    SHOAL_RETURN_IF_ERROR_C(CheckSize<shoal_builtin_options>("shoal_builtin_options", options->struct_size, kBuiltinOptionsAbi1));
    if (client->client)
      return Fail(StatusCode::kFailedPrecondition, "the client has started; choose the trainer before running it");
    shoal::BuiltinTrainerOptions b;
    b.dataset = Str(options->dataset, "digits");
    b.data_dir = Str(options->data_dir);
    b.partition_index = options->partition_index;
    b.partition_count = options->partition_count;
    b.partition_scheme = Str(options->partition_scheme, "iid");
    b.device = Str(options->device, "auto");
    b.precision = Str(options->precision, "fp32");
    if (b.partition_count == 0 || b.partition_index >= b.partition_count)
      return Fail(StatusCode::kInvalidArgument, "partition_index " + std::to_string(b.partition_index) +
                                                    " must be below partition_count " + std::to_string(b.partition_count));
    auto trainer = shoal::MakeBuiltinTrainer(b);
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
  if (!client) return NullClient("shoal_client_cancel");
  // Atomics only: callable from a signal handler. Start() rechecks `cancelled` after it
  // publishes `running`, so a cancel racing with the start is never lost.
  client->cancelled.store(true);
  if (shoal::Client* c = client->running.load()) c->Cancel();
  return SHOAL_OK;
}

shoal_status shoal_client_get_stats(const shoal_client* client, shoal_client_stats* stats) {
  if (!client) return NullClient("shoal_client_get_stats");
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

// ---- datasets ----------------------------------------------------------------------------

shoal_status shoal_dataset_load(const char* name, const char* data_dir, uint64_t seed, double test_fraction,
                                uint32_t index, uint32_t count, const char* scheme, shoal_dataset** dataset) {
  return Guard([&]() -> shoal_status {
    if (!dataset) return Fail(StatusCode::kInvalidArgument, "shoal_dataset_load: dataset (the out pointer) is NULL");
    *dataset = nullptr;
    if (!name) return Fail(StatusCode::kInvalidArgument, "shoal_dataset_load: name is NULL");
    if (count == 0 || index >= count)
      return Fail(StatusCode::kInvalidArgument,
                  "part " + std::to_string(index) + " of " + std::to_string(count) + ": index must be below count");
    LogRouting();
    const std::string dir = data_dir ? std::string(data_dir) : shoal::data::DefaultDataDir();
    auto full = shoal::data::LoadDataset(name, dir);
    if (!full.ok()) return Fail(full.status());
    auto part = shoal::data::TrainingPart(*full, test_fraction, seed, {index, count}, Str(scheme, "iid"));
    if (!part.ok()) return Fail(part.status());
    auto d = std::make_unique<shoal_dataset>();
    d->data = std::move(*part);
    *dataset = d.release();
    return SHOAL_OK;
  });
}

size_t shoal_dataset_rows(const shoal_dataset* d) { return d ? static_cast<size_t>(d->data.n) : 0; }
size_t shoal_dataset_dim(const shoal_dataset* d) { return d ? static_cast<size_t>(d->data.dim) : 0; }
uint32_t shoal_dataset_classes(const shoal_dataset* d) { return d ? static_cast<uint32_t>(d->data.num_classes) : 0; }
const float* shoal_dataset_features(const shoal_dataset* d) { return d ? d->data.x.data() : nullptr; }
const int32_t* shoal_dataset_labels(const shoal_dataset* d) { return d ? d->data.y.data() : nullptr; }
void shoal_dataset_destroy(shoal_dataset* d) { delete d; }

}  // extern "C"
