// The commit log: the step leader commits which updates a step applies, every replica applies
// the same ones through the exchange's accumulator (exact, order-independent) and checks the
// leader's model hash; and the locally mixed step of the exchanges without a leader (gossip).
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

#include "codec/codec.h"
#include "codec/round_context.h"
#include "runtime/peer/peer_impl.h"
#include "runtime/update.h"

namespace shoal::peer {

// The updates a commit of `step` (the next) takes now, by author, and in *all whether every
// live member's is in. Updates from another replica do not count. With overlap an update
// starts from the replica after step-2, or after step-1 for a member that has just loaded the
// replica (it never had the older one); every replica applies what the commit lists, so both
// are consistent.
std::vector<std::string> Peer::Eligible(uint64_t step, bool* all) {
  auto& got = updates_[step];
  *all = true;
  for (const auto& name : LiveNames())
    if (!got.count(name) || !got.at(name).complete) *all = false;
  const std::string base = BaseHash(step);
  std::vector<std::string> authors;
  for (const auto& [name, u] : got)
    if (u.complete && ((!base.empty() && u.base_hash == base) || (overlap_ && u.base_hash == hash_)))
      authors.push_back(name);
  return authors;
}

// The leader commits the step once every live member's update is in, or at the deadline.
void Peer::MaybeCommit() {
  const uint64_t step = committed_ + 1;
  if (sent_step_ < step || Leader() != self_.name || PastTheEnd(step)) return;
  bool all = false;
  const std::vector<std::string> authors = Eligible(step, &all);
  if (!all && MillisSince(step_started_) < static_cast<int64_t>(swarm_info_.step_timeout_ms)) return;
  Status st = Apply(step, authors);
  if (!st.ok()) {
    spdlog::error("peer {}: step {}: {}", self_.name, step, st.message());
    return;
  }
  BroadcastCommit(step, authors);
}

// Sends the commit of `step` (its authors and their payload hashes) to every member, if this
// peer still holds every one of those updates.
void Peer::BroadcastCommit(uint64_t step, const std::vector<std::string>& authors) {
  std::vector<std::string> hashes;
  auto s = updates_.find(step);
  if (s == updates_.end()) return;
  for (const auto& a : authors) {
    auto u = s->second.find(a);
    if (u == s->second.end()) return;
    hashes.push_back(u->second.payload_hash);
  }
  Broadcast([&](Member& m) {
    protocol::Header h = Header(m);
    h.round = step;
    return protocol::EncodeCommit(h, authors, hashes, hash_);
  });
}

// A follower with overlap applies the next step as soon as every live member's update is in,
// as the leader will (Eligible), without waiting for the commit; at most one step ahead of it.
void Peer::Speculate() {
  if (!overlap_ || speculation_ || Leader() == self_.name) return;
  const uint64_t step = committed_ + 1;
  if (sent_step_ < step || commits_.count(step) || step == failed_speculation_ || PastTheEnd(step)) return;
  bool all = false;
  const std::vector<std::string> authors = Eligible(step, &all);
  if (!all) return;
  Speculation s{.step = step, .entries = {}, .w_before = w_, .state_before = exchange_->SaveState(), .hash_before = hash_,
                .since = Clock::now()};
  for (const auto& a : authors) s.entries.emplace_back(a, updates_[step].at(a).payload_hash);
  if (Status st = Apply(step, authors); !st.ok()) {  // the commit will say what to do (a resync)
    spdlog::warn("peer {}: step {}: not applied ahead of its commit: {}", self_.name, step, st.message());
    RollBack(std::move(s));
    failed_speculation_ = step;
    return;
  }
  speculation_ = std::move(s);
  ++applied_ahead_;
}

// The replica goes back to where it was before the step applied ahead of its commit.
void Peer::RollBack(Speculation s) {
  w_ = std::move(s.w_before);
  if (Status st = exchange_->LoadState(s.state_before); !st.ok())  // its own SaveState: cannot fail
    spdlog::error("peer {}: rolling back step {}: {}", self_.name, s.step, st.message());
  hash_ = std::move(s.hash_before);
  committed_ = s.step - 1;
  hash_log_.erase(s.step);
  if (!commit_log_.empty() && commit_log_.back().first == s.step) commit_log_.pop_back();
}

// The commit of the step applied ahead: the same updates and model confirm it; otherwise the
// replica rolls back and applies the commit's updates. This peer's update of the step after
// next, made from the replica applied ahead, then starts from a replica the leader never had:
// it leaves it out of that step (one contribution lost, the replicas still one).
void Peer::SettleSpeculation(const std::string& from, protocol::Commit c) {
  Speculation s = std::move(*speculation_);
  speculation_.reset();
  if (c.entries == s.entries && c.model_hash == hash_) return;
  ++rollbacks_;
  spdlog::info("peer {}: step {}: {}'s commit differs from the step applied ahead of it; rolling back", self_.name,
               s.step, from);
  const uint64_t step = s.step;
  RollBack(std::move(s));
  commits_[step] = PendingCommit{from, std::move(c.entries), std::move(c.model_hash), Clock::now()};
}

// The step applied ahead, when its commit cannot come: a follower that became the leader
// commits it as applied; one whose commit never came (the leader lost it, or died without
// a successor's re-announcement) loads the replica from a member.
void Peer::CheckSpeculation() {
  if (!speculation_) return;
  if (Leader() == self_.name) {
    std::vector<std::string> authors;
    for (const auto& [a, hash] : speculation_->entries) authors.push_back(a);
    BroadcastCommit(speculation_->step, authors);
    speculation_.reset();
  } else if (MillisSince(speculation_->since) > 2 * static_cast<int64_t>(swarm_info_.step_timeout_ms)) {
    Resync(Leader(), "step " + std::to_string(speculation_->step) + ", applied ahead of its commit, was never committed");
  }
}

void Peer::HandleCommit(const std::string& from, uint64_t step, protocol::Commit c) {
  if (speculation_ && step == speculation_->step) return SettleSpeculation(from, std::move(c));
  if (step <= committed_) {
    // A repeat (a new leader re-announcing its last commit): harmless if we agree.
    auto h = hash_log_.find(step);
    if (h != hash_log_.end() && h->second != c.model_hash) {
      ++divergences_;
      Resync(from, "step " + std::to_string(step) + " was committed with another result");
    }
    return;
  }
  commits_[step] = PendingCommit{from, std::move(c.entries), std::move(c.model_hash), Clock::now()};
}

void Peer::TryApplyCommits() {
  if (speculation_) return;  // the commit of the step applied ahead comes first
  for (auto it = commits_.find(committed_ + 1); it != commits_.end(); it = commits_.find(committed_ + 1)) {
    const uint64_t step = it->first;
    PendingCommit& c = it->second;
    std::vector<std::string> authors;
    bool missing = false;
    for (const auto& [author, payload_hash] : c.entries) {
      authors.push_back(author);
      auto& by_author = updates_[step];
      auto u = by_author.find(author);
      if (u != by_author.end() && u->second.complete && u->second.payload_hash == payload_hash) continue;
      missing = true;
      if (u != by_author.end() && u->second.complete) by_author.erase(u);  // a different update: not the committed one
      if (!fetching_.count({step, author}) && members_.count(c.from)) {
        fetching_.insert({step, author});
        protocol::Header h = Header(members_.at(c.from));
        h.round = step;
        SendTo(c.from, protocol::EncodeUpdateFetch(h, author));
      }
    }
    if (missing) {
      if (MillisSince(c.since) > static_cast<int64_t>(swarm_info_.step_timeout_ms)) Resync(c.from, "committed updates are unavailable");
      return;
    }
    const std::string from = c.from, want = c.model_hash;
    commits_.erase(it);
    Status st = Apply(step, authors);
    if (!st.ok() || hash_ != want) {
      ++divergences_;
      Resync(from, st.ok() ? "model hash " + hash_.substr(0, 16) + " after step " + std::to_string(step) + " differs from " +
                                 from + "'s " + want.substr(0, 16)
                           : st.message());
      return;
    }
  }
  // Commits for later steps but not the next one: this replica fell behind.
  if (!commits_.empty() && commits_.begin()->first > committed_ + 1 &&
      MillisSince(commits_.begin()->second.since) > static_cast<int64_t>(swarm_info_.step_timeout_ms))
    Resync(commits_.begin()->second.from, "missed the commit of step " + std::to_string(committed_ + 1));
}

// Applies `authors`' updates of `step` to the replica: the exchange's accumulator (the
// aggregator's: an exact, order-independent sum) over the decoded updates, each weighted by
// its examples, then the exchange's shared step (a shared optimizer, or DeMo's sign step).
// When the exchange takes only the mean and the codec ends in a linear transform (DeMo's
// DCT), the updates are summed in the transform domain and their mean, transformed back once,
// is the accumulator's one update (TransformSum).
Status Peer::Apply(uint64_t step, const std::vector<std::string>& authors) {
  // With overlap this peer's update of step+1 starts from the replica this step leaves: made
  // first, also when commits arrive faster than the loop goes round (the same bits whatever
  // the timing).
  if (overlap_) LocalUpdates();
  const auto started = Clock::now();
  auto& got = updates_[step];
  SHOAL_ASSIGN_OR_RETURN(auto acc, exchange_->Start(step, w_));
  std::vector<float> decoded(n_);
  double loss = 0.0, weight = 0.0;
  const auto ctx = runtime::SharedContext(swarm_info_.task.seed, step);  // as DecodeUpload's
  runtime::TransformSum* mean = nullptr;
  if (exchange_->takes_the_mean() && codec_->linear_transform()) {
    if (!step_mean_) step_mean_ = std::make_unique<runtime::TransformSum>(*codec_);
    step_mean_->Clear();
    mean = step_mean_.get();
  }
  for (const auto& a : authors) {
    const Update& u = got.at(a);
    const uint64_t w = exchange_->Weight(u.num_examples);
    if (mean) {
      SHOAL_RETURN_IF_ERROR(mean->Add(u.payload, ctx, w).WithContext(a + "'s update"));
    } else {
      SHOAL_RETURN_IF_ERROR(runtime::DecodeUpload(*codec_, swarm_info_.task.seed, step, u.payload, decoded)
                                .WithContext("decoding " + a + "'s update"));
      SHOAL_RETURN_IF_ERROR(acc->Add({.client = a, .num_examples = w, .delta = decoded}).WithContext(a + "'s update"));
    }
    loss += static_cast<double>(w) * u.loss;
    weight += static_cast<double>(w);
  }
  if (mean && mean->count() > 0) {
    SHOAL_RETURN_IF_ERROR(mean->Mean(decoded).WithContext("the step's mean"));
    SHOAL_RETURN_IF_ERROR(acc->Add({.client = "the step's mean", .num_examples = 1, .delta = decoded}));
  }
  SHOAL_ASSIGN_OR_RETURN(auto result, acc->Finish({}));
  SHOAL_RETURN_IF_ERROR(CommitStep(step, result, started));
  commit_log_.emplace_back(step, authors);
  while (commit_log_.size() > kLogSteps) commit_log_.pop_front();
  while (!updates_.empty() && updates_.begin()->first + kLogSteps < step) updates_.erase(updates_.begin());
  FinishStep(step, authors.size(), weight > 0 ? loss / weight : 0.0, -1.0);
  return Status::Ok();
}

// The step's result moves the replica (the exchange's shared step), which must stay finite;
// `step` is then committed with the replica's hash. Both the commit log and the ring end here.
Status Peer::CommitStep(uint64_t step, const std::optional<std::vector<float>>& result, Clock::time_point started) {
  SHOAL_RETURN_IF_ERROR(exchange_->Apply(result, w_));
  bool finite = true;
  for (float x : w_) finite = finite && std::isfinite(x);
  if (!finite) return Status::Internal("step " + std::to_string(step) + " made the model non-finite");
  hash_ = crypto::ModelHash(w_);
  committed_ = step;
  hash_log_[step] = hash_;
  while (hash_log_.size() > kLogSteps) hash_log_.erase(hash_log_.begin());
  last_commit_time_ = Clock::now();
  apply_seconds_ += std::chrono::duration<double>(last_commit_time_ - started).count();
  return Status::Ok();
}

// A step without a leader: this peer's update goes to the exchange's recipients; once the
// updates of every member that drew this peer are in (or at the deadline), the replica becomes
// the exchange's mix of its own model and the models received. spread: the mean RMS distance
// from this peer's model to the ones received.
void Peer::MixStep() {
  const uint64_t step = committed_ + 1;
  if (sent_step_ != step) LocalUpdate(step);
  if (sent_step_ != step) return;
  const auto live = LiveNames();
  std::vector<std::string> expected;
  for (const auto& n : live)
    if (n != self_.name) {
      const auto t = exchange_->Recipients(n, step, live);
      if (std::find(t.begin(), t.end(), self_.name) != t.end()) expected.push_back(n);
    }
  auto& got = updates_[step];
  size_t have = 0;
  for (const auto& n : expected) have += got.count(n) && got.at(n).complete;
  if (have < expected.size() && MillisSince(step_started_) < static_cast<int64_t>(swarm_info_.step_timeout_ms)) return;
  auto acc = exchange_->Start(step, w_);
  if (!acc.ok()) {  // cannot happen: every step checks finiteness
    spdlog::error("peer {}: step {}: own replica is not mixable: {}", self_.name, step, acc.status().message());
    return;
  }
  std::vector<float> decoded(n_);
  double spread = 0.0;
  for (auto& [name, u] : got) {
    if (name == self_.name || !u.complete) continue;
    if (!runtime::DecodeUpload(*codec_, swarm_info_.task.seed, step, u.payload, decoded).ok()) continue;
    if (!(*acc)->Add({.client = name, .num_examples = exchange_->Weight(u.num_examples), .delta = decoded}).ok()) continue;
    double d2 = 0.0;
    for (size_t i = 0; i < n_; ++i)
      d2 += (static_cast<double>(decoded[i]) - w_[i]) * (static_cast<double>(decoded[i]) - w_[i]);
    spread += std::sqrt(d2 / static_cast<double>(n_));
  }
  const size_t count = (*acc)->count();
  const double loss = got.count(self_.name) ? got.at(self_.name).loss : 0.0;
  auto result = (*acc)->Finish({});
  if (Status st = result.ok() ? exchange_->Apply(*result, w_) : result.status(); !st.ok()) {
    spdlog::error("peer {}: step {}: {}", self_.name, step, st.message());
    return;
  }
  hash_ = crypto::ModelHash(w_);
  committed_ = step;
  while (!updates_.empty() && updates_.begin()->first <= step) updates_.erase(updates_.begin());
  FinishStep(step, count, loss, count > 1 ? spread / static_cast<double>(count - 1) : 0.0);
}

}  // namespace shoal::peer
