// The ring all-reduce (sdk/src/runtime/peer/ring_allreduce.h), N members wired together in
// process: every member ends with the same bits, equal to a naive sum (exactly, for integer
// values; to float rounding, for random ones); quantized hops stay within the int8 bound and
// still agree bit for bit; pipelined pieces in any delivery order give the unpipelined bits;
// hops or pieces out of order or carrying the wrong segment are refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <deque>
#include <memory>

#include "core/rng.h"
#include "runtime/peer/exchange.h"
#include "runtime/peer/ring_allreduce.h"

namespace shoal::peer {
namespace {

struct Ring {
  std::vector<std::unique_ptr<SegmentCodec>> codecs;
  std::vector<std::unique_ptr<RingAllReduce>> members;
};

// Runs a ring of inputs.size() members to completion, each link first in, first out (member
// m's queue holds what m - 1 sent, in order). The order in which links deliver is drawn from
// `schedule_seed` (0: member by member, draining each queue), so that pieces of different
// hops interleave differently.
Ring RunRing(const std::vector<std::vector<float>>& inputs, const std::vector<double>& weights, const std::string& spec,
             size_t piece_values = size_t{1} << 16, uint64_t schedule_seed = 0) {
  const size_t n = inputs.size();
  Ring ring;
  std::vector<std::deque<RingHop>> queue(n);
  for (size_t m = 0; m < n; ++m) {
    auto c = SegmentCodec::Create(spec);
    EXPECT_TRUE(c.ok()) << c.status().message();
    ring.codecs.push_back(std::move(*c));
    ring.members.push_back(std::make_unique<RingAllReduce>(n, m, inputs[m], weights[m], weights[m] * (m + 1.0),
                                                           ring.codecs.back().get(), piece_values));
  }
  for (size_t m = 0; m < n; ++m) {
    auto first = ring.members[m]->Start();
    EXPECT_TRUE(first.ok());
    for (auto& piece : *first) queue[(m + 1) % n].push_back(std::move(piece));
  }
  Rng rng(schedule_seed, 1);
  auto deliver = [&](size_t m) {
    auto out = ring.members[m]->Receive(std::move(queue[m].front()));
    EXPECT_TRUE(out.ok()) << out.status().message();
    queue[m].pop_front();
    if (out.ok() && *out) queue[(m + 1) % n].push_back(std::move(**out));
  };
  for (bool moved = true; moved;) {
    moved = false;
    if (schedule_seed) {
      std::vector<size_t> ready;
      for (size_t m = 0; m < n; ++m)
        if (!queue[m].empty()) ready.push_back(m);
      if (!ready.empty()) deliver(ready[rng.Below(ready.size())]), moved = true;
      continue;
    }
    for (size_t m = 0; m < n; ++m)
      while (!queue[m].empty()) deliver(m), moved = true;
  }
  for (size_t m = 0; m < n; ++m) EXPECT_TRUE(ring.members[m]->done()) << "member " << m;
  return ring;
}

std::vector<float> Random(uint64_t seed, size_t n) {
  Rng rng(seed, 0);
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(rng.Normal());
  return v;
}

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

TEST(RingAllReduce, IntegerValuesSumExactlyForEveryRingSizeAndLength) {
  for (size_t members : {1u, 2u, 3u, 4u, 7u})
    for (size_t n : {0u, 1u, 3u, 10u, 1001u}) {
      std::vector<std::vector<float>> in(members, std::vector<float>(n));
      std::vector<float> naive(n, 0.0f);
      std::vector<double> weights;
      for (size_t m = 0; m < members; ++m) {
        for (size_t i = 0; i < n; ++i) naive[i] += in[m][i] = static_cast<float>(static_cast<int>((m * 131 + i * 7) % 97) - 48);
        weights.push_back(static_cast<double>(m + 2));
      }
      const Ring ring = RunRing(in, weights, "none");
      double w = 0, loss = 0;
      for (size_t m = 0; m < members; ++m) w += weights[m], loss += weights[m] * (m + 1.0);
      for (const auto& r : ring.members) {
        EXPECT_TRUE(SameBits(r->sum(), naive)) << members << " members, " << n << " values";
        EXPECT_EQ(r->weight(), w);
        EXPECT_EQ(r->loss(), loss);
      }
    }
}

TEST(RingAllReduce, RandomValuesMatchANaiveSumAndEveryMemberHasTheSameBits) {
  const size_t members = 5, n = 4099;
  std::vector<std::vector<float>> in;
  for (size_t m = 0; m < members; ++m) in.push_back(Random(m + 1, n));
  const Ring ring = RunRing(in, std::vector<double>(members, 1.0), "none");
  for (size_t i = 0; i < n; ++i) {
    double naive = 0;
    for (size_t m = 0; m < members; ++m) naive += in[m][i];
    ASSERT_NEAR(ring.members[0]->sum()[i], naive, 1e-5 * (1 + std::fabs(naive))) << i;
  }
  for (const auto& r : ring.members) EXPECT_TRUE(SameBits(r->sum(), ring.members[0]->sum()));
}

// int8 per hop: each reduce-scatter hop quantizes a partial sum (error <= scale / 2 each, the
// scale being the chunk's absmax / 127), and the owner's final encoding once more; the
// replicas still agree bit for bit.
TEST(RingAllReduce, Int8HopsStayWithinTheQuantizationBoundAndAgree) {
  const size_t members = 4, n = 2048;
  std::vector<std::vector<float>> in;
  for (size_t m = 0; m < members; ++m) in.push_back(Random(10 + m, n));
  const Ring ring = RunRing(in, std::vector<double>(members, 1.0), "int8");
  double err2 = 0, ref2 = 0, worst = 0;
  for (size_t i = 0; i < n; ++i) {
    double naive = 0;
    for (size_t m = 0; m < members; ++m) naive += in[m][i];
    const double e = ring.members[0]->sum()[i] - naive;
    err2 += e * e, ref2 += naive * naive, worst = std::max(worst, std::fabs(e));
  }
  // |values| < ~5 sigma; partial sums of up to 4 members < ~20: members quantizations of
  // scale <= 20 / 127 / 2 each bound the error by ~0.32; in practice far less.
  EXPECT_LT(worst, 0.32);
  EXPECT_LT(err2 / ref2, 1e-3) << "NMSE";
  EXPECT_GT(err2, 0.0) << "int8 hops are lossy: an exact result would mean they were not quantized";
  for (const auto& r : ring.members) EXPECT_TRUE(SameBits(r->sum(), ring.members[0]->sum()));
}

// Pieces of any size, delivered in any order a ring allows, give the unpipelined ring's bits
// (one piece per segment): for the exact and element-wise codecs at any piece size, for int8
// when its chunks divide the piece.
TEST(RingAllReduce, PipelinedPiecesGiveTheUnpipelinedRingsBits) {
  struct Case {
    const char* spec;
    size_t piece;
  };
  for (const Case& c : {Case{"none", 7}, Case{"none", 64}, Case{"bf16", 5}, Case{"fp16", 33}, Case{"int8:chunk=8", 64},
                        Case{"int8:chunk=8", 8}}) {
    for (size_t members : {2u, 3u, 5u}) {
      const size_t n = 1001;
      std::vector<std::vector<float>> in;
      for (size_t m = 0; m < members; ++m) in.push_back(Random(100 + m, n));
      const std::vector<double> weights(members, 1.0);
      const Ring whole = RunRing(in, weights, c.spec, n);
      for (uint64_t schedule : {0u, 1u, 2u, 3u}) {
        const Ring pieces = RunRing(in, weights, c.spec, c.piece, schedule);
        for (size_t m = 0; m < members; ++m) {
          EXPECT_TRUE(SameBits(pieces.members[m]->sum(), whole.members[m]->sum()))
              << c.spec << " piece " << c.piece << ", " << members << " members, schedule " << schedule;
          EXPECT_EQ(pieces.members[m]->weight(), whole.members[m]->weight());
          EXPECT_EQ(pieces.members[m]->loss(), whole.members[m]->loss());
        }
      }
    }
  }
}

TEST(RingAllReduce, HopsOutOfOrderOrWithTheWrongSegmentAreRefused) {
  auto codec = SegmentCodec::Create("none");
  ASSERT_TRUE(codec.ok());
  RingAllReduce r(3, 1, std::vector<float>(9, 1.0f), 1.0, 0.0, codec->get(), 2);
  ASSERT_TRUE(r.Start().ok());
  // Segments of 3 values travel in pieces of 2 and 1.
  const std::vector<float> two(2, 2.0f);
  auto payload = (*codec)->Encode(two);
  ASSERT_TRUE(payload.ok());
  // Member 1 expects reduce-scatter hop 0 carrying member 0's segment 0, from 1 contributor,
  // piece 0 first.
  RingHop hop{.phase = 0, .hop = 0, .segment = 0, .contributors = 1, .weight = 1.0, .loss = 0.0, .payload = *payload};
  // Each change of the right piece makes it one the member refuses.
  auto refused = [&](auto change) {
    RingHop wrong = hop;
    change(wrong);
    return !r.Receive(std::move(wrong)).ok();
  };
  EXPECT_TRUE(refused([](RingHop& h) { h.hop = 1; }));
  EXPECT_TRUE(refused([](RingHop& h) { h.segment = 2; }));
  EXPECT_TRUE(refused([](RingHop& h) { h.contributors = 2; }));
  EXPECT_TRUE(refused([](RingHop& h) {
    const auto b = h.payload.bytes();
    h.payload = std::vector<uint8_t>(b.begin(), b.end() - 1);
  })) << "a truncated payload";
  EXPECT_TRUE(refused([](RingHop& h) { h.piece = 1; })) << "piece 1 before piece 0";
  EXPECT_TRUE(refused([](RingHop& h) { h.phase = 2; }));
  EXPECT_TRUE(refused([](RingHop& h) { h.hop = 7; }));
  EXPECT_TRUE(r.Next(0, 0, 0));
  EXPECT_FALSE(r.Next(0, 0, 1));
  auto next = r.Receive(hop);
  ASSERT_TRUE(next.ok()) << next.status().message();
  ASSERT_TRUE(next->has_value());
  EXPECT_EQ((*next)->segment, 0u);
  EXPECT_EQ((*next)->contributors, 2u);
  EXPECT_EQ((*next)->weight, 2.0);
}

TEST(RingAllReduce, OnlyDenseCodecsCarryPartialSums) {
  EXPECT_TRUE(SegmentCodec::Create("none").ok());
  EXPECT_TRUE(SegmentCodec::Create("bf16").ok());
  EXPECT_TRUE(SegmentCodec::Create("int8:chunk=64").ok());
  EXPECT_EQ(SegmentCodec::Create("ef|topk:ratio=0.01|int8").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SegmentCodec::Create("ef|sign").status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(SegmentCodec::Create("bogus").status().code(), StatusCode::kInvalidArgument);
}

TEST(RingAllReduce, RingModesAreExchangesThatFinishOnTheRing) {
  const std::vector<TensorSpec> layout = {{"p", {8}}};
  protocol::SwarmInfo s;
  s.task.optimizer.name = "adamw";
  s.task.optimizer.learning_rate = 0.01f;
  s.mode = "allreduce";
  auto x = MakeExchange(s, layout);
  ASSERT_TRUE(x.ok()) << x.status().message();
  EXPECT_EQ((*x)->finish(), Exchange::Finish::kRing);
  s.mode = "diloco";
  EXPECT_EQ((*MakeExchange(s, layout))->finish(), Exchange::Finish::kLeaderCommits);
  s.params = {{"diloco_allreduce", 1}};
  EXPECT_EQ((*MakeExchange(s, layout))->finish(), Exchange::Finish::kRing);
  s.mode = "allreduce";
  s.task.optimizer.name = "demo";
  EXPECT_EQ(MakeExchange(s, layout).status().code(), StatusCode::kInvalidArgument) << "DeMo cannot be summed densely";
}

}  // namespace
}  // namespace shoal::peer
