// shoal-aggregator's metrics for Prometheus: fed by the service's typed observers
// (RoundReport after each round, LiveStatus every 250 ms), read by scrapes. Every scrape sees
// one consistent state: a round's counters all move together, under one lock.
//
//   shoal_rounds_completed_total        rounds completed by this process
//   shoal_last_completed_round          the last completed round (counting resumed ones)
//   shoal_current_round, shoal_round_open
//   shoal_clients_registered, shoal_clients_selected (open round), shoal_updates_received (open round)
//   shoal_clients_reported_total, shoal_clients_dropped_total
//   shoal_bytes_total{direction="up"|"down", codec}       frames on the wire
//   shoal_dense_equivalent_bytes_total                     what dense fp32 both ways would have cost
//   shoal_frames_rejected_total{reason}                    by protocol error code
//   shoal_updates_late_total, shoal_resyncs_total, shoal_clients_moved_total
//   shoal_connections_total, shoal_handshakes_failed_total, shoal_handshakes_refused_total
//   shoal_round_duration_seconds (histogram)
//   shoal_encode_seconds (clients' mean, last round), shoal_decode_seconds_total
//   shoal_test_loss, shoal_test_accuracy, shoal_train_loss (last round)
//   shoal_strategy_value{name}                              the strategy's own: epsilon with DP, ...
#pragma once

#include <prometheus/histogram.h>

#include <mutex>
#include <optional>

#include "metrics_endpoint.h"
#include "shoal/server.h"

namespace shoal::telemetry {

class AggregatorMetrics : public prometheus::Collectable {
 public:
  AggregatorMetrics();
  void OnRound(const RoundReport& r);
  void OnStatus(const LiveStatus& s);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  mutable std::mutex mu_;
  uint64_t rounds_ = 0, reported_ = 0, dropped_ = 0, bytes_up_ = 0, bytes_down_ = 0, dense_ = 0, resyncs_ = 0;
  double decode_seconds_ = 0;
  std::optional<RoundReport> last_;
  LiveStatus live_;
  prometheus::Histogram round_seconds_;
};

}  // namespace shoal::telemetry
