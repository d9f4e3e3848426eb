// An application that embeds the Shoal client with ITS OWN model and training code.
//
// The model is multinomial logistic regression written right here (forward, gradient and SGD
// by hand, no Shoal layers). Shoal only moves parameters: the application implements the
// shoal::Trainer interface and hands it to shoal::Client. The parameter layout matches the
// aggregator's `--model linear` (fc0.weight [in, classes], fc0.bias [classes]), so the
// aggregator can evaluate the federated model on its held-out split.
//
//   shoal-aggregator --model linear --min-clients 2 --rounds 20 ...
//   embed_logreg --connect tcp://127.0.0.1:7070 --partition 0/2
//   embed_logreg --connect tcp://127.0.0.1:7070 --partition 1/2
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "shoal/client.h"
#include "shoal/data.h"

namespace {

class LogisticRegression final : public shoal::Trainer {
 public:
  LogisticRegression(shoal::data::Dataset full, uint32_t part, uint32_t parts)
      : full_(std::move(full)), part_(part), parts_(parts) {}

  std::string name() const override { return "embed_logreg"; }
  uint64_t num_examples() const override { return static_cast<uint64_t>(full_.n / parts_); }

  shoal::Status Configure(const shoal::TaskConfig& task) override {
    const int64_t d = full_.dim, k = full_.num_classes;
    const std::vector<shoal::TensorSpec> mine = {{"fc0.weight", {d, k}}, {"fc0.bias", {k}}};
    if (task.layout != mine)
      return shoal::Status::InvalidArgument("this application trains logistic regression (" +
                                            shoal::LayoutToString(mine) + "); the aggregator's model '" + task.model +
                                            "' has " + shoal::LayoutToString(task.layout) +
                                            ". Start the aggregator with --model linear");
    // Use the same held-out split and partition as every other client, so no client ever
    // trains on the aggregator's test examples.
    auto part = shoal::data::TrainingPart(full_, task.test_fraction, task.seed, {part_, parts_}, "iid");
    if (!part.ok()) return part.status();
    train_ = std::move(*part);
    batch_ = task.batch_size;
    seed_ = task.seed;
    return shoal::Status::Ok();
  }

  shoal::Status Train(std::span<const float> global, const shoal::RoundConfig& round, const shoal::TrainContext& ctx,
                      shoal::TrainResult* out) override {
    const int64_t d = train_.dim, k = train_.num_classes, n = train_.n;
    std::vector<float> w(global.begin(), global.end());  // W (d*k) then b (k)
    std::vector<float> grad(w.size());
    std::vector<double> p(k);
    std::vector<int64_t> order(n);
    for (int64_t i = 0; i < n; ++i) order[i] = i;
    std::srand(static_cast<unsigned>(seed_ + round.round * 7919 + part_));
    const int64_t steps_per_epoch = (n + batch_ - 1) / batch_;
    const int64_t total = round.local_steps ? round.local_steps : steps_per_epoch * round.local_epochs;
    double loss_sum = 0.0;
    uint64_t seen = 0;
    for (int64_t step = 0; step < total; ++step) {
      if (ctx.cancelled()) return shoal::Status::Cancelled("cancelled");
      if (step % steps_per_epoch == 0)  // reshuffle each epoch (Fisher-Yates)
        for (int64_t i = n - 1; i > 0; --i) std::swap(order[i], order[std::rand() % (i + 1)]);
      const int64_t begin = (step % steps_per_epoch) * batch_;
      const int64_t end = std::min<int64_t>(begin + batch_, n);
      std::fill(grad.begin(), grad.end(), 0.0f);
      for (int64_t r = begin; r < end; ++r) {
        const float* x = &train_.x[order[r] * d];
        const int y = train_.y[order[r]];
        // logits = x W + b, softmax, cross-entropy
        double mx = -1e300;
        for (int64_t c = 0; c < k; ++c) {
          double z = w[d * k + c];
          for (int64_t j = 0; j < d; ++j) z += x[j] * w[j * k + c];
          p[c] = z;
          mx = std::max(mx, z);
        }
        double sum = 0.0;
        for (int64_t c = 0; c < k; ++c) sum += (p[c] = std::exp(p[c] - mx));
        loss_sum += -std::log(p[y] / sum);
        // dL/dz = softmax - onehot; dW = x^T dz; db = dz
        for (int64_t c = 0; c < k; ++c) {
          const float dz = static_cast<float>(p[c] / sum - (c == y ? 1.0 : 0.0));
          for (int64_t j = 0; j < d; ++j) grad[j * k + c] += x[j] * dz;
          grad[d * k + c] += dz;
        }
      }
      const float scale = round.learning_rate / static_cast<float>(end - begin);
      for (size_t i = 0; i < w.size(); ++i) w[i] -= scale * grad[i];
      seen += static_cast<uint64_t>(end - begin);
      if (ctx.progress) ctx.progress(static_cast<float>(step + 1) / static_cast<float>(total));
    }
    out->delta.resize(w.size());
    for (size_t i = 0; i < w.size(); ++i) out->delta[i] = w[i] - global[i];
    out->num_examples = seen;
    out->metrics = {{"train_loss", seen ? loss_sum / static_cast<double>(seen) : 0.0}};
    return shoal::Status::Ok();
  }

 private:
  shoal::data::Dataset full_;
  shoal::data::Dataset train_;
  uint32_t part_, parts_;
  uint32_t batch_ = 32;
  uint64_t seed_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string connect = "tcp://127.0.0.1:7070", partition = "0/1", dataset = "digits";
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--connect")) connect = argv[i + 1];
    else if (!std::strcmp(argv[i], "--partition")) partition = argv[i + 1];
    else if (!std::strcmp(argv[i], "--dataset")) dataset = argv[i + 1];
    else {
      std::fprintf(stderr, "usage: embed_logreg [--connect EP] [--partition i/n] [--dataset digits]\n");
      return 2;
    }
  }
  auto part = shoal::data::ParsePartition(partition);
  if (!part.ok()) {
    std::fprintf(stderr, "embed_logreg: error: %s\n", part.status().message().c_str());
    return 2;
  }
  auto data = shoal::data::LoadDataset(dataset, shoal::data::DefaultDataDir());
  if (!data.ok()) {
    std::fprintf(stderr, "embed_logreg: error: %s\n", data.status().message().c_str());
    return 1;
  }
  shoal::ClientOptions options;
  options.connect = connect;
  options.name = "logreg-" + std::to_string(part->index);
  options.on_event = [](const shoal::ClientEvent& e) {
    if (e.kind == shoal::ClientEvent::Kind::kRoundDone)
      std::printf("round %llu: train_loss %.4f\n", static_cast<unsigned long long>(e.round), e.train_loss);
    if (e.kind == shoal::ClientEvent::Kind::kFinished) std::printf("finished: %s\n", e.message.c_str());
  };
  shoal::Client client(options, std::make_unique<LogisticRegression>(std::move(*data), part->index, part->count));
  shoal::Status st = client.Run();
  if (!st.ok()) {
    std::fprintf(stderr, "embed_logreg: error: %s\n", st.message().c_str());
    return 1;
  }
  return 0;
}
