#include "aggregator_metrics.h"

#include <algorithm>

namespace shoal::telemetry {

AggregatorMetrics::AggregatorMetrics()
    : round_seconds_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600}) {}

void AggregatorMetrics::OnRound(const RoundReport& r) {
  std::lock_guard<std::mutex> lock(mu_);
  ++rounds_;
  reported_ += r.clients_reported;
  dropped_ += r.clients_dropped;
  bytes_up_ += r.bytes_up;
  bytes_down_ += r.bytes_down;
  dense_ += r.bytes_dense_equiv;
  resyncs_ += r.resyncs;
  decode_seconds_ += r.decode_seconds;
  round_seconds_.Observe(r.seconds);
  last_ = r;
}

void AggregatorMetrics::OnStatus(const LiveStatus& s) {
  std::lock_guard<std::mutex> lock(mu_);
  live_ = s;
  live_.clients.clear();  // the per-client list is the status page's, not exported here
}

std::vector<prometheus::MetricFamily> AggregatorMetrics::Collect() const {
  std::lock_guard<std::mutex> lock(mu_);
  const RoundReport none;
  const RoundReport& r = last_ ? *last_ : none;
  FamilyList out;
  out.Counter("shoal_rounds_completed_total", "rounds completed by this process").Value(static_cast<double>(rounds_));
  out.Gauge("shoal_last_completed_round", "the last completed round, counting those resumed from a checkpoint")
      // The last report's round; before any round of this process, the resumed one.
      .Value(static_cast<double>(std::max(live_.last_completed, r.round)));
  out.Gauge("shoal_current_round", "the round in progress, or the next one").Value(static_cast<double>(live_.round));
  out.Gauge("shoal_round_open", "1 while a round's tasks are out").Value(live_.round_open ? 1 : 0);
  out.Gauge("shoal_clients_registered", "clients registered now").Value(static_cast<double>(live_.clients_registered));
  out.Gauge("shoal_clients_selected", "clients selected for the open round").Value(static_cast<double>(live_.clients_selected));
  out.Gauge("shoal_updates_received", "updates received in the open round").Value(static_cast<double>(live_.updates_received));
  out.Counter("shoal_clients_reported_total", "updates aggregated, over all rounds").Value(static_cast<double>(reported_));
  out.Counter("shoal_clients_dropped_total", "selected clients that failed their round").Value(static_cast<double>(dropped_));
  out.Counter("shoal_bytes_total", "bytes of frames on the wire, by direction and codec")
      .Value(static_cast<double>(bytes_up_), {{"direction", "up"}, {"codec", r.codec_up}})
      .Value(static_cast<double>(bytes_down_), {{"direction", "down"}, {"codec", r.codec_down}});
  out.Counter("shoal_dense_equivalent_bytes_total", "what dense fp32 models both ways would have cost")
      .Value(static_cast<double>(dense_));
  out.Counter("shoal_frames_rejected_total", "inbound frames rejected, by protocol error code");
  for (const auto& [reason, count] : r.rejected_by_code) out.Value(static_cast<double>(count), {{"reason", reason}});
  out.Counter("shoal_updates_late_total", "updates refused for arriving after their round (or too stale)")
      .Value(static_cast<double>(r.updates_late));
  out.Counter("shoal_clients_moved_total", "registrations moved to a new connection of the same key (a cut link, a restart)")
      .Value(static_cast<double>(r.clients_moved));
  out.Counter("shoal_resyncs_total", "full models sent to clients whose replica was behind").Value(static_cast<double>(resyncs_));
  out.Counter("shoal_connections_total", "connections accepted").Value(static_cast<double>(r.connections));
  out.Counter("shoal_handshakes_failed_total", "transport handshakes that failed").Value(static_cast<double>(r.handshakes_failed));
  out.Counter("shoal_handshakes_refused_total", "handshakes whose key the allow-list refused")
      .Value(static_cast<double>(r.handshakes_refused));
  out.Histogram("shoal_round_duration_seconds", "from a round's tasks going out to its close").Sample(round_seconds_.Collect());
  out.Gauge("shoal_encode_seconds", "clients' mean time to encode their update, last round").Value(r.encode_seconds);
  out.Counter("shoal_decode_seconds_total", "the aggregator's time decoding updates").Value(decode_seconds_);
  if (last_) {
    out.Gauge("shoal_test_loss", "held-out loss of the global model after the last round").Value(r.test_loss);
    out.Gauge("shoal_test_accuracy", "held-out accuracy of the global model after the last round").Value(r.test_accuracy);
    out.Gauge("shoal_train_loss", "clients' mean training loss in the last round").Value(r.train_loss);
  }
  out.Gauge("shoal_strategy_value", "the strategy's own values after the last round (epsilon with DP, ...)");
  for (const StrategyMetric& m : r.strategy_metrics) out.Value(m.value, {{"name", m.name}});
  return out.Take();
}

}  // namespace shoal::telemetry
