#include <spdlog/spdlog.h>

#include <chrono>

#include "crypto/crypto.h"
#include "runtime/server/edge.h"

namespace shoal::aggregator {

using std::chrono::milliseconds;

// The client's trainer: each round, an order for the edge's service, then the wait for its
// partial sum (on the client's worker thread: the client keeps heartbeating meanwhile).
class EdgeLink::Trainer final : public shoal::Trainer {
 public:
  explicit Trainer(EdgeLink* link) : link_(link) {}
  std::string name() const override { return "edge-aggregator"; }
  // The edge relays the task's feature map to its clients, whose trainers apply it.
  bool standardizes() const override { return true; }
  uint64_t num_examples() const override { return 0; }  // its clients' own, reported with each sum

  Status Configure(const TaskConfig& task) override {
    std::lock_guard<std::mutex> lock(link_->mu_);
    if (!link_->have_task_) {
      link_->task_ = task;
      link_->have_task_ = true;
      link_->cv_.notify_all();
      return Status::Ok();
    }
    if (task == link_->task_) return Status::Ok();
    return Status::InvalidArgument("the parent aggregator's task changed (model " + task.model + ", codec " + task.codec +
                                   "); this edge relays the task it started with: restart it");
  }

  Status Train(std::span<const float> global, const RoundConfig& config, const TrainContext& ctx,
               TrainResult* out) override {
    std::unique_lock<std::mutex> lock(link_->mu_);
    EdgeOrder order;
    order.round = config.round;
    order.config = config;
    order.model.assign(global.begin(), global.end());
    order.model_hash = crypto::ModelHash(order.model);
    if (link_->received_ && link_->received_->round == config.round && link_->received_->model_hash == order.model_hash)
      order.received = std::move(*link_->received_);
    link_->received_.reset();
    link_->order_ = std::move(order);
    link_->current_round_ = config.round;
    link_->result_.reset();
    link_->cv_.notify_all();
    while (!(link_->result_ && link_->result_->round == config.round)) {
      if (ctx.cancelled() || link_->stop_.load()) {
        link_->current_round_ = 0;  // the parent moved on: the service closes the edge's round
        return Status::Cancelled("the parent aggregator moved past round " + std::to_string(config.round));
      }
      link_->cv_.wait_for(lock, milliseconds(50));
    }
    Result& r = *link_->result_;
    if (!r.bytes) {
      link_->result_.reset();
      return Status::Unavailable("the edge's round " + std::to_string(config.round) + " gave no partial sum");
    }
    out->num_examples = r.weight;
    out->metrics = {{"train_loss", r.train_loss}};
    return Status::Ok();  // the client's partial_sum hook takes the bytes next
  }

