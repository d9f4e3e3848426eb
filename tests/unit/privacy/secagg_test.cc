// SecAgg+ (privacy/secagg): Shamir sharing, the neighbour graph and its parameters, fixed
// point, and the two state machines run in memory: exact sums under dropouts at every stage,
// aborts that reveal nothing, a malicious server's tricks refused, masked inputs uniform.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "core/rng.h"
#include "crypto/keys.h"
#include "privacy/secagg/protocol.h"

namespace shoal::privacy::secagg {
namespace {

Secret RandomSecret(Rng& rng) {
  Secret s;
  for (auto& b : s) b = static_cast<uint8_t>(rng.NextU64());
  return s;
}

TEST(Shamir, AnyThresholdSubsetRecoversAndFewerDoNot) {
  Rng rng(1);
  for (uint32_t t : {1u, 2u, 5u, 9u}) {
    const Secret secret = RandomSecret(rng);
    std::vector<uint32_t> xs = {3, 4, 7, 8, 11, 12, 13, 20, 21};
    auto shares = SplitSecret(secret, t, xs);
    ASSERT_TRUE(shares.ok());
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<Share> pick = *shares;
      rng.Shuffle(std::span<Share>(pick));
      auto back = CombineShares(pick, t);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      EXPECT_EQ(*back, secret);
      // A forged share among the t (any change to one y) gives no secret or another one.
      pick[0].y[trial % 8] = (pick[0].y[trial % 8] + 1) % kFieldPrime;
      auto forged = CombineShares(pick, t);
      EXPECT_TRUE(!forged.ok() || *forged != secret);
    }
    if (t > 1) {
      EXPECT_FALSE(CombineShares(std::span<const Share>(shares->data(), t - 1), t).ok());
    }
  }
  const Secret s{};
  EXPECT_FALSE(SplitSecret(s, 0, std::vector<uint32_t>{1, 2}).ok());
  EXPECT_FALSE(SplitSecret(s, 3, std::vector<uint32_t>{1, 2}).ok());
  EXPECT_FALSE(SplitSecret(s, 1, std::vector<uint32_t>{0, 2}).ok());
  EXPECT_FALSE(SplitSecret(s, 1, std::vector<uint32_t>{2, 2}).ok());
  std::array<uint8_t, 64> bad{};
  std::fill(bad.begin(), bad.begin() + 8, 0xff);
  EXPECT_FALSE(DecodeShareY(1, bad).ok()) << "a value >= p";
}

// t - 1 shares say nothing: for two different secrets, the distribution of one share's first
// word is the same (uniform over the field) -- checked on its top bits over 4,000 splits each.
TEST(Shamir, FewerThanThresholdSharesLookUniform) {
  std::array<int, 16> zero{}, ones{};
  Secret a{}, b;
  b.fill(0xff);
  const std::vector<uint32_t> xs = {1, 2, 3};
  for (int i = 0; i < 4000; ++i) {
    ++zero[(*SplitSecret(a, 2, xs))[0].y[0] >> 57];
    ++ones[(*SplitSecret(b, 2, xs))[0].y[0] >> 57];
  }
  for (int bin = 0; bin < 16; ++bin) {
    EXPECT_NEAR(zero[bin], 250, 80) << bin;
    EXPECT_NEAR(ones[bin], 250, 80) << bin;
  }
}

TEST(Graph, HararyNeighboursAreSymmetricWithTheDegree) {
  for (uint32_t n : {5u, 60u, 200u}) {
    for (uint32_t k : {4u, 10u, 20u}) {
      const uint32_t deg = std::min(k, n - 1);
      std::vector<std::vector<uint32_t>> nb(n);
      for (uint32_t i = 0; i < n; ++i) nb[i] = Neighbours(n, deg, 42, i);
      for (uint32_t i = 0; i < n; ++i) {
        EXPECT_EQ(nb[i].size(), deg) << n << " " << k;
        for (uint32_t v : nb[i]) {
          EXPECT_NE(v, i);
          EXPECT_TRUE(std::binary_search(nb[v].begin(), nb[v].end(), i));
        }
      }
    }
  }
  EXPECT_NE(Neighbours(200, 10, 1, 0), Neighbours(200, 10, 2, 0)) << "the seed permutes the ring";
}

TEST(Graph, DerivedParametersMeetBothBounds) {
  for (uint32_t n : {10u, 50u, 100u, 1000u, 10000u}) {
    auto p = DeriveParams(n, 0.2, 0.05);
    ASSERT_TRUE(p.ok()) << n << ": " << p.status().ToString();
    const double k = p->degree;
    EXPECT_GE(p->threshold, p->degree / 2 + 1 + std::ceil(0.05 * k)) << n;
    const double margin = p->degree + 1 == n ? 0.0 : 3 * std::sqrt(k * 0.2 * 0.8);
    EXPECT_LE(p->threshold, k * 0.8 - margin) << n;
    EXPECT_TRUE(p->malicious_secure);
    if (n > 50) {
      EXPECT_LT(p->degree, n / 2) << "sparse for large n";
    }
  }
  // n = 100: k = 2 ceil(3 log2 100) = 40, t = 21 <= 32 - 3 sqrt(6.4) = 24.4.
  EXPECT_EQ(DeriveParams(100, 0.2, 0.0)->degree, 40u);
  EXPECT_EQ(DeriveParams(100, 0.2, 0.0)->threshold, 21u);
  // 35% dropout: k = 40 leaves 26 - 9.1 < 21 survivors at 3 sigma, k = 80 leaves 52 - 12.8 < 41:
  // the full graph (99 neighbours, 64 >= 50 survive).
  EXPECT_EQ(DeriveParams(100, 0.35, 0.0)->degree, 99u);
  EXPECT_FALSE(DeriveParams(10, 0.6, 0.0).ok()) << "60% dropout leaves too few for an honest majority";
  EXPECT_FALSE(DeriveParams(3, 0.2, 0.0).ok()) << "t = 2 of 2 neighbours cannot lose one";
  auto weak = DeriveParams(10, 0.6, 0.0, 0, 3);
  ASSERT_TRUE(weak.ok());
  EXPECT_FALSE(weak->malicious_secure);
  EXPECT_FALSE(DeriveParams(1, 0.1, 0.0).ok());
}

TEST(FixedPoint, SumOfEncodingsDecodesToTheSumAndClipsAreCounted) {
  FixedPoint fp(2.0, 100);
  std::vector<uint32_t> sum(3, 0), enc(3);
  double want[3] = {0, 0, 0};
  Rng rng(3);
  for (int k = 0; k < 100; ++k) {
    std::vector<float> x = {static_cast<float>(rng.UniformDouble() * 4 - 2), 2.0f, -2.0f};
    EXPECT_EQ(EncodeFixed(fp, x, enc), 0u);
    for (int i = 0; i < 3; ++i) {
      sum[i] += enc[i];
      want[i] += x[i];
    }
  }
  std::vector<double> got(3);
  DecodeFixedSum(fp, sum, got);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(got[i], want[i], 100 / (2 * fp.scale)) << i;
  std::vector<float> wild = {3.0f, -1e30f, NAN, 1.0f};
  std::vector<uint32_t> out(4);
  EXPECT_EQ(EncodeFixed(fp, wild, out), 3u);
  std::vector<double> dec(4);
  DecodeFixedSum(fp, out, dec);
  EXPECT_NEAR(dec[0], 2.0, 1e-6);
  EXPECT_NEAR(dec[1], -2.0, 1e-6);
  EXPECT_EQ(dec[2], 0.0);
}

// ---- the protocol in memory ----------------------------------------------------------------

struct Party {
  crypto::KeyPair keys;
  std::unique_ptr<Client> client;
};

// policy: what the clients accept (honest-but-curious tests lower the threshold's floor).
std::vector<Party> MakeParties(uint32_t n, ClientPolicy policy = {}) {
  std::vector<Party> p(n);
  for (uint32_t i = 0; i < n; ++i) {
    p[i].keys = *crypto::GenerateKeyPair();
    p[i].client = std::make_unique<Client>(100 + 3 * i, p[i].keys.sign_secret, policy);  // ids not equal to indices
  }
  return p;
}

struct Plan {
  uint32_t n = 10, length = 16, threshold = 0;
  double min_threshold_fraction = 0.5;
  // party positions dropping at each stage
  std::set<uint32_t> no_advert = {}, no_shares = {}, no_masked = {}, no_check = {}, no_unmask = {};
  std::map<uint32_t, uint32_t> garble = {};  // party position -> how many of its shares it seals as garbage
};

struct Outcome {
  Status status;
  std::optional<Result> result;
  std::vector<uint32_t> expected;  // sum over survivors of their encodings mod 2^32
  uint32_t degree = 0;             // the Setup's
};

Outcome Failed(Status st) {
  Outcome o;
  o.status = std::move(st);
  return o;
}

Outcome RunProtocol(std::vector<Party>& parties, const Plan& plan, uint64_t seed, uint64_t round = 1) {
  Outcome out;
  ServerOptions so{.range = 1.0, .length = plan.length, .dropout = 0.3, .threshold = plan.threshold,
                   .min_threshold_fraction = plan.min_threshold_fraction};
  Server server(7, round, so);
  Rng rng(seed, 99);
  std::map<uint32_t, uint32_t> party_of;  // client id -> party position
  for (uint32_t i = 0; i < plan.n; ++i) {
    party_of[100 + 3 * i] = i;
    auto a = parties[i].client->Start(7, round);
    EXPECT_TRUE(a.ok());
    if (!plan.no_advert.count(i)) {
      EXPECT_TRUE(server.AddAdvert(*a).ok());
    }
  }
  auto setup = server.CloseAdverts();
  if (!setup.ok()) return Failed(setup.status());
  for (uint32_t i = 0; i < plan.n; ++i) {
    if (plan.no_advert.count(i)) continue;
    auto sk = parties[i].client->OnSetup(*setup);
    if (!sk.ok()) return Failed(sk.status());
    if (plan.garble.count(i))
      for (uint32_t k = 0; k < plan.garble.at(i) && k < sk->shares.size(); ++k)
        sk->shares[k].sealed[sk->shares[k].sealed.size() / 2] ^= 0x5a;
    if (!plan.no_shares.count(i)) {
      EXPECT_TRUE(server.AddShareKeys(*sk).ok());
    }
  }
  auto deliveries = server.CloseShareKeys();
  if (!deliveries.ok()) return Failed(deliveries.status());
  out.expected.assign(plan.length, 0);
  out.degree = setup->degree;
  FixedPoint fp(1.0, static_cast<uint32_t>(setup->roster.size()));
  for (const SharesFor& d : *deliveries) {
    const uint32_t i = party_of.at(setup->roster[d.to].client_id);
    std::vector<float> x(plan.length);
    for (float& v : x) v = static_cast<float>(rng.UniformDouble() * 2.4 - 1.2);  // some beyond the range
    std::vector<uint32_t> enc(plan.length);
    const uint64_t clipped = EncodeFixed(fp, x, enc);
    auto masked = parties[i].client->OnShares(d, enc, clipped);
    if (!masked.ok()) return Failed(masked.status());
    if (plan.no_masked.count(i)) continue;
    EXPECT_TRUE(server.AddMasked(*masked).ok());
    for (uint32_t c = 0; c < plan.length; ++c) out.expected[c] += enc[c];
  }
  auto request = server.CloseMasked();
  if (!request.ok()) return Failed(request.status());
  for (uint32_t s : request->survivors) {
    const uint32_t i = party_of.at(setup->roster[s].client_id);
    auto sig = parties[i].client->OnCheck(*request);
    if (!sig.ok()) return Failed(sig.status());
    if (!plan.no_check.count(i)) {
      EXPECT_TRUE(server.AddCheck(*sig).ok());
    }
  }
  auto proof = server.CloseCheck();
  if (!proof.ok()) return Failed(proof.status());
  for (uint32_t s : proof->signers) {
    const uint32_t i = party_of.at(setup->roster[s].client_id);
    auto shares = parties[i].client->OnUnmask(*proof);
    if (!shares.ok()) return Failed(shares.status());
    if (!plan.no_unmask.count(i)) {
      EXPECT_TRUE(server.AddUnmask(*shares).ok());
    }
  }
  auto result = server.Finish();
  if (!result.ok()) return Failed(result.status());
  out.result = std::move(*result);
  return out;
}

// 1,000 seeds, 10 clients: 3 drop after sharing keys (before MaskedInput) and 3 more after it
// (they never answer Unmask); the unmasked sum equals the plaintext modular sum bit for bit.
// Only 4 answer Unmask, so the threshold is 3 of 9 neighbours: an honest-but-curious setting,
// which the clients must be told to accept (ClientPolicy).
TEST(SecAgg, UnmaskedSumIsExactUnderDropoutsBeforeAndAfterMaskedInput) {
  auto parties = MakeParties(10, ClientPolicy{.min_threshold_fraction = 0.0});
  for (uint64_t seed = 0; seed < 1000; ++seed) {
    Rng rng(seed);
    std::vector<uint32_t> order(10);
    std::iota(order.begin(), order.end(), 0u);
    rng.Shuffle(std::span<uint32_t>(order));
    Plan plan{.threshold = 3, .min_threshold_fraction = 0.0};
    plan.no_masked = {order[0], order[1], order[2]};
    plan.no_unmask = {order[3], order[4], order[5]};
    Outcome o = RunProtocol(parties, plan, seed, seed + 1);
    ASSERT_TRUE(o.result.has_value()) << "seed " << seed << ": " << o.status.ToString();
    ASSERT_EQ(o.result->sum, o.expected) << "seed " << seed;
    EXPECT_EQ(o.result->survivors.size(), 7u);
    EXPECT_EQ(o.result->recovered, 3u);
    EXPECT_GT(o.result->clipped, 0u) << "values beyond the range are counted";
  }
}

TEST(SecAgg, SparseGraphAndDropoutsBeforeSharingAreExactToo) {
  auto parties = MakeParties(60);
  Plan plan{.n = 60, .length = 300};
  plan.no_advert = {5};
  plan.no_shares = {9, 17};
  plan.no_masked = {1, 2, 3, 4, 40, 41};
  plan.no_unmask = {50, 51, 52};
  Outcome o = RunProtocol(parties, plan, 11);
  ASSERT_TRUE(o.result.has_value()) << o.status.ToString();
  EXPECT_EQ(o.result->sum, o.expected);
  EXPECT_EQ(o.result->recovered, 6u);
}

TEST(SecAgg, BelowThresholdTheRoundAbortsAndRevealsNothing) {
  auto parties = MakeParties(6);
  Plan plan{.n = 6, .threshold = 4};
  plan.no_masked = {0, 1, 2};  // 3 survivors < 4
  Outcome o = RunProtocol(parties, plan, 1);
  EXPECT_FALSE(o.result.has_value());
  EXPECT_NE(o.status.message().find("below the threshold"), std::string::npos) << o.status.ToString();
  // Enough masked inputs but too few answers to Unmask: Finish fails, no sum.
  Plan late{.n = 6, .threshold = 4};
  late.no_unmask = {0, 1, 2};
  Outcome o2 = RunProtocol(parties, late, 2, 2);
  EXPECT_FALSE(o2.result.has_value());
  EXPECT_NE(o2.status.message().find("threshold"), std::string::npos) << o2.status.ToString();
}

// A malicious server: each case is refused by the client with a clear error.
class SecAggClientRefuses : public ::testing::Test {
 protected:
  void SetUp() override {
    parties_ = MakeParties(5);
    server_ = std::make_unique<Server>(7, 1, ServerOptions{.range = 1.0, .length = 4, .threshold = 3});
    for (auto& p : parties_) ASSERT_TRUE(server_->AddAdvert(*p.client->Start(7, 1)).ok());
    setup_ = *server_->CloseAdverts();
    for (auto& p : parties_) ASSERT_TRUE(server_->AddShareKeys(*p.client->OnSetup(setup_)).ok());
    deliveries_ = *server_->CloseShareKeys();
  }
  Client& client(uint32_t index) {
    for (auto& p : parties_)
      if (p.client->index() == index) return *p.client;
    throw std::runtime_error("no such index");
  }
  std::vector<Party> parties_;
  std::unique_ptr<Server> server_;
  secagg::Setup setup_;
  std::vector<SharesFor> deliveries_;
  static std::vector<uint32_t> Words() { return {1, 2, 3, 4}; }
};

// A neighbour that seals garbage (or a share altered on the way) is dropped and counted, not
// fatal: one malicious client must not abort its neighbours' rounds. A misaddressed share, or
// another client's delivery, still aborts.
TEST_F(SecAggClientRefuses, AForgedShareIsDroppedAndAMisaddressedOneRefused) {
  SharesFor forged = deliveries_[0];
  forged.shares[0].sealed[30] ^= 1;
  auto r = client(deliveries_[0].to).OnShares(forged, Words(), 0);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->rejected_shares, 1u);
  EXPECT_EQ(client(deliveries_[0].to).rejected_shares(), 1u);
  SharesFor wrong = deliveries_[1];
  wrong.shares[0].to = 3;
  auto w = client(1).OnShares(wrong, Words(), 0);
  ASSERT_FALSE(w.ok());
  EXPECT_NE(w.status().message().find("addressed"), std::string::npos) << w.status().ToString();
  EXPECT_FALSE(client(2).OnShares(deliveries_[3], Words(), 0).ok()) << "another client's delivery";
  // Garbage from more than k - t neighbours leaves fewer than t valid shares: refused.
  SharesFor worse = deliveries_[4];
  for (size_t i = 0; i + setup_.threshold <= worse.shares.size(); ++i) worse.shares[i].sealed[30] ^= 1;
  auto x = client(worse.to).OnShares(worse, Words(), 0);
  ASSERT_FALSE(x.ok());
  EXPECT_NE(x.status().message().find("failed authentication"), std::string::npos) << x.status().ToString();
}

