// The Prometheus endpoint of a Shoal process (`--metrics-listen HOST:PORT` on shoal-aggregator
// and shoal-peer): prometheus-cpp's Exposer, which serves GET /metrics in the text exposition
// format from civetweb threads. Each scrape asks the process's collectables for a consistent
// snapshot (aggregator_metrics.h, peer_metrics.h) plus the process facts (process_*).
//
// It lives outside libshoal on purpose: an application that embeds the SDK should not link an
// HTTP server. The service and the peer publish typed reports (RoundReport, LiveStatus,
// PeerStep) through their observers; this library turns them into metrics.
//
// Names follow Prometheus conventions: a shoal_ prefix, counters end in _total, times in
// _seconds, sizes in _bytes; process_* are the standard process metrics.
#pragma once

#include <prometheus/client_metric.h>
#include <prometheus/collectable.h>
#include <prometheus/metric_family.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "shoal/status.h"

namespace prometheus {
class Exposer;
}
struct mg_connection;

namespace shoal::telemetry {

// Builds the families of one scrape: Add a family, then its samples.
class FamilyList {
 public:
  using Labels = std::vector<prometheus::ClientMetric::Label>;
  FamilyList& Counter(const std::string& name, const std::string& help);
  FamilyList& Gauge(const std::string& name, const std::string& help);
  FamilyList& Histogram(const std::string& name, const std::string& help);
  // A sample of the family added last.
  FamilyList& Value(double value, Labels labels = {});
  FamilyList& Sample(prometheus::ClientMetric metric, Labels labels = {});
  std::vector<prometheus::MetricFamily> Take() { return std::move(families_); }

 private:
  std::vector<prometheus::MetricFamily> families_;
};

// "HOST:PORT" from a --metrics-listen / --status-listen value: "HOST:PORT" (an IPv4 address,
// or [IPv6]) or a bare "PORT", which means 127.0.0.1 (loopback by default). Port 0 asks for
// a free one. InvalidArgument naming `flag` otherwise.
StatusOr<std::string> ParseListenAddress(const std::string& listen, const std::string& flag);
// The address a server bound: `address` (HOST:PORT as parsed) with the port civetweb reports
// (a port 0 asked for a free one).
std::string BoundAddress(const std::string& address, const std::vector<int>& ports);

// Debian 12's civetweb (1.15) crashes the process while writing its own error page (seen for
// GET of an unknown path: a segfault in mg_send_http_error). So both servers answer, in their
// begin_request callback and before civetweb looks at it, every request but a GET of one of
// `served`: 404 for another path, 405 for another method. Returns what begin_request returns
// (0: civetweb goes on and serves it; else the status sent).
int AnswerUnlessServed(mg_connection* conn, std::initializer_list<const char*> served);

class MetricsEndpoint {
 public:
  // Binds `listen`: "HOST:PORT" (an IPv4 address, or [IPv6]) or a bare "PORT", which means
  // 127.0.0.1 (loopback by default: metrics can name clients and keys' counts). Port 0 picks a
  // free one. `program` and the version go into shoal_build_info. Unavailable with the reason
  // when the address cannot be bound; InvalidArgument for a malformed one.
  static StatusOr<std::unique_ptr<MetricsEndpoint>> Start(const std::string& listen, const std::string& program,
                                                           std::shared_ptr<prometheus::Collectable> source);
  ~MetricsEndpoint();
  // "HOST:PORT" actually bound; the page is http://HOST:PORT/metrics.
  const std::string& address() const { return address_; }

 private:
  MetricsEndpoint() = default;
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::vector<std::shared_ptr<prometheus::Collectable>> collectables_;
  std::string address_;
};

}  // namespace shoal::telemetry
