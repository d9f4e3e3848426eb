// The runtime end to end over the in-process network: registration, rounds, learning, and a
// model that does not depend on the order in which updates arrive.
#include <gtest/gtest.h>

#include "federation.h"

namespace shoal::testing {
namespace {

class RegistrationTest : public RuntimeTest, public ::testing::WithParamInterface<uint32_t> {};

// N clients all register, every round hears from every one of them, the model learns, and
// every client leaves with the service's Bye.
TEST_P(RegistrationTest, EveryClientRegistersReportsEachRoundAndGetsBye) {
  const uint32_t n = GetParam();
  constexpr uint64_t kRounds = 5;
  Federation fed(Options(n, kRounds), 1);
  ASSERT_TRUE(fed.ok());
  fed.AddClients(n);
  const auto lines = fed.Run(kRunLimit);

  ASSERT_NO_FATAL_FAILURE(ExpectRounds(lines, kRounds));
  for (const auto& line : lines) {
    ExpectRound(line, n, n);
    EXPECT_EQ(line["clients_registered"].get<size_t>(), n);
    EXPECT_EQ(line["resyncs"].get<uint64_t>(), 0u);
    EXPECT_EQ(line["frames_rejected"].get<uint64_t>(), 0u);
  }
  EXPECT_GT(lines.back()["test_accuracy"].get<double>(), lines.front()["test_accuracy"].get<double>());
  EXPECT_LT(lines.back()["test_loss"].get<double>(), lines.front()["test_loss"].get<double>());

  fed.ExpectEveryClientSaidBye();
  for (size_t i = 0; i < fed.size(); ++i) {
    Member& m = fed.member(i);
    SCOPED_TRACE(m.name);
    EXPECT_EQ(m.welcomes.load(), 1);  // registered once, never re-registered
    EXPECT_EQ(m.rounds_done.load(), static_cast<int>(kRounds));
    const Client::Stats s = m.client->stats();
    EXPECT_EQ(s.rounds_trained, kRounds);
    EXPECT_EQ(s.resyncs, 0u);
    EXPECT_EQ(s.errors_received, 0u);
    EXPECT_EQ(s.reconnects, 0u);
    EXPECT_GT(s.bytes_sent, 0u);
    EXPECT_GT(s.bytes_received, 0u);
  }
}

INSTANTIATE_TEST_SUITE_P(Clients, RegistrationTest, ::testing::Values(1u, 3u, 8u),
                         [](const ::testing::TestParamInfo<uint32_t>& p) { return std::to_string(p.param); });

// A trainer that does everything the built-in one does but does not say it standardizes: an
// application's trainer, or an older client's.
class NotStandardizing : public Trainer {
 public:
  explicit NotStandardizing(std::unique_ptr<Trainer> inner) : inner_(std::move(inner)) {}
  std::string name() const override { return "app"; }
  Status Configure(const TaskConfig& task) override { return inner_->Configure(task); }
  uint64_t num_examples() const override { return inner_->num_examples(); }
  Status Train(std::span<const float> global, const RoundConfig& round, const TrainContext& ctx,
               TrainResult* out) override {
    return inner_->Train(global, round, ctx, out);
  }

 private:
  std::unique_ptr<Trainer> inner_;
};

// CSV features are standardized by default: the task carries the training split's mean and
// scale, the built-in trainer applies them (the federation learns), and a trainer that does
// not say it applies them is refused at Hello with the flag that turns it off.
TEST_F(RuntimeTest, AStandardizingTaskAdmitsOnlyTrainersThatStandardize) {
  Federation fed(Options(2, 3), 1);
  ASSERT_TRUE(fed.ok());
  fed.AddClients(2);
  const auto lines = fed.Run(kRunLimit);
  ASSERT_NO_FATAL_FAILURE(ExpectRounds(lines, 3));
  EXPECT_GT(lines.back()["test_accuracy"].get<double>(), lines.front()["test_accuracy"].get<double>());

  Federation refused(Options(1, 1), 2);
  ASSERT_TRUE(refused.ok());
  refused.wrap_trainer = [](std::unique_ptr<Trainer> t) { return std::make_unique<NotStandardizing>(std::move(t)); };
  refused.AddClients(1);
  refused.StartService();
  refused.StartClients();
  ASSERT_TRUE(WaitUntil([&] { return refused.member(0).finished.load(); }, kRunLimit));
  const Status& st = refused.member(0).result;
  EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("does not apply the task's feature standardization; start the aggregator with "
                              "--standardize off"),
            std::string::npos)
      << st.ToString();

  AggregatorOptions off = Options(1, 1);
  off.standardize = "off";
  Federation plain(off, 3);
  ASSERT_TRUE(plain.ok());
  plain.wrap_trainer = refused.wrap_trainer;
  plain.AddClients(1);
  ASSERT_NO_FATAL_FAILURE(ExpectRounds(plain.Run(kRunLimit), 1));
}

// The same federation twice, with per-client latencies reversed between the runs (so the
// updates of each round arrive in opposite orders) and driven differently (threads running
// Client::Run, then one thread polling every client, which trains inline): the same model,
// bit for bit, after every round.
TEST_F(RuntimeTest, TheModelDoesNotDependOnTheOrderUpdatesArrive) {
  constexpr uint32_t kClients = 4;
  constexpr uint64_t kRounds = 3;
  auto run = [&](bool reversed, const std::string& metrics) {
    Federation fed(Options(kClients, kRounds, /*round_timeout_ms=*/2000, metrics), 3);
    EXPECT_TRUE(fed.ok());
    if (!fed.ok()) return std::vector<Json>{};
    fed.AddClients(
        kClients, [&](uint32_t i) { return SlowUp(milliseconds(20 * (reversed ? kClients - 1 - i : i))); },
        /*train_inline=*/reversed);
    auto lines = fed.Run(kRunLimit, /*poll=*/reversed);
    fed.ExpectEveryClientSaidBye();
    return lines;
  };
  const auto a = run(false, "a.jsonl");
  const auto b = run(true, "b.jsonl");
  ASSERT_NO_FATAL_FAILURE(ExpectRounds(a, kRounds));
  ASSERT_NO_FATAL_FAILURE(ExpectRounds(b, kRounds));
  for (uint64_t r = 0; r < kRounds; ++r) {
    SCOPED_TRACE("round " + std::to_string(r + 1));
    ExpectRound(a[r], kClients, kClients);  // the same clients took part in both runs
    ExpectRound(b[r], kClients, kClients);
    EXPECT_EQ(a[r]["model_hash"], b[r]["model_hash"]);
    if (r > 0) {
      EXPECT_NE(a[r]["model_hash"], a[r - 1]["model_hash"]);  // the model did move
    }
  }
}

// The metrics count the connections the listener accepted (channel.h: on the in-process
// network a connection counts, and succeeds, when it opens), and none failed.
TEST_F(RuntimeTest, TheMetricsCountTheConnectionsTheListenerAccepted) {
  constexpr uint32_t kClients = 3;
  Federation fed(Options(kClients, 1), 1);
  ASSERT_TRUE(fed.ok());
  fed.AddClients(kClients);
  const auto lines = fed.Run(kRunLimit);
  ASSERT_NO_FATAL_FAILURE(ExpectRounds(lines, 1));
  EXPECT_EQ(lines[0]["handshakes_failed"].get<uint64_t>(), 0u);
  EXPECT_FALSE(lines[0]["secure"].get<bool>());
  EXPECT_EQ(lines[0]["connections"].get<uint64_t>(), kClients);
}

}  // namespace
}  // namespace shoal::testing
