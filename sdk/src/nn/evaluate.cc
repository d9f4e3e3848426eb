#include "nn/evaluate.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "nn/token_windows.h"

namespace shoal::nn {
namespace {

// Why `data` and the parameters cannot be fed to `model` (reading out of bounds), or "".
std::string Misfit(const Model& model, std::span<const float> host_params, const data::Dataset& data) {
  const ModelInputs inputs = model.inputs();
  const bool tokens = model.batch_kind() == BatchKind::kTokens;
  if (tokens != (data.kind == data::DatasetKind::kTokens))
    return std::string("the model takes ") + BatchKindName(model.batch_kind()) + ", the dataset holds " +
           data::DatasetKindName(data.kind);
  if (host_params.size() != model.num_params())
    return "got " + std::to_string(host_params.size()) + " parameters, the model has " +
           std::to_string(model.num_params());
  if (tokens)
    return data.vocab_size > inputs.vocab_size || data.tokens.size() != static_cast<size_t>(data.n)
               ? "the dataset's tokens do not fit the model's vocabulary of " + std::to_string(inputs.vocab_size)
               : "";
  if (data.n > 0 && data.dim != inputs.input_dim)
    return "data has " + std::to_string(data.dim) + " features, the model takes " + std::to_string(inputs.input_dim);
  if (data.x.size() != static_cast<size_t>(data.n * data.dim) || data.y.size() != static_cast<size_t>(data.n))
    return "dataset arrays do not match n = " + std::to_string(data.n);
  if (std::any_of(data.y.begin(), data.y.end(), [&](int32_t label) { return label < 0 || label >= inputs.num_classes; }))
    return "a label is outside [0, " + std::to_string(inputs.num_classes) + ")";
  return "";
}

EvalResult EvaluateTokens(Model& model, std::span<const float> host_params, const data::Dataset& data, int batch) {
  EvalResult result;
  const int seq = model.max_seq_len();
  const std::vector<int64_t> starts = EvalWindowStarts(data.n, seq, kMaxEvalWindows);
  if (starts.empty()) {  // not one window fits: no score, rather than a perfect one
    spdlog::error("Evaluate({}, {}): {} tokens hold no window of {} + 1", model.spec(), data.name, data.n, seq);
    result.loss = result.accuracy = std::numeric_limits<double>::quiet_NaN();
    return result;
  }
  const int rows = std::max(1, batch / seq);
  Backend* backend = model.backend();
  DeviceArray<float> params(backend, host_params.size());
  params.Upload(host_params.data(), host_params.size());
  std::vector<int32_t> host_tokens(static_cast<size_t>(rows) * seq), host_targets(host_tokens.size());
  DeviceArray<int32_t> tokens(backend, host_tokens.size()), targets(backend, host_tokens.size());
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (size_t first = 0; first < starts.size(); first += static_cast<size_t>(rows)) {
    const int n = static_cast<int>(std::min<size_t>(rows, starts.size() - first));
    for (int r = 0; r < n; ++r)
      CopyWindow(data, starts[first + r], seq, host_tokens.data() + static_cast<size_t>(r) * seq,
                 host_targets.data() + static_cast<size_t>(r) * seq);
    tokens.Upload(host_tokens.data(), static_cast<size_t>(n) * seq);
    targets.Upload(host_targets.data(), static_cast<size_t>(n) * seq);
    const LossSums sums = model.ForwardLoss(params.get(), Batch::Tokens(tokens.get(), targets.get(), n, seq));
    loss_sum += sums.loss_sum;
    correct += sums.correct;
  }
  const double scored = static_cast<double>(starts.size()) * seq;
  result.loss = loss_sum / scored;
  result.accuracy = static_cast<double>(correct) / scored;
  result.num_examples = static_cast<uint64_t>(scored);
  return result;
}

}  // namespace

EvalResult Evaluate(Model& model, std::span<const float> host_params, const data::Dataset& data, int batch) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  EvalResult result;
  const bool tokens = model.batch_kind() == BatchKind::kTokens;
  const std::string problem = Misfit(model, host_params, data);
  if (!problem.empty()) {
    spdlog::error("Evaluate({}, {}): {}", model.spec(), data.name, problem);
    result.loss = result.accuracy = kNaN;
    return result;
  }
  if (data.n == 0) return result;
  if (tokens) return EvaluateTokens(model, host_params, data, batch);

  Backend* backend = model.backend();
  batch = std::max(1, static_cast<int>(std::min<int64_t>(batch, data.n)));
  DeviceArray<float> params(backend, host_params.size());
  params.Upload(host_params.data(), host_params.size());
  DeviceArray<float> x(backend, static_cast<size_t>(batch) * data.dim);
  DeviceArray<int32_t> y(backend, static_cast<size_t>(batch));

  double loss_sum = 0.0;
  int64_t correct = 0;
  for (int64_t start = 0; start < data.n; start += batch) {
    const int rows = static_cast<int>(std::min<int64_t>(batch, data.n - start));
    x.Upload(data.x.data() + start * data.dim, static_cast<size_t>(rows) * data.dim);
    y.Upload(data.y.data() + start, static_cast<size_t>(rows));
    const LossSums sums = model.ForwardLoss(params.get(), Batch::Features(x.get(), y.get(), rows));
    loss_sum += sums.loss_sum;
    correct += sums.correct;
  }
  result.loss = loss_sum / static_cast<double>(data.n);
  result.accuracy = static_cast<double>(correct) / static_cast<double>(data.n);
  result.num_examples = static_cast<uint64_t>(data.n);
  return result;
}

}  // namespace shoal::nn