// A server that withholds neighbours' shares (claims they dropped before sharing) would leave
// the client's input behind its self-mask alone: with fewer than t shares the client refuses.
TEST_F(SecAggClientRefuses, FewerNeighboursThanTheThreshold) {
  SharesFor thin = deliveries_[0];
  thin.shares.resize(setup_.threshold - 1);
  auto r = client(deliveries_[0].to).OnShares(thin, Words(), 0);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("below the threshold"), std::string::npos) << r.status().ToString();
}

TEST_F(SecAggClientRefuses, OverlappingSurvivorAndDroppedSetsAndTooFewSurvivors) {
  for (auto& d : deliveries_) ASSERT_TRUE(client(d.to).OnShares(d, Words(), 0).ok());
  auto both = client(0).OnCheck({{0, 1, 2, 3}, {3, 4}});
  ASSERT_FALSE(both.ok());
  EXPECT_NE(both.status().message().find("both as survivor and as dropped"), std::string::npos);
  EXPECT_EQ(client(0).stage(), Client::Stage::kAborted);
  auto few = client(1).OnCheck({{0, 1}, {2, 3, 4}});
  ASSERT_FALSE(few.ok());
  EXPECT_NE(few.status().message().find("below the threshold"), std::string::npos);
  auto unsorted = client(2).OnCheck({{2, 1, 0}, {}});
  EXPECT_FALSE(unsorted.ok());
  // A request that meets the threshold and the quorum (3 of 5) is signed, once per round.
  auto q = client(3).OnCheck({{0, 1, 3}, {2, 4}});
  ASSERT_TRUE(q.ok()) << "3 of 5 meets the quorum floor(5 / 2) + 1 = 3: " << q.status().ToString();
  EXPECT_FALSE(client(3).OnCheck({{0, 1, 3}, {2, 4}}).ok()) << "a second request in one round is never signed";
}

