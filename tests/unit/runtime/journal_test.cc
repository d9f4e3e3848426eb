// The client's round journal (runtime/client/journal.h): state kept before each round goes
// back when the aggregator returns to an earlier round, an update left out of a closed round
// returns its mass to the error-feedback residual, and nothing else changes.
#include <gtest/gtest.h>

#include "codec/round_context.h"
#include "core/rng.h"
#include "runtime/client/journal.h"

namespace shoal::runtime {
namespace {

const std::vector<TensorSpec> kLayout = {{"w", {16, 8}}, {"b", {8}}};
constexpr uint64_t kSeed = 11;
const std::string kAuthor = "client-0";

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
  std::vector<uint8_t> Round(uint64_t r, uint64_t session, Settled* settled = nullptr) {
    auto s = journal.Settle(r, session, state(), kSeed, kAuthor);
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
  f.journal.Acked(1);
  const std::vector<float> before_2 = Residual(*f.codec);
  f.Round(2, 7);
  f.journal.Acked(2);
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
  reference.journal.Acked(1);
  EXPECT_EQ(reference.Round(2, 7), again);
  EXPECT_EQ(Residual(*reference.codec), Residual(*f.codec));
}

TEST(RoundJournal, AnUpdateLeftOutOfItsRoundReturnsItsMassToTheResidual) {
  Fixture f;
  f.Round(1, 7);
  f.journal.Acked(1);
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
  twin.journal.Acked(1);
  twin.Round(2, 7);
  ASSERT_TRUE(twin.journal.Settle(3, 7, twin.state(), kSeed, kAuthor).ok());
  const std::vector<float> u2 = RandomUpdate(2);
  const std::vector<float> r = Residual(*twin.codec);
  for (size_t i = 0; i < r.size(); ++i) ASSERT_EQ(r[i], u2[i] + before[i]) << i;
}

TEST(RoundJournal, AcknowledgedOrAnotherSessionsUpdatesAreLeftAlone) {
  Fixture f;
  f.Round(1, 7);
  f.journal.Acked(1);
  f.Round(2, 7);
  f.journal.Acked(2);
  std::vector<float> r = Residual(*f.codec);
  Settled s;
  ASSERT_TRUE(f.journal.Settle(3, 7, f.state(), kSeed, kAuthor).ok());
  EXPECT_EQ(Residual(*f.codec), r);
  EXPECT_EQ(f.journal.size(), 0u);

  // Sent to an aggregator that restarted after saving round 3: its Ack may have died with it.
  f.Round(3, 7);
  r = Residual(*f.codec);
  auto settled = f.journal.Settle(4, 8, f.state(), kSeed, kAuthor);
  ASSERT_TRUE(settled.ok());
  EXPECT_TRUE(settled->returned.empty() && settled->rolled_back.empty());
  EXPECT_EQ(Residual(*f.codec), r);
}

TEST(RoundJournal, WithoutErrorFeedbackALeftOutUpdateIsReportedLost) {
  auto codec = std::move(codec::Codec::Create("topk:ratio=0.25|int8", kLayout)).value();
  RoundJournal journal;
  RoundState state{codec.get(), nullptr, nullptr, nullptr};
  journal.Keep(1, state);
  auto payload = codec->Encode(RandomUpdate(1), codec::MakeRoundContext(kSeed, 1, codec::NameSeed(kAuthor)));
  ASSERT_TRUE(payload.ok());
  journal.Encoded(1, *payload, false, 7);
  auto s = journal.Settle(2, 7, state, kSeed, kAuthor);
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->lost, std::vector<uint64_t>{1});
  EXPECT_TRUE(s->returned.empty());
}

}  // namespace
}  // namespace shoal::runtime
