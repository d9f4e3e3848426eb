// Partial sums (ExactSum::Merge, Serialize, Deserialize: hierarchical aggregation): the sum
// of a tier's partial sums, merged directly or after the wire, has the bits of the flat sum of
// every update, whatever the grouping and order; the wire form refuses what is malformed.
#include <gtest/gtest.h>
#include <zstd.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "aggregate/exact_sum.h"
#include "aggregate/strategy.h"
#include "aggregate/wrappers/dp.h"

namespace shoal::aggregator {
namespace {

struct Term {
  std::vector<float> x;
  uint64_t w;
};

// Terms spanning 180 binary orders with cancellation (so coordinates reach the wide form),
// zeros, denormals and weights up to 2^40.
std::vector<Term> HardTerms(size_t n, size_t count, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> exponent(-90.0f, 90.0f);
  std::vector<Term> terms;
  for (size_t k = 0; k < count; ++k) {
    Term t{std::vector<float>(n), 1 + rng() % (uint64_t{1} << (k % 3 == 0 ? 40 : 10))};
    for (auto& v : t.x) {
      const uint64_t kind = rng() % 10;
      v = kind == 0 ? 0.0f : (kind == 1 ? std::numeric_limits<float>::denorm_min() * static_cast<float>(rng() % 7)
                                        : std::exp2(exponent(rng)));
      if (rng() & 1) v = -v;
    }
    terms.push_back(std::move(t));
  }
  for (size_t k = 0; k + 1 < count; k += 4) {  // exact cancellation of a huge term elsewhere
    terms[k + 1] = terms[k];
    for (auto& v : terms[k + 1].x) v = -v;
  }
  return terms;
}

void ExpectSameBits(const ExactSum& a, const ExactSum& b) {
  ASSERT_EQ(a.size(), b.size());
  EXPECT_EQ(a.count(), b.count());
  EXPECT_EQ(a.total_weight(), b.total_weight());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint64_t>(a.Value(i)), std::bit_cast<uint64_t>(b.Value(i))) << "coordinate " << i;
    ASSERT_EQ(a.Sign(i), b.Sign(i)) << "coordinate " << i;
  }
}

TEST(PartialSum, MergedGroupsGiveTheFlatSumsBitsDirectlyAndOverTheWire) {
  const size_t n = 301;
  const std::vector<Term> terms = HardTerms(n, 23, 5);
  ExactSum flat(n);
  for (const Term& t : terms) ASSERT_TRUE(flat.Add(t.x, t.w).ok());
  ASSERT_GT(flat.wide_coordinates(), 0u) << "the case must reach the wide form";

  std::mt19937_64 rng(9);
  for (int trial = 0; trial < 12; ++trial) {
    // Random groups: some empty, some of one update (the single form), in a random order.
    const size_t groups = 1 + rng() % 6;
    std::vector<ExactSum> parts(groups, ExactSum(n));
    std::vector<size_t> order(terms.size());
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    for (size_t k : order) ASSERT_TRUE(parts[rng() % groups].Add(terms[k].x, terms[k].w).ok());
    ExactSum direct(n), wire(n);
    for (const ExactSum& p : parts) {
      ASSERT_TRUE(direct.Merge(p).ok());
      auto back = ExactSum::Deserialize(p.Serialize(), n);
      ASSERT_TRUE(back.ok()) << back.status().ToString();
      ExpectSameBits(*back, p);
      ASSERT_TRUE(wire.Merge(*back).ok());
    }
    ExpectSameBits(direct, flat);
    ExpectSameBits(wire, flat);
  }
  // A partial sum goes into a sum that already holds updates, and takes updates after it.
  ExactSum mixed(n), rest(n);
  ASSERT_TRUE(mixed.Add(terms[0].x, terms[0].w).ok());
  for (size_t k = 1; k < 10; ++k) ASSERT_TRUE(rest.Add(terms[k].x, terms[k].w).ok());
  ASSERT_TRUE(mixed.Merge(rest).ok());
  for (size_t k = 10; k < terms.size(); ++k) ASSERT_TRUE(mixed.Add(terms[k].x, terms[k].w).ok());
  ExpectSameBits(mixed, flat);
}

TEST(PartialSum, AnEmptySumRoundTripsAndMergesAsNothing) {
  ExactSum empty(17), one(17);
  ASSERT_TRUE(one.Add(std::vector<float>(17, 1.5f), 3).ok());
  auto back = ExactSum::Deserialize(empty.Serialize(), 17);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->count(), 0u);
  ASSERT_TRUE(one.Merge(*back).ok());
  EXPECT_EQ(one.count(), 1u);
  EXPECT_EQ(one.Value(3), 4.5);
}