TEST_F(SecAggClientRefuses, ReplayedStagesAndAReusedRound) {
  auto again = client(0).OnSetup(setup_);
  ASSERT_FALSE(again.ok());
  EXPECT_NE(again.status().message().find("out of order"), std::string::npos);
  ASSERT_TRUE(client(1).OnShares(deliveries_[1], Words(), 0).ok());
  EXPECT_FALSE(client(1).OnShares(deliveries_[1], Words(), 0).ok()) << "the same stage twice";
  auto reused = client(2).Start(7, 1);
  ASSERT_FALSE(reused.ok());
  EXPECT_NE(reused.status().message().find("reused"), std::string::npos);
}

// The threshold floor holds on both sides: a server refuses to set t <= k/2, and a client
// refuses such a Setup from a server that does anyway (or one with too many neighbours).
TEST(SecAgg, AThresholdAtMostHalfTheNeighboursIsRefused) {
  auto parties = MakeParties(5);
  Server strict(7, 1, ServerOptions{.range = 1.0, .length = 4, .threshold = 2});
  Server lax(7, 1, ServerOptions{.range = 1.0, .length = 4, .threshold = 2, .min_threshold_fraction = 0.0});
  for (auto& p : parties) {
    auto a = *p.client->Start(7, 1);
    ASSERT_TRUE(strict.AddAdvert(a).ok());
    ASSERT_TRUE(lax.AddAdvert(a).ok());
  }
  auto refused = strict.CloseAdverts();
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("at most half"), std::string::npos) << refused.status().ToString();
  const secagg::Setup low = *lax.CloseAdverts();
  auto r = parties[0].client->OnSetup(low);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("too low"), std::string::npos) << r.status().ToString();
  auto big = MakeParties(1, ClientPolicy{.max_degree = 3});
  secagg::Setup wide = low;
  wide.threshold = 4;
  (void)big[0].client->Start(7, 1);
  EXPECT_FALSE(big[0].client->OnSetup(wide).ok()) << "4 neighbours over a policy of 3";
}

