// The client's round journal (runtime/client/journal.h): state kept before each round goes
// back when the aggregator returns to an earlier round, an update that is not in the model
// (left out of its round, discarded by its commit, or lost in a FedBuff buffer with a
// restarted aggregator) returns its mass to the error-feedback residual, and nothing else
// changes.
#include <gtest/gtest.h>

#include "codec/round_context.h"
#include "core/rng.h"
#include "runtime/client/journal.h"

namespace shoal::runtime {
namespace {

const std::vector<TensorSpec> kLayout = {{"w", {16, 8}}, {"b", {8}}};
constexpr uint64_t kSeed = 11;
const std::string kAuthor = "client-0";
const std::vector<uint64_t> kNone;  // a Welcome that lists no committed round of this client

std::vector<float> RandomUpdate(uint64_t stream) {
  Rng rng(5, stream);
  std::vector<float> u(LayoutSize(kLayout));
  for (float& v : u) v = static_cast<float>(rng.Normal());
  return u;
}

std::vector<float> Residual(const codec::Codec& c) { return {c.residual().begin(), c.residual().end()}; }

// A trainer whose state is a counter of rounds trained.
class CountingTrainer final : public Trainer {
 public:
  Status Configure(const TaskConfig&) override { return Status::Ok(); }
  uint64_t num_examples() const override { return 1; }
  Status Train(std::span<const float>, const RoundConfig&, const TrainContext&, TrainResult*) override {
    ++trained;
    return Status::Ok();
  }
  std::vector<uint8_t> SaveState() const override { return {static_cast<uint8_t>(trained)}; }
  Status LoadState(std::span<const uint8_t> s) override {
    if (s.size() != 1) return Status::Corruption("bad state");
    trained = s[0];
    return Status::Ok();
  }
  int trained = 0;
};

struct Fixture {
  std::unique_ptr<codec::Codec> codec = std::move(codec::Codec::Create("ef|topk:ratio=0.25", kLayout)).value();
  CountingTrainer trainer;
  bool sent_slow = false;
  RoundJournal journal;
  RoundState state() { return {codec.get(), nullptr, &sent_slow, &trainer}; }
  // Round `r` as a client runs it: settle, keep, train, encode.
  std::vector<uint8_t> Round(uint64_t r, uint64_t session, Settled* settled = nullptr,
                             const std::vector<uint64_t>* committed = &kNone) {
    auto s = journal.Settle(r, session, committed, state(), kSeed, kAuthor);
    EXPECT_TRUE(s.ok()) << s.status().ToString();
    if (settled && s.ok()) *settled = *s;
    journal.Keep(r, state());
    EXPECT_TRUE(trainer.Train({}, RoundConfig{}, {}, nullptr).ok());
    auto payload = codec->Encode(RandomUpdate(r), codec::MakeRoundContext(kSeed, r, codec::NameSeed(kAuthor)));
    EXPECT_TRUE(payload.ok());
    journal.Encoded(r, *payload, false, session);
    return *payload;
  }
};

TEST(RoundJournal, AnAggregatorBackAtAnEarlierRoundGetsTheStateOfThen) {
  Fixture f;
  f.Round(1, 7);
  f.journal.Acked(1, 1);
  const std::vector<float> before_2 = Residual(*f.codec);
  f.Round(2, 7);
  f.journal.Acked(2, 2);
  ASSERT_NE(Residual(*f.codec), before_2);
  ASSERT_EQ(f.trainer.trained, 2);
  // The aggregator restarted (session 8) from its checkpoint of round 1: round 2 again.
  Settled s;
  const std::vector<uint8_t> again = f.Round(2, 8, &s);
  EXPECT_EQ(s.rolled_back, std::vector<uint64_t>{2});
  EXPECT_TRUE(s.returned.empty());
  EXPECT_EQ(f.trainer.trained, 2) << "the trainer went back to its state before round 2, then trained it";
  // Round 2 encoded again from the restored residual gives what an uninterrupted client sends.
  Fixture reference;
  reference.Round(1, 7);
  reference.journal.Acked(1, 1);
  EXPECT_EQ(reference.Round(2, 7), again);
  EXPECT_EQ(Residual(*reference.codec), Residual(*f.codec));
}

TEST(RoundJournal, AnUpdateLeftOutOfItsRoundReturnsItsMassToTheResidual) {
  Fixture f;
  f.Round(1, 7);
  f.journal.Acked(1, 1);
  const std::vector<float> before = Residual(*f.codec);
  f.Round(2, 7);  // never acknowledged: the round closed without it
  Settled s;
  f.Round(3, 7, &s);
  EXPECT_EQ(s.returned, std::vector<uint64_t>{2});
  EXPECT_TRUE(s.rolled_back.empty());
  // Top-k of fp32 values is exact: residual after the return = round 2's whole x = u2 + r1,
  // which round 3's encode then took up. Check it before round 3's encode, on a twin.
  Fixture twin;
  twin.Round(1, 7);
  twin.journal.Acked(1, 1);
  twin.Round(2, 7);
  ASSERT_TRUE(twin.journal.Settle(3, 7, &kNone, twin.state(), kSeed, kAuthor).ok());
  const std::vector<float> u2 = RandomUpdate(2);
  const std::vector<float> r = Residual(*twin.codec);
  for (size_t i = 0; i < r.size(); ++i) ASSERT_EQ(r[i], u2[i] + before[i]) << i;
}

TEST(RoundJournal, UpdatesInTheModelAreLeftAlone) {
  Fixture f;
  f.Round(1, 7);
  f.journal.Acked(1, 1);
  f.Round(2, 7);
  f.journal.Acked(2, 2);
  std::vector<float> r = Residual(*f.codec);
  ASSERT_TRUE(f.journal.Settle(3, 7, &kNone, f.state(), kSeed, kAuthor).ok());
  EXPECT_EQ(Residual(*f.codec), r);
  EXPECT_EQ(f.journal.size(), 0u);

  // Sent to an aggregator that restarted after saving round 3 (its Ack died with it): the
  // new one's Welcome lists round 3 among this client's committed rounds.
  f.Round(3, 7);
  r = Residual(*f.codec);
  const std::vector<uint64_t> listed = {1, 3};
  auto settled = f.journal.Settle(4, 8, &listed, f.state(), kSeed, kAuthor);
  ASSERT_TRUE(settled.ok());
  EXPECT_TRUE(settled->returned.empty() && settled->rolled_back.empty());
  EXPECT_EQ(Residual(*f.codec), r);

  // An aggregator that keeps no record of commits (an edge) is trusted with it too.
  f.Round(4, 8);
  r = Residual(*f.codec);
  settled = f.journal.Settle(5, 9, nullptr, f.state(), kSeed, kAuthor);
  ASSERT_TRUE(settled.ok());
  EXPECT_TRUE(settled->returned.empty() && settled->rolled_back.empty());
  EXPECT_EQ(Residual(*f.codec), r);
}

TEST(RoundJournal, AnUpdateNoSavedCommitHoldsReturnsAfterARestart) {
  Fixture f;
  f.Round(1, 7);  // sent; the aggregator saved round 1 without it, then died before its Ack
  Settled s;
  f.Round(2, 8, &s);
  EXPECT_EQ(s.returned, std::vector<uint64_t>{1});
}

TEST(RoundJournal, AnUpdateItsCommitDiscardedReturnsItsMass) {
  Fixture f;
  f.Round(1, 7);
  f.journal.Acked(1, 1);
  f.journal.Discarded(1);  // round 1 closed with fewer than --min-results updates
  Settled s;
  f.Round(2, 7, &s);
  EXPECT_EQ(s.returned, std::vector<uint64_t>{1});
}

// FedBuff: round 1's update waits in the buffer of commit 2 while the client trains round 2's
// task. The next task settles it: in the model once commit 2 closed, back in the residual
// when the aggregator died with it in the buffer.
TEST(RoundJournal, UnderFedBuffABufferedUpdateIsSettledWhenItsCommitIs) {
  {
    Fixture f;
    f.Round(1, 7);
    f.journal.Acked(1, 2);
    Settled s;
    f.Round(2, 7, &s);
    EXPECT_EQ(s.pending, 1u) << "commit 2 is open: round 1's update is still buffered";
    EXPECT_TRUE(s.returned.empty());
    f.journal.Acked(2, 3);
    const std::vector<float> r = Residual(*f.codec);
    auto settled = f.journal.Settle(3, 7, &kNone, f.state(), kSeed, kAuthor);
    ASSERT_TRUE(settled.ok());
    EXPECT_EQ(settled->pending, 1u) << "round 2's update waits for commit 3";
    EXPECT_TRUE(settled->returned.empty());
    EXPECT_EQ(Residual(*f.codec), r);
    settled = f.journal.Settle(4, 7, &kNone, f.state(), kSeed, kAuthor);
    ASSERT_TRUE(settled.ok());
    EXPECT_EQ(settled->pending, 0u);
    EXPECT_TRUE(settled->returned.empty());
  }
  // The aggregator dies with round 1's update in commit 2's buffer and resumes from its
  // checkpoint of round 1: round 2 is taken back, and round 1's mass returns. Top-k of fp32
  // values is exact, so the residual is round 1's whole update again.
  Fixture f;
  f.Round(1, 7);
  f.journal.Acked(1, 2);
  f.Round(2, 7);
  f.journal.Acked(2, 2);
  auto settled = f.journal.Settle(2, 8, &kNone, f.state(), kSeed, kAuthor);
  ASSERT_TRUE(settled.ok());
  EXPECT_EQ(settled->rolled_back, std::vector<uint64_t>{2});
  EXPECT_EQ(settled->returned, std::vector<uint64_t>{1});
  EXPECT_EQ(settled->restarted, std::vector<uint64_t>{1});
  EXPECT_EQ(Residual(*f.codec), RandomUpdate(1));
  EXPECT_EQ(f.trainer.trained, 1);
}

TEST(RoundJournal, WithoutErrorFeedbackALeftOutUpdateIsReportedLost) {
  auto codec = std::move(codec::Codec::Create("topk:ratio=0.25|int8", kLayout)).value();
  RoundJournal journal;
  RoundState state{codec.get(), nullptr, nullptr, nullptr};
  journal.Keep(1, state);
  auto payload = codec->Encode(RandomUpdate(1), codec::MakeRoundContext(kSeed, 1, codec::NameSeed(kAuthor)));
  ASSERT_TRUE(payload.ok());
  journal.Encoded(1, *payload, false, 7);
  auto s = journal.Settle(2, 7, &kNone, state, kSeed, kAuthor);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->lost, std::vector<uint64_t>{1});
  EXPECT_TRUE(s->returned.empty());
}

}  // namespace
}  // namespace shoal::runtime
