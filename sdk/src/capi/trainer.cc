// The application's trainer (shoal_trainer callbacks) behind shoal::Trainer, its training
// context, and the built-in trainer's options: what a client and a peer both take.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "capi/capi.h"

namespace shoal::capi {

// A callback's failure as a Status: its return value (a shoal_status, or any nonzero as
// Internal) and the reason it wrote.
Status CallbackStatus(const char* who, const char* callback, int rc, const char* error) {
  const StatusCode code = rc > 0 && rc <= SHOAL_PERMISSION_DENIED ? static_cast<StatusCode>(rc) : StatusCode::kInternal;
  std::string reason = error && error[0] ? std::string(error) : "no reason given";
  return Status(code, std::string("the ") + who + "'s " + callback + " callback failed (" + std::to_string(rc) +
                          "): " + reason);
}

CTask::CTask(const TaskConfig& task) {
  size_t offset = 0;
  for (const auto& spec : task.layout) {
    const size_t n = static_cast<size_t>(spec.numel());
    tensors_.push_back({spec.name.c_str(), offset, n, spec.shape.size(), spec.shape.data()});
    offset += n;
  }
  ct_.struct_size = sizeof ct_;
  ct_.model = task.model.c_str();
  ct_.dataset = task.dataset.c_str();
  ct_.num_params = offset;
  ct_.num_tensors = tensors_.size();
  ct_.tensors = tensors_.data();
  ct_.optimizer = task.optimizer.name.c_str();
  ct_.learning_rate = task.optimizer.learning_rate;
  ct_.momentum = task.optimizer.momentum;
  ct_.weight_decay = task.optimizer.weight_decay;
  ct_.local_epochs = task.local_epochs;
  ct_.local_steps = task.local_steps;
  ct_.batch_size = task.batch_size;
  ct_.seed = task.seed;
  ct_.test_fraction = task.test_fraction;
}

namespace {

// What a caller's struct_size must cover: every field of the ABI that introduced the struct.
constexpr size_t kBuiltinOptionsAbi1 = SHOAL_SIZE_THROUGH(shoal_builtin_options, precision);

class CTrainer final : public Trainer {
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

  Status Configure(const TaskConfig& task) override {
    const CTask ct(task);  // everything it points at lives for the call
    char error[kErrorBytes] = "";
    const int rc = t_.configure(t_.user, ct.get(), error, sizeof error);
    error[sizeof error - 1] = '\0';
    if (rc != 0) return CallbackStatus("trainer", "configure", rc, error);
    return Status::Ok();
  }

  Status Train(std::span<const float> global, const RoundConfig& round, const TrainContext& ctx,
               TrainResult* out) override {
    char error[kErrorBytes] = "";
    SHOAL_RETURN_IF_ERROR(SetParameters(global, error));
    shoal_round r{};
    r.struct_size = sizeof r;
    r.round = round.round;
    r.learning_rate = round.learning_rate;
    r.local_epochs = round.local_epochs;
    r.local_steps = round.local_steps;
    r.prox_mu = round.prox_mu;
    r.keep_optimizer_state = round.keep_optimizer_state ? 1 : 0;
    shoal_train_context* context = reinterpret_cast<shoal_train_context*>(const_cast<TrainContext*>(&ctx));
    uint64_t examples = 0;
    double loss = NAN;
    int rc = t_.train(t_.user, &r, context, &examples, &loss, error, sizeof error);
    error[sizeof error - 1] = '\0';
    if (rc != 0) return ctx.cancelled() ? Status::Cancelled("cancelled") : CallbackStatus("trainer", "train", rc, error);
    std::vector<float> local(global.size());
    rc = t_.get_parameters(t_.user, local.data(), local.size(), error, sizeof error);
    error[sizeof error - 1] = '\0';
    if (rc != 0) return CallbackStatus("trainer", "get_parameters", rc, error);
    out->delta.resize(local.size());
    for (size_t i = 0; i < local.size(); ++i) out->delta[i] = local[i] - global[i];
    out->num_examples = examples;
    if (std::isfinite(loss)) out->metrics.emplace_back("train_loss", loss);
    return Status::Ok();
  }

  Status Evaluate(std::span<const float> params, EvalResult* out) override {
    if (!t_.evaluate) return Status::FailedPrecondition("this trainer does not evaluate");
    char error[kErrorBytes] = "";
    SHOAL_RETURN_IF_ERROR(SetParameters(params, error));
    double loss = NAN, accuracy = NAN;
    uint64_t n = 0;
    const int rc = t_.evaluate(t_.user, &loss, &accuracy, &n, error, sizeof error);
    error[sizeof error - 1] = '\0';
    if (rc != 0) return CallbackStatus("trainer", "evaluate", rc, error);
    *out = EvalResult{loss, accuracy, n};
    return Status::Ok();
  }

