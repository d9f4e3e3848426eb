// shoal::Server (shoal/server.h): the public face of the aggregator service. It owns the
// stop and reload flags the service's loop reads, and remembers how a run ended so that
// Poll keeps answering with it.
#include "shoal/server.h"

#include <atomic>
#include <chrono>
#include <optional>

#include "runtime/server/service.h"

namespace shoal {

class Server::Impl {
 public:
  explicit Impl(std::unique_ptr<aggregator::Service> service) : service_(std::move(service)) {}

  Status SetEvaluator(std::unique_ptr<Evaluator> evaluator) {
    if (started_) return Status::FailedPrecondition("SetEvaluator after the server started serving (Run or Poll)");
    service_->SetEvaluator(std::move(evaluator));
    return Status::Ok();
  }

  Status Run() {
    if (started_) return Status::FailedPrecondition("Run after the server already ran (Run or Poll)");
    started_ = true;
    over_ = service_->Run(stop_, &reload_, &finish_);
    return *over_;
  }

  Status Poll(uint32_t timeout_ms, bool* finished) {
    if (!finished) return Status::InvalidArgument("Poll: finished is null");
    started_ = true;
    using Clock = std::chrono::steady_clock;
    const auto until = Clock::now() + std::chrono::milliseconds(timeout_ms);
    const uint64_t committed = service_->rounds_completed();
    while (!over_) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - Clock::now());
      over_ = service_->Turn(stop_, &reload_, std::max(left, std::chrono::milliseconds(0)), &finish_);
      // Back to the application after each commit: a loop that reads rounds_completed()
      // between slices sees every round, however short.
      if (Clock::now() >= until || service_->rounds_completed() != committed) break;
    }
    *finished = over_.has_value();
    return over_.value_or(Status::Ok());
  }

  void Stop() { stop_.store(true); }
  void Finish() { finish_.store(true); }
  void ReloadAllowList() { reload_.store(true); }
  aggregator::Service& service() const { return *service_; }

 private:
  std::unique_ptr<aggregator::Service> service_;
  std::atomic<bool> stop_{false}, reload_{false}, finish_{false};
  bool started_ = false;
  std::optional<Status> over_;  // how the run ended, once it has
};

// Lock-free atomics, so Stop and ReloadAllowList may be called from a signal handler.
static_assert(std::atomic<bool>::is_always_lock_free);

StatusOr<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  SHOAL_ASSIGN_OR_RETURN(auto service, aggregator::Service::Create(aggregator::AggregatorOptions(options)));
  return std::unique_ptr<Server>(new Server(std::make_unique<Impl>(std::move(service))));
}

Server::Server(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Server::~Server() = default;
Status Server::SetEvaluator(std::unique_ptr<Evaluator> evaluator) { return impl_->SetEvaluator(std::move(evaluator)); }
Status Server::Run() { return impl_->Run(); }
Status Server::Poll(uint32_t timeout_ms, bool* finished) { return impl_->Poll(timeout_ms, finished); }
void Server::Stop() { impl_->Stop(); }
void Server::Finish() { impl_->Finish(); }
void Server::ReloadAllowList() { impl_->ReloadAllowList(); }
std::string Server::endpoint() const { return impl_->service().endpoint(); }
uint64_t Server::rounds_completed() const { return impl_->service().rounds_completed(); }
std::string Server::model_hash() const { return impl_->service().model_hash(); }

}  // namespace shoal