 private:
  EdgeLink* link_;
};

StatusOr<std::unique_ptr<EdgeLink>> EdgeLink::Start(ClientOptions options, uint32_t task_timeout_ms,
                                                    std::function<std::unique_ptr<transport::Channel>()> channel) {
  std::unique_ptr<EdgeLink> link(new EdgeLink());
  const std::string parent = options.connect;
  // A lost parent is retried by the client for a while, then by a fresh client (Loop).
  options.reconnect_timeout_ms = 600000;
  EdgeLink* l = link.get();
  options.on_event = [l, parent](const ClientEvent& e) {
    switch (e.kind) {
      case ClientEvent::Kind::kConnected:
        l->connected_ = true;
        spdlog::info("edge: joined the parent aggregator {}", parent);
        break;
      case ClientEvent::Kind::kReconnecting:
        l->connected_ = false;
        spdlog::warn("edge: lost the parent aggregator {}; rejoining (this edge keeps its clients)", parent);
        break;
      case ClientEvent::Kind::kFinished: {
        std::lock_guard<std::mutex> lock(l->mu_);
        l->bye_reason_ = e.message;
        break;
      }
      default:
        break;
    }
  };
  link->thread_ = std::thread([l, options, channel] { l->Loop(options, channel); });
  std::unique_lock<std::mutex> lock(link->mu_);
  link->cv_.wait_for(lock, milliseconds(task_timeout_ms), [l] { return l->have_task_ || l->finished_.has_value(); });
  if (link->have_task_) return link;
  if (link->finished_ && !link->finished_->ok()) return link->finished_->WithContext("joining the parent " + parent);
  if (link->finished_) return Status::FailedPrecondition("the parent aggregator " + parent + " said Bye before any task");
  return Status::Unavailable("no task from the parent aggregator " + parent + " within " +
                             std::to_string(task_timeout_ms / 1000) +
                             " s: check --upstream, that it runs, and --upstream-server-key/--upstream-key");
}

void EdgeLink::Loop(ClientOptions options, std::function<std::unique_ptr<transport::Channel>()> channel) {
  while (!stop_.load()) {
    ClientHooks hooks;
    if (channel) hooks.channel = channel();
    hooks.on_model = [this](ReceivedModel m) {
      std::lock_guard<std::mutex> lock(mu_);
      received_ = std::move(m);
    };
    hooks.partial_sum = [this](uint64_t round) -> std::optional<std::vector<uint8_t>> {
      std::lock_guard<std::mutex> lock(mu_);
      if (!result_ || result_->round != round || !result_->bytes) return std::nullopt;
      std::optional<std::vector<uint8_t>> bytes = std::move(result_->bytes);
      result_.reset();
      return bytes;
    };
    std::unique_ptr<Client> client = ClientFactory::Make(options, std::make_unique<Trainer>(this), std::move(hooks));
    {
      std::lock_guard<std::mutex> lock(client_mu_);
      client_ = client.get();
    }
    Status st = stop_.load() ? Status::Cancelled("stopping") : client->Run();
    {
      std::lock_guard<std::mutex> lock(client_mu_);
      client_ = nullptr;
    }
    connected_ = false;
    if (stop_.load()) return;
    const StatusCode code = st.code();
    if (st.ok() || code == StatusCode::kPermissionDenied || code == StatusCode::kFailedPrecondition ||
        code == StatusCode::kInvalidArgument) {
      if (!st.ok()) spdlog::error("edge: the link to the parent aggregator {} ended: {}", options.connect, st.message());
      std::lock_guard<std::mutex> lock(mu_);
      finished_ = st;
      cv_.notify_all();
      return;
    }
    spdlog::warn("edge: the parent aggregator {} is unreachable ({}); trying again", options.connect, st.message());
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait_for(lock, milliseconds(1000), [this] { return stop_.load(); });
  }
}

EdgeLink::~EdgeLink() {
  stop_ = true;
  {
    std::lock_guard<std::mutex> lock(client_mu_);
    if (client_) client_->Cancel();
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

std::optional<EdgeOrder> EdgeLink::TakeOrder() {
  std::lock_guard<std::mutex> lock(mu_);
  return std::exchange(order_, std::nullopt);
}

bool EdgeLink::Superseded(uint64_t round) const {
  std::lock_guard<std::mutex> lock(mu_);
  return current_round_ != round;
}

void EdgeLink::Deliver(uint64_t round, std::vector<uint8_t> partial_sum, uint64_t weight, double train_loss) {
  std::lock_guard<std::mutex> lock(mu_);
  if (current_round_ != round) return;
  result_ = Result{round, std::move(partial_sum), weight, train_loss};
  cv_.notify_all();
}

void EdgeLink::Fail(uint64_t round, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  if (current_round_ != round) return;
  spdlog::warn("edge: round {}: no partial sum for the parent: {}", round, why);
  result_ = Result{round, std::nullopt, 0, 0.0};
  cv_.notify_all();
}

std::optional<Status> EdgeLink::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

std::string EdgeLink::bye_reason() const {
  std::lock_guard<std::mutex> lock(mu_);
  return bye_reason_;
}

}  // namespace shoal::aggregator
