// Asynchronous strategies (FedBuff, aggregate/strategies/fedbuff.h) in the service. A "round"
// is one commit: round r's buffer fills with updates trained from any version r-1-tau, tau <=
// --max-staleness, and commits when it holds --buffer-size of them (or when it holds some and
// no client is training towards it, or at --round-timeout if it holds any; an empty buffer
// keeps waiting, since an empty commit would age every update in flight). Between commits
// nobody waits:
//   - a client that reports, fails or registers is idle; DispatchIdle gives it the current
//     round's task (model version r-1, as a delta when its replica is one version behind, in
//     full when further) unless it has already trained on that version, keeping
//     ceil(--fraction * registered) clients training;
//   - a client's update is taken only for the task it holds (task_round), at most one per
//     task, so a client contributes at most once per model version;
//   - uploads in flight carry over a commit (ResetRound), and their staleness is counted when
//     they are complete;
//   - a task more than --max-staleness commits old expires at the next commit (the client is
//     failed for it and becomes idle): its update would be refused, and a client that
//     abandoned its task would otherwise hold it forever.
#include "runtime/server/service_impl.h"

namespace shoal::aggregator {

namespace {
constexpr uint64_t kDispatchSeedTag = 0x66656462756666ULL;  // "fedbuff"
}  // namespace

void Service::Impl::DispatchIdle() {
  dispatch_pending_ = false;
  if (!round_.open) return;
  const size_t training = TrainingCount();
  std::vector<const ClientState*> idle;
  for (const auto& [id, c] : clients_)
    if (!c.training && c.task_round != round_.number) idle.push_back(&c);
  const size_t n = clients_.size();
  const size_t concurrency =
      std::min(n, std::max<size_t>(1, static_cast<size_t>(std::ceil(o_.fraction * static_cast<double>(n)))));
  if (training >= concurrency || idle.empty()) return;
  SortByName(idle);
  // Frames are shared only by the tasks sent together: a client that heard newer frames
  // (its Ack) would refuse a task encoded before them as replayed.
  ClearTaskFrames();
  Rng rng(o_.seed ^ kDispatchSeedTag, ++dispatches_);
  rng.Shuffle(std::span<const ClientState*>(idle));
  const size_t k = std::min(idle.size(), concurrency - training);
  for (size_t i = 0; i < k; ++i) {
    round_.selected.push_back(idle[i]->id);
    SendTask(clients_.at(idle[i]->id), false);
  }
}

void Service::Impl::ExpireStaleTasks() {
  std::vector<uint32_t> expired;
  for (const auto& [id, c] : clients_)
    if (c.training && c.task_round + async_->max_staleness < round_.number) expired.push_back(id);
  for (uint32_t id : expired) FailClient(id, "its task is more than --max-staleness commits old");
}

bool Service::Impl::BufferDeadline() {
  if (Clock::now() < round_.deadline) return false;
  if (!round_.results.empty()) return true;
  spdlog::warn("round {}: no update in {} ms; still buffering", round_.number, o_.round_timeout_ms);
  round_.deadline = Clock::now() + std::chrono::milliseconds(o_.round_timeout_ms);
  return false;
}

size_t Service::Impl::TrainingCount() const {
  return std::count_if(clients_.begin(), clients_.end(), [](const auto& kv) { return kv.second.training; });
}

bool Service::Impl::BufferResolved() const { return BufferFull() || (!round_.results.empty() && TrainingCount() == 0); }

bool Service::Impl::AdmitBuffered(ClientState& c, uint64_t round, bool first_chunk) {
  if (c.training && round == c.task_round) return true;
  // The update of a task that expired (ExpireStaleTasks): late, counted once.
  if (first_chunk && round != 0 && round + async_->max_staleness < round_.number) ++updates_late_;
  Reject(c.peer, ErrorCode::StaleRound,
         "no task of round " + std::to_string(round) + " is outstanding for this client" +
             (c.training ? " (it holds round " + std::to_string(c.task_round) + "'s)" : ""),
         round);
  return false;
}

std::optional<uint64_t> Service::Impl::BufferedStaleness(ClientState& c, uint64_t round) {
  const uint64_t staleness = round_.number - round;  // round <= round_.number: tasks only come from open rounds
  if (round_.open && staleness <= async_->max_staleness) return staleness;
  if (closing_) return std::nullopt;  // the run is over: clients still training hear the Bye
  ++updates_late_;
  Reject(c.peer, ErrorCode::StaleRound,
         round_.open ? "update trained from round " + std::to_string(round) + "'s model is " + std::to_string(staleness) +
                           " commits old, beyond --max-staleness " + std::to_string(async_->max_staleness)
                     : "no commit is being buffered (waiting for --min-clients)",
         round);
  c.training = false;
  dispatch_pending_ = true;
  return std::nullopt;
}

}  // namespace shoal::aggregator
