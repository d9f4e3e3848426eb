// Typed messages: every federated message kind encodes and decodes to the same typed value,
// and a malformed field is refused with a reason (the frame's kind and header still known).
// Peer messages: peer_messages_test.cc.
#include <gtest/gtest.h>

#include "protocol/messages.h"

namespace shoal::protocol {
namespace {

StatusOr<Message> RoundTrip(const Frame& f) {
  Verified v = VerifyFrame(f, MaxFrameBytes(kDefaultChunkBytes));
  EXPECT_TRUE(v.ok()) << v.reason;
  return DecodeMessage(v);
}

TEST(Messages, EveryFederatedKindDecodesToItsTypedValue) {
  const Header h{7, 3, 2, 11};
  auto hello = RoundTrip(EncodeHello(h, "alice", 42, "builtin", {"int8", "topk"})).value();
  EXPECT_EQ(hello.kind, MessageKind::Hello);
  EXPECT_EQ(hello.header.session, 7u);
  EXPECT_EQ(hello.header.round, 3u);
  EXPECT_EQ(hello.header.sender, 2u);
  EXPECT_EQ(hello.header.sequence, 11u);
  const auto& hb = std::get<Hello>(hello.body);
  EXPECT_EQ(hb.client_name, "alice");
  EXPECT_EQ(hb.num_examples, 42u);
  EXPECT_EQ(hb.trainer, "builtin");
  EXPECT_EQ(hb.codecs, (std::vector<std::string>{"int8", "topk"}));

  const std::vector<uint8_t> payload = {1, 2, 3, 4, 5};
  const ChunkRef chunk{0, 1, 0, payload.size(), payload};
  RoundConfig rc{3, 0.1f, 2, 0, 0.01f};
  // A message's chunk points into its frame: keep the frame alive while reading it.
  const Frame task_frame = EncodeRoundTask(h, rc, 500, "hash", PayloadEncoding::Codec, chunk, "base", 2);
  auto task = RoundTrip(task_frame).value();
  const auto& t = std::get<RoundTask>(task.body);
  ASSERT_TRUE(t.config);
  EXPECT_FLOAT_EQ(t.config->learning_rate, 0.1f);
  EXPECT_EQ(t.config->local_epochs, 2u);
  EXPECT_EQ(t.deadline_ms, 500u);
  EXPECT_EQ(t.model_hash, "hash");
  EXPECT_EQ(t.base_hash, "base");
  EXPECT_EQ(t.delta_round, 2u);
  EXPECT_EQ(t.encoding, PayloadEncoding::Codec);
  ASSERT_TRUE(t.chunk.present);
  EXPECT_EQ(std::vector<uint8_t>(t.chunk.data.begin(), t.chunk.data.end()), payload);

  // A round config out of range does not lose the frame: the task says why.
  rc.learning_rate = -1.0f;
  auto bad_task = RoundTrip(EncodeRoundTask(h, rc, 500, "hash", PayloadEncoding::DenseF32, chunk)).value();
  EXPECT_FALSE(std::get<RoundTask>(bad_task.body).config);
  EXPECT_NE(std::get<RoundTask>(bad_task.body).config_error.find("learning rate"), std::string::npos);

  UpdateReport report;
  report.train_loss = 0.5;
  report.encode_seconds = 0.25;
  report.eval = EvalResult{0.7, 0.8, 30};
  report.other = {{"train_accuracy", 0.9}};
  const Frame update_frame = EncodeUpdate(h, 17, report, PayloadEncoding::Codec, chunk);
  auto up = RoundTrip(update_frame).value();
  const auto& u = std::get<UpdateChunk>(up.body);
  EXPECT_EQ(u.num_examples, 17u);
  EXPECT_EQ(u.report.train_loss, 0.5);
  EXPECT_EQ(u.report.encode_seconds, 0.25);
  ASSERT_TRUE(u.report.eval);
  EXPECT_EQ(u.report.eval->num_examples, 30u);
  EXPECT_EQ(u.report.eval->accuracy, 0.8);
  EXPECT_EQ(u.report.other, (std::vector<std::pair<std::string, double>>{{"train_accuracy", 0.9}}));

  EXPECT_EQ(std::get<Resync>(RoundTrip(EncodeResync(h, "have")).value().body).have_hash, "have");
  EXPECT_TRUE(std::get<Ack>(RoundTrip(EncodeAck(h, true, h.round)).value().body).accepted);
  const Ack later = std::get<Ack>(RoundTrip(EncodeAck(h, false, h.round + 2)).value().body);
  EXPECT_FALSE(later.accepted);
  EXPECT_EQ(later.commit_round, h.round + 2);
  EXPECT_FALSE(RoundTrip(EncodeAck(h, true, h.round - 1)).ok()) << "no update commits before its task's round";
  auto err = std::get<ErrorReply>(RoundTrip(EncodeError(h, ErrorCode::Refused, "no")).value().body);
  EXPECT_EQ(err.code, ErrorCode::Refused);
  EXPECT_EQ(err.reason, "no");
  EXPECT_STREQ(ErrorName(err.code), "Refused");
  auto beat = std::get<Heartbeat>(RoundTrip(EncodeHeartbeat(h, true, 0.5f)).value().body);
  EXPECT_TRUE(beat.busy);
  EXPECT_EQ(beat.progress, 0.5f);
  EXPECT_EQ(std::get<Bye>(RoundTrip(EncodeBye(h, "done")).value().body).reason, "done");
}

TEST(Messages, ImplausibleEvaluationIsDroppedAndBadFieldsAreRefused) {
  const std::vector<uint8_t> payload = {1};
  const ChunkRef chunk{0, 1, 0, 1, payload};
  UpdateReport report;
  report.eval = EvalResult{0.1, 1.5, 10};  // accuracy above 1: not kept
  auto up = RoundTrip(EncodeUpdate({1, 1, 1, 1}, 5, report, PayloadEncoding::Codec, chunk)).value();
  EXPECT_FALSE(std::get<UpdateChunk>(up.body).report.eval);

  const std::string long_name(5000, 'x');
  Frame f = EncodeHello({0, 0, 0, 1}, long_name, 1, "t", {});
  Verified v = VerifyFrame(f, MaxFrameBytes(kDefaultChunkBytes));
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(KindOf(v), MessageKind::Hello);
  EXPECT_EQ(HeaderOf(v).sequence, 1u);
  auto m = DecodeMessage(v);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("longer than 4096"), std::string::npos) << m.status().message();

  report = UpdateReport{};
  report.other = {{"x", std::numeric_limits<double>::infinity()}};
  Frame nonfinite = EncodeUpdate({1, 1, 1, 1}, 5, report, PayloadEncoding::Codec, chunk);
  auto bad = DecodeMessage(VerifyFrame(nonfinite, MaxFrameBytes(kDefaultChunkBytes)));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("not finite"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace shoal::protocol
