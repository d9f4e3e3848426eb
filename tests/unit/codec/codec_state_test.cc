// Codec::SaveState / LoadState: an encoder restored from a checkpoint continues with the same
// payloads as one that never stopped (error-feedback residual, PowerSGD's Q), and a blob of
// another pipeline or a damaged one is refused with the state unchanged.
#include <gtest/gtest.h>

#include "codec/codec.h"
#include "core/rng.h"

namespace shoal::codec {
namespace {

const std::vector<TensorSpec> kLayout = {{"w", {12, 20}}, {"b", {20}}, {"v", {7, 9}}};

std::vector<float> Update(uint64_t round) {
  Rng rng(round);
  std::vector<float> u(LayoutSize(kLayout));
  for (float& v : u) v = static_cast<float>(rng.Normal());
  return u;
}

RoundContext Ctx(uint64_t round) {
  RoundContext c;
  c.round = round;
  c.shared_seed = 100 + round;
  c.private_seed = 7;
  return c;
}

TEST(CodecState, ARestoredEncoderContinuesBitIdentically) {
  for (const char* spec : {"ef|topk:ratio=0.1|int8", "ef|powersgd:rank=2", "powersgd:rank=3|bf16", "ef|sign", "int8"}) {
    auto whole = Codec::Create(spec, kLayout), first = Codec::Create(spec, kLayout), resumed = Codec::Create(spec, kLayout);
    ASSERT_TRUE(whole.ok() && first.ok() && resumed.ok()) << spec;
    std::vector<std::vector<uint8_t>> expected;
    for (uint64_t r = 1; r <= 6; ++r) expected.push_back(*(*whole)->Encode(Update(r), Ctx(r)));
    for (uint64_t r = 1; r <= 3; ++r) ASSERT_TRUE((*first)->Encode(Update(r), Ctx(r)).ok());
    ASSERT_TRUE((*resumed)->LoadState((*first)->SaveState()).ok()) << spec;
    for (uint64_t r = 4; r <= 6; ++r) EXPECT_EQ(*(*resumed)->Encode(Update(r), Ctx(r)), expected[r - 1]) << spec << " " << r;
  }
}

TEST(CodecState, RefusesAnotherPipelinesOrADamagedState) {
  auto ef = Codec::Create("ef|topk:ratio=0.1|int8", kLayout), plain = Codec::Create("topk:ratio=0.1|int8", kLayout),
       psgd = Codec::Create("powersgd:rank=2", kLayout);
  ASSERT_TRUE((*ef)->Encode(Update(1), Ctx(1)).ok());
  ASSERT_TRUE((*psgd)->Encode(Update(1), Ctx(1)).ok());
  const auto ef_state = (*ef)->SaveState(), psgd_state = (*psgd)->SaveState();
  EXPECT_EQ((*plain)->LoadState(ef_state).code(), StatusCode::kCorruption);   // a residual it has no place for
  EXPECT_EQ((*ef)->LoadState((*plain)->SaveState()).code(), StatusCode::kCorruption);
  EXPECT_EQ((*plain)->LoadState(psgd_state).code(), StatusCode::kCorruption);  // transform state without a transform
  for (size_t cut : {size_t{0}, size_t{1}, ef_state.size() / 2, ef_state.size() - 1}) {
    std::vector<uint8_t> damaged(ef_state.begin(), ef_state.begin() + static_cast<std::ptrdiff_t>(cut));
    const auto before = std::vector<float>((*ef)->residual().begin(), (*ef)->residual().end());
    EXPECT_FALSE((*ef)->LoadState(damaged).ok()) << cut;
    EXPECT_EQ(std::vector<float>((*ef)->residual().begin(), (*ef)->residual().end()), before) << cut;
  }
  auto extra = psgd_state;
  extra.push_back(0);
  EXPECT_FALSE((*psgd)->LoadState(extra).ok());
  auto bad = psgd_state;
  bad[bad.size() - 1 - 4 * 2 * 9] ^= 0x7f;  // somewhere in the last tensor's header or Q
  (void)(*psgd)->LoadState(bad);            // may load (a float changed) or refuse; never crash
}

}  // namespace
}  // namespace shoal::codec
