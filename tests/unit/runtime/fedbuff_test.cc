// The asynchronous FedBuff strategy in the real service and clients over the in-process
// network: commits of exactly --buffer-size updates that never wait for a straggler, whose
// updates past --max-staleness are refused and counted; synchronous behaviour when the buffer
// is the whole federation; a resume from the checkpoint; and the combinations it refuses.
#include <gtest/gtest.h>

#include "core/checkpoint.h"
#include "crypto/crypto.h"
#include "federation.h"

namespace shoal::testing {
namespace {

AggregatorOptions FedBuff(AggregatorOptions o, uint32_t buffer, uint32_t max_staleness) {
  o.strategy.name = "fedbuff";
  o.strategy.buffer_size = buffer;
  o.strategy.max_staleness = max_staleness;
  return o;
}

// Three clients whose updates take 10 ms to arrive and one whose take 300 ms. Commits of two
// never wait for the straggler: every commit holds exactly two updates, at most one commit
// old; the straggler's task expires two commits after it was sent (it is given the newest
// model again), its updates arrive tens of commits late and are refused and counted, and none
// is acknowledged.
TEST_F(RuntimeTest, FedBuffCommitsWithoutWaitingAndRefusesUpdatesPastTheStalenessBound) {
  constexpr uint32_t kClients = 4, kStraggler = 3;
  constexpr uint64_t kRounds = 60;
  const AggregatorOptions o = FedBuff(Options(kClients, kRounds, /*round_timeout_ms=*/5000), 2, 1);
  Federation fed(o, 1);
  ASSERT_TRUE(fed.ok());
  fed.AddClients(kClients, [](uint32_t i) { return SlowUp(milliseconds(i == kStraggler ? 300 : 10)); });
  const auto lines = fed.Run(kRunLimit);

  ASSERT_NO_FATAL_FAILURE(ExpectRounds(lines, kRounds));
  for (const auto& line : lines) {
    SCOPED_TRACE(line.dump());
    EXPECT_EQ(line["clients_reported"].get<size_t>(), 2u);
    EXPECT_TRUE(line["model_updated"].get<bool>());
    EXPECT_LE(line["staleness_max"].get<double>(), 1.0);
  }
  EXPECT_GT(lines.back()["test_accuracy"].get<double>(), lines.front()["test_accuracy"].get<double>());
  // Its first update left at about the start and arrived 300 ms later, many commits on.
  EXPECT_GE(lines.back()["updates_late"].get<uint64_t>(), 1u);
  fed.ExpectEveryClientSaidBye();
  EXPECT_EQ(fed.member(kStraggler).rounds_done.load(), 0) << "none of the straggler's updates was taken";
  EXPECT_GE(fed.member(kStraggler).client->stats().rounds_trained, 2u) << "its expired task was replaced";
  int fast_done = 0;
  for (uint32_t i = 0; i < kStraggler; ++i) fast_done += fed.member(i).rounds_done.load();
  EXPECT_EQ(fast_done, static_cast<int>(2 * kRounds)) << "every update taken was acknowledged";
}

// With the buffer as large as the federation and no straggler, every client trains once on
// each model version and every commit holds all of them, fresh: synchronous rounds.
TEST_F(RuntimeTest, FedBuffWithTheWholeFederationInTheBufferRunsInLockstep) {
  constexpr uint32_t kClients = 3;
  constexpr uint64_t kRounds = 6;
  Federation fed(FedBuff(Options(kClients, kRounds), kClients, 5), 2);
  ASSERT_TRUE(fed.ok());
  fed.AddClients(kClients);
  const auto lines = fed.Run(kRunLimit);

  ASSERT_NO_FATAL_FAILURE(ExpectRounds(lines, kRounds));
  for (const auto& line : lines) {
    ExpectRound(line, kClients, kClients);
    EXPECT_EQ(line["staleness_max"].get<double>(), 0.0) << line.dump();
    EXPECT_EQ(line["updates_late"].get<uint64_t>(), 0u);
    EXPECT_EQ(line["resyncs"].get<uint64_t>(), 0u);
  }
  fed.ExpectEveryClientSaidBye();
  for (size_t i = 0; i < fed.size(); ++i) EXPECT_EQ(fed.member(i).rounds_done.load(), static_cast<int>(kRounds));
}

// Clients slower than --round-timeout: an empty buffer at the deadline is not committed (that
// would age every update in flight past --max-staleness 0); it waits, and each commit holds
// both fresh updates.
TEST_F(RuntimeTest, FedBuffDoesNotCommitAnEmptyBufferAtTheDeadline) {
  constexpr uint32_t kClients = 2;
  constexpr uint64_t kRounds = 2;
  Federation fed(FedBuff(Options(kClients, kRounds, /*round_timeout_ms=*/150), kClients, 0), 5);
  ASSERT_TRUE(fed.ok());
  fed.AddClients(kClients, [](uint32_t) { return SlowUp(milliseconds(400)); });
  const auto lines = fed.Run(kRunLimit);
  ASSERT_NO_FATAL_FAILURE(ExpectRounds(lines, kRounds));
  for (const auto& line : lines) {
    ExpectRound(line, kClients, kClients);
    EXPECT_EQ(line["staleness_max"].get<double>(), 0.0);
    EXPECT_EQ(line["updates_late"].get<uint64_t>(), 0u);
    EXPECT_GE(line["seconds"].get<double>(), 0.3) << "it waited past the 150 ms deadline for the updates";
  }
}

// Stopped after its commits, the service resumes from the checkpoint, exactly that model, and
// counts on from there: every commit appears once.
TEST_F(RuntimeTest, FedBuffResumesFromItsLastCommit) {
  constexpr uint32_t kClients = 3;
  AggregatorOptions o = FedBuff(Options(kClients, 4), 2, 3);
  o.checkpoint_dir = dir_.File("ck");
  std::vector<Json> first;
  {
    Federation fed(o, 3);
    ASSERT_TRUE(fed.ok());
    fed.AddClients(kClients);
    first = fed.Run(kRunLimit);
    ASSERT_NO_FATAL_FAILURE(ExpectRounds(first, 4));
  }
  auto ck = ReadCheckpoint(dir_.File("ck/checkpoint.shoal"));
  ASSERT_TRUE(ck.ok()) << ck.status().ToString();
  EXPECT_EQ(ck->round, 4u);
  EXPECT_EQ(crypto::ModelHash(ck->params.span()), first.back()["model_hash"].get<std::string>());

  o.resume = true;
  o.rounds = 7;
  Federation fed(o, 4);
  ASSERT_TRUE(fed.ok());
  EXPECT_EQ(fed.service().model_hash(), first.back()["model_hash"].get<std::string>()) << "resumed the committed model";
  EXPECT_EQ(fed.service().rounds_completed(), 4u);
  fed.AddClients(kClients);
  const auto lines = fed.Run(kRunLimit);
  ASSERT_NO_FATAL_FAILURE(ExpectRounds(lines, 7));
  for (size_t i = 4; i < 7; ++i) EXPECT_EQ(lines[i]["clients_reported"].get<size_t>(), 2u);
}

// What a buffer of updates from different model versions cannot go with, refused at start.
TEST_F(RuntimeTest, FedBuffRefusesSecureAggregationDpAndTheAdaptiveDeadline) {
  const auto& refused = CreateRefusal;
  const AggregatorOptions base = FedBuff(Options(2, 1), 2, 3);
  AggregatorOptions secagg = base;
  secagg.secagg.enabled = true;
  EXPECT_NE(refused(secagg).find("synchronous cohort"), std::string::npos) << refused(secagg);
  AggregatorOptions dp = base;
  dp.dp.clip = 1.0;
  dp.dp.noise_multiplier = 1.0;
  EXPECT_NE(refused(dp).find("synchronous cohort"), std::string::npos) << refused(dp);
  AggregatorOptions deadline = base;
  deadline.deadline.quantile = 0.5;
  EXPECT_NE(refused(deadline).find("--deadline-quantile"), std::string::npos) << refused(deadline);
  EXPECT_EQ(refused(base), "");
}

}  // namespace
}  // namespace shoal::testing
