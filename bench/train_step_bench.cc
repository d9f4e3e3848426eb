// One local training step on the CPU backend, single-threaded: the built-in MLP (forward +
// softmax cross-entropy + backward + SGD momentum 0.9 step) on digits-shaped data (64
// features, 10 classes), and the GPT (nn/gpt.h) on random byte tokens with an AdamW step;
// with SHOAL_BENCH_DEVICE=cuda also the GPT on the GPU (tokens/s, model FLOP/s for MFU). bench/torch_train_step.py times the same step in PyTorch
// and bench/train_step_vs_torch.sh prints the two side by side.
//
//   build/bin/train_step_bench [--benchmark_filter=...]
#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"
#include "nn/gpt.h"
#include "nn/gpt_spec.h"
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

void BM_GptStep(benchmark::State& state, const std::string& model_spec, int batch, const std::string& device,
                Precision precision) {
  auto made = MakeBackend(device);
  if (!made.ok()) return state.SkipWithError(made.status().ToString().c_str());
  Backend* backend = made->get();
  auto model = nn::MakeModel(model_spec, {0, 0, 256}, backend);
  if (!model.ok()) return state.SkipWithError(model.status().ToString().c_str());
  (*model)->set_precision(precision);
  ParameterArena init;
  (*model)->Init(&init, 1);
  OptimizerConfig config;
  config.name = "adamw";
  config.learning_rate = 1e-3f;
  config.weight_decay = 0.1f;
  auto optimizer = nn::MakeOptimizer(config, init.size(), backend);
  if (!optimizer.ok()) return state.SkipWithError(optimizer.status().ToString().c_str());
  const int ctx = nn::ParseGptSpec(model_spec)->ctx;
  Rng rng(2);
  std::vector<int32_t> tokens(static_cast<size_t>(batch) * (ctx + 1));
  for (int32_t& t : tokens) t = static_cast<int32_t>(rng.Below(256));
  std::vector<int32_t> x, y;
  for (int r = 0; r < batch; ++r) {
    x.insert(x.end(), tokens.begin() + r * (ctx + 1), tokens.begin() + r * (ctx + 1) + ctx);
    y.insert(y.end(), tokens.begin() + r * (ctx + 1) + 1, tokens.begin() + (r + 1) * (ctx + 1));
  }
  // Everything in the backend's memory (host memory for the CPU).
  DeviceArray<float> params(backend, init.size()), grads(backend, init.size());
  params.Upload(init.data(), init.size());
  DeviceArray<int32_t> dx(backend, x.size()), dy(backend, y.size());
  dx.Upload(x.data(), x.size());
  dy.Upload(y.data(), y.size());
  const nn::Batch b = nn::Batch::Tokens(dx.get(), dy.get(), batch, ctx);
  for (auto _ : state) {
    (*model)->ForwardBackward(params.get(), b, grads.get(), 1.0f);  // reads the loss back: synchronizes
    (*optimizer)->Step(params.get(), grads.get());
    backend->Synchronize();
    benchmark::ClobberMemory();
  }
  const double tokens_per_step = static_cast<double>(batch) * ctx;
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(tokens_per_step));
  state.counters["params"] = static_cast<double>(init.size());
  // 6 FLOPs per parameter per token (forward 2, backward 4), attention's own products not
  // counted: the usual "model FLOPs" of MFU, as a rate.
  state.counters["model_flops"] = benchmark::Counter(6.0 * static_cast<double>(init.size()) * tokens_per_step,
                                                     benchmark::Counter::kIsIterationInvariantRate);
  // Activations kept from the forward to the backward pass (what checkpointing trades for time).
  state.counters["activation_MB"] =
      static_cast<double>(static_cast<nn::Gpt&>(**model).ActivationBytes(batch, ctx)) / 1e6;
}

void RegisterAll() {
  for (const char* spec : {"gpt:layers=3,dim=96,heads=4,ctx=64", "gpt:layers=3,dim=96,heads=4,ctx=64,ckpt=1"})
    benchmark::RegisterBenchmark(("TrainStep/" + std::string(spec) + "/batch:8").c_str(),
                                 [spec](benchmark::State& st) { BM_GptStep(st, spec, 8, "cpu", Precision::kFp32); })
        ->Unit(benchmark::kMicrosecond);
  // On a GPU (SHOAL_BENCH_DEVICE=cuda, as bench/gpu_check.sh runs it): the CPU-scale model and
  // a 113M-parameter one (16 layers, dim 768, ctx 1024), fp32 and bf16.
  if (const char* device = std::getenv("SHOAL_BENCH_DEVICE"); device && std::string(device) != "cpu") {
    const std::string dev = device;
    for (const char* spec : {"gpt:layers=3,dim=96,heads=4,ctx=64", "gpt:layers=16,dim=768,heads=12,ctx=1024"})
      for (Precision p : {Precision::kFp32, Precision::kBf16})
        benchmark::RegisterBenchmark(
            ("TrainStepGpu/" + std::string(spec) + "/batch:8/" + PrecisionName(p)).c_str(),
            [spec, dev, p](benchmark::State& st) { BM_GptStep(st, spec, 8, dev, p); })
            ->Unit(benchmark::kMillisecond)
            ->UseRealTime();
  }
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
