// The per-client upload codec (--codec-slow, --slow-below-mbps) in the real service and
// clients over the in-process network: a client on a slow up link measures its rate and
// switches to the slow codec after its first update, the others keep the main one, and the
// aggregator decodes each with its own codec; the options it refuses.
#include <gtest/gtest.h>

#include "federation.h"

namespace shoal::testing {
namespace {

// Three clients; client 2's up link carries 4 KB/s (0.032 Mbit/s), the others' are unlimited.
// With a bound of 0.05 Mbit/s, round 1 is all int8 (nothing measured yet); from round 2 the
// slow client sends int8 (a quarter of the bytes) and only it does; the model learns. (A fast
// client would need over 400 ms from sending its 2.6 KB to the Ack to measure below the
// bound; the slow one can only measure below its link's rate.)
TEST_F(RuntimeTest, AClientOnASlowLinkSwitchesToTheSlowCodecAndOnlyIt) {
  constexpr uint32_t kClients = 3, kSlow = 2;
  constexpr uint64_t kRounds = 5;
  AggregatorOptions o = Options(kClients, kRounds, /*round_timeout_ms=*/10000);
  o.model = "mlp:256";  // 2,563 parameters: 10 KB dense, 2.6 KB in int8 (0.65 s on the slow link)
  o.codec_slow = "int8";
  o.slow_below_mbps = 0.05;
  Federation fed(o, 1);
  ASSERT_TRUE(fed.ok());
  ClientLinks slow;
  slow.up.bytes_per_second = 4000;
  fed.AddClients(kClients, OnlyClient(kSlow, slow));
  const auto lines = fed.Run(kRunLimit);

  ASSERT_NO_FATAL_FAILURE(ExpectRounds(lines, kRounds));
  for (const auto& line : lines) ExpectRound(line, kClients, kClients);
  EXPECT_EQ(lines[0]["updates_slow_codec"].get<uint64_t>(), kClients) << "no rate measured before the first update";
  for (size_t r = 1; r < kRounds; ++r)
    EXPECT_EQ(lines[r]["updates_slow_codec"].get<uint64_t>(), 1u) << lines[r].dump();
  // Three int8 updates in round 1; two dense and one int8 later: (2 + 1/4) / (3/4) = 3x, less
  // the heartbeats both rounds carry.
  const double int8_round = lines[0]["bytes_up"].get<double>(), mixed_round = lines[kRounds - 1]["bytes_up"].get<double>();
  EXPECT_GT(mixed_round, 2.0 * int8_round);
  EXPECT_LT(mixed_round, 3.5 * int8_round);
  EXPECT_GT(lines.back()["test_accuracy"].get<double>(), lines.front()["test_accuracy"].get<double>());
  fed.ExpectEveryClientSaidBye();
}

TEST_F(RuntimeTest, TheSlowCodecNeedsABoundAndNoSecureAggregation) {
  const auto& refused = CreateRefusal;
  AggregatorOptions o = Options(2, 1);
  o.codec_slow = "int8";
  EXPECT_NE(refused(o).find("--slow-below-mbps"), std::string::npos) << refused(o);
  o.slow_below_mbps = 1;
  EXPECT_EQ(refused(o), "");
  o.codec_slow = "int9";
  EXPECT_NE(refused(o), "");
  AggregatorOptions rate_only = Options(2, 1);
  rate_only.slow_below_mbps = 1;
  EXPECT_NE(refused(rate_only).find("--codec-slow"), std::string::npos) << refused(rate_only);
  AggregatorOptions secagg = Options(2, 1);
  secagg.codec_slow = "int8";
  secagg.slow_below_mbps = 1;
  secagg.secagg.enabled = true;
  EXPECT_NE(refused(secagg).find("--secagg"), std::string::npos) << refused(secagg);
}

}  // namespace
}  // namespace shoal::testing