TEST(PartialSum, MergeRefusesAnotherLengthOrTooMuchWeightAndKeepsTheSum) {
  ExactSum a(4), b(5), heavy(4);
  ASSERT_TRUE(a.Add(std::vector<float>{1, 2, 3, 4}, 2).ok());
  ASSERT_TRUE(b.Add(std::vector<float>(5, 1.0f), 1).ok());
  EXPECT_EQ(a.Merge(b).code(), StatusCode::kInvalidArgument);
  for (int k = 0; k < (1 << 23) / 2 && heavy.total_weight() < (uint64_t{1} << 62); ++k)
    ASSERT_TRUE(heavy.Add(std::vector<float>(4, 1.0f), ExactSum::kMaxWeight).ok());
  ExactSum heavier = heavy;
  ASSERT_TRUE(heavier.Merge(heavy).ok());  // 2^63 exactly
  EXPECT_EQ(heavier.Merge(a).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(a.count(), 1u);
  EXPECT_EQ(a.Value(3), 8.0);
}

// The raw layout (exact_sum_wire.cc), compressed the way Serialize does.
std::vector<uint8_t> Pack(const std::vector<uint8_t>& raw) {
  std::vector<uint8_t> out(ZSTD_compressBound(raw.size()));
  out.resize(ZSTD_compress(out.data(), out.size(), raw.data(), raw.size(), 1));
  return out;
}
std::vector<uint8_t> Unpack(const std::vector<uint8_t>& packed) {
  std::vector<uint8_t> raw(ZSTD_getFrameContentSize(packed.data(), packed.size()));
  raw.resize(ZSTD_decompress(raw.data(), raw.size(), packed.data(), packed.size()));
  return raw;
}
template <typename T>
void PutAt(std::vector<uint8_t>& raw, size_t at, T v) {
  std::memcpy(raw.data() + at, &v, sizeof(T));
}

TEST(PartialSum, TheWireRefusesWhatIsMalformedWithTheReason) {
  ExactSum s(3);
  ASSERT_TRUE(s.Add(std::vector<float>{1.0f, -2.0f, 0.0f}, 5).ok());
  ASSERT_TRUE(s.Add(std::vector<float>{3.0f, 0.5f, 0.0f}, 7).ok());
  const std::vector<uint8_t> good = Unpack(s.Serialize());
  ASSERT_TRUE(ExactSum::Deserialize(Pack(good), 3).ok());
  auto refused = [](const std::vector<uint8_t>& raw, size_t n, const std::string& why) {
    auto r = ExactSum::Deserialize(Pack(raw), n);
    ASSERT_FALSE(r.ok()) << why;
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << why;
    EXPECT_NE(r.status().message().find(why), std::string::npos) << r.status().message();
  };
  refused(good, 4, "coordinates");  // wrong n
  std::vector<uint8_t> raw = good;
  raw[0] = 'X';
  refused(raw, 3, "magic");
  raw = good;
  PutAt<uint64_t>(raw, 12, 13);  // count above the weight (12)
  refused(raw, 3, "do not fit");
  raw = good;
  raw.push_back(0);
  refused(raw, 3, "trailing");
  raw = good;
  raw[36] = 0x90;  // a length of 16 with the sign: truncated
  refused(raw, 3, "coordinate 0");
  raw = good;
  raw.back() = 0xff;  // coordinate 2 (a zero, the last byte) marked wide, but no wide list
  refused(raw, 3, "wide");
  raw = good;
  raw.resize(raw.size() - 1);
  refused(raw, 3, "truncated");
  // A value beyond what its weight allows: exponent 150 at weight 12 (bound 2^(4 + 129)).
  raw = good;
  PutAt<int16_t>(raw, 37, 150);
  refused(raw, 3, "out of range");
  // Not zstd at all, and a zstd frame declaring more than any sum of 3 coordinates.
  EXPECT_EQ(ExactSum::Deserialize(good, 3).status().code(), StatusCode::kCorruption);
  EXPECT_EQ(ExactSum::Deserialize(Pack(std::vector<uint8_t>(ExactSum::MaxSerializedBytes(3) + 1)), 3).status().code(),
            StatusCode::kCorruption);
}

TEST(PartialSum, RandomDamageIsRefusedOrReadsAsAValidSum) {
  const std::vector<Term> terms = HardTerms(40, 8, 3);
  ExactSum s(40);
  for (const Term& t : terms) ASSERT_TRUE(s.Add(t.x, t.w).ok());
  const std::vector<uint8_t> good = Unpack(s.Serialize());
  std::mt19937_64 rng(1);
  int accepted = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    std::vector<uint8_t> raw = good;
    for (int k = 0; k < 1 + trial % 3; ++k) raw[rng() % raw.size()] ^= static_cast<uint8_t>(1 + rng() % 255);
    auto r = ExactSum::Deserialize(Pack(raw), 40);
    if (!r.ok()) continue;
    ++accepted;  // whatever it read must merge and read back without fault
    ExactSum sum = s;
    ASSERT_TRUE(sum.Merge(*r).ok() || r->total_weight() + s.total_weight() > ExactSum::kMaxTotalWeight);
    for (size_t i = 0; i < 40; ++i) (void)sum.Value(i);
  }
  EXPECT_LT(accepted, 3000);
}

}  // namespace
}  // namespace shoal::aggregator

