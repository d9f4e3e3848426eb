// One local training step of the built-in MLP on the CPU backend, single-threaded:
// forward + softmax cross-entropy + backward + SGD (momentum 0.9) step, on digits-shaped
// data (64 features, 10 classes). bench/torch_train_step.py times the same step in PyTorch
// and bench/train_step_vs_torch.sh prints the two side by side.
//
//   build/bin/train_step_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"
#include "nn/model_registry.h"
#include "nn/optimizer.h"

namespace shoal {
namespace {

constexpr int64_t kInputDim = 64;   // 8x8 digits
constexpr int32_t kClasses = 10;
constexpr float kLearningRate = 0.01f;
constexpr float kMomentum = 0.9f;

void BM_TrainStep(benchmark::State& state, const std::string& model_spec, int batch) {
  auto backend = MakeCpuBackend();
  auto model = nn::MakeModel(model_spec, {kInputDim, kClasses}, backend.get());
  if (!model.ok()) return state.SkipWithError(model.status().ToString().c_str());
  ParameterArena params;
  (*model)->Init(&params, 1);

  OptimizerConfig config;
  config.learning_rate = kLearningRate;
  config.momentum = kMomentum;
  auto optimizer = nn::MakeOptimizer(config, params.size(), backend.get());
  if (!optimizer.ok()) return state.SkipWithError(optimizer.status().ToString().c_str());

  // Digits-like inputs in [0, 1) and random labels (the values do not change the work).
  Rng rng(2);
  std::vector<float> x(static_cast<size_t>(batch) * kInputDim);
  for (float& v : x) v = rng.Uniform();
  std::vector<int32_t> y(static_cast<size_t>(batch));
  for (int32_t& v : y) v = static_cast<int32_t>(rng.Below(kClasses));
  std::vector<float> grads(params.size());

  const nn::Batch features = nn::Batch::Features(x.data(), y.data(), batch);
  for (auto _ : state) {
    (*model)->ForwardBackward(params.data(), features, grads.data(), /*loss_scale=*/1.0f);
    (*optimizer)->Step(params.data(), grads.data());
    benchmark::DoNotOptimize(params.data());
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * batch);
  state.counters["params"] = static_cast<double>(params.size());
}

void RegisterAll() {
  for (const char* spec : {"mlp:64", "mlp:256,256"})
    for (int batch : {32, 256})
      benchmark::RegisterBenchmark(("TrainStep/" + std::string(spec) + "/batch:" + std::to_string(batch)).c_str(),
                                   [spec, batch](benchmark::State& st) { BM_TrainStep(st, spec, batch); })
          ->Unit(benchmark::kMicrosecond);
}

}  // namespace
}  // namespace shoal

int main(int argc, char** argv) {
  // Single-threaded on purpose: the figure compares per-core efficiency with PyTorch
  // (torch.set_num_threads(1) on the other side), and clients share machines.
  openblas_set_num_threads(1);
  shoal::RegisterAll();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