// The server refuses adverts that would sabotage the neighbours' key agreement: a low-order
// point, or another client's key.
TEST(SecAgg, ServerRefusesLowOrderAndRepeatedKeys) {
  auto parties = MakeParties(2);
  Server server(7, 1, ServerOptions{.range = 1.0, .length = 4});
  auto a = *parties[0].client->Start(7, 1);
  ASSERT_TRUE(server.AddAdvert(a).ok());
  auto b = *parties[1].client->Start(7, 1);
  AdvertiseKeys copy = b;
  copy.s_public = a.s_public;
  copy.signature = crypto::Sign(AdvertMessage(7, 1, copy), parties[1].keys.sign_secret);
  EXPECT_FALSE(server.AddAdvert(copy).ok()) << "another client's key";
  AdvertiseKeys low = b;
  low.c_public = {};  // u = 1, a point of order 4: its agreement is all zero
  low.c_public[0] = 1;
  low.signature = crypto::Sign(AdvertMessage(7, 1, low), parties[1].keys.sign_secret);
  EXPECT_FALSE(server.AddAdvert(low).ok()) << "a low-order point";
  EXPECT_TRUE(server.AddAdvert(b).ok());
}

// A forged share among more than t is left out; a share revealed twice is refused.
TEST(SecAgg, OneForgedUnmaskShareIsToleratedAndRepeatsRefused) {
  auto parties = MakeParties(6);
  Server server(7, 1, ServerOptions{.range = 1.0, .length = 4, .dropout = 0.0});
  for (auto& p : parties) ASSERT_TRUE(server.AddAdvert(*p.client->Start(7, 1)).ok());
  const secagg::Setup setup = *server.CloseAdverts();  // 5 neighbours, t = 3
  std::map<uint32_t, Client*> by_index;
  for (auto& p : parties) {
    ASSERT_TRUE(server.AddShareKeys(*p.client->OnSetup(setup)).ok());
    by_index[p.client->index()] = p.client.get();
  }
  const std::vector<SharesFor> deliveries = *server.CloseShareKeys();
  for (const auto& d : deliveries) ASSERT_TRUE(server.AddMasked(*by_index[d.to]->OnShares(d, {1, 2, 3, 4}, 0)).ok());
  const UnmaskRequest request = *server.CloseMasked();
  for (const auto& [index, c] : by_index) ASSERT_TRUE(server.AddCheck(*c->OnCheck(request)).ok());
  const UnmaskProof proof = *server.CloseCheck();
  bool forged = false;
  for (const auto& [index, c] : by_index) {
    UnmaskShares reveal = *c->OnUnmask(proof);
    if (!forged) {
      UnmaskShares twice = reveal;
      twice.shares.push_back(twice.shares.front());
      EXPECT_FALSE(server.AddUnmask(twice).ok()) << "the same owner's share twice";
      reveal.shares.front().y[0] ^= 1;  // a forged share of one client's self mask
      forged = true;
    }
    ASSERT_TRUE(server.AddUnmask(reveal).ok());
  }
  auto result = server.Finish();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(result->sum[i], 6 * (i + 1));
}

