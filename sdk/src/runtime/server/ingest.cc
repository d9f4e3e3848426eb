#include "runtime/server/service_impl.h"

namespace shoal::aggregator {

static_assert(protocol::kMaxExamples == ExactSum::kMaxWeight, "every valid example count must be a valid weight");

void Service::Impl::HandleUpdate(ClientState& c, const protocol::Header& h, protocol::UpdateChunk& u) {
  if (async_) {
    if (!AdmitBuffered(c, h.round, u.chunk.index == 0)) return;
  } else if (!round_.open || h.round != round_.number) {
    // An update for a round that closed before it arrived: late, counted once (at its first chunk).
    if (h.round != 0 && h.round <= last_completed_ && u.chunk.index == 0) ++updates_late_;
    return Reject(c.peer, ErrorCode::StaleRound,
                  "update for round " + std::to_string(h.round) + " but " +
                      (round_.open ? "round " + std::to_string(round_.number) + " is open" : "no round is open"),
                  h.round);
  } else if (!IsSelected(c.id)) {
    return Reject(c.peer, ErrorCode::StaleRound, "client was not selected this round", round_.number);
  } else if (Settled(c.id)) {
    return Reject(c.peer, ErrorCode::Duplicate, "this round's update was already settled", round_.number);
  }
  if (round_.secagg) {
    Reject(c.peer, ErrorCode::MalformedFrame, "this aggregator runs secure aggregation: send a masked input, not an Update",
           round_.number);
    return FailClient(c.id, "rejected: a plain update under secure aggregation");
  }
  const bool partial = u.encoding == protocol::PayloadEncoding::PartialSum;
  if (u.encoding != protocol::PayloadEncoding::Codec && !(u.encoding == protocol::PayloadEncoding::CodecSlow && slow_codec_) &&
      !(partial && !async_)) {
    Reject(c.peer, ErrorCode::MalformedFrame,
           partial ? "--strategy " + strategy_->name() + " commits single updates; it takes no partial sums"
           : slow_codec_ ? "an update must be encoded with the task's codec or codec_slow"
                         : "an update must be encoded with the task's codec",
           round_.number);
    return FailClient(c.id, "rejected: wrong encoding");
  }
  const uint64_t max_bytes =
      partial ? ExactSum::MaxSerializedBytes(global_.size()) : protocol::MaxCodecPayloadBytes(global_.size());
  auto [it, inserted] = round_.assembling.try_emplace(c.id, max_bytes);
  if (inserted) {
    // A partial sum's weight is its clients' examples together: up to the exact sum's bound.
    if (u.num_examples == 0 || u.num_examples > (partial ? ExactSum::kMaxTotalWeight : protocol::kMaxExamples)) {
      Reject(c.peer, ErrorCode::MalformedFrame, partial ? "num_examples must be in [1, 2^63]" : "num_examples must be in [1, 2^40]",
             round_.number);
      return FailClient(c.id, "rejected: bad num_examples");
    }
    round_.incoming[c.id] = {u.num_examples, std::move(u.report), u.encoding};
  } else if (round_.incoming[c.id].encoding != u.encoding) {
    Reject(c.peer, ErrorCode::MalformedFrame, "an update's chunks must all have one encoding", round_.number);
    return FailClient(c.id, "rejected: mixed encodings");
  }
  Status st = it->second.Add(u.chunk);
  if (!st.ok()) {
    Reject(c.peer, ErrorCode::MalformedFrame, st.message(), round_.number);
    return FailClient(c.id, "rejected: " + st.message());
  }
  if (!it->second.complete()) return;
  runtime::Update update;
  update.author = c.name;
  update.round = h.round;  // the task's round: the client encoded with its context
  update.payload = it->second.Take();
  round_.assembling.erase(it);
  RoundState::Incoming incoming = std::move(round_.incoming[c.id]);
  round_.incoming.erase(c.id);
  update.num_examples = incoming.num_examples;
  update.report = std::move(incoming.report);
  const bool slow = incoming.encoding == protocol::PayloadEncoding::CodecSlow;
  uint64_t staleness = 0;
  if (async_) {
    auto s = BufferedStaleness(c, h.round);
    if (!s) return;
    staleness = *s;
  } else {
    deadline_.Observe(std::chrono::duration<double>(Clock::now() - round_.started).count());
  }
  // The ingest stages: decode, then validate (finite, within the norm bound); an edge's
  // partial sum is read and merged whole.
  const auto decode_start = Clock::now();
  uint64_t partial_updates = 0;  // the clients' updates in an edge's partial sum
  std::optional<runtime::UpdatePipeline::Failure> failed =
      partial ? AddPartialSum(update, &partial_updates) : (slow ? ingest_slow_ : ingest_).Run(update);
  round_.decode_seconds += std::chrono::duration<double>(Clock::now() - decode_start).count();
  if (!failed && !partial) {
    if (Status added = round_.accumulator->Add({c.name, c.id, update.num_examples, update.delta, staleness});
        !added.ok())
      failed = runtime::UpdatePipeline::Failure{runtime::Refusal::kShapeMismatch, added.WithContext("accumulate")};
  }
  if (failed) {
    const ErrorCode code = failed->refusal == runtime::Refusal::kTooLarge       ? ErrorCode::UpdateTooLarge
                           : failed->refusal == runtime::Refusal::kShapeMismatch ? ErrorCode::ShapeMismatch
                                                                                 : ErrorCode::MalformedFrame;
    Reject(c.peer, code, "update refused: " + failed->status.message(), round_.number);
    return FailClient(c.id, "rejected: " + failed->status.message());
  }
  round_.results.emplace(c.id,
                         Reported{c.name, c.id, update.num_examples, std::move(update.report), partial_updates, h.round});
  ++c.rounds_reported;
  round_.slow_codec_updates += slow;
  c.training = false;
  dispatch_pending_ = true;
  Enqueue(c.id, protocol::EncodeAck(Header(h.round), true, round_.number));
}

// An edge aggregator's partial sum: read (every check of the wire form), its weight the one
// its Update declared, its mean within --max-update-norm, then merged into the round's sum.
std::optional<runtime::UpdatePipeline::Failure> Service::Impl::AddPartialSum(const runtime::Update& update,
                                                                                       uint64_t* updates) {
  using Failure = runtime::UpdatePipeline::Failure;
  auto sum = ExactSum::Deserialize(update.payload, global_.size());
  if (!sum.ok()) return Failure{runtime::Refusal::kMalformed, sum.status()};
  if (sum->total_weight() != update.num_examples)
    return Failure{runtime::Refusal::kMalformed,
                   Status::InvalidArgument("partial sum of weight " + std::to_string(sum->total_weight()) +
                                           " sent as " + std::to_string(update.num_examples) + " examples")};
  if (sum->count() == 0) return Failure{runtime::Refusal::kMalformed, Status::InvalidArgument("an empty partial sum")};
  if (o_.max_update_norm > 0) {  // of the mean the partial sum stands for
    double norm2 = 0.0;
    const double w = static_cast<double>(sum->total_weight());
    for (size_t i = 0; i < sum->size(); ++i) {
      const double mean = sum->Value(i) / w;
      norm2 += mean * mean;
    }
    if (!(std::sqrt(norm2) <= o_.max_update_norm))
      return Failure{runtime::Refusal::kTooLarge,
                     Status::InvalidArgument("the partial sum's mean has L2 norm " + std::to_string(std::sqrt(norm2)) +
                                             ", above --max-update-norm " + std::to_string(o_.max_update_norm))};
  }
  if (Status added = round_.accumulator->AddPartialSum(*sum); !added.ok())
    return Failure{runtime::Refusal::kMalformed, added.WithContext("--strategy " + strategy_->name())};
  *updates = sum->count();
  return std::nullopt;
}

}  // namespace shoal::aggregator