 private:
  Status SetParameters(std::span<const float> params, char* error) {
    const int rc = t_.set_parameters(t_.user, params.data(), params.size(), error, kErrorBytes);
    error[kErrorBytes - 1] = '\0';
    return rc == 0 ? Status::Ok() : CallbackStatus("trainer", "set_parameters", rc, error);
  }

  shoal_trainer t_;
  std::string name_;
};

}  // namespace

Status CheckCTrainer(const shoal_trainer& trainer) {
  if (trainer.version != SHOAL_TRAINER_VERSION)
    return Status::InvalidArgument("shoal_trainer.version is " + std::to_string(trainer.version) + "; this library (ABI " +
                                   std::to_string(SHOAL_ABI_VERSION) + ") knows version " +
                                   std::to_string(SHOAL_TRAINER_VERSION));
  std::string missing;
  if (!trainer.configure) missing += " configure";
  if (!trainer.set_parameters) missing += " set_parameters";
  if (!trainer.get_parameters) missing += " get_parameters";
  if (!trainer.train) missing += " train";
  if (!missing.empty()) return Status::InvalidArgument("shoal_trainer lacks required callbacks:" + missing);
  return Status::Ok();
}

std::unique_ptr<Trainer> MakeCTrainer(const shoal_trainer& trainer) { return std::make_unique<CTrainer>(trainer); }

StatusOr<BuiltinTrainerOptions> BuiltinOptions(const shoal_builtin_options* options) {
  SHOAL_RETURN_IF_ERROR(
      CheckSize<shoal_builtin_options>("shoal_builtin_options", options->struct_size, kBuiltinOptionsAbi1));
  BuiltinTrainerOptions b;
  b.dataset = Str(options->dataset, "digits");
  b.data_dir = Str(options->data_dir);
  b.partition_index = options->partition_index;
  b.partition_count = options->partition_count;
  b.partition_scheme = Str(options->partition_scheme, "iid");
  b.device = Str(options->device, "auto");
  b.precision = Str(options->precision, "fp32");
  if (options->struct_size >= SHOAL_SIZE_THROUGH(shoal_builtin_options, ranks)) b.ranks = options->ranks;
  if (options->struct_size >= SHOAL_SIZE_THROUGH(shoal_builtin_options, bucket_bytes)) b.bucket_bytes = options->bucket_bytes;
  if (b.ranks == 0) return Status::InvalidArgument("ranks must be at least 1");
  if (b.partition_count == 0 || b.partition_index >= b.partition_count)
    return Status::InvalidArgument("partition_index " + std::to_string(b.partition_index) +
                                   " must be below partition_count " + std::to_string(b.partition_count));
  return b;
}

}  // namespace shoal::capi

extern "C" {

int shoal_train_cancelled(const shoal_train_context* context) {
  if (!context) return 0;
  return reinterpret_cast<const shoal::TrainContext*>(context)->cancelled() ? 1 : 0;
}

void shoal_train_progress(shoal_train_context* context, float fraction) {
  if (!context || !std::isfinite(fraction)) return;
  const auto* ctx = reinterpret_cast<const shoal::TrainContext*>(context);
  if (ctx->progress) ctx->progress(std::min(1.0f, std::max(0.0f, fraction)));
}

shoal_status shoal_builtin_options_init(shoal_builtin_options* options, size_t struct_size) {
  using namespace shoal::capi;
  return Guard([&]() -> shoal_status {
    if (!options) return Fail(shoal::StatusCode::kInvalidArgument, "shoal_builtin_options_init: options is NULL");
    SHOAL_RETURN_IF_ERROR_C(CheckSize<shoal_builtin_options>("shoal_builtin_options", struct_size, kBuiltinOptionsAbi1));
    std::memset(options, 0, struct_size);
    options->struct_size = struct_size;
    options->dataset = "digits";
    options->partition_index = 0;
    options->partition_count = 1;
    options->partition_scheme = "iid";
    options->device = "auto";
    options->precision = "fp32";
    if (struct_size >= SHOAL_SIZE_THROUGH(shoal_builtin_options, ranks)) options->ranks = 1;
    if (struct_size >= SHOAL_SIZE_THROUGH(shoal_builtin_options, bucket_bytes))
      options->bucket_bytes = shoal::BuiltinTrainerOptions{}.bucket_bytes;
    return SHOAL_OK;
  });
}

}  // extern "C"
