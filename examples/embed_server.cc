// An application that runs the Shoal AGGREGATOR inside itself (shoal::Server), with ITS OWN
// evaluation: the partner's service decides how the federated model is scored and when
// training is good enough.
//
// The evaluator here scores the global `--model linear` (fc0.weight [in, classes], fc0.bias
// [classes]) on the application's own evaluation data, the held-out split of the dataset,
// by hand (no Shoal layers), and reports, beside loss and accuracy, the accuracy of the
// worst class: a number the built-in evaluation does not give. The application's loop steps
// the server (Poll); its round observer ends training (Finish: Bye to every client) once the
// worst class reaches --target, or the run ends after --rounds rounds.
//
//   embed_server --listen tcp://127.0.0.1:7070 --rounds 30 --target 0.8
//   embed_logreg --connect tcp://127.0.0.1:7070 --partition 0/2
//   embed_logreg --connect tcp://127.0.0.1:7070 --partition 1/2
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "shoal/data.h"
#include "shoal/server.h"

namespace {

class HeldOutEvaluator final : public shoal::Evaluator {
 public:
  explicit HeldOutEvaluator(shoal::data::Dataset full) : full_(std::move(full)) {}

  shoal::Status Configure(const shoal::TaskConfig& task) override {
    const int64_t d = full_.dim, k = full_.num_classes;
    const std::vector<shoal::TensorSpec> mine = {{"fc0.weight", {d, k}}, {"fc0.bias", {k}}};
    if (task.layout != mine)
      return shoal::Status::InvalidArgument("this evaluator scores logistic regression (" +
                                            shoal::LayoutToString(mine) + "), not " + task.model);
    // The split every client also leaves out of training (same seed and fraction).
    auto split = shoal::data::TrainTestSplit(full_, task.test_fraction, task.seed);
    if (!split.ok()) return split.status();
    test_ = std::move(split->test);
    return shoal::Status::Ok();
  }

  shoal::Status Evaluate(std::span<const float> w, uint64_t round, shoal::Evaluation* out) override {
    const int64_t d = test_.dim, k = test_.num_classes;
    std::vector<double> right(k, 0.0), seen(k, 0.0);
    double loss = 0.0;
    for (int64_t r = 0; r < test_.n; ++r) {
      const float* x = &test_.x[r * d];
      const int y = test_.y[r];
      std::vector<double> z(k);
      for (int64_t c = 0; c < k; ++c) {
        z[c] = w[d * k + c];
        for (int64_t j = 0; j < d; ++j) z[c] += x[j] * w[j * k + c];
      }
      const double mx = *std::max_element(z.begin(), z.end());
      double sum = 0.0;
      for (double v : z) sum += std::exp(v - mx);
      loss += -(z[y] - mx - std::log(sum));
      right[y] += std::max_element(z.begin(), z.end()) - z.begin() == y;
      seen[y] += 1;
    }
    double worst = 1.0;
    for (int64_t c = 0; c < k; ++c)
      if (seen[c] > 0) worst = std::min(worst, right[c] / seen[c]);
    double correct = 0.0;
    for (double v : right) correct += v;
    out->loss = loss / static_cast<double>(test_.n);
    out->accuracy = correct / static_cast<double>(test_.n);
    out->metrics = {{"worst_class_accuracy", worst}};
    return shoal::Status::Ok();
  }

 private:
  shoal::data::Dataset full_, test_;
};

}  // namespace

int main(int argc, char** argv) {
  shoal::ServerOptions o;
  o.listen = "tcp://127.0.0.1:7070";
  o.model = "linear";
  o.min_clients = 2;
  o.rounds = 30;
  o.print_table = false;
  double target = 0.8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--listen")) o.listen = argv[i + 1];
    else if (!std::strcmp(argv[i], "--rounds")) o.rounds = std::strtoull(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--min-clients")) o.min_clients = static_cast<uint32_t>(std::atoi(argv[i + 1]));
    else if (!std::strcmp(argv[i], "--target")) target = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--metrics-out")) o.metrics_out = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: embed_server [--listen EP] [--rounds N] [--min-clients N] [--target A] [--metrics-out F]\n");
      return 2;
    }
  }
  auto data = shoal::data::LoadDataset(o.dataset, shoal::data::DefaultDataDir());
  if (!data.ok()) {
    std::fprintf(stderr, "embed_server: error: %s\n", data.status().message().c_str());
    return 1;
  }
  // The gate, after every committed round (on the server's thread, inside Poll): the
  // evaluator's own metric arrives in the round's report.
  shoal::Server* running = nullptr;
  o.on_round = [&](const shoal::RoundReport& r) {
    double worst = 0.0;
    for (const auto& m : r.evaluation_metrics)
      if (m.name == "worst_class_accuracy") worst = m.value;
    std::printf("round %llu: worst class %.4f\n", static_cast<unsigned long long>(r.round), worst);
    if (worst >= target) {
      std::printf("target %.2f reached after %llu rounds; stopping\n", target, static_cast<unsigned long long>(r.round));
      running->Finish();  // Bye to every client (Stop would leave them waiting for a restart)
    }
  };
  auto server = shoal::Server::Create(o);
  if (!server.ok()) {
    std::fprintf(stderr, "embed_server: error: %s\n", server.status().message().c_str());
    return 1;
  }
  running = server->get();
  if (auto st = (*server)->SetEvaluator(std::make_unique<HeldOutEvaluator>(std::move(*data))); !st.ok()) return 1;

  // The application's own loop: a slice of serving (until a round commits, at most 50 ms),
  // then its own work (here: counting the rounds it saw between slices).
  bool finished = false;
  shoal::Status st;
  uint64_t last = 0, seen = 0;
  while (!finished) {
    st = (*server)->Poll(50, &finished);
    if ((*server)->rounds_completed() != last) ++seen, last = (*server)->rounds_completed();
  }
  std::printf("the loop saw %llu of %llu rounds\n", static_cast<unsigned long long>(seen), static_cast<unsigned long long>(last));
  if (!st.ok()) {
    std::fprintf(stderr, "embed_server: error: %s\n", st.message().c_str());
    return 1;
  }
  return 0;
}
