// The centralized baseline for the federated demo: the same MLP trained on the WHOLE
// training split in one place (what federation approximates), evaluated on the same held-out
// split the aggregator uses (TrainTestSplit(test_fraction, seed)), one line per epoch.
//
//   build/bin/centralized_baseline --dataset digits --model mlp --epochs 30 --lr 0.1 --momentum 0.9
//
// The model is initialized with Model::Init(seed) like the aggregator's global model, and the
// optimizer keeps its state across epochs (there are no rounds to reset it at).
#include <spdlog/spdlog.h>

#include <boost/program_options.hpp>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <numeric>

#include "backend/backend.h"
#include "core/rng.h"
#include "shoal/data.h"
#include "nn/evaluate.h"
#include "nn/model_registry.h"
#include "nn/optimizer.h"

namespace po = boost::program_options;

namespace shoal {
namespace {

struct Options {
  std::string dataset = "digits";
  std::string data_dir;  // Default: data::DefaultDataDir()
  std::string model = "mlp";
  std::string device = "cpu";
  uint32_t epochs = 30;
  uint32_t batch_size = 32;
  double test_fraction = 0.2;
  uint64_t seed = 0;
  OptimizerConfig optimizer;
};

int Run(const Options& o) {
  auto fail = [](const Status& st) {
    std::fprintf(stderr, "centralized_baseline: error: %s\n", st.ToString().c_str());
    return 1;
  };
  auto full = data::LoadDataset(o.dataset, o.data_dir.empty() ? data::DefaultDataDir() : o.data_dir);
  if (!full.ok()) return fail(full.status());
  auto split = data::TrainTestSplit(*full, o.test_fraction, o.seed);
  if (!split.ok()) return fail(split.status());
  const data::Dataset& train = split->train;
  auto backend = MakeBackend(o.device);
  if (!backend.ok()) return fail(backend.status());
  auto model = nn::MakeModel(o.model, nn::InputsOf(*full), backend->get());
  if (!model.ok()) return fail(model.status());
  auto optimizer = nn::MakeOptimizer(o.optimizer, (*model)->num_params(), backend->get());
  if (!optimizer.ok()) return fail(optimizer.status());
  if (o.batch_size == 0) return fail(Status::InvalidArgument("--batch-size must be > 0"));

  ParameterArena host;
  (*model)->Init(&host, o.seed);
  Backend* be = backend->get();
  const size_t n = host.size();
  DeviceArray<float> w(be, n), grads(be, n);
  w.Upload(host.data(), n);
  const int64_t dim = train.dim;
  DeviceArray<float> batch_x(be, static_cast<size_t>(o.batch_size) * dim);
  DeviceArray<int32_t> batch_y(be, o.batch_size);
  std::vector<float> hx(static_cast<size_t>(o.batch_size) * dim);
  std::vector<int32_t> hy(o.batch_size);
  std::vector<int64_t> order(static_cast<size_t>(train.n));
  std::iota(order.begin(), order.end(), int64_t{0});

  std::printf("# centralized %s on %s: %lld train / %lld held-out examples (test_fraction %.2f, seed %llu), "
              "%zu parameters, %s lr %g momentum %g, batch %u\n",
              (*model)->spec().c_str(), o.dataset.c_str(), static_cast<long long>(train.n),
              static_cast<long long>(split->test.n), o.test_fraction, static_cast<unsigned long long>(o.seed), n,
              o.optimizer.name.c_str(), static_cast<double>(o.optimizer.learning_rate),
              static_cast<double>(o.optimizer.momentum), o.batch_size);
  std::printf("%5s %11s %10s %13s %8s\n", "epoch", "train_loss", "test_loss", "test_accuracy", "seconds");
  const EvalResult start = nn::Evaluate(**model, host.span(), split->test);
  std::printf("%5d %11s %10.4f %13.4f %8.3f\n", 0, "-", start.loss, start.accuracy, 0.0);

  Rng rng(o.seed ^ 0x63656e7472616cULL);  // "central": its own shuffle stream
  const auto t0 = std::chrono::steady_clock::now();
  for (uint32_t epoch = 1; epoch <= o.epochs; ++epoch) {
    rng.Shuffle(std::span<int64_t>(order));
    double loss_sum = 0.0;
    for (int64_t pos = 0; pos < train.n; pos += o.batch_size) {
      const int rows = static_cast<int>(std::min<int64_t>(o.batch_size, train.n - pos));
      for (int r = 0; r < rows; ++r) {
        const int64_t i = order[static_cast<size_t>(pos + r)];
        std::copy_n(train.x.data() + i * dim, dim, hx.data() + static_cast<int64_t>(r) * dim);
        hy[static_cast<size_t>(r)] = train.y[static_cast<size_t>(i)];
      }
      batch_x.Upload(hx.data(), static_cast<size_t>(rows) * dim);
      batch_y.Upload(hy.data(), static_cast<size_t>(rows));
      const nn::Batch batch = nn::Batch::Features(batch_x.get(), batch_y.get(), rows);
      loss_sum += (*model)->ForwardBackward(w.get(), batch, grads.get(), /*loss_scale=*/1.0f).loss_sum;
      (*optimizer)->Step(w.get(), grads.get());
    }
    w.Download(host.data(), n);
    const EvalResult test = nn::Evaluate(**model, host.span(), split->test);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("%5u %11.4f %10.4f %13.4f %8.3f\n", epoch, loss_sum / static_cast<double>(train.n), test.loss,
                test.accuracy, seconds);
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace
}  // namespace shoal

int main(int argc, char** argv) {
  shoal::Options o;
  po::options_description desc("centralized_baseline: the MLP trained centrally, held-out accuracy per epoch");
  desc.add_options()("help,h", "show this help")(
      "dataset", po::value(&o.dataset)->default_value(o.dataset), "digits | csv:PATH | idx:IMAGES,LABELS")(
      "data-dir", po::value(&o.data_dir), "where digits.csv.gz is cached (default $SHOAL_DATA_DIR or ~/.cache/shoal)")(
      "model", po::value(&o.model)->default_value(o.model), "mlp | mlp:H1,H2,... | linear")(
      "device", po::value(&o.device)->default_value(o.device), "auto | cpu | cuda[:N]")(
      "epochs", po::value(&o.epochs)->default_value(o.epochs), "passes over the training split")(
      "batch-size", po::value(&o.batch_size)->default_value(o.batch_size), "minibatch size")(
      "test-fraction", po::value(&o.test_fraction)->default_value(o.test_fraction), "held-out share")(
      "seed", po::value(&o.seed)->default_value(o.seed), "split, init and shuffle seed")(
      "optimizer", po::value(&o.optimizer.name)->default_value("sgd"), "sgd | adamw")(
      "lr", po::value(&o.optimizer.learning_rate)->default_value(0.1f), "learning rate")(
      "momentum", po::value(&o.optimizer.momentum)->default_value(0.9f), "sgd momentum")(
      "nesterov", po::bool_switch(&o.optimizer.nesterov), "sgd Nesterov momentum")(
      "weight-decay", po::value(&o.optimizer.weight_decay)->default_value(0.0f), "L2 (sgd) / decoupled (adamw)");
  po::variables_map vm;
  try {
    po::store(po::parse_command_line(argc, argv, desc), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::fprintf(stderr, "centralized_baseline: error: %s\n", e.what());
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc << "\n";
    return 0;
  }
  spdlog::set_level(spdlog::level::warn);
  return shoal::Run(o);
}
