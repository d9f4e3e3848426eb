// A secure-aggregation round on the client (privacy/secagg/protocol.h has the protocol). The
// keys go out with the round's task, Setup and the shares are answered while the worker
// trains, and the trained update leaves masked once both the update and this client's shares
// are here. Any refusal of the state machine (a malicious or confused aggregator) aborts this
// client's part of the round with the reason logged; nothing more is revealed, and the next
// round starts afresh.
#include "runtime/client/client_impl.h"

#include "protocol/secagg.h"

namespace shoal {

void Client::Impl::StartSecAgg(uint64_t round) {
  if (round == secagg_round_) return;  // the same round's full model after a Resync
  secagg_round_ = round;
  secagg_setup_.reset();
  secagg_shares_.reset();
  secagg_pending_.reset();
  auto keys = secagg_->Start(session_, round);
  if (!keys.ok()) {
    spdlog::error("round {}: {}", round, keys.status().message());
    return;
  }
  if (Status st = Send(protocol::EncodeSecAggKeys(NextHeader(round), *keys)); !st.ok())
    spdlog::warn("round {}: secure aggregation keys not sent: {}", round, st.message());
}

Status Client::Impl::HandleSecAgg(const protocol::Header& h, protocol::Message& m) {
  const uint64_t round = h.round;
  if (!secagg_ || round != secagg_round_) {
    spdlog::warn("ignoring {} for round {} (this client's secure aggregation round is {})",
                 protocol::MessageName(m.kind), round, secagg_round_);
    return Status::Ok();
  }
  auto fail = [&](const Status& st) {
    spdlog::error("round {}: {}", round, st.message());
    secagg_pending_.reset();
    return Status::Ok();  // the aggregator counts this client out of the round; keep serving
  };
  if (auto* setup = std::get_if<privacy::secagg::Setup>(&m.body)) {
    const protocol::PrivacyConfig& privacy = welcome_->privacy;
    std::vector<uint32_t> coordinates = runtime::SecureSumCoordinates(*up_codec_, welcome_->task.seed, round);
    if (setup->range != privacy.secagg_range || setup->bits != privacy.secagg_bits || setup->length != coordinates.size())
      return fail(Status::InvalidArgument("the Setup's range, width or length differs from the task's"));
    secagg_plan_ = {std::move(coordinates),
                    runtime::SecureSumEncoding(privacy, static_cast<uint32_t>(setup->roster.size()), setup->threshold)};
    auto shares = secagg_->OnSetup(*setup);
    if (!shares.ok()) return fail(shares.status());
    secagg_setup_ = *setup;
    if (Status st = Send(protocol::EncodeSecAggShareKeys(NextHeader(round), *shares)); !st.ok()) {
      spdlog::warn("round {}: secure aggregation shares not sent: {}", round, st.message());
      return Status::Ok();
    }
    spdlog::info("round {}: secure aggregation among {} clients: shares sent to {} neighbours", round,
                 setup->roster.size(), shares->shares.size());
    Reached(RoundPoint::kSharesSent, round);
    return Status::Ok();
  }
  if (auto* shares = std::get_if<privacy::secagg::SharesFor>(&m.body)) {
    if (!secagg_setup_ || secagg_shares_) return fail(Status::FailedPrecondition("secure aggregation shares out of order"));
    secagg_shares_ = std::move(*shares);
    SendMaskedIfReady();
    return Status::Ok();
  }
  if (auto* request = std::get_if<privacy::secagg::UnmaskRequest>(&m.body)) {
    // The consistency check: sign the one survivor set this client was told (never a second).
    Reached(RoundPoint::kUnmaskAsked, round);
    auto signature = secagg_->OnCheck(*request);
    if (!signature.ok()) return fail(signature.status());
    if (Status st = Send(protocol::EncodeSecAggCheckSignature(NextHeader(round), *signature)); !st.ok())
      spdlog::warn("round {}: secure aggregation consistency signature not sent: {}", round, st.message());
    return Status::Ok();
  }
  if (auto* proof = std::get_if<privacy::secagg::UnmaskProof>(&m.body)) {
    auto reveal = secagg_->OnUnmask(*proof);
    if (!reveal.ok()) return fail(reveal.status());
    if (Status st = Send(protocol::EncodeSecAggUnmaskShares(NextHeader(round), *reveal)); !st.ok())
      spdlog::warn("round {}: secure aggregation unmask shares not sent: {}", round, st.message());
    return Status::Ok();
  }
  return Status::Ok();
}

void Client::Impl::SendMaskedIfReady() {
  if (!secagg_pending_ || !secagg_shares_ || !secagg_setup_) return;
  runtime::Update u = std::move(*secagg_pending_);
  secagg_pending_.reset();
  const uint64_t round = u.round;
  const auto encode_start = Clock::now();
  const protocol::PrivacyConfig& privacy = welcome_->privacy;
  const runtime::SecureSumPlan& plan = secagg_plan_;
  auto encoded = runtime::EncodeSecureUpdate(plan, u.delta, privacy, secagg_setup_->threshold, dp_random_);
  if (!encoded.ok()) {
    spdlog::error("round {}: {}", round, encoded.status().message());
    return;
  }
  auto masked = secagg_->OnShares(*secagg_shares_, std::move(encoded->words), encoded->clipped);
  if (!masked.ok()) {
    spdlog::error("round {}: {}", round, masked.status().message());
    return;
  }
  const std::vector<uint8_t> bytes = protocol::PackMasked(masked->masked, secagg_setup_->bits);
  if (masked->rejected_shares)
    spdlog::warn("round {}: {} neighbours' secure aggregation shares failed authentication and were dropped", round,
                 masked->rejected_shares);
  if (encoded->clipped)
    spdlog::warn("round {}: {} of {} values outside the secure aggregation range {} were clipped", round,
                 encoded->clipped, plan.coordinates.size(), privacy.secagg_range);
  spdlog::debug("round {}: masked update ready in {:.3f}s", round,
                std::chrono::duration<double>(Clock::now() - encode_start).count());
  SendUpdatePayload(u, bytes, "masked update", [&](const protocol::Header& h, const protocol::ChunkRef& chunk) {
    return protocol::EncodeSecAggMasked(h, masked->from, masked->clipped, u.num_examples, chunk, masked->rejected_shares);
  });
}

}  // namespace shoal
