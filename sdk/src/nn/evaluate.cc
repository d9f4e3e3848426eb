#include "nn/evaluate.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <limits>

namespace shoal::nn {

EvalResult Evaluate(Model& model, std::span<const float> host_params, const data::Dataset& data, int batch) {
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
  EvalResult result;
  // Refuse inputs that would make the backend read out of bounds.
  const ModelInputs inputs = model.inputs();
  std::string problem;
  if (model.batch_kind() != BatchKind::kFeatures || data.kind != data::DatasetKind::kFeatures)
    problem = std::string("the model takes ") + BatchKindName(model.batch_kind()) + ", the dataset holds " +
              data::DatasetKindName(data.kind) + " (Evaluate reads features only)";
  else if (host_params.size() != model.num_params())
    problem = "got " + std::to_string(host_params.size()) + " parameters, the model has " +
              std::to_string(model.num_params());
  else if (data.n > 0 && data.dim != inputs.input_dim)
    problem = "data has " + std::to_string(data.dim) + " features, the model takes " +
              std::to_string(inputs.input_dim);
  else if (data.x.size() != static_cast<size_t>(data.n * data.dim) || data.y.size() != static_cast<size_t>(data.n))
    problem = "dataset arrays do not match n = " + std::to_string(data.n);
  else if (std::any_of(data.y.begin(), data.y.end(),
                       [&](int32_t label) { return label < 0 || label >= inputs.num_classes; }))
    problem = "a label is outside [0, " + std::to_string(inputs.num_classes) + ")";
  if (!problem.empty()) {
    spdlog::error("Evaluate({}, {}): {}", model.spec(), data.name, problem);
    result.loss = result.accuracy = kNaN;
    return result;
  }
  if (data.n == 0) return result;

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