TEST(SecAgg, ClientRefusesARosterThatAltersItsKeysOrForgesANeighbour) {
  auto parties = MakeParties(4);
  Server server(7, 1, ServerOptions{.range = 1.0, .length = 4});
  for (auto& p : parties) ASSERT_TRUE(server.AddAdvert(*p.client->Start(7, 1)).ok());
  secagg::Setup setup = *server.CloseAdverts();
  secagg::Setup swapped = setup;
  std::swap(swapped.roster[0].c_public, swapped.roster[1].c_public);
  auto r = parties[0].client->OnSetup(swapped);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("altered"), std::string::npos) << r.status().ToString();
  secagg::Setup forged = setup;
  forged.roster[0].s_public[0] ^= 1;  // parties[1] sees neighbour 0 with keys it did not sign
  auto f = parties[1].client->OnSetup(forged);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("not signed"), std::string::npos) << f.status().ToString();
  // The server refuses an advert whose signature does not verify.
  AdvertiseKeys bad = setup.roster[2];
  bad.client_id = 999;
  Server s2(7, 1, ServerOptions{.range = 1.0, .length = 4});
  EXPECT_FALSE(s2.AddAdvert(bad).ok());
}

// ---- a malicious aggregator against real client state machines -----------------------------

// Adverts, Setup, ShareKeys and MaskedInput run honestly; the server is left at Check and the
// clients are found by roster index.
struct AtCheck {
  std::unique_ptr<Server> server;
  secagg::Setup setup;
  std::map<uint32_t, Client*> by_index;
  std::map<uint32_t, const crypto::KeyPair*> keys;  // by roster index: what a colluder gives away
};

// The value of a step that must succeed; a failure names the step and stops the test.
template <class T>
T Must(StatusOr<T> r, const char* step) {
  if (!r.ok()) throw std::runtime_error(std::string(step) + ": " + r.status().ToString());
  return std::move(*r);
}

AtCheck RunToCheck(std::vector<Party>& parties, ServerOptions so, uint64_t round) {
  AtCheck at;
  at.server = std::make_unique<Server>(7, round, so);
  for (auto& p : parties) EXPECT_TRUE(at.server->AddAdvert(Must(p.client->Start(7, round), "Start")).ok());
  at.setup = Must(at.server->CloseAdverts(), "CloseAdverts");
  for (auto& p : parties) {
    EXPECT_TRUE(at.server->AddShareKeys(Must(p.client->OnSetup(at.setup), "OnSetup")).ok());
    at.by_index[p.client->index()] = p.client.get();
    at.keys[p.client->index()] = &p.keys;
  }
  for (const SharesFor& d : Must(at.server->CloseShareKeys(), "CloseShareKeys"))
    EXPECT_TRUE(at.server->AddMasked(Must(at.by_index[d.to]->OnShares(d, std::vector<uint32_t>(so.length, d.to), 0),
                                          "OnShares")).ok());
  Must(at.server->CloseMasked(), "CloseMasked");
  return at;
}

// Finding 1 (Bonawitz et al. CCS'17, §4): the server tells the victim and three clients "all
// survived" (they would reveal shares of the victim's self mask b) and the other three "the
// victim dropped" (they would reveal shares of its mask key s_sk). With t = 3 each group alone
// holds t shares, so answering both would unmask the victim's input by itself. Each client signs
// what it was told; the second group cannot show a quorum (4 of 7) on its request, so it refuses
// and reveals nothing, whatever mix of signatures the server sends it.
TEST(SecAggMaliciousServer, InconsistentSurvivorSetsRevealNothingTheyCouldCombine) {
  auto parties = MakeParties(7, ClientPolicy{.min_threshold_fraction = 0.0});
  AtCheck at = RunToCheck(parties, ServerOptions{.range = 1.0, .length = 4, .dropout = 0.0, .threshold = 3,
                                                 .min_threshold_fraction = 0.0}, 1);
  ASSERT_EQ(at.setup.degree, 6u);
  const uint32_t victim = 0;
  const UnmaskRequest all{{0, 1, 2, 3, 4, 5, 6}, {}}, without{{1, 2, 3, 4, 5, 6}, {victim}};
  const std::set<uint32_t> told_all = {0, 1, 2, 3}, told_without = {4, 5, 6};
  std::map<uint32_t, crypto::Signature> on_all, on_without;
  for (uint32_t i : told_all) on_all[i] = at.by_index[i]->OnCheck(all)->signature;
  for (uint32_t i : told_without) on_without[i] = at.by_index[i]->OnCheck(without)->signature;
  auto proof_of = [](const std::map<uint32_t, crypto::Signature>& sigs) {
    UnmaskProof p;
    for (const auto& [i, sig] : sigs) {
      p.signers.push_back(i);
      p.signatures.push_back(sig);
    }
    return p;
  };
  std::map<uint32_t, crypto::Signature> mixed = on_all;
  mixed.insert(on_without.begin(), on_without.end());  // every signature the server holds
  std::map<uint32_t, std::set<bool>> kinds;  // owner -> kinds of share revealed (true: of s_sk)
  for (uint32_t i : told_all) {
    auto shares = at.by_index[i]->OnUnmask(proof_of(on_all));
    ASSERT_TRUE(shares.ok()) << "4 signatures on its request meet the quorum: " << shares.status().ToString();
    for (const RevealedShare& r : shares->shares) kinds[r.owner].insert(r.mask_key);
  }
  for (uint32_t i : told_without) {
    // The three signatures on its request, all seven (four on another request), or only the
    // other group's: none is a quorum on what this client signed.
    const UnmaskProof proof = i == 4 ? proof_of(on_without) : i == 5 ? proof_of(mixed) : proof_of(on_all);
    auto shares = at.by_index[i]->OnUnmask(proof);
    ASSERT_FALSE(shares.ok()) << "client " << i << " revealed shares";
    EXPECT_EQ(shares.status().code(), StatusCode::kPermissionDenied);
    EXPECT_NE(shares.status().message().find("nothing revealed"), std::string::npos) << shares.status().ToString();
    EXPECT_EQ(at.by_index[i]->stage(), Client::Stage::kAborted);
    EXPECT_FALSE(at.by_index[i]->OnUnmask(proof_of(on_all)).ok()) << "an aborted client reveals nothing later";
  }
  EXPECT_EQ(kinds[victim], std::set<bool>{false}) << "only shares of the victim's self mask left any client";
  // A forged signature does not count either: the fourth signature on `without` made up.
  auto parties2 = MakeParties(7, ClientPolicy{.min_threshold_fraction = 0.0});
  AtCheck at2 = RunToCheck(parties2, ServerOptions{.range = 1.0, .length = 4, .dropout = 0.0, .threshold = 3,
                                                   .min_threshold_fraction = 0.0}, 2);
  std::map<uint32_t, crypto::Signature> sigs;
  for (uint32_t i : told_without) sigs[i] = at2.by_index[i]->OnCheck(without)->signature;
  sigs[3] = sigs[4];
  EXPECT_FALSE(at2.by_index[4]->OnUnmask(proof_of(sigs)).ok());
}

