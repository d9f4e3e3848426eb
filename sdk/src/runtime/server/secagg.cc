// A secure-aggregation round on the aggregator (privacy/secagg/protocol.h has the protocol).
// The stages run alongside local training: AdvertiseKeys arrive as soon as clients get their
// task, Setup and the shares go out while they train, and the masked inputs replace Update.
//   kKeys    until every selected client advertised (or failed) or --secagg-stage-timeout
//   kShares  until every roster member shared keys, or the stage timeout
//   kMasked  until every sharer sent its masked input, or the round's deadline
//   kCheck   until every survivor signed the survivor set (the consistency check), or the
//            stage timeout; the signatures then go to every signer
//   kUnmask  until every signer answered, or the stage timeout; then the sum is unmasked
// A client that misses a stage fails the round (it is counted like any straggler); a stage
// error (too few clients for the threshold) aborts the round's aggregate, nothing is unmasked,
// and the model stays as it was.
#include "runtime/server/service_impl.h"

#include "protocol/secagg.h"

namespace shoal::aggregator {

namespace sa = privacy::secagg;
using Stage = Service::Impl::SecAggStage;

void Service::Impl::StartSecAgg() {
  auto& s = round_.secagg.emplace();
  sa::ServerOptions so;
  so.range = o_.secagg.range;
  so.bits = privacy_.secagg_bits;
  s.plan.coordinates = runtime::SecureSumCoordinates(*up_codec_, o_.seed, round_.number);
  so.length = static_cast<uint32_t>(s.plan.coordinates.size());
  so.dropout = o_.secagg.dropout;
  so.corrupt = o_.secagg.corrupt;
  so.colluding_fraction = o_.secagg.corrupt;  // the consistency quorum assumes the same share colludes
  so.degree = o_.secagg.neighbours;
  so.threshold = o_.secagg.threshold;
  s.server = std::make_unique<sa::Server>(session_, round_.number, so);
  s.stage_deadline = Clock::now() + std::chrono::milliseconds(o_.secagg.stage_timeout_ms);
  s.waiting.insert(round_.selected.begin(), round_.selected.end());
}

void Service::Impl::AbortSecAgg(const std::string& why) {
  auto& s = *round_.secagg;
  spdlog::error("round {}: secure aggregation aborted: {}; the model stays as it was", round_.number, why);
  s.failure = why;
  s.stage = Stage::kDone;
  s.waiting.clear();
}

void Service::Impl::AwaitStage(SecAggStage next, Frame message, std::span<const uint32_t> indices) {
  auto& s = *round_.secagg;
  const auto frame = std::make_shared<const Frame>(std::move(message));
  for (uint32_t index : indices) {
    const uint32_t id = s.server->client_id(index);
    s.waiting.insert(id);
    Enqueue(id, frame);
  }
  s.stage = next;
  s.stage_deadline = Clock::now() + std::chrono::milliseconds(o_.secagg.stage_timeout_ms);
}

void Service::Impl::HandleSecAgg(ClientState& c, const protocol::Header& h, protocol::Message& m) {
  if (!round_.open || !round_.secagg || h.round != round_.number || !IsSelected(c.id))
    return Reject(c.peer, ErrorCode::StaleRound,
                  std::string(protocol::MessageName(m.kind)) + " for round " + std::to_string(h.round) +
                      ", which has no secure aggregation open for this client",
                  h.round);
  if (round_.failures.count(c.id)) return;  // already out of this round
  auto& s = *round_.secagg;
  auto refuse = [&](const Status& st) {
    Reject(c.peer, ErrorCode::MalformedFrame, st.message(), round_.number);
    FailClient(c.id, "rejected: secure aggregation: " + st.message());
    s.waiting.erase(c.id);
  };
  auto index = [&] { return s.server->IndexOf(c.id); };
  if (auto* keys = std::get_if<sa::AdvertiseKeys>(&m.body)) {
    if (s.stage != Stage::kKeys || keys->client_id != c.id) return refuse(Status::InvalidArgument("AdvertiseKeys out of stage or for another client"));
    if (Status st = s.server->AddAdvert(*keys); !st.ok()) return refuse(st);
    s.waiting.erase(c.id);
    return;
  }
  if (auto* sk = std::get_if<sa::ShareKeys>(&m.body)) {
    if (s.stage != Stage::kShares || index() != sk->from) return refuse(Status::InvalidArgument("ShareKeys out of stage or from another index"));
    if (Status st = s.server->AddShareKeys(*sk); !st.ok()) return refuse(st);
    s.waiting.erase(c.id);
    return;
  }
  if (auto* masked = std::get_if<protocol::SecAggMaskedChunk>(&m.body)) {
    if (s.stage != Stage::kMasked || index() != masked->from || !s.waiting.count(c.id))
      return refuse(Status::InvalidArgument("SecAggMasked out of stage or from another index"));
    const uint64_t bytes = uint64_t{s.server->setup().length} * (privacy_.secagg_bits / 8);
    auto [it, inserted] = round_.assembling.try_emplace(c.id, bytes);
    if (Status st = it->second.Add(masked->chunk); !st.ok()) return refuse(st);
    if (!it->second.complete()) return;
    auto words = protocol::UnpackMasked(it->second.Take(), privacy_.secagg_bits, s.server->setup().length);
    round_.assembling.erase(it);
    if (!words.ok()) return refuse(words.status());
    if (Status st = s.server->AddMasked({masked->from, std::move(*words), masked->clipped, masked->rejected_shares});
        !st.ok())
      return refuse(st);
    s.waiting.erase(c.id);
    round_.results.emplace(c.id,
                           Reported{c.name, c.id, std::max<uint64_t>(masked->num_examples, 1), {}, 0, round_.number});
    ++c.rounds_reported;
    Enqueue(c.id, protocol::EncodeAck(Header(round_.number), true, round_.number));
    return;
  }
  if (auto* sig = std::get_if<sa::CheckSignature>(&m.body)) {
    if (s.stage != Stage::kCheck || index() != sig->from || !s.waiting.count(c.id))
      return refuse(Status::InvalidArgument("SecAggCheckSignature out of stage or from another index"));
    if (Status st = s.server->AddCheck(*sig); !st.ok()) {
      Reject(c.peer, ErrorCode::MalformedFrame, st.message(), round_.number);  // its masked input already counts
      s.waiting.erase(c.id);
      return;
    }
    s.waiting.erase(c.id);
    return;
  }
  if (auto* shares = std::get_if<sa::UnmaskShares>(&m.body)) {
    if (s.stage != Stage::kUnmask || index() != shares->from) return refuse(Status::InvalidArgument("UnmaskShares out of stage or from another index"));
    if (Status st = s.server->AddUnmask(*shares); !st.ok()) {
      Reject(c.peer, ErrorCode::MalformedFrame, st.message(), round_.number);  // its masked input already counts
      s.waiting.erase(c.id);
      return;
    }
    s.waiting.erase(c.id);
    return;
  }
  Reject(c.peer, ErrorCode::MalformedFrame, std::string("a client may not send ") + protocol::MessageName(m.kind));
}

void Service::Impl::AdvanceSecAgg() {
  auto& s = *round_.secagg;
  if (s.stage == Stage::kDone) return;
  for (auto it = s.waiting.begin(); it != s.waiting.end();)  // failed or departed clients are not waited for
    it = round_.failures.count(*it) || !clients_.count(*it) ? s.waiting.erase(it) : std::next(it);
  const auto now = Clock::now();
  const bool due = s.stage == Stage::kMasked ? now >= round_.deadline : now >= s.stage_deadline;
  if (!s.waiting.empty() && !due) return;
  for (uint32_t id : s.waiting) FailClient(id, "secure aggregation: missed a stage deadline");
  s.waiting.clear();
  const auto stage_timeout = std::chrono::milliseconds(o_.secagg.stage_timeout_ms);
  switch (s.stage) {
    case Stage::kKeys: {
      auto setup = s.server->CloseAdverts();
      if (!setup.ok()) return AbortSecAgg(setup.status().message());
      const uint32_t n = static_cast<uint32_t>(setup->roster.size());
      s.plan.encoding = runtime::SecureSumEncoding(privacy_, n, setup->threshold);
      if (!s.plan.encoding.Fits(
              n, privacy::secagg::NoiseHeadroom(n, setup->threshold, privacy_.dp_clip, privacy_.dp_noise_multiplier)))
        return AbortSecAgg("the sum of " + std::to_string(n) + " int8 updates does not fit 16 bits");
      if (privacy_.dp_clip > 0 &&
          std::sqrt(static_cast<double>(s.plan.coordinates.size())) / (2 * s.plan.encoding.scale) >= privacy_.dp_clip / 2)
        return AbortSecAgg("--dp-clip is too small for the fixed-point resolution of " +
                           std::to_string(s.plan.coordinates.size()) + " values");
      const auto frame = std::make_shared<const Frame>(protocol::EncodeSecAggSetup(Header(round_.number), *setup));
      for (const auto& member : setup->roster) {
        s.waiting.insert(member.client_id);
        Enqueue(member.client_id, frame);
      }
      for (uint32_t id : round_.selected)
        if (!s.server->IndexOf(id)) FailClient(id, "secure aggregation: no keys advertised");
      spdlog::info("round {}: secure aggregation among {} clients, {} neighbours each, threshold {}", round_.number,
                   setup->roster.size(), setup->degree, setup->threshold);
      s.stage = Stage::kShares;
      s.stage_deadline = now + stage_timeout;
      return;
    }
    case Stage::kShares: {
      auto deliveries = s.server->CloseShareKeys();
      if (!deliveries.ok()) return AbortSecAgg(deliveries.status().message());
      for (const auto& d : *deliveries) {
        const uint32_t id = s.server->client_id(d.to);
        s.waiting.insert(id);
        Enqueue(id, protocol::EncodeSecAggShares(Header(round_.number), d));
      }
      for (const auto& member : s.server->setup().roster)
        if (!s.waiting.count(member.client_id)) FailClient(member.client_id, "secure aggregation: no keys shared");
      s.stage = Stage::kMasked;
      return;
    }
    case Stage::kMasked: {
      auto request = s.server->CloseMasked();
      if (!request.ok()) return AbortSecAgg(request.status().message());
      return AwaitStage(Stage::kCheck, protocol::EncodeSecAggUnmask(Header(round_.number), *request), request->survivors);
    }
    case Stage::kCheck: {
      auto proof = s.server->CloseCheck();
      if (!proof.ok()) return AbortSecAgg(proof.status().message());
      return AwaitStage(Stage::kUnmask, protocol::EncodeSecAggUnmaskProof(Header(round_.number), *proof), proof->signers);
    }
    case Stage::kUnmask: {
      auto result = s.server->Finish();
      if (!result.ok()) return AbortSecAgg(result.status().message());
      s.result = std::move(*result);
      s.stage = Stage::kDone;
      return;
    }
    case Stage::kDone:
      return;
  }
}

// At the round's close: the unmasked mean into the accumulator as the round's one update, and
// the round's secure-aggregation metrics. Without a sum (aborted), the survivors' updates are
// lost: they count as failures and the model stays.
Status Service::Impl::AddSecureAggregate(nlohmann::json& line) {
  auto& s = *round_.secagg;
  line["secagg"] = true;
  if (!s.result) {
    line["secagg_aborted"] = s.failure.empty() ? "incomplete" : s.failure;
    line["secagg_recovered"] = 0;
    for (auto& [id, r] : round_.results) round_.failures[id] = ClientFailure{r.client, id, "secure aggregation aborted"};
    round_.results.clear();
    return Status::Ok();
  }
  const sa::Result& r = *s.result;
  const uint32_t survivors = static_cast<uint32_t>(r.survivors.size());
  std::vector<float> mean = runtime::DecodeSecureMean(s.plan, r.sum, survivors, global_.size());
  SHOAL_RETURN_IF_ERROR(round_.accumulator->Add({"secure-aggregate", 0, survivors, mean}).WithContext("secure aggregate"));
  const double values = static_cast<double>(survivors) * static_cast<double>(s.plan.coordinates.size());
  line["secagg_recovered"] = r.recovered;
  line["secagg_clipped"] = r.clipped;
  line["secagg_clip_rate"] = values > 0 ? static_cast<double>(r.clipped) / values : 0.0;
  line["secagg_threshold"] = s.server->setup().threshold;
  line["secagg_neighbours"] = s.server->setup().degree;
  line["secagg_signatures"] = r.signatures;
  line["secagg_rejected_shares"] = r.rejected_shares;
  if (r.clipped > 0)
    spdlog::warn("round {}: {} of {} masked values were outside --secagg-range {} and clipped", round_.number,
                 r.clipped, static_cast<uint64_t>(values), o_.secagg.range);
  return Status::Ok();
}

}  // namespace shoal::aggregator
