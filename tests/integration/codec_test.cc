// Update compression end to end: real aggregator and client processes on 127.0.0.1.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <zmq.hpp>

#include "harness.h"
#include "protocol/federated.h"

namespace shoal::testing {
namespace {

using std::chrono::seconds;
const auto& kOneThread = OneThreadEnv();

// 20 rounds with a lossy upload codec AND a lossy download codec, half the clients per round:
// every client checks its replica's hash against the aggregator's at every task it gets, so
// zero resyncs means all replicas stayed bit-identical; the model still learns, and the
// upload is several times smaller than dense.
TEST(Codec, LossyBothWaysKeepsReplicasIdentical) {
  const std::string dir = TempDir("codec-replicas");
  const int port = FreePort();
  auto args = AggregatorArgs(port, 20, 4, dir + "/run.jsonl");
  SetFlag(args, "--codec", "ef|topk:ratio=0.05|int8");
  SetFlag(args, "--codec-down", "int8");
  SetFlag(args, "--fraction", "0.5");
  Process agg("shoal-aggregator", args, dir + "/agg", kOneThread);
  auto clients = StartClients(port, 4, dir);
  ASSERT_EQ(agg.Wait(seconds(180)), 0) << agg.Stderr();
  ExpectAllExitZero(clients);
  auto lines = ReadJsonLines(dir + "/run.jsonl");
  ASSERT_EQ(lines.size(), 20u);
  uint64_t up = 0, dense_up = 0;
  for (const auto& l : lines) {
    EXPECT_EQ(l["clients_selected"], 2) << l.dump();
    EXPECT_EQ(l["clients_reported"], 2) << l.dump();
    EXPECT_EQ(l["resyncs"], 0) << "a replica diverged: " << l.dump();
    up += l["bytes_up"].get<uint64_t>();
    dense_up += l["bytes_dense_equiv"].get<uint64_t>() / 2;  // half of dense_equiv is the upload
  }
  EXPECT_LT(up * 4, dense_up) << "5% top-k + int8 should upload far less than dense fp32";
  EXPECT_GT(lines.back()["test_accuracy"].get<double>(), 0.8);
  for (auto& c : clients) EXPECT_EQ(c->Stderr().find("asking the aggregator for the full model"), std::string::npos);
}

// DeMo, DDP-like: one local step per round, clients keep their decoupled momentum and send
// its DCT top-k extraction; the aggregator steps by the sign of the mean.
TEST(Codec, DemoOptimizerTrainsWithOneStepRounds) {
  const std::string dir = TempDir("demo");
  const int port = FreePort();
  auto args = AggregatorArgs(port, 60, 4, dir + "/run.jsonl");
  SetFlag(args, "--model", "mlp:64");
  SetFlag(args, "--client-optimizer", "demo");
  SetFlag(args, "--strategy", "demo");
  SetFlag(args, "--local-steps", "1");
  SetFlag(args, "--lr", "0.03");
  SetFlag(args, "--momentum", "0");
  SetFlag(args, "--codec", "demo:chunk=64,topk=32,bits=32");
  Process agg("shoal-aggregator", args, dir + "/agg", kOneThread);
  auto clients = StartClients(port, 4, dir);
  ASSERT_EQ(agg.Wait(seconds(180)), 0) << agg.Stderr();
  ExpectAllExitZero(clients);
  auto lines = ReadJsonLines(dir + "/run.jsonl");
  ASSERT_EQ(lines.size(), 60u);
  EXPECT_GT(lines.back()["test_accuracy"].get<double>(), 0.8);
  EXPECT_GT(lines.back()["test_accuracy"].get<double>(), lines[9]["test_accuracy"].get<double>() + 0.2);
  // The extracted momentum is sparse in the DCT domain: far fewer bytes than the dense model.
  EXPECT_LT(lines.back()["bytes_up"].get<uint64_t>() * 10, lines.back()["bytes_dense_equiv"].get<uint64_t>() / 2);
}

// DeMo's update only makes sense with the demo strategy: the pairing is checked at start.
TEST(Codec, DemoOptimizerNeedsTheDemoStrategy) {
  const std::string dir = TempDir("demo-bad");
  Process agg("shoal-aggregator", {"--listen", Endpoint(FreePort()), "--client-optimizer", "demo"}, dir + "/agg");
  EXPECT_EQ(agg.Wait(seconds(30)), 2);
  EXPECT_NE(agg.Stderr().find("--strategy demo"), std::string::npos) << agg.Stderr();
}

// A bad --codec is refused at start with the parser's message.
TEST(Codec, BadSpecIsAUsageError) {
  const std::string dir = TempDir("codec-bad");
  Process agg("shoal-aggregator", {"--listen", Endpoint(FreePort()), "--codec", "ef|int8|topk"}, dir + "/agg");
  EXPECT_EQ(agg.Wait(seconds(30)), 2);
  EXPECT_NE(agg.Stderr().find("topk"), std::string::npos) << agg.Stderr();
}

// Negotiation: a client that does not list a stage of the task's codec is refused at Hello
// with an error naming the stage.
TEST(Codec, ClientWithoutTheStageIsRefused) {
  const std::string dir = TempDir("codec-negotiation");
  const int port = FreePort();
  auto args = AggregatorArgs(port, 1, 1, dir + "/run.jsonl");
  SetFlag(args, "--codec", "qsgd:levels=16");
  Process agg("shoal-aggregator", args, dir + "/agg");
  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.connect(Endpoint(port));
  const auto hello = protocol::EncodeHello({0, 0, 0, 1}, "old-client", 10, "test", {"int8", "topk"});
  s.send(zmq::buffer(hello));
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  ASSERT_GT(zmq::poll(&item, 1, std::chrono::milliseconds(10000)), 0) << agg.Stderr();
  zmq::message_t m;
  ASSERT_TRUE(s.recv(m));
  auto v = protocol::VerifyFrame({static_cast<const uint8_t*>(m.data()), m.size()}, 1 << 20);
  ASSERT_TRUE(v.ok()) << v.reason;
  ASSERT_EQ(v.envelope->message_type(), wire::Message::Error);
  const auto* e = v.envelope->message_as_Error();
  EXPECT_EQ(e->code(), wire::ErrorCode::UnsupportedCodec);
  EXPECT_NE(e->reason()->str().find("'qsgd'"), std::string::npos) << e->reason()->str();
  agg.Signal(SIGTERM);
  EXPECT_EQ(agg.Wait(seconds(10)), 0);
}

}  // namespace
}  // namespace shoal::testing