// The quorum argument with colluders: the server holds the identity keys of c = floor(gamma n)
// clients (it signs anything as them) and splits the honest ones among two or three requests,
// then shows each client every signature it has on that client's request. Over 300 random
// splits, the clients that reveal all signed one and the same request.
TEST(SecAggMaliciousServer, WithColludersEveryClientThatRevealsSawTheSameSurvivorSet) {
  const uint32_t n = 9;
  const double gamma = 0.25;  // c = 2, quorum = floor(11 / 2) + 1 = 6
  ASSERT_EQ(ConsistencyQuorum(n, gamma), 6u);
  auto parties = MakeParties(n, ClientPolicy{.colluding_fraction = gamma});
  Rng rng(5);
  int revealed_rounds = 0;
  for (uint64_t round = 1; round <= 300; ++round) {
    AtCheck at = RunToCheck(parties, ServerOptions{.range = 1.0, .length = 4, .dropout = 0.0,
                                                   .colluding_fraction = gamma}, round);
    std::vector<uint32_t> order(n);
    std::iota(order.begin(), order.end(), 0u);
    rng.Shuffle(std::span<uint32_t>(order));
    const std::set<uint32_t> colluders = {order[0], order[1]};
    const uint32_t groups = 2 + static_cast<uint32_t>(rng.NextU64() % 2);
    std::vector<UnmaskRequest> requests(groups);
    std::map<uint32_t, uint32_t> group_of;
    for (uint32_t k = 2; k < n; ++k) group_of[order[k]] = static_cast<uint32_t>(rng.NextU64() % groups);
    for (uint32_t g = 0; g < groups; ++g) {
      // Every client survives except a random few marked dropped (never one told this request).
      for (uint32_t i = 0; i < n; ++i) {
        const bool told = group_of.count(i) && group_of[i] == g;
        (told || colluders.count(i) || rng.NextU64() % 3 ? requests[g].survivors : requests[g].dropped).push_back(i);
      }
    }
    std::vector<std::map<uint32_t, crypto::Signature>> sigs(groups);
    for (const auto& [i, g] : group_of) {
      auto s = at.by_index[i]->OnCheck(requests[g]);
      if (s.ok()) sigs[g][i] = s->signature;
    }
    for (uint32_t g = 0; g < groups; ++g)
      for (uint32_t c : colluders)
        if (std::binary_search(requests[g].survivors.begin(), requests[g].survivors.end(), c))
          sigs[g][c] = crypto::Sign(CheckMessage(7, round, requests[g]), at.keys[c]->sign_secret);
    std::set<uint32_t> revealing_groups;
    for (const auto& [i, g] : group_of) {
      if (at.by_index[i]->stage() != Client::Stage::kChecked) continue;
      UnmaskProof proof;
      for (const auto& [j, sig] : sigs[g]) {
        proof.signers.push_back(j);
        proof.signatures.push_back(sig);
      }
      if (at.by_index[i]->OnUnmask(proof).ok()) revealing_groups.insert(g);
    }
    EXPECT_LE(revealing_groups.size(), 1u) << "round " << round << ": clients revealed on different survivor sets";
    revealed_rounds += !revealing_groups.empty();
  }
  EXPECT_GT(revealed_rounds, 0) << "some splits leave one group a quorum (the test exercises reveals)";
}

// Finding 2: a roster made of the server's own adverts (fresh identities, the same client ids)
// around the victim's. Without a trusted roster every check passes -- the limit docs/SECURITY.md
// states; with one, the victim refuses the first unknown identity.
TEST(SecAggMaliciousServer, ARosterOfTheServersOwnIdentitiesIsRefusedWithATrustedRoster) {
  auto real = MakeParties(5);
  auto trusted = std::make_shared<TrustedKeys>();
  for (auto& p : real) trusted->insert(p.keys.curve_public);
  for (bool with_roster : {false, true}) {
    auto fakes = MakeParties(5);
    ClientPolicy policy;
    if (with_roster) policy.trusted = trusted;
    Client victim(100, real[0].keys.sign_secret, policy);
    Server server(7, 1, ServerOptions{.range = 1.0, .length = 4});
    ASSERT_TRUE(server.AddAdvert(*victim.Start(7, 1)).ok());
    for (uint32_t i = 1; i < 5; ++i) ASSERT_TRUE(server.AddAdvert(*fakes[i].client->Start(7, 1)).ok());
    secagg::Setup setup = *server.CloseAdverts();
    auto r = victim.OnSetup(setup);
    if (!with_roster) {
      EXPECT_TRUE(r.ok()) << "without a trusted roster the server's own identities pass: " << r.status().ToString();
      continue;
    }
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), StatusCode::kPermissionDenied);
    EXPECT_NE(r.status().message().find("not in this client's trusted roster"), std::string::npos) << r.status().ToString();
    EXPECT_EQ(victim.stage(), Client::Stage::kAborted);
  }
  // The real federation passes the same trusted roster.
  std::vector<Party> vouched(5);
  for (uint32_t i = 0; i < 5; ++i) {
    vouched[i].keys = real[i].keys;
    vouched[i].client = std::make_unique<Client>(100 + 3 * i, real[i].keys.sign_secret, ClientPolicy{.trusted = trusted});
  }
  Plan plan{.n = 5, .length = 4, .threshold = 3};
  Outcome o = RunProtocol(vouched, plan, 3, 9);
  ASSERT_TRUE(o.result.has_value()) << o.status.ToString();
  EXPECT_EQ(o.result->sum, o.expected);
}

