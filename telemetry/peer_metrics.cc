#include "peer_metrics.h"

namespace shoal::telemetry {

PeerMetrics::PeerMetrics()
    : step_seconds_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}) {}

void PeerMetrics::OnStep(const PeerStep& s) {
  std::lock_guard<std::mutex> lock(mu_);
  ++steps_;
  step_ = s.step;
  members_ = s.members;
  included_ = s.included;
  sent_ += s.bytes_sent;
  received_ += s.bytes_received;
  rejected_ = s.frames_rejected;
  resyncs_ = s.resyncs;
  loss_ = s.loss;
  if (s.eval) eval_ = s.eval;
  step_seconds_.Observe(s.seconds);
}

std::vector<prometheus::MetricFamily> PeerMetrics::Collect() const {
  std::lock_guard<std::mutex> lock(mu_);
  FamilyList out;
  out.Counter("shoal_peer_steps_total", "steps finished by this process").Value(static_cast<double>(steps_));
  out.Gauge("shoal_peer_step", "the last finished step").Value(static_cast<double>(step_));
  out.Gauge("shoal_peer_members", "live members, this peer included").Value(static_cast<double>(members_));
  out.Gauge("shoal_peer_included", "updates the last step applied").Value(static_cast<double>(included_));
  out.Counter("shoal_bytes_total", "bytes of frames on the wire, by direction")
      .Value(static_cast<double>(sent_), {{"direction", "sent"}})
      .Value(static_cast<double>(received_), {{"direction", "received"}});
  out.Histogram("shoal_peer_step_duration_seconds", "wall time of a step").Sample(step_seconds_.Collect());
  out.Counter("shoal_frames_rejected_total", "inbound frames rejected").Value(static_cast<double>(rejected_));
  out.Counter("shoal_peer_resyncs_total", "replica transfers").Value(static_cast<double>(resyncs_));
  if (steps_) out.Gauge("shoal_train_loss", "mean training loss of the last step's updates").Value(loss_);
  if (eval_) {
    out.Gauge("shoal_test_loss", "loss at the last evaluation").Value(eval_->loss);
    out.Gauge("shoal_test_accuracy", "accuracy at the last evaluation").Value(eval_->accuracy);
  }
  return out.Take();
}

}  // namespace shoal::telemetry
