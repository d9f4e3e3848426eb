// Peer messages: every one encodes (protocol/peer.h), passes VerifyFrame and decodes
// (DecodeMessage) to the same typed value; each malformed field is refused with its reason;
// and what an update's signature binds.
#include <gtest/gtest.h>

#include <functional>

#include <cmath>
#include <limits>

#include "crypto/keys.h"
#include "frame_helpers.h"
#include "protocol/messages.h"

namespace shoal::protocol {
namespace {

PeerInfo Alice() {
  PeerInfo p;
  p.name = "alice";
  p.endpoint = "tcp://10.0.0.1:7101";
  p.curve_key = std::string(40, 'a');
  for (size_t i = 0; i < p.sign_key.size(); ++i) p.sign_key[i] = static_cast<uint8_t>(i);
  return p;
}

SwarmInfo Swarm() {
  SwarmInfo s;
  s.task.model = "mlp:32";
  s.task.layout = {{"fc0.weight", {64, 10}}, {"fc0.bias", {10}}};
  s.task.dataset = "digits";
  s.mode = "diloco";
  s.members = {Alice()};
  s.step_timeout_ms = 3000;
  s.heartbeat_interval_ms = 100;
  s.heartbeat_timeout_ms = 900;
  s.chunk_bytes = 4096;
  s.params = {{"diloco_inner_steps", 30}, {"outer_lr", 0.7}};
  s.steps = 99;
  return s;
}

crypto::Signature SomeSignature() {
  crypto::Signature sig{};
  for (size_t i = 0; i < sig.size(); ++i) sig[i] = static_cast<uint8_t>(3 * i + 1);
  return sig;
}

const std::string kHash(64, 'f');
const std::vector<uint8_t> kPayload = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13};

Frame Update(const std::string& author, const std::string& base, uint64_t n, double loss) {
  return EncodePeerUpdate({7, 4, 0, 9}, author, base, n, loss, SplitPayload(kPayload, 5).at(1), SomeSignature());
}

TEST(PeerMessages, JoinAndMembersRoundTrip) {
  auto m = Decode(EncodeJoin({7, 2, 0, 1}, Alice(), true)).value();
  EXPECT_EQ(m.kind, MessageKind::Join);
  EXPECT_EQ(m.header.session, 7u);
  EXPECT_EQ(m.header.round, 2u);
  EXPECT_EQ(m.header.sequence, 1u);
  EXPECT_EQ(std::get<Join>(m.body).self, Alice());
  EXPECT_TRUE(std::get<Join>(m.body).want_members);
  EXPECT_FALSE(DecodeAs<Join>(EncodeJoin({}, Alice(), false), MessageKind::Join).want_members);

  const SwarmInfo members = DecodeAs<SwarmInfo>(EncodeMembers({7, 0, 0, 2}, Swarm()), MessageKind::Members);
  EXPECT_EQ(members, Swarm());
  EXPECT_EQ(members.Param("diloco_inner_steps", 0), 30);
  EXPECT_EQ(members.Param("absent", 5), 5);
}

TEST(PeerMessages, UpdateCommitStateAndFetchRoundTrip) {
  const std::string base(64, 'b');
  const Frame update_frame = Update("alice", base, 32, 0.25);  // the chunk points into it
  const auto u = DecodeAs<PeerUpdate>(update_frame, MessageKind::PeerUpdate);
  EXPECT_EQ(u.author, "alice");
  EXPECT_EQ(u.base_hash, base);
  EXPECT_EQ(u.num_examples, 32u);
  EXPECT_EQ(u.loss, 0.25);
  EXPECT_EQ(u.signature, SomeSignature());
  ASSERT_TRUE(u.chunk.present);
  EXPECT_EQ(u.chunk.index, 1u);
  EXPECT_EQ(u.chunk.count, 3u);
  EXPECT_EQ(u.chunk.offset, 5u);
  EXPECT_EQ(u.chunk.total_bytes, kPayload.size());
  EXPECT_EQ(std::vector<uint8_t>(u.chunk.data.begin(), u.chunk.data.end()), std::vector<uint8_t>(kPayload.begin() + 5, kPayload.begin() + 10));

  const std::string other(64, 'e');
  const auto c = DecodeAs<Commit>(EncodeCommit({7, 3, 0, 3}, {"alice", "bob"}, {kHash, other}, base), MessageKind::Commit);
  EXPECT_EQ(c.entries, (std::vector<std::pair<std::string, std::string>>{{"alice", kHash}, {"bob", other}}));
  EXPECT_EQ(c.model_hash, base);
  // A step the leader committed with no update at all.
  EXPECT_TRUE(DecodeAs<Commit>(EncodeCommit({}, {}, {}, base), MessageKind::Commit).entries.empty());

  EXPECT_EQ(DecodeAs<StateRequest>(EncodeStateRequest({}, "joining"), MessageKind::StateRequest).reason, "joining");
  // The encoder cuts a reason the decoder would refuse.
  EXPECT_EQ(DecodeAs<StateRequest>(EncodeStateRequest({}, std::string(5000, 'r')), MessageKind::StateRequest).reason,
            std::string(kMaxStringBytes, 'r'));

  const Frame state_frame = EncodeState({7, 3, 0, 4}, kHash, other, SplitPayload(kPayload, 1 << 20).at(0));
  const auto s = DecodeAs<State>(state_frame, MessageKind::State);
  EXPECT_EQ(s.model_hash, kHash);
  EXPECT_EQ(s.state_hash, other);
  ASSERT_TRUE(s.chunk.present);
  EXPECT_EQ(std::vector<uint8_t>(s.chunk.data.begin(), s.chunk.data.end()), kPayload);

  EXPECT_EQ(DecodeAs<UpdateFetch>(EncodeUpdateFetch({}, "bob"), MessageKind::UpdateFetch).author, "bob");
}

TEST(PeerMessages, RingSegmentRoundTripAndRefusals) {
  RingSegment r{.ring_hash = kHash, .attempt = 2, .phase = 1, .hop = 3, .segment = 4, .contributors = 5,
                .weight = 96.0, .loss = 12.5, .chunk = {}};
  for (size_t i = 0; i < r.signature.size(); ++i) r.signature[i] = static_cast<uint8_t>(3 * i + 1);
  const Frame f = EncodeRingSegment({7, 9, 0, 1}, r, SplitPayload(kPayload, 1 << 20).at(0));
  const auto d = DecodeAs<RingSegment>(f, MessageKind::RingSegment);
  EXPECT_EQ(d.ring_hash, kHash);
  EXPECT_EQ(d.attempt, 2u);
  EXPECT_EQ(d.phase, 1);
  EXPECT_EQ(d.hop, 3u);
  EXPECT_EQ(d.segment, 4u);
  EXPECT_EQ(d.contributors, 5u);
  EXPECT_EQ(d.weight, 96.0);
  EXPECT_EQ(d.loss, 12.5);
  EXPECT_EQ(d.signature, r.signature);
  ASSERT_TRUE(d.chunk.present);
  EXPECT_EQ(std::vector<uint8_t>(d.chunk.data.begin(), d.chunk.data.end()), kPayload);

  const auto refused = [&](RingSegment bad, const std::string& why) {
    return RefusedWith(EncodeRingSegment({}, bad, SplitPayload(kPayload, 1 << 20).at(0)), why);
  };
  RingSegment bad = r;
  bad.ring_hash = "short";
  EXPECT_TRUE(refused(bad, "ring hash"));
  bad = r, bad.phase = 2;
  EXPECT_TRUE(refused(bad, "phase 2"));
  bad = r, bad.hop = kMaxMembers;
  EXPECT_TRUE(refused(bad, "member limit"));
  bad = r, bad.contributors = 0;
  EXPECT_TRUE(refused(bad, "member limit"));
  bad = r, bad.weight = -1.0;
  EXPECT_TRUE(refused(bad, "weight"));
  bad = r, bad.loss = std::nan("");
  EXPECT_TRUE(refused(bad, "weight or loss"));
}

TEST(PeerMessages, MalformedMembersAreRefused) {
  PeerInfo bad = Alice();
  bad.name = "has space";
  EXPECT_TRUE(RefusedWith(EncodeJoin({}, bad, false), "member name must be 1-64 printable characters"));
  bad.name = std::string(kMaxPeerName + 1, 'n');
  EXPECT_TRUE(RefusedWith(EncodeJoin({}, bad, false), "member name must be 1-64 printable characters"));
  bad.name = "";
  EXPECT_TRUE(RefusedWith(EncodeJoin({}, bad, false), "member name must be 1-64 printable characters"));
  bad = Alice();
  bad.endpoint = "inproc://x";
  EXPECT_TRUE(RefusedWith(EncodeJoin({}, bad, false), "member endpoint 'inproc://x' is not tcp:// or ipc://"));
  bad.endpoint = "tcp://" + std::string(kMaxStringBytes, 'h');
  EXPECT_TRUE(RefusedWith(EncodeJoin({}, bad, false), "member endpoint is longer than 4096 bytes"));
  bad = Alice();
  bad.curve_key = "short";
  EXPECT_TRUE(RefusedWith(EncodeJoin({}, bad, false), "member curve key is not 40 Z85 characters"));

  // What the encoders cannot write: no member description, a short signing key.
  flatbuffers::FlatBufferBuilder fbb;
  EXPECT_TRUE(RefusedWith(Finish(fbb, {}, MessageKind::Join, wire::CreateJoin(fbb, 0, true).Union()),
                          "member description is missing"));
  fbb.Clear();
  const std::vector<uint8_t> short_key(31, 1);
  auto info = wire::CreatePeerInfoDirect(fbb, "alice", "tcp://10.0.0.1:7101", "", &short_key);
  EXPECT_TRUE(RefusedWith(Finish(fbb, {}, MessageKind::Join, wire::CreateJoin(fbb, info).Union()),
                          "member signing key must be 32 bytes"));
}

TEST(PeerMessages, MalformedSwarmsAreRefused) {
  SwarmInfo s = Swarm();
  s.mode = "telepathy";
  EXPECT_TRUE(RefusedWith(EncodeMembers({}, s), "unknown swarm mode 'telepathy'"));
  s = Swarm();
  s.members.clear();
  EXPECT_TRUE(RefusedWith(EncodeMembers({}, s), "member list must hold 1-4096 members"));
  s = Swarm();
  s.members[0].name = "a b";
  EXPECT_TRUE(RefusedWith(EncodeMembers({}, s), "member name must be 1-64 printable characters"));
  s = Swarm();
  s.heartbeat_timeout_ms = s.heartbeat_interval_ms;
  EXPECT_TRUE(RefusedWith(EncodeMembers({}, s), "swarm timing or chunk settings are inconsistent"));
  s = Swarm();
  s.chunk_bytes = 1023;
  EXPECT_TRUE(RefusedWith(EncodeMembers({}, s), "swarm timing or chunk settings are inconsistent"));
  s = Swarm();
  s.params.assign(kMaxSwarmParams + 1, {"p", 1.0});
  EXPECT_TRUE(RefusedWith(EncodeMembers({}, s), "too many swarm parameters"));
  s = Swarm();
  s.params = {{"outer_lr", std::numeric_limits<double>::quiet_NaN()}};
  EXPECT_TRUE(RefusedWith(EncodeMembers({}, s), "bad swarm parameter"));
  s.params = {{std::string(kMaxMetricName + 1, 'p'), 1.0}};
  EXPECT_TRUE(RefusedWith(EncodeMembers({}, s), "bad swarm parameter"));
  s = Swarm();
  s.task.layout.clear();
  EXPECT_TRUE(RefusedWith(EncodeMembers({}, s), "task has an empty model layout"));
}

TEST(PeerMessages, MalformedUpdatesAreRefused) {
  const std::string base(64, 'b');
  EXPECT_TRUE(RefusedWith(Update("has space", base, 32, 0.5), "update fields out of range: the author is not a valid name"));
  EXPECT_TRUE(RefusedWith(Update("", base, 32, 0.5), "update fields out of range: the author is not a valid name"));
  EXPECT_TRUE(RefusedWith(Update("alice", base, 0, 0.5), "update fields out of range: num_examples 0 is not in [1, 2^40]"));
  EXPECT_TRUE(RefusedWith(Update("alice", base, kMaxExamples + 1, 0.5), "update fields out of range: num_examples"));
  EXPECT_TRUE(Decode(Update("alice", base, kMaxExamples, 0.5)).ok());
  EXPECT_TRUE(RefusedWith(Update("alice", base, 32, std::nan("")), "update fields out of range: the loss is not finite"));
  EXPECT_TRUE(RefusedWith(Update("alice", base, 32, -std::numeric_limits<double>::infinity()),
                          "update fields out of range: the loss is not finite"));
  EXPECT_TRUE(RefusedWith(Update("alice", "short", 32, 0.5), "update fields out of range: the base hash is not 64 characters"));

  // Signatures of other sizes (the encoder only writes 64 bytes).
  for (size_t size : {0, 63, 65}) {
    flatbuffers::FlatBufferBuilder fbb;
    const std::vector<uint8_t> sig(size, 7);
    auto msg = wire::CreatePeerUpdateDirect(fbb, "alice", base.c_str(), 32, 0.5, 0, size ? &sig : nullptr);
    EXPECT_TRUE(RefusedWith(Finish(fbb, {}, MessageKind::PeerUpdate, msg.Union()),
                            "update fields out of range: the signature is not 64 bytes"))
        << size << " bytes";
  }
}

TEST(PeerMessages, MalformedCommitsAreRefused) {
  EXPECT_TRUE(RefusedWith(EncodeCommit({}, {"a", "b"}, {kHash}, kHash),
                          "commit must list as many payload hashes as authors (at most 4096)"));
  const std::vector<std::string> many(kMaxMembers + 1, "a");
  const std::vector<std::string> many_hashes(kMaxMembers + 1, kHash);
  EXPECT_TRUE(RefusedWith(EncodeCommit({}, many, many_hashes, kHash), "commit must list as many payload hashes as authors"));
  EXPECT_TRUE(RefusedWith(EncodeCommit({}, {"a", "b c"}, {kHash, kHash}, kHash), "bad commit entry 1: not a valid author name"));
  EXPECT_TRUE(RefusedWith(EncodeCommit({}, {"a"}, {"short"}, kHash), "bad commit entry 0: the payload hash is not 64 characters"));
  EXPECT_TRUE(RefusedWith(EncodeCommit({}, {"a"}, {kHash}, std::string(kMaxStringBytes + 1, 'm')),
                          "commit model hash is longer than 4096 bytes"));
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<std::string> none;
  auto msg = wire::CreateCommitDirect(fbb, nullptr, nullptr, nullptr);
  EXPECT_TRUE(RefusedWith(Finish(fbb, {}, MessageKind::Commit, msg.Union()), "commit must list as many payload hashes"));
  fbb.Clear();
  auto authors = fbb.CreateVectorOfStrings(none);
  auto hashes = fbb.CreateVectorOfStrings(none);
  msg = wire::CreateCommit(fbb, authors, hashes, 0);
  EXPECT_TRUE(RefusedWith(Finish(fbb, {}, MessageKind::Commit, msg.Union()), "commit model hash is missing"));
}

TEST(PeerMessages, OverlongStateStringsAndBadFetchesAreRefused) {
  const std::string long_text(kMaxStringBytes + 1, 'x');
  flatbuffers::FlatBufferBuilder fbb;
  auto request = wire::CreateStateRequestDirect(fbb, long_text.c_str());
  EXPECT_TRUE(RefusedWith(Finish(fbb, {}, MessageKind::StateRequest, request.Union()),
                          "state request reason is longer than 4096 bytes"));
  const auto chunk = SplitPayload(kPayload, 1 << 20).at(0);
  EXPECT_TRUE(RefusedWith(EncodeState({}, long_text, kHash, chunk), "state model hash is longer than 4096 bytes"));
  EXPECT_TRUE(RefusedWith(EncodeState({}, kHash, long_text, chunk), "state hash is longer than 4096 bytes"));
  EXPECT_TRUE(RefusedWith(EncodeUpdateFetch({}, ""), "update fetch names no valid author"));
  EXPECT_TRUE(RefusedWith(EncodeUpdateFetch({}, "a b"), "update fetch names no valid author"));
}

TEST(PeerMessages, TheSignatureBindsSwarmStepAuthorBaseWeightLossAndPayload) {
  auto keys = crypto::GenerateKeyPair().value();
  const std::vector<uint8_t> payload = {1, 2, 3, 4};
  const std::string base(64, 'b');
  const auto digest = crypto::Hash256(payload);
  const auto msg = SignedUpdateBytes(1, 2, "alice", base, 32, 0.75, digest);
  const crypto::Signature sig = crypto::Sign(msg, keys.sign_secret);
  EXPECT_TRUE(crypto::Verify(sig, msg, keys.sign_public));
  std::vector<uint8_t> other_payload = payload;
  other_payload[3] ^= 1;
  for (const auto& changed : {SignedUpdateBytes(9, 2, "alice", base, 32, 0.75, digest),
                              SignedUpdateBytes(1, 3, "alice", base, 32, 0.75, digest),
                              SignedUpdateBytes(1, 2, "bob", base, 32, 0.75, digest),
                              SignedUpdateBytes(1, 2, "alice", std::string(64, 'c'), 32, 0.75, digest),
                              SignedUpdateBytes(1, 2, "alice", base, 33, 0.75, digest),
                              SignedUpdateBytes(1, 2, "alice", base, 32, 0.25, digest),
                              SignedUpdateBytes(1, 2, "alice", base, 32, -0.75, digest),
                              SignedUpdateBytes(1, 2, "alice", base, 32, 0.75, crypto::Hash256(other_payload))})
    EXPECT_FALSE(crypto::Verify(sig, changed, keys.sign_public));
  auto other = crypto::GenerateKeyPair().value();
  EXPECT_FALSE(crypto::Verify(sig, msg, other.sign_public));
}

// A ring hop's signature binds the swarm, step, sender, ring, attempt, where the piece goes,
// what it sums and its payload: changing any one fails verification.
TEST(PeerMessages, TheRingHopSignatureBindsEveryFieldAndThePayload) {
  auto keys = crypto::GenerateKeyPair().value();
  const std::vector<uint8_t> payload = {1, 2, 3, 4};
  const auto digest = crypto::Hash256(payload);
  const RingSegment r{.ring_hash = kHash, .attempt = 2, .phase = 1, .hop = 3, .segment = 4, .contributors = 5,
                      .weight = 96.0, .loss = 12.5, .piece = 6, .chunk = {}};
  const auto msg = SignedRingHopBytes(1, 2, "alice", r, digest);
  const crypto::Signature sig = crypto::Sign(msg, keys.sign_secret);
  EXPECT_TRUE(crypto::Verify(sig, msg, keys.sign_public));
  std::vector<std::vector<uint8_t>> changed = {SignedRingHopBytes(9, 2, "alice", r, digest),
                                               SignedRingHopBytes(1, 3, "alice", r, digest),
                                               SignedRingHopBytes(1, 2, "bob", r, digest)};
  std::vector<uint8_t> other_payload = payload;
  other_payload[0] ^= 1;
  changed.push_back(SignedRingHopBytes(1, 2, "alice", r, crypto::Hash256(other_payload)));
  const std::vector<std::function<void(RingSegment&)>> edits = {
      [](RingSegment& x) { x.ring_hash = std::string(64, 'e'); }, [](RingSegment& x) { x.attempt = 3; },
      [](RingSegment& x) { x.phase = 0; },                        [](RingSegment& x) { x.hop = 2; },
      [](RingSegment& x) { x.segment = 5; },                      [](RingSegment& x) { x.piece = 7; },
      [](RingSegment& x) { x.contributors = 4; },                 [](RingSegment& x) { x.weight = 95.0; },
      [](RingSegment& x) { x.loss = -12.5; }};
  for (const auto& edit : edits) {
    RingSegment e = r;
    edit(e);
    changed.push_back(SignedRingHopBytes(1, 2, "alice", e, digest));
  }
  for (const auto& c : changed) EXPECT_FALSE(crypto::Verify(sig, c, keys.sign_public));
  // And not an update's signature over the same numbers (another domain tag).
  EXPECT_NE(msg, SignedUpdateBytes(1, 2, "alice", kHash, 96, 12.5, digest));
}

}  // namespace
}  // namespace shoal::protocol