// A roster smaller than the client's minimum, with fewer neighbours or a lower threshold than
// its policy, or listing one identity twice, is refused at Setup.
TEST(SecAggMaliciousServer, SetupsBelowTheClientsPolicyAreRefused) {
  struct Case {
    ClientPolicy policy;
    const char* names;
  };
  const Case cases[] = {{ClientPolicy{.min_roster = 6}, "min_roster"},
                        {ClientPolicy{.min_degree = 5}, "min_neighbours"},
                        {ClientPolicy{.min_threshold = 4}, "min_threshold"}};
  for (const Case& c : cases) {
    auto parties = MakeParties(5, c.policy);
    Server server(7, 1, ServerOptions{.range = 1.0, .length = 4, .threshold = 3});  // 5 clients, k = 4, t = 3
    for (auto& p : parties) ASSERT_TRUE(server.AddAdvert(*p.client->Start(7, 1)).ok());
    auto r = parties[0].client->OnSetup(Must(server.CloseAdverts(), "CloseAdverts"));
    ASSERT_FALSE(r.ok()) << c.names;
    EXPECT_EQ(r.status().code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(r.status().message().find(c.names), std::string::npos) << r.status().ToString();
  }
  // A graph seed of the server's choosing (one it ground to place its clients): refused.
  {
    auto parties = MakeParties(5);
    Server server(7, 1, ServerOptions{.range = 1.0, .length = 4, .threshold = 3});
    for (auto& p : parties) ASSERT_TRUE(server.AddAdvert(*p.client->Start(7, 1)).ok());
    secagg::Setup ground = Must(server.CloseAdverts(), "CloseAdverts");
    EXPECT_EQ(ground.graph_seed, GraphSeed(7, 1, ground.roster));
    ground.graph_seed ^= 1;
    auto g = parties[0].client->OnSetup(ground);
    ASSERT_FALSE(g.ok());
    EXPECT_NE(g.status().message().find("graph seed is not derived"), std::string::npos) << g.status().ToString();
  }
  // The default minimum roster is 3: two clients' sum less one's own update is the other's.
  auto two = MakeParties(3);
  Server server(7, 1, ServerOptions{.range = 1.0, .length = 4, .threshold = 2});
  for (auto& p : two) ASSERT_TRUE(server.AddAdvert(*p.client->Start(7, 1)).ok());
  secagg::Setup small = Must(server.CloseAdverts(), "CloseAdverts");
  small.roster.pop_back();
  small.degree = 1;
  small.threshold = 1;
  auto r = two[0].client->OnSetup(small);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("min_roster"), std::string::npos) << r.status().ToString();
  // One identity twice: an honest server refuses it, so the malicious one edits its Setup
  // (the fourth advert re-signed with the third client's key, which it holds).
  auto dup = MakeParties(4);
  Server s2(7, 1, ServerOptions{.range = 1.0, .length = 4, .threshold = 2});
  for (auto& p : dup) ASSERT_TRUE(s2.AddAdvert(*p.client->Start(7, 1)).ok());
  secagg::Setup twice = Must(s2.CloseAdverts(), "CloseAdverts");
  twice.roster[3].identity = twice.roster[2].identity;
  twice.roster[3].signature = crypto::Sign(AdvertMessage(7, 1, twice.roster[3]), dup[2].keys.sign_secret);
  auto d = dup[0].client->OnSetup(twice);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("identity twice"), std::string::npos) << d.status().ToString();
}

// Finding 5: a client that seals garbage for some neighbours does not abort their rounds: each
// drops and counts the share, and while the garbler's secrets keep t valid shares the round
// completes with the exact sum and the count reaches the server. A garbler that seals garbage
// for every neighbour leaves its own masks unremovable: its neighbours still send their masked
// inputs (none aborts), and the server aborts the round at Finish naming it, unmasking nothing.
TEST(SecAgg, AClientSealingGarbageSharesDoesNotAbortItsNeighbours) {
  auto parties = MakeParties(8);
  Plan plan{.n = 8, .length = 32};
  plan.garble = {{2, 1}};
  Outcome o = RunProtocol(parties, plan, 4);
  ASSERT_TRUE(o.result.has_value()) << o.status.ToString();
  EXPECT_EQ(o.result->sum, o.expected);
  EXPECT_EQ(o.result->survivors.size(), 8u);
  EXPECT_EQ(o.result->rejected_shares, 1u);
  EXPECT_EQ(o.result->signatures, 8u);
  Plan all{.n = 8, .length = 32};
  all.garble = {{2, 100}};
  Outcome a = RunProtocol(parties, all, 5, 2);
  ASSERT_FALSE(a.result.has_value());
  EXPECT_NE(a.status.message().find("client 106's self mask"), std::string::npos) << a.status.ToString();
}