namespace shoal::aggregator {
namespace {

// A round of `strategy` fed each update directly, and one fed the same updates as partial
// sums of two groups (what edge aggregators send): the same delta, bit for bit.
TEST(PartialSum, EveryWeightedMeanStrategyTakesPartialSumsAsTheirUpdates) {
  const size_t n = 97;
  const std::vector<Term> terms = HardTerms(n, 9, 17);
  for (const char* name : {"fedavg", "fedprox", "fedavgm", "fedadam", "fedyogi", "fedadagrad", "demo"}) {
    StrategyOptions o;
    o.name = name;
    auto direct = MakeStrategy(o), tiered = MakeStrategy(o);
    ASSERT_TRUE(direct.ok() && tiered.ok()) << name;
    const std::vector<float> global(n, 0.25f);
    // Small deltas (a server optimizer's state must stay finite): the hard terms scaled down.
    std::vector<std::vector<float>> deltas;
    for (const Term& t : terms) {
      std::vector<float> d(n);
      for (size_t i = 0; i < n; ++i) d[i] = std::ldexp(t.x[i], -80);
      deltas.push_back(std::move(d));
    }
    for (uint64_t round = 1; round <= 2; ++round) {  // twice: stateful strategies carry state across
      auto a = (*direct)->StartRound(round, global);
      auto b = (*tiered)->StartRound(round, global);
      ExactSum edge0(n), edge1(n);
      for (size_t k = 0; k < terms.size(); ++k) {
        const uint64_t w = 1 + terms[k].w % 1000;
        ASSERT_TRUE(a->Add({"c" + std::to_string(k), static_cast<uint32_t>(k + 1), w, deltas[k], 0}).ok());
        ASSERT_TRUE((k % 2 ? edge1 : edge0).Add(deltas[k], w).ok());
      }
      ASSERT_TRUE(b->AddPartialSum(*ExactSum::Deserialize(edge0.Serialize(), n)).ok()) << name;
      ASSERT_TRUE(b->AddPartialSum(edge1).ok()) << name;
      EXPECT_EQ(a->count(), b->count()) << name;
      auto da = a->Finish({}), db = b->Finish({});
      ASSERT_TRUE(da.ok() && db.ok() && da->has_value() && db->has_value()) << name;
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>((**da)[i]), std::bit_cast<uint32_t>((**db)[i])) << name << " " << i;
    }
  }
}

TEST(PartialSum, StrategiesThatNeedEachUpdateRefuseOne) {
  ExactSum sum(4);
  ASSERT_TRUE(sum.Add(std::vector<float>{1, 2, 3, 4}, 2).ok());
  const std::vector<float> global(4);
  for (const char* name : {"median", "trimmed_mean", "krum", "multi_krum", "centered_clip", "fedbuff"}) {
    StrategyOptions o;
    o.name = name;
    auto s = MakeStrategy(o);
    ASSERT_TRUE(s.ok()) << name;
    auto acc = (*s)->StartRound(1, global);
    const Status st = acc->AddPartialSum(sum);
    EXPECT_EQ(st.code(), StatusCode::kFailedPrecondition) << name;
    EXPECT_NE(st.message().find("weighted mean"), std::string::npos) << st.message();
    EXPECT_EQ(acc->count(), 0u);
  }
  DpOptions dp;
  dp.clip = 1.0;
  dp.noise_multiplier = 1.0;
  auto inner = MakeStrategy({});
  ASSERT_TRUE(inner.ok());
  auto wrapped = WrapWithDp(std::move(*inner), dp, 1.0, 10);
  ASSERT_TRUE(wrapped.ok()) << wrapped.status().ToString();
  EXPECT_EQ((*wrapped)->StartRound(1, global)->AddPartialSum(sum).code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace shoal::aggregator
