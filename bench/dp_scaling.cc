// Data-parallel scaling of the built-in trainer (issue 19): one round of --steps local steps of
// a model on --dataset, with --ranks R ranks (threads on the cpu; one GPU each on cuda, NCCL),
// each rank taking --batch rows or token windows of the step's R x --batch (weak scaling, as
// DDP is measured). Prints one line per rank count: examples (rows, or predicted tokens) per
// second, and the scaling efficiency against the first count, throughput(R) / (R/R0 x
// throughput(R0)). A warm-up round precedes each measured one.
//
//   build/bin/dp_scaling --device cpu --ranks 1,2 --model mlp:256,256 --dataset digits [--bucket-mb 0]
//   build/bin/dp_scaling --device cuda --ranks 1,2,4,8 --model gpt:layers=16,dim=768,heads=12,ctx=1024
//       --dataset kjv --batch 8 --steps 10 --precision bf16
#include <boost/program_options.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "nn/model_registry.h"
#include "shoal/data.h"
#include "shoal/trainer.h"

namespace po = boost::program_options;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  std::string device = "cpu", ranks_list = "1,2", model = "mlp:256,256", dataset = "digits", precision = "fp32";
  uint32_t batch = 64, steps = 50;
  double bucket_mb = 25;
  po::options_description d("dp_scaling");
  d.add_options()("help", "this help")("device", po::value(&device), "cpu or cuda")(
      "ranks", po::value(&ranks_list), "rank counts, comma-separated")("model", po::value(&model), "model spec")(
      "dataset", po::value(&dataset), "dataset")("batch", po::value(&batch), "rows or windows per rank per step")(
      "steps", po::value(&steps), "local steps per round")(
      "bucket-mb", po::value(&bucket_mb), "gradient buckets (MiB; 0 = one all-reduce after the backward pass)")("precision", po::value(&precision), "fp32, tf32, bf16, fp16");
  po::variables_map vm;
  po::store(po::parse_command_line(argc, argv, d), vm);
  po::notify(vm);
  if (vm.count("help")) {
    std::cout << d;
    return 0;
  }
  std::vector<uint32_t> counts;
  std::stringstream ss(ranks_list);
  for (std::string item; std::getline(ss, item, ',');) counts.push_back(static_cast<uint32_t>(std::stoul(item)));

  auto data = shoal::data::LoadDataset(dataset, shoal::data::DefaultDataDir());
  if (!data.ok()) return std::fprintf(stderr, "%s\n", data.status().ToString().c_str()), 1;
  auto cpu = shoal::MakeCpuBackend();
  auto layout_model = shoal::nn::MakeModel(model, shoal::nn::InputsOf(*data), cpu.get());
  if (!layout_model.ok()) return std::fprintf(stderr, "%s\n", layout_model.status().ToString().c_str()), 1;
  shoal::ParameterArena init;
  (*layout_model)->Init(&init, 1);
  const std::vector<float> global(init.data(), init.data() + init.size());
  const bool tokens = data->kind == shoal::data::DatasetKind::kTokens;

  double base = 0.0;
  uint32_t base_ranks = 0;
  for (uint32_t ranks : counts) {
    shoal::BuiltinTrainerOptions o;
    o.dataset = dataset;
    o.device = device;
    o.ranks = ranks;
    o.bucket_bytes = static_cast<size_t>(bucket_mb * (1 << 20));
    o.precision = precision;
    auto trainer = shoal::MakeBuiltinTrainer(o);
    if (!trainer.ok()) return std::fprintf(stderr, "%u ranks: %s\n", ranks, trainer.status().ToString().c_str()), 1;
    shoal::TaskConfig task;
    task.model = (*layout_model)->spec();
    task.layout = (*layout_model)->Layout();
    task.dataset = dataset;
    task.batch_size = batch * ranks;
    task.optimizer.name = tokens ? "adamw" : "sgd";
    task.optimizer.learning_rate = tokens ? 1e-4f : 0.01f;
    task.test_fraction = 0.1;
    if (auto st = (*trainer)->Configure(task); !st.ok()) return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
    shoal::RoundConfig round;
    round.local_steps = steps;
    shoal::TrainResult r;
    double seconds = 0.0;
    for (int pass = 0; pass < 2; ++pass) {  // a warm-up round, then the measured one
      round.round = static_cast<uint64_t>(pass + 1);
      const auto t0 = Clock::now();
      if (auto st = (*trainer)->Train(global, round, {}, &r); !st.ok())
        return std::fprintf(stderr, "%s\n", st.ToString().c_str()), 1;
      seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    }
    const double per_second = static_cast<double>(r.num_examples) / seconds;
    if (base == 0.0) {
      base = per_second;
      base_ranks = ranks;
    }
    const double efficiency = per_second / (base * static_cast<double>(ranks) / base_ranks);
    std::printf("dp_scaling: %s on %s, %s x %u ranks, %u %s per rank per step, %u steps: %.0f %s/s, %.2f ms per "
                "step, scaling efficiency %.3f\n",
                task.model.c_str(), dataset.c_str(), device.c_str(), ranks, batch, tokens ? "windows" : "rows", steps,
                per_second, tokens ? "tokens" : "rows", 1000.0 * seconds / steps, efficiency);
  }
  return 0;
}
