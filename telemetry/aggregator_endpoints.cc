#include "aggregator_endpoints.h"

#include <spdlog/spdlog.h>

namespace shoal::telemetry {

void AggregatorEndpoints::Observe(ServerOptions& options) {
  options.on_round = [this](const RoundReport& r) {
    metrics_->OnRound(r);
    if (page_) page_->OnRound(r);
  };
  options.on_status = [this](const LiveStatus& s) {
    metrics_->OnStatus(s);
    if (page_) page_->OnStatus(s);
  };
}

Status AggregatorEndpoints::Start(const std::string& metrics_listen, const std::string& status_listen,
                                  const std::string& program) {
  if (!metrics_listen.empty()) {
    SHOAL_ASSIGN_OR_RETURN(endpoint_, MetricsEndpoint::Start(metrics_listen, program, metrics_));
    spdlog::info("Prometheus metrics at http://{}/metrics", endpoint_->address());
  }
  if (!status_listen.empty()) {
    SHOAL_ASSIGN_OR_RETURN(page_, StatusPage::Start(status_listen, program));
    spdlog::info("status page at http://{}/", page_->address());
  }
  return Status::Ok();
}

}  // namespace shoal::telemetry
