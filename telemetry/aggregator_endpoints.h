// What shoal-aggregator serves to operators, besides its metrics file: the Prometheus endpoint
// (--metrics-listen) and the live status page (--status-listen), both fed by the service's
// typed observers. Keeps the main thin: Observe before Server::Create, Start after it.
#pragma once

#include <memory>
#include <string>

#include "aggregator_metrics.h"
#include "metrics_endpoint.h"
#include "status_page.h"

namespace shoal::telemetry {

class AggregatorEndpoints {
 public:
  // Sets options.on_round and on_status to feed the metrics and the page (whichever run).
  // This object must outlive the service.
  void Observe(ServerOptions& options);
  // Starts what is asked for (an empty address: not that one) and logs each URL. The errors
  // of MetricsEndpoint::Start and StatusPage::Start.
  Status Start(const std::string& metrics_listen, const std::string& status_listen, const std::string& program);

 private:
  std::shared_ptr<AggregatorMetrics> metrics_ = std::make_shared<AggregatorMetrics>();
  std::unique_ptr<MetricsEndpoint> endpoint_;
  std::unique_ptr<StatusPage> page_;
};

}  // namespace shoal::telemetry
