// The runtime under faulty links: a straggler past the deadline, a connection cut mid-run,
// frames lost on the way up, and a client whose replica falls behind and must resync.
#include <gtest/gtest.h>

#include "federation.h"
#include "protocol/federated.h"

namespace shoal::testing {
namespace {

// A client channel that loses the frames from the aggregator that `drop` picks (as a link
// that lost exactly those would), counting them.
class DroppingChannel final : public transport::Channel {
 public:
  using Pick = std::function<bool(const wire::Envelope&)>;
  DroppingChannel(std::unique_ptr<transport::Channel> inner, Pick drop, std::shared_ptr<std::atomic<int>> dropped)
      : inner_(std::move(inner)), drop_(std::move(drop)), dropped_(std::move(dropped)) {}

  StatusOr<std::optional<transport::Message>> Recv(milliseconds timeout) override {
    SHOAL_ASSIGN_OR_RETURN(auto m, inner_->Recv(timeout));
    if (!m) return m;
    protocol::Verified v = protocol::VerifyFrame(m->bytes(), protocol::MaxFrameBytes(protocol::kDefaultChunkBytes));
    if (v.ok() && drop_(*v.envelope)) {
      ++*dropped_;
      return std::optional<transport::Message>();
    }
    return m;
  }
  Status Send(std::span<const uint8_t> frame, milliseconds timeout) override { return inner_->Send(frame, timeout); }
  Status Reset() override { return inner_->Reset(); }
  const transport::Traffic& traffic() const override { return inner_->traffic(); }
  const std::string& endpoint() const override { return inner_->endpoint(); }
  uint64_t handshake_failures_in_a_row() const override { return inner_->handshake_failures_in_a_row(); }
  bool last_failure_was_auth() const override { return inner_->last_failure_was_auth(); }
  const std::string& last_handshake_failure() const override { return inner_->last_handshake_failure(); }
  const transport::HandshakeStats& handshakes() const override { return inner_->handshakes(); }

