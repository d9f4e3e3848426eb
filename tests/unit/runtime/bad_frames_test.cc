// A peer that sends the aggregator bad frames gets an Error back, is counted, and does not
// disturb the real clients.
#include <gtest/gtest.h>

#include "codec/codec.h"
#include "federation.h"
#include "protocol/envelope.h"

namespace shoal::testing {
namespace {

// Sends `frame` on `channel` and expects the aggregator's answer to be a well-formed Error
// frame with `code` and a reason containing `reason`.
void ExpectErrorReply(transport::Channel& channel, const std::vector<uint8_t>& frame, wire::ErrorCode code,
                      const std::string& reason) {
  ASSERT_TRUE(channel.Send(frame, milliseconds(1000)).ok());
  auto reply = channel.Recv(milliseconds(5000));
  ASSERT_TRUE(reply.ok()) << reply.status().ToString();
  ASSERT_TRUE(reply->has_value()) << "no answer to a bad frame";
  protocol::Verified v = protocol::VerifyFrame((*reply)->bytes(), protocol::MaxFrameBytes(protocol::kDefaultChunkBytes));
  ASSERT_TRUE(v.ok()) << v.reason;
  ASSERT_EQ(v.envelope->message_type(), wire::Message::Error) << protocol::MessageName(v.envelope->message_type());
  const wire::Error* err = v.envelope->message_as_Error();
  EXPECT_EQ(err->code(), code) << wire::EnumNameErrorCode(err->code());
  ASSERT_NE(err->reason(), nullptr);
  EXPECT_NE(err->reason()->str().find(reason), std::string::npos) << err->reason()->str();
}

TEST_F(RuntimeTest, BadFramesGetAnErrorAreCountedAndTheRealClientsCarryOn) {
  constexpr uint32_t kClients = 2;
  constexpr uint64_t kRounds = 2;
  Federation fed(Options(kClients, kRounds), 1);
  ASSERT_TRUE(fed.ok());
  fed.StartService();

  // Before any client joins: garbage, then a valid Hello without a name.
  auto raw = fed.net().Connect(kAggregatorName);
  ExpectErrorReply(*raw, std::vector<uint8_t>(64, 0xab), wire::ErrorCode::MalformedFrame, "not a Shoal envelope");
  ExpectErrorReply(*raw, protocol::EncodeHello({0, 0, 0, 1}, "", 10, "raw", codec::SupportedStages()),
                   wire::ErrorCode::MalformedFrame, "client name");

  fed.AddClients(kClients);
  const auto lines = fed.Run(kRunLimit);

  ASSERT_NO_FATAL_FAILURE(ExpectRounds(lines, kRounds));
  for (const auto& line : lines) {
    ExpectRound(line, kClients, kClients);
    EXPECT_EQ(line["clients_registered"].get<size_t>(), kClients);  // the raw peer never became a client
    EXPECT_EQ(line["frames_rejected"].get<uint64_t>(), 2u) << line.dump();
    EXPECT_EQ(line["rejected_by_code"]["MalformedFrame"].get<uint64_t>(), 2u) << line.dump();
  }
  fed.ExpectEveryClientSaidBye();
  // Nothing else came to the raw peer: no task, no Bye.
  auto more = raw->Recv(milliseconds(0));
  ASSERT_TRUE(more.ok());
  EXPECT_FALSE(more->has_value());
}

}  // namespace
}  // namespace shoal::testing
