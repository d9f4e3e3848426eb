// Secure aggregation's messages (protocol/secagg.h): a real round's messages encode, verify and
// decode to the same typed values; wrong lengths and counts are refused; Welcome's privacy
// settings round-trip and are range-checked; masked words pack to 32 or 16 bits.
#include <gtest/gtest.h>

#include "crypto/keys.h"
#include "frame_helpers.h"
#include "protocol/messages.h"

namespace shoal::protocol {
namespace {

namespace sa = privacy::secagg;
constexpr Header kHeader{7, 3, 2, 11};

TEST(SecAggMessages, ARealRoundsMessagesRoundTrip) {
  std::vector<std::unique_ptr<sa::Client>> clients;
  sa::Server server(7, 3, sa::ServerOptions{.range = 2.0, .length = 5, .bits = 16, .dropout = 0.0});
  for (uint32_t id = 1; id <= 3; ++id) {
    auto keys = *crypto::GenerateKeyPair();
    clients.push_back(std::make_unique<sa::Client>(id, keys.sign_secret));
    auto advert = *clients.back()->Start(7, 3);
    auto back = DecodeAs<sa::AdvertiseKeys>(EncodeSecAggKeys(kHeader, advert), MessageKind::SecAggKeys);
    EXPECT_EQ(back.client_id, advert.client_id);
    EXPECT_EQ(back.identity, advert.identity);
    EXPECT_EQ(back.c_public, advert.c_public);
    EXPECT_EQ(back.s_public, advert.s_public);
    EXPECT_EQ(back.signature, advert.signature);
    ASSERT_TRUE(server.AddAdvert(back).ok()) << "the decoded advert still verifies";
  }
  const sa::Setup setup = *server.CloseAdverts();
  const auto s = DecodeAs<sa::Setup>(EncodeSecAggSetup(kHeader, setup), MessageKind::SecAggSetup);
  EXPECT_EQ(s.session, 7u);
  EXPECT_EQ(s.round, 3u);
  EXPECT_EQ(s.degree, setup.degree);
  EXPECT_EQ(s.threshold, setup.threshold);
  EXPECT_EQ(s.graph_seed, setup.graph_seed);
  EXPECT_EQ(s.range, 2.0);
  EXPECT_EQ(s.length, 5u);
  EXPECT_EQ(s.bits, 16u);
  ASSERT_EQ(s.roster.size(), 3u);
  for (auto& c : clients) {
    auto sk = *c->OnSetup(s);
    auto back = DecodeAs<sa::ShareKeys>(EncodeSecAggShareKeys(kHeader, sk), MessageKind::SecAggShareKeys);
    EXPECT_EQ(back.from, sk.from);
    EXPECT_EQ(back.self_mask_commitment, sk.self_mask_commitment);
    ASSERT_EQ(back.shares.size(), sk.shares.size());
    EXPECT_EQ(back.shares[0].sealed, sk.shares[0].sealed);
    ASSERT_TRUE(server.AddShareKeys(back).ok());
  }
  const std::vector<sa::SharesFor> deliveries = *server.CloseShareKeys();
  for (const auto& d : deliveries) {
    auto back = DecodeAs<sa::SharesFor>(EncodeSecAggShares(kHeader, d), MessageKind::SecAggShares);
    EXPECT_EQ(back.to, d.to);
    ASSERT_EQ(back.shares.size(), d.shares.size());
    sa::Client& c = *clients[setup.roster[d.to].client_id - 1];
    auto masked = *c.OnShares(back, {1, 2, 3, 4, 5}, 0);
    const auto bytes = PackMasked(masked.masked, 16);
    ASSERT_EQ(bytes.size(), 10u);
    const Frame f = EncodeSecAggMasked(kHeader, masked.from, 4, 99, SplitPayload(bytes, 1024).at(0), 2);
    auto chunk = DecodeAs<SecAggMaskedChunk>(f, MessageKind::SecAggMasked);
    EXPECT_EQ(chunk.from, masked.from);
    EXPECT_EQ(chunk.clipped, 4u);
    EXPECT_EQ(chunk.rejected_shares, 2u);
    EXPECT_EQ(chunk.num_examples, 99u);
    auto words = UnpackMasked(chunk.chunk.data, 16, 5);
    ASSERT_TRUE(words.ok());
    for (size_t i = 0; i < 5; ++i) EXPECT_EQ((*words)[i], masked.masked[i] & 0xffff);
    ASSERT_TRUE(server.AddMasked({masked.from, *words, 0}).ok());
  }
  const sa::UnmaskRequest request = *server.CloseMasked();
  auto r = DecodeAs<sa::UnmaskRequest>(EncodeSecAggUnmask(kHeader, request), MessageKind::SecAggUnmask);
  EXPECT_EQ(r.survivors, request.survivors);
  EXPECT_EQ(r.dropped, request.dropped);
  for (auto& c : clients) {
    auto sig = *c->OnCheck(r);
    auto back = DecodeAs<sa::CheckSignature>(EncodeSecAggCheckSignature(kHeader, sig), MessageKind::SecAggCheckSignature);
    EXPECT_EQ(back.from, sig.from);
    EXPECT_EQ(back.signature, sig.signature);
    ASSERT_TRUE(server.AddCheck(back).ok()) << "the decoded signature still verifies";
  }
  const sa::UnmaskProof proof = *server.CloseCheck();
  const auto p = DecodeAs<sa::UnmaskProof>(EncodeSecAggUnmaskProof(kHeader, proof), MessageKind::SecAggUnmaskProof);
  EXPECT_EQ(p.signers, proof.signers);
  EXPECT_EQ(p.signatures, proof.signatures);
  for (auto& c : clients) {
    auto reveal = *c->OnUnmask(p);
    auto back = DecodeAs<sa::UnmaskShares>(EncodeSecAggUnmaskShares(kHeader, reveal), MessageKind::SecAggUnmaskShares);
    ASSERT_EQ(back.shares.size(), reveal.shares.size());
    EXPECT_EQ(back.shares[0].y, reveal.shares[0].y);
    EXPECT_EQ(back.shares[0].mask_key, reveal.shares[0].mask_key);
    ASSERT_TRUE(server.AddUnmask(back).ok());
  }
  auto result = server.Finish();
  ASSERT_TRUE(result.ok()) << result.status().ToString();
  // 16-bit words on the wire: the masks cancel mod 2^16, leaving 3 x (1, 2, 3, 4, 5).
  for (uint32_t i = 0; i < 5; ++i) EXPECT_EQ(result->sum[i] & 0xffff, 3 * (i + 1)) << i;
}

TEST(SecAggMessages, WrongLengthsAndBitsAreRefused) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<uint8_t> short_key(31, 1), key(32, 1), sig(64, 2);
  auto k = wire::CreateSecAggKeys(fbb, 1, fbb.CreateVector(key), fbb.CreateVector(short_key), fbb.CreateVector(key),
                                  fbb.CreateVector(sig));
  EXPECT_TRUE(RefusedWith(Finish(fbb, kHeader, wire::Message::SecAggKeys, k.Union()), "c_public must be 32 bytes"));
  flatbuffers::FlatBufferBuilder fb2;
  auto setup = wire::CreateSecAggSetup(fb2, 2, 2, 9, 1.0, 5, fb2.CreateVector(std::vector<flatbuffers::Offset<wire::SecAggKeys>>{}), 8);
  EXPECT_TRUE(RefusedWith(Finish(fb2, kHeader, wire::Message::SecAggSetup, setup.Union()), "bits must be 16 or 32"));
  flatbuffers::FlatBufferBuilder fb3;
  std::vector<uint8_t> big(513, 0);
  std::vector<flatbuffers::Offset<wire::SecAggSealed>> sealed = {wire::CreateSecAggSealed(fb3, 0, 1, fb3.CreateVector(big))};
  auto shares = wire::CreateSecAggShares(fb3, 1, fb3.CreateVector(sealed));
  EXPECT_TRUE(RefusedWith(Finish(fb3, kHeader, wire::Message::SecAggShares, shares.Union()), "over 512 bytes"));
  flatbuffers::FlatBufferBuilder fb4;
  std::vector<uint8_t> y(63, 0);
  std::vector<flatbuffers::Offset<wire::SecAggRevealed>> rev = {wire::CreateSecAggRevealed(fb4, 0, false, fb4.CreateVector(y))};
  auto un = wire::CreateSecAggUnmaskShares(fb4, 0, fb4.CreateVector(rev));
  EXPECT_TRUE(RefusedWith(Finish(fb4, kHeader, wire::Message::SecAggUnmaskShares, un.Union()), "must be 64 bytes"));
  flatbuffers::FlatBufferBuilder fb5;
  auto masked = wire::CreateSecAggMasked(fb5, 0, 0, 1);
  EXPECT_TRUE(RefusedWith(Finish(fb5, kHeader, wire::Message::SecAggMasked, masked.Union()), "no payload"));
  EXPECT_FALSE(UnpackMasked(std::vector<uint8_t>(9, 0), 16, 5).ok());
  flatbuffers::FlatBufferBuilder fb6;
  std::vector<uint32_t> signers = {0, 1};
  auto proof = wire::CreateSecAggUnmaskProof(fb6, fb6.CreateVector(signers), fb6.CreateVector(std::vector<uint8_t>(127, 0)));
  EXPECT_TRUE(RefusedWith(Finish(fb6, kHeader, wire::Message::SecAggUnmaskProof, proof.Union()), "64 each"));
  flatbuffers::FlatBufferBuilder fb7;
  auto csig = wire::CreateSecAggCheckSignature(fb7, 0, fb7.CreateVector(std::vector<uint8_t>(63, 0)));
  EXPECT_TRUE(RefusedWith(Finish(fb7, kHeader, wire::Message::SecAggCheckSignature, csig.Union()), "64 bytes"));
}

TEST(SecAggMessages, WelcomePrivacyRoundTripsAndIsChecked) {
  WelcomeInfo w;
  w.client_id = 4;
  w.task.model = "mlp:8";
  w.task.layout = {{"fc0.weight", {64, 8}}};
  w.task.dataset = "digits";
  w.task.codec = w.task.codec_down = "none";
  w.privacy = {true, 0.5, 16, 1.5, 0.8};
  auto back = DecodeAs<WelcomeInfo>(EncodeWelcome(kHeader, w), MessageKind::Welcome);
  EXPECT_EQ(back.privacy, w.privacy);
  w.privacy = {};
  EXPECT_EQ(DecodeAs<WelcomeInfo>(EncodeWelcome(kHeader, w), MessageKind::Welcome).privacy, PrivacyConfig{});
  w.privacy = {true, 0.0, 32, 0, 0};
  EXPECT_TRUE(RefusedWith(EncodeWelcome(kHeader, w), "positive range"));
  w.privacy = {false, 0.0, 32, 1.0, 1.0};
  EXPECT_TRUE(RefusedWith(EncodeWelcome(kHeader, w), "distributed DP"));
}

}  // namespace
}  // namespace shoal::protocol
