// shoal-peer's metrics for Prometheus, fed by PeerOptions::on_step (PeerStep), read by scrapes
// under one lock (a consistent state per scrape).
//
//   shoal_peer_steps_total, shoal_peer_step, shoal_peer_members, shoal_peer_included
//   shoal_bytes_total{direction="sent"|"received"}
//   shoal_peer_step_duration_seconds (histogram)
//   shoal_frames_rejected_total, shoal_peer_resyncs_total
//   shoal_train_loss (last step), shoal_test_loss, shoal_test_accuracy (last evaluation)
#pragma once

#include <prometheus/histogram.h>

#include <mutex>
#include <optional>

#include "metrics_endpoint.h"
#include "shoal/peer.h"

namespace shoal::telemetry {

class PeerMetrics : public prometheus::Collectable {
 public:
  PeerMetrics();
  void OnStep(const PeerStep& s);
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  mutable std::mutex mu_;
  uint64_t steps_ = 0, step_ = 0, members_ = 0, included_ = 0, sent_ = 0, received_ = 0, rejected_ = 0, resyncs_ = 0;
  double loss_ = 0;
  std::optional<EvalResult> eval_;
  prometheus::Histogram step_seconds_;
};

}  // namespace shoal::telemetry
