// Hostile and broken inputs against real processes: garbage frames, bad flags, missing data,
// unreachable aggregator, port in use.
#include <gtest/gtest.h>

#include <memory>
#include <zmq.hpp>

#include "core/rng.h"
#include "harness.h"
#include "protocol/federated.h"

namespace shoal::testing {
namespace {

using std::chrono::seconds;
const auto& kOneThread = OneThreadEnv();

// (c) 10,000 garbage, truncated, wrong-version and out-of-protocol frames, then a normal
// round completes and the metrics count every rejected frame.
TEST(Robustness, GarbageFramesAreRejectedAndCounted) {
  const std::string dir = TempDir("garbage");
  const int port = FreePort();
  Process agg("shoal-aggregator", AggregatorArgs(port, 2, 2, dir + "/run.jsonl"), dir + "/agg", kOneThread);

  zmq::context_t ctx;
  zmq::socket_t s(ctx, zmq::socket_type::dealer);
  s.set(zmq::sockopt::linger, 0);
  s.connect(Endpoint(port));
  Rng rng(42);
  const protocol::Frame hello = protocol::EncodeHello({0, 0, 0, 1}, "garbage", 1, "test", {});
  protocol::Frame wrong_version = hello;
  // The version is the envelope's first scalar; find it by re-encoding with a patched copy.
  {
    flatbuffers::FlatBufferBuilder fbb;
    auto msg = wire::CreateHelloDirect(fbb, "x", 1, "t");
    wire::EnvelopeBuilder eb(fbb);
    eb.add_version(protocol::kProtocolVersion + 98);
    eb.add_message_type(wire::Message::Hello);
    eb.add_message(msg.Union());
    fbb.Finish(eb.Finish(), wire::EnvelopeIdentifier());
    wrong_version.assign(fbb.GetBufferPointer(), fbb.GetBufferPointer() + fbb.GetSize());
  }
  const protocol::Frame unregistered_update =
      protocol::EncodeHeartbeat({12345, 1, 9, 1}, false, 0.0f);  // wrong session, never said Hello

  // The aggregator answers every bad frame with an Error; read them while sending so
  // neither side's queue fills.
  int errors = 0, version_errors = 0;
  zmq::pollitem_t item{s.handle(), 0, ZMQ_POLLIN, 0};
  auto drain = [&](std::chrono::milliseconds wait) {
    while (zmq::poll(&item, 1, wait) > 0) {
      zmq::message_t m;
      if (!s.recv(m, zmq::recv_flags::dontwait)) break;
      auto v = protocol::VerifyFrame({static_cast<const uint8_t*>(m.data()), m.size()}, 1 << 20);
      ASSERT_TRUE(v.ok()) << v.reason;
      ASSERT_EQ(v.envelope->message_type(), wire::Message::Error);
      ++errors;
      const auto* e = v.envelope->message_as_Error();
      if (e->code() == wire::ErrorCode::VersionMismatch) {
        ++version_errors;
        EXPECT_NE(e->reason()->str().find("version " + std::to_string(protocol::kProtocolVersion + 98)), std::string::npos)
            << e->reason()->str();
      }
    }
  };

  const int kFrames = 10000;
  int sent_version = 0;
  for (int i = 0; i < kFrames; ++i) {
    protocol::Frame f;
    switch (i % 4) {
      case 0: {  // random bytes
        f.resize(rng.Below(512));
        for (auto& b : f) b = static_cast<uint8_t>(rng.NextU64());
        break;
      }
      case 1:  // a valid frame cut short
        // (dropping only the last <= 7 bytes may remove nothing but alignment padding)
        f.assign(hello.begin(), hello.begin() + static_cast<long>(rng.Below(hello.size() - 8)));
        break;
      case 2:  // a valid frame from a newer protocol, or with its root offset destroyed
        if (i % 8 == 2) {
          f = wrong_version;
          ++sent_version;
        } else {
          f = hello;
          for (int k = 0; k < 4; ++k) f[rng.Below(f.size())] ^= static_cast<uint8_t>(1 + rng.Below(255));
          f[1] ^= 0xff;  // root offset now points far past the end: never a valid frame
        }
        break;
      default:  // well-formed but out of protocol
        f = unregistered_update;
        break;
    }
    s.send(zmq::buffer(f));
    drain(std::chrono::milliseconds(0));
  }
  drain(std::chrono::milliseconds(2000));
  // Replies are best effort: the aggregator never blocks on a peer, so when a flooding peer's
  // queue is full a reply is dropped (the frame is still counted, checked below).
  EXPECT_GE(errors, kFrames * 95 / 100) << "bad frames get Error replies";
  EXPECT_GE(version_errors, sent_version * 95 / 100);

  // Now honest clients train as usual.
  auto clients = StartClients(port, 2, dir);
  ASSERT_EQ(agg.Wait(seconds(120)), 0) << agg.Stderr();
  ExpectAllExitZero(clients);
  auto lines = ReadJsonLines(dir + "/run.jsonl");
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(lines[0]["clients_reported"], 2);
  EXPECT_EQ(lines[0]["frames_rejected"].get<int>(), kFrames);
  EXPECT_EQ(lines[0]["rejected_by_code"]["VersionMismatch"].get<int>(), sent_version);
  EXPECT_EQ(lines[0]["rejected_by_code"]["UnknownSession"].get<int>(), kFrames / 4);
}

// Every usage or environment error is one clear line and a non-zero exit.
TEST(Robustness, ClearErrorsForBadFlagsAndEnvironment) {
  const std::string dir = TempDir("errors");
  struct Case {
    std::string program;
    std::vector<std::string> args;
    int code;
    std::string needle;
  };
  const int port = FreePort(), busy = FreePort();
  const std::vector<Case> cases = {
      {"shoal-aggregator", {"--no-such-flag"}, 2, "unrecognised option '--no-such-flag'"},
      {"shoal-aggregator", {"--rounds", "many"}, 2, "--rounds"},
      // Boost would wrap a negative count into an unsigned option (2^64 - 1 rounds).
      {"shoal-aggregator", {"--rounds", "-1"}, 2, "--rounds must not be negative (got -1)"},
      {"shoal-sim", {"--clients=-5", "--rounds", "1"}, 2, "--clients must not be negative (got -5)"},
      // DeMo's codec on plain deltas, without error feedback: refused, naming the fixes.
      {"shoal-aggregator", {"--listen", Endpoint(FreePort()), "--codec", "demo:chunk=64,topk=8,bits=1"}, 2,
       "--client-optimizer demo --strategy demo"},
      {"shoal-peer", {"--listen", Endpoint(FreePort()), "--codec", "demo:chunk=64,topk=8,bits=1", "--steps", "1"}, 2,
       "--client-optimizer demo, or keep the dropped part with error feedback"},
      {"shoal-peer", {"--listen", Endpoint(FreePort()), "--mode", "gossip", "--overlap", "--steps", "1"}, 2,
       "--overlap needs the leader's commit: --mode allgather, or diloco without --diloco-allreduce"},
      {"shoal-aggregator", {"--listen", Endpoint(FreePort()), "--metrics-listen", "localhost:http"}, 2,
       "--metrics-listen localhost:http: expected HOST:PORT or PORT"},
      // The metrics port is the service's own: taken.
      {"shoal-aggregator", {"--listen", Endpoint(busy), "--metrics-listen", std::to_string(busy)}, 1,
       "cannot listen there"},
      // Flags are checked before the device is probed: the codec is named, not the missing GPU.
      {"shoal-aggregator", {"--listen", Endpoint(FreePort()), "--device", "cuda:7", "--codec", "int9"}, 2,
       "codec spec 'int9'"},
      {"shoal-aggregator", {"--listen", Endpoint(FreePort()), "--model", "mlp:0"}, 2, "mlp:0"},
      {"shoal-aggregator", {"--listen", Endpoint(FreePort()), "--strategy", "magic"}, 2, "fedavg, fedprox"},
      // An edge aggregator: its parent decides the rounds and keeps the model; one that never
      // answers is named; a plain link off loopback needs keys.
      {"shoal-aggregator", {"--listen", Endpoint(FreePort()), "--upstream", Endpoint(FreePort()), "--rounds", "3"}, 2,
       "--rounds with --upstream: the parent decides the rounds"},
      {"shoal-aggregator", {"--listen", Endpoint(FreePort()), "--upstream", Endpoint(FreePort()), "--checkpoint-dir", dir}, 2,
       "an edge keeps no model of its own"},
      {"shoal-aggregator", {"--listen", Endpoint(FreePort()), "--upstream", Endpoint(FreePort()), "--upstream-timeout", "1"},
       1, "no task from the parent aggregator"},
      {"shoal-aggregator", {"--listen", Endpoint(FreePort()), "--upstream", "tcp://192.0.2.1:7070"}, 1,
       "--upstream tcp://192.0.2.1:7070 is not a loopback address: give --upstream-key and --upstream-server-key"},
      {"shoal-aggregator", {"--listen", Endpoint(FreePort()), "--data-dir", dir + "/nothing-here"}, 1, "scripts/setup"},
      {"shoal-aggregator", {"--listen", "tcp://nonsense"}, 1, "tcp://nonsense"},
      // Secure by default: no unencrypted listener on other interfaces without --insecure.
      {"shoal-aggregator", {"--listen", "tcp://*:" + std::to_string(FreePort())}, 1, "--insecure"},
      {"shoal-client", {"--partition", "4/4"}, 2, "--partition"},
      {"shoal-client", {"--gpus", "2", "--device", "cpu"}, 2, "--gpus N (N >= 1) takes GPUs"},
      {"shoal-client", {"--data-dir", dir + "/nothing-here"}, 1, "scripts/setup"},
      // The connection's flags are checked before the data is loaded or the device probed.
      {"shoal-client", {"--connect", "tcp://192.0.2.1:7070", "--data-dir", dir + "/nothing-here", "--device", "cuda:7"}, 1,
       "is not a loopback address"},
      {"shoal-client", {"--server-key", dir + "/agg.pub", "--data-dir", dir + "/nothing-here"}, 2, "needs --secret-key"},
      {"shoal-client", {"--connect", Endpoint(port), "--connect-timeout", "1.5"}, 1, "no answer from the aggregator"},
  };
  for (const auto& c : cases) {
    Process p(c.program, c.args, dir + "/case");
    EXPECT_EQ(p.Wait(seconds(30)), c.code) << c.program << " " << c.args[0] << ": " << p.Stderr();
    const std::string err = p.Stderr();
    EXPECT_NE(err.find(c.needle), std::string::npos) << "stderr was: " << err;
    EXPECT_NE(err.find("error:"), std::string::npos) << err;
  }
}

TEST(Robustness, PortInUseIsReported) {
  const std::string dir = TempDir("port");
  const int port = FreePort();
  Process first("shoal-aggregator", {"--listen", Endpoint(port)}, dir + "/first");
  ASSERT_TRUE(WaitFor([&] { return first.Stderr().find("listening on") != std::string::npos; }, seconds(30)));
  Process second("shoal-aggregator", {"--listen", Endpoint(port)}, dir + "/second");
  EXPECT_EQ(second.Wait(seconds(30)), 1);
  EXPECT_NE(second.Stderr().find("already in use"), std::string::npos) << second.Stderr();
  first.Signal(SIGTERM);
  EXPECT_EQ(first.Wait(seconds(10)), 0) << "SIGTERM is a clean shutdown";
}

}  // namespace
}  // namespace shoal::testing
