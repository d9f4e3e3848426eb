// The update stages: the client's encode and the server's decode + validate give back what the
// codec alone gives, and a refused update names the stage and the refusal.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "codec/codec.h"
#include "codec/round_context.h"
#include "runtime/update.h"

namespace shoal::runtime {
namespace {

std::vector<TensorSpec> Layout() { return {{"w", {16, 8}}, {"b", {8}}}; }

Update MakeUpdate(size_t n) {
  Update u;
  u.author = "alice";
  u.round = 3;
  u.num_examples = 10;
  u.delta.resize(n);
  for (size_t i = 0; i < n; ++i) u.delta[i] = std::sin(static_cast<float>(i)) * 0.01f;
  return u;
}

TEST(UpdatePipeline, EncodeThenDecodeGivesWhatTheCodecGives) {
  auto enc = codec::Codec::Create("int8", Layout()).value();
  auto dec = codec::Codec::Create("int8", Layout()).value();
  auto ref = codec::Codec::Create("int8", Layout()).value();
  const size_t n = 136;
  UpdatePipeline client, server;
  client.Add(EncodeStage(enc.get(), 42));
  server.Add(DecodeStage(dec.get(), 42, n)).Add(ValidateStage(10.0));
  Update u = MakeUpdate(n);
  const std::vector<float> original = u.delta;
  ASSERT_FALSE(client.Run(u));
  EXPECT_GT(u.report.encode_seconds, 0.0);
  // The same payload the codec makes with this round's context and the author's private seed.
  auto expected = ref->Encode(original, codec::MakeRoundContext(42, 3, codec::NameSeed("alice"))).value();
  EXPECT_EQ(u.payload, expected);
  Update got;
  got.round = 3;
  got.payload = u.payload;
  ASSERT_FALSE(server.Run(got));
  std::vector<float> want(n);
  ASSERT_TRUE(ref->Decode(expected, codec::MakeRoundContext(42, 3, 0), want).ok());
  EXPECT_EQ(got.delta, want);
  for (size_t i = 0; i < n; ++i) EXPECT_NEAR(got.delta[i], original[i], 0.01f / 127 + 1e-6f);
}

TEST(UpdatePipeline, RefusalsNameTheStage) {
  auto dec = codec::Codec::Create("none", Layout()).value();
  UpdatePipeline server;
  server.Add(DecodeStage(dec.get(), 1, 136)).Add(ValidateStage(1.0));

  Update truncated;
  truncated.payload = {1, 2, 3};
  auto f = server.Run(truncated);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->refusal, Refusal::kShapeMismatch);
  EXPECT_EQ(f->status.message().rfind("decode: ", 0), 0u) << f->status.message();

  std::vector<float> big(136, 1.0f);  // norm sqrt(136) > 1
  Update huge;
  huge.payload.assign(reinterpret_cast<const uint8_t*>(big.data()), reinterpret_cast<const uint8_t*>(big.data() + 136));
  f = server.Run(huge);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->refusal, Refusal::kTooLarge);
  EXPECT_NE(f->status.message().find("exceeds --max-update-norm"), std::string::npos) << f->status.message();

  big.assign(136, 0.0f);
  big[7] = std::numeric_limits<float>::infinity();
  UpdatePipeline validate_only;
  validate_only.Add(ValidateStage(0.0));
  Update inf;
  inf.delta = big;
  f = validate_only.Run(inf);
  ASSERT_TRUE(f);
  EXPECT_EQ(f->refusal, Refusal::kShapeMismatch);
  EXPECT_NE(f->status.message().find("value 7 is not finite"), std::string::npos) << f->status.message();

  big[7] = 0.5f;
  inf.delta = big;
  EXPECT_FALSE(validate_only.Run(inf));  // no bound when max_norm is 0
}

}  // namespace
}  // namespace shoal::runtime
