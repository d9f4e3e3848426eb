// Peer messages: encode -> verify -> decode round trips, the checks on hostile fields, and
// what an update's signature binds.
#include <gtest/gtest.h>

#include "crypto/keys.h"
#include "protocol/peer.h"

namespace shoal::protocol {
namespace {

const wire::Envelope* Open(const Frame& f) {
  auto v = VerifyFrame(f, 1 << 20);
  EXPECT_TRUE(v.ok()) << v.reason;
  return v.envelope;
}

PeerInfo Alice() {
  PeerInfo p;
  p.name = "alice";
  p.endpoint = "tcp://10.0.0.1:7101";
  p.curve_key = std::string(40, 'a');
  for (size_t i = 0; i < p.sign_key.size(); ++i) p.sign_key[i] = static_cast<uint8_t>(i);
  return p;
}

TEST(PeerMessages, JoinMembersAndCommitRoundTrip) {
  const Frame join = EncodeJoin({7, 0, 0, 1}, Alice(), true);
  const auto* env = Open(join);
  ASSERT_EQ(env->message_type(), wire::Message::Join);
  EXPECT_TRUE(env->message_as_Join()->want_members());
  auto info = DecodePeerInfo(env->message_as_Join()->self());
  ASSERT_TRUE(info.ok()) << info.status().ToString();
  EXPECT_EQ(*info, Alice());

  SwarmInfo s;
  s.task.model = "mlp:32";
  s.task.layout = {{"fc0.weight", {64, 10}}, {"fc0.bias", {10}}};
  s.task.dataset = "digits";
  s.mode = "diloco";
  s.members = {Alice()};
  s.params = {{"diloco_inner_steps", 30}, {"outer_lr", 0.7}};
  s.steps = 99;
  auto members = DecodeMembers(Open(EncodeMembers({7, 0, 0, 2}, s))->message_as_Members());
  ASSERT_TRUE(members.ok()) << members.status().ToString();
  EXPECT_EQ(members->task, s.task);
  EXPECT_EQ(members->mode, "diloco");
  EXPECT_EQ(members->members, s.members);
  EXPECT_EQ(members->Param("diloco_inner_steps", 0), 30);
  EXPECT_EQ(members->Param("absent", 5), 5);
  EXPECT_EQ(members->steps, 99u);

  const std::string h(64, 'f');
  auto commit = DecodeCommit(Open(EncodeCommit({7, 3, 0, 3}, {"alice", "bob"}, {h, h}, h))->message_as_Commit());
  ASSERT_TRUE(commit.ok());
  EXPECT_EQ(commit->size(), 2u);
  EXPECT_EQ((*commit)[1].first, "bob");
}

TEST(PeerMessages, HostileFieldsAreRefused) {
  PeerInfo bad = Alice();
  bad.name = "has space";
  EXPECT_FALSE(DecodePeerInfo(Open(EncodeJoin({}, bad, false))->message_as_Join()->self()).ok());
  bad = Alice();
  bad.endpoint = "inproc://x";
  EXPECT_FALSE(DecodePeerInfo(Open(EncodeJoin({}, bad, false))->message_as_Join()->self()).ok());
  bad = Alice();
  bad.curve_key = "short";
  EXPECT_FALSE(DecodePeerInfo(Open(EncodeJoin({}, bad, false))->message_as_Join()->self()).ok());
  SwarmInfo s;
  s.task.model = "mlp";
  s.mode = "telepathy";
  s.members = {Alice()};
  EXPECT_FALSE(DecodeMembers(Open(EncodeMembers({}, s))->message_as_Members()).ok());
  s.mode = "gossip";
  s.heartbeat_timeout_ms = s.heartbeat_interval_ms;  // inconsistent timing
  EXPECT_FALSE(DecodeMembers(Open(EncodeMembers({}, s))->message_as_Members()).ok());
  // A commit whose lists disagree in length, or with a malformed hash.
  EXPECT_FALSE(DecodeCommit(Open(EncodeCommit({}, {"a", "b"}, {std::string(64, 'f')}, "x"))->message_as_Commit()).ok());
  EXPECT_FALSE(DecodeCommit(Open(EncodeCommit({}, {"a"}, {"short"}, "x"))->message_as_Commit()).ok());
}

TEST(PeerMessages, TheSignatureBindsSwarmStepAuthorBaseWeightAndPayload) {
  auto keys = crypto::GenerateKeyPair().value();
  const std::vector<uint8_t> payload = {1, 2, 3, 4};
  const std::string base(64, 'b');
  const auto digest = crypto::Hash256(payload);
  const auto msg = SignedUpdateBytes(1, 2, "alice", base, 32, digest);
  const crypto::Signature sig = crypto::Sign(msg, keys.sign_secret);
  EXPECT_TRUE(crypto::Verify(sig, msg, keys.sign_public));
  std::vector<uint8_t> other_payload = payload;
  other_payload[3] ^= 1;
  for (const auto& changed : {SignedUpdateBytes(9, 2, "alice", base, 32, digest),
                              SignedUpdateBytes(1, 3, "alice", base, 32, digest),
                              SignedUpdateBytes(1, 2, "bob", base, 32, digest),
                              SignedUpdateBytes(1, 2, "alice", std::string(64, 'c'), 32, digest),
                              SignedUpdateBytes(1, 2, "alice", base, 33, digest),
                              SignedUpdateBytes(1, 2, "alice", base, 32, crypto::Hash256(other_payload))})
    EXPECT_FALSE(crypto::Verify(sig, changed, keys.sign_public));
  auto other = crypto::GenerateKeyPair().value();
  EXPECT_FALSE(crypto::Verify(sig, msg, other.sign_public));
}

}  // namespace
}  // namespace shoal::protocol