// The server's checks on what clients report (docs/SECURITY.md, "Sabotage by a client"): a
// clipped or rejected-share count above what a client can have, a consistency signature on
// another survivor set or from a non-survivor, and unmask shares from a client that did not
// sign are refused; the round still completes with the honest messages.
TEST(SecAgg, TheServerRefusesImpossibleCountsAndUnsignedAnswers) {
  auto parties = MakeParties(5);
  Server server(7, 1, ServerOptions{.range = 1.0, .length = 4, .threshold = 3});
  for (auto& p : parties) ASSERT_TRUE(server.AddAdvert(*p.client->Start(7, 1)).ok());
  const secagg::Setup setup = Must(server.CloseAdverts(), "CloseAdverts");
  std::map<uint32_t, Client*> by_index;
  std::map<uint32_t, const crypto::KeyPair*> keys;
  for (auto& p : parties) {
    ASSERT_TRUE(server.AddShareKeys(*p.client->OnSetup(setup)).ok());
    by_index[p.client->index()] = p.client.get();
    keys[p.client->index()] = &p.keys;
  }
  const std::vector<SharesFor> deliveries = Must(server.CloseShareKeys(), "CloseShareKeys");
  for (const auto& d : deliveries) {
    MaskedInput m = Must(by_index[d.to]->OnShares(d, {1, 2, 3, 4}, 0), "OnShares");
    if (d.to == 0) {
      MaskedInput clipped = m;
      clipped.clipped = 5;
      auto c = server.AddMasked(clipped);
      ASSERT_FALSE(c.ok());
      EXPECT_NE(c.message().find("more clipped values"), std::string::npos) << c.ToString();
      MaskedInput rejected = m;
      rejected.rejected_shares = setup.degree + 1;
      auto r = server.AddMasked(rejected);
      ASSERT_FALSE(r.ok());
      EXPECT_NE(r.message().find("more rejected shares"), std::string::npos) << r.ToString();
    }
    ASSERT_TRUE(server.AddMasked(m).ok());
  }
  const UnmaskRequest request = Must(server.CloseMasked(), "CloseMasked");
  ASSERT_EQ(request.survivors.size(), 5u);
  // A signature on another set (as a client told something else would give) does not verify.
  const UnmaskRequest other{{0, 1, 2, 3}, {4}};
  auto wrong = server.AddCheck({1, crypto::Sign(CheckMessage(7, 1, other), keys[1]->sign_secret)});
  ASSERT_FALSE(wrong.ok());
  EXPECT_NE(wrong.message().find("does not verify"), std::string::npos) << wrong.ToString();
  std::vector<CheckSignature> sigs;
  for (uint32_t i = 0; i < 4; ++i) sigs.push_back(Must(by_index[i]->OnCheck(request), "OnCheck"));  // 4 does not sign
  for (const CheckSignature& sig : sigs) ASSERT_TRUE(server.AddCheck(sig).ok());
  EXPECT_FALSE(server.AddCheck(sigs[0]).ok()) << "the same signer twice (a replay)";
  const UnmaskProof proof = Must(server.CloseCheck(), "CloseCheck");
  EXPECT_EQ(proof.signers, (std::vector<uint32_t>{0, 1, 2, 3}));
  // Client 4 never signed: its unmask shares are refused even if it sends them.
  auto unsigned_reveal = by_index[4]->OnUnmask(proof);
  EXPECT_FALSE(unsigned_reveal.ok()) << "it is not at the Check stage's end";
  for (uint32_t i = 0; i < 4; ++i) ASSERT_TRUE(server.AddUnmask(Must(by_index[i]->OnUnmask(proof), "OnUnmask")).ok());
  EXPECT_FALSE(server.AddUnmask({4, {}}).ok()) << "unmask shares from a client that did not sign";
  auto result = server.Finish();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  for (uint32_t i = 0; i < 4; ++i) EXPECT_EQ(result->sum[i], 5 * (i + 1));
  EXPECT_EQ(result->signatures, 4u);
}

// One client's masked input, for an all-zero and for a structured plaintext: its bytes are
// uniform (chi-square, 255 degrees of freedom, below the 10^-6 critical value 377.2) and its
// words do not correlate with the plaintext (|r| < 5 / sqrt(n), p ~ 6e-7). The masks come from
// fresh keys (the OS's randomness), so the test cannot be seeded: its false-failure rate is
// about 4e-6 per run (three clients, two checks), where the 0.1% value once used gave 0.3%.
TEST(SecAgg, MaskedInputsAreUniformAndUncorrelatedWithThePlaintext) {
  auto parties = MakeParties(3);
  Server server(7, 1, ServerOptions{.range = 1.0, .length = 65536, .dropout = 0.0});
  for (auto& p : parties) ASSERT_TRUE(server.AddAdvert(*p.client->Start(7, 1)).ok());
  secagg::Setup setup = *server.CloseAdverts();
  for (auto& p : parties) ASSERT_TRUE(server.AddShareKeys(*p.client->OnSetup(setup)).ok());
  auto deliveries = *server.CloseShareKeys();
  for (const auto& d : deliveries) {
    std::vector<float> x(65536);
    for (size_t i = 0; i < x.size(); ++i) x[i] = d.to == 0 ? 0.0f : static_cast<float>(std::sin(i * 0.01));
    Client* c = nullptr;
    for (auto& p : parties)
      if (p.client->index() == d.to) c = p.client.get();
    std::vector<uint32_t> enc(x.size());
    EncodeFixed(FixedPoint(1.0, 3), x, enc);
    auto m = c->OnShares(d, enc, 0);
    ASSERT_TRUE(m.ok());
    std::array<double, 256> counts{};
    const uint8_t* bytes = reinterpret_cast<const uint8_t*>(m->masked.data());
    for (size_t i = 0; i < m->masked.size() * 4; ++i) ++counts[bytes[i]];
    const double expect = m->masked.size() * 4 / 256.0;
    double chi2 = 0;
    for (double k : counts) chi2 += (k - expect) * (k - expect) / expect;
    EXPECT_LT(chi2, 377.2) << "client " << d.to;
    if (d.to != 0) {
      double sx = 0, sy = 0, sxx = 0, syy = 0, sxy = 0;
      const double n = x.size();
      for (size_t i = 0; i < x.size(); ++i) {
        const double a = x[i], b = m->masked[i];
        sx += a; sy += b; sxx += a * a; syy += b * b; sxy += a * b;
      }
      const double r = (sxy - sx * sy / n) / std::sqrt((sxx - sx * sx / n) * (syy - sy * sy / n));
      EXPECT_LT(std::fabs(r), 5 / std::sqrt(n)) << "correlation " << r;
    }
  }
}

}  // namespace
}  // namespace shoal::privacy::secagg