 private:
  std::unique_ptr<transport::Channel> inner_;
  Pick drop_;
  std::shared_ptr<std::atomic<int>> dropped_;
};

// One client's up link is 3x slower than the round deadline: every round closes at the
// deadline without it (counted as dropped), the others' updates are applied, and the run
// completes; its late updates never count.
TEST_F(RuntimeTest, AStragglerIsDroppedAtEachDeadlineAndTheOthersAreApplied) {
  constexpr uint32_t kClients = 3, kStraggler = 2;
  constexpr uint64_t kRounds = 3;
  const AggregatorOptions o = Options(kClients, kRounds, /*round_timeout_ms=*/400);
  Federation fed(o, 1);
  ASSERT_TRUE(fed.ok());
  fed.AddClients(kClients, OnlyClient(kStraggler, SlowUp(3 * milliseconds(o.round_timeout_ms))));
  const auto lines = fed.Run(kRunLimit);

  ASSERT_NO_FATAL_FAILURE(ExpectRounds(lines, kRounds));
  for (const auto& line : lines) {
    ExpectRound(line, kClients, kClients - 1);
    EXPECT_GE(line["seconds"].get<double>(), 0.9 * o.round_timeout_ms / 1000.0) << "closed before the deadline";
  }
  fed.ExpectEveryClientSaidBye();
  for (uint32_t i = 0; i < kClients; ++i) {
    SCOPED_TRACE(fed.member(i).name);
    EXPECT_EQ(fed.member(i).welcomes.load(), 1);
    EXPECT_EQ(fed.member(i).rounds_done.load(), i == kStraggler ? 0 : static_cast<int>(kRounds));
  }
  EXPECT_GE(fed.member(kStraggler).client->stats().rounds_trained, 1u);  // it trained, too late
}

// The same straggler under the adaptive deadline: round 1 announces the full --round-timeout
// (nothing observed yet), later rounds close at margin x the median of the observed times, far
// sooner, and the straggler's late updates are refused and counted.
TEST_F(RuntimeTest, TheAdaptiveDeadlineStopsWaitingForAStraggler) {
  constexpr uint32_t kClients = 3, kStraggler = 2;
  constexpr uint64_t kRounds = 25;
  AggregatorOptions o = Options(kClients, kRounds, /*round_timeout_ms=*/1500);
  o.deadline = {0.5, 1.5, 3, 50};
  Federation fed(o, 1);
  ASSERT_TRUE(fed.ok());
  fed.AddClients(kClients, OnlyClient(kStraggler, SlowUp(milliseconds(600))));
  const auto lines = fed.Run(kRunLimit);

  ASSERT_NO_FATAL_FAILURE(ExpectRounds(lines, kRounds));
  EXPECT_DOUBLE_EQ(lines[0]["deadline_seconds"].get<double>(), 1.5);
  for (size_t i = 1; i < lines.size(); ++i) {
    SCOPED_TRACE(i);
    ExpectRound(lines[i], kClients, kClients - 1);
    // Below the straggler's 600 ms delay (ExpectRound: it never reports) and the timeout.
    EXPECT_LT(lines[i]["deadline_seconds"].get<double>(), 1.5) << "the deadline follows the fast clients";
  }
  // Its update of round 2 arrives 600 ms after it left, rounds later (the last ones' arrive
  // after the run, unrecorded).
  EXPECT_GE(lines.back()["updates_late"].get<uint64_t>(), 3u) << "the straggler's updates arrived after their rounds";
}

// The connection of one client is cut right after round 1 (before round 2's tasks go out):
// the service drops it from round 2, the client reconnects under a new routing id and
// registers again, and rounds 3 and 4 hear from it.
TEST_F(RuntimeTest, ACutClientRegistersAgainAndReportsInLaterRounds) {
  constexpr uint32_t kClients = 3, kCut = 1;
  constexpr uint64_t kRounds = 4;
  AggregatorOptions o = Options(kClients, kRounds);
  Federation* fed_ptr = nullptr;
  std::atomic<bool> cut{false};
  o.on_round = [&](const aggregator::RoundReport& r) {  // on the service's thread, between rounds
    if (r.round == 1) cut = fed_ptr->net().Cut(fed_ptr->member(kCut).peer);
  };
  Federation fed(o, 1);
  ASSERT_TRUE(fed.ok());
  fed_ptr = &fed;
  fed.AddClients(kClients);
  const auto lines = fed.Run(kRunLimit);

  EXPECT_TRUE(cut.load());
  ASSERT_NO_FATAL_FAILURE(ExpectRounds(lines, kRounds));
  ExpectRound(lines[0], kClients, kClients);
  ExpectRound(lines[1], kClients, kClients - 1);  // round 2 went out to all; the cut one's task was undeliverable
  for (size_t r = 2; r < kRounds; ++r) {
    ExpectRound(lines[r], kClients, kClients);
    EXPECT_EQ(lines[r]["clients_registered"].get<size_t>(), kClients);
  }

  fed.ExpectEveryClientSaidBye();
  Member& m = fed.member(kCut);
  EXPECT_EQ(m.welcomes.load(), 2);                         // registered again after the cut
  EXPECT_EQ(m.client->stats().rounds_trained, 3u);         // rounds 1, 3 and 4
  EXPECT_EQ(fed.net().stats().connections, kClients + 1);  // one reconnection
  EXPECT_FALSE(fed.net().Cut(m.peer));                     // the old connection stays closed
}

// One client's up link loses 30% of its frames (Hellos, heartbeats, updates, its Bye): the
// service keeps serving, every round is applied with the others' updates, a round that
// lost the lossy client's update closes at the deadline with it counted as dropped, and
// exactly the updates the service accepted were acknowledged to that client.
TEST_F(RuntimeTest, FramesLostOnTheWayUpCostOnlyTheirRounds) {
  constexpr uint32_t kClients = 3, kLossy = 2;
  constexpr uint64_t kRounds = 3;
  const AggregatorOptions o = Options(kClients, kRounds, /*round_timeout_ms=*/500);
  Federation fed(o, 1);
  ASSERT_TRUE(fed.ok());
  fed.AddClients(kClients, OnlyClient(kLossy, LossyUp(0.3)));
  const auto lines = fed.Run(kRunLimit);

  ASSERT_NO_FATAL_FAILURE(ExpectRounds(lines, kRounds));
  size_t lossy_reported = 0;
  for (const auto& line : lines) {
    const size_t reported = line["clients_reported"].get<size_t>();
    ASSERT_GE(reported, kClients - 1) << line.dump();
    ExpectRound(line, kClients, reported);
    if (reported < kClients) {  // the lossy client's update was lost: the round waited for the deadline
      EXPECT_GE(line["seconds"].get<double>(), 0.9 * o.round_timeout_ms / 1000.0) << line.dump();
    }
    lossy_reported += reported - (kClients - 1);
  }
  EXPECT_GT(fed.net().stats().frames_lost, 0u);
  fed.ExpectEveryClientSaidBye();
  for (uint32_t i = 0; i < kClients; ++i) {
    const size_t acknowledged = fed.member(i).rounds_done.load();
    EXPECT_EQ(acknowledged, i == kLossy ? lossy_reported : kRounds) << fed.member(i).name;
  }
}

// With an int8 delta on the way down, a client that misses round 2's task keeps the round-1
// replica, while the service believes it holds round 2's: round 3's task is a delta against
// a base it does not have. It asks for the full model (a resync), trains on it, and its
// update is accepted.
TEST_F(RuntimeTest, AClientThatMissedADeltaResyncsAndIsAcceptedAgain) {
  constexpr uint32_t kClients = 3, kBehind = 0;
  constexpr uint64_t kRounds = 4;
  AggregatorOptions o = Options(kClients, kRounds);
  o.codec = "int8";
  o.codec_down = "int8";
  o.round_timeout_ms = 800;
  Federation fed(o, 1);
  ASSERT_TRUE(fed.ok());
  auto dropped = std::make_shared<std::atomic<int>>(0);
  ClientLinks misses_round_2;
  misses_round_2.wrap = [dropped](std::unique_ptr<transport::Channel> inner) -> std::unique_ptr<transport::Channel> {
    return std::make_unique<DroppingChannel>(
        std::move(inner),
        [](const wire::Envelope& e) { return e.message_type() == wire::Message::RoundTask && e.round() == 2; }, dropped);
  };
  fed.AddClients(kClients, OnlyClient(kBehind, misses_round_2));
  const auto lines = fed.Run(kRunLimit);

  EXPECT_GE(dropped->load(), 1);
  ASSERT_NO_FATAL_FAILURE(ExpectRounds(lines, kRounds));
  ExpectRound(lines[1], kClients, kClients - 1);  // round 2: no task, no update
  for (size_t r : {0, 2, 3}) ExpectRound(lines[r], kClients, kClients);
  for (size_t r = 0; r < kRounds; ++r)  // round 3 answered one resync
    EXPECT_EQ(lines[r]["resyncs"].get<uint64_t>(), r == 2 ? 1u : 0u) << lines[r].dump();

  fed.ExpectEveryClientSaidBye();
  for (uint32_t i = 0; i < kClients; ++i) {
    SCOPED_TRACE(fed.member(i).name);
    const Client::Stats s = fed.member(i).client->stats();
    EXPECT_EQ(s.resyncs, i == kBehind ? 1u : 0u);
    EXPECT_EQ(s.rounds_trained, i == kBehind ? kRounds - 1 : kRounds);
    EXPECT_EQ(fed.member(i).welcomes.load(), 1);  // it never had to register again
  }
}

}  // namespace
}  // namespace shoal::testing
