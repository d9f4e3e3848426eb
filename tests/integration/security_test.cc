// Transport security against real processes on 127.0.0.1 (DESIGN.md §5): CurveZMQ with a ZAP
// allow-list re-read on SIGHUP, no plaintext on the wire, captured traffic that cannot be
// replayed, identities bound to keys, a flood of unauthenticated connections, clear errors.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <set>
#include <thread>
#include <zmq.hpp>

#include "backend/backend.h"
#include "codec/codec.h"
#include "core/rng.h"
#include "crypto/keys.h"
#include "harness.h"
#include "nn/model_registry.h"
#include "protocol/federated.h"
#include "relay.h"

namespace shoal::testing {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::seconds;
const auto& kOneThread = OneThreadEnv();

size_t Count(const std::string& haystack, const std::string& needle) {
  size_t n = 0;
  for (size_t pos = haystack.find(needle); pos != std::string::npos; pos = haystack.find(needle, pos + 1)) ++n;
  return n;
}

bool Listening(Process& agg) {
  return WaitFor([&] { return agg.Stderr().find("listening on") != std::string::npos; }, seconds(30));
}

// Keys for the aggregator and `clients`, and an allow-list directory holding the `listed` ones.
struct Keys {
  std::string dir, allow;
  Keys(const std::string& base, const std::vector<std::string>& clients, const std::vector<std::string>& listed)
      : dir(base + "/keys"), allow(base + "/allow") {
    std::vector<std::string> names = clients;
    names.push_back("agg");
    MakeKeys(dir, names);
    fs::create_directories(allow);
    for (const auto& n : listed) List(n);
  }
  void List(const std::string& name) const { fs::copy_file(dir + "/" + name + ".pub", allow + "/" + name + ".pub"); }
  void Unlist(const std::string& name) const { fs::remove(allow + "/" + name + ".pub"); }
};

std::unique_ptr<Process> SecureClient(int port, const Keys& keys, const std::string& name, int index, int count,
                                      const std::string& log) {
  return std::make_unique<Process>("shoal-client",
                                   Concat(ClientArgs(port, index, count), SecureClientFlags(keys.dir, name)), log,
                                   kOneThread);
}

std::vector<std::string> Hashes(const std::vector<nlohmann::json>& lines) {
  std::vector<std::string> out;
  for (const auto& l : lines) out.push_back(l["model_hash"].get<std::string>());
  return out;
}

// A client that is not on the list is refused at the CURVE handshake, before any of its
// messages reach the protocol layer; SIGHUP re-reads the list, both ways.
TEST(Security, AllowListIsEnforcedAtTheHandshakeAndReloadedOnSighup) {
  const std::string dir = TempDir("allowlist");
  const Keys keys(dir, {"alice", "bob"}, {"alice"});
  const int port = FreePort();
  // --rounds 0: serve until SIGTERM. Two clients are needed for a round.
  Process agg("shoal-aggregator",
              Concat(AggregatorArgs(port, 0, 2, dir + "/run.jsonl"), SecureAggregatorFlags(keys.dir, keys.allow)),
              dir + "/agg", kOneThread);
  ASSERT_TRUE(Listening(agg)) << agg.Stderr();
  auto alice = SecureClient(port, keys, "alice", 0, 2, dir + "/alice");
  ASSERT_TRUE(WaitFor([&] { return agg.Stderr().find("client alice registered") != std::string::npos; }, seconds(30)))
      << agg.Stderr();

  // 1. bob is not listed: refused at the handshake (ZAP), a clear error, a bounded number of tries.
  auto bob = SecureClient(port, keys, "bob", 1, 2, dir + "/bob1");
  EXPECT_EQ(bob->Wait(seconds(30)), 1) << bob->Stderr();
  EXPECT_NE(bob->Stderr().find("refused this key"), std::string::npos) << bob->Stderr();
  EXPECT_NE(bob->Stderr().find("--allow-keys"), std::string::npos) << bob->Stderr();
  const std::string bob_key = crypto::ReadPublicKey(keys.dir + "/bob.pub").value();
  EXPECT_GE(Count(agg.Stderr(), "key not on the allow-list (key " + bob_key), 3u) << agg.Stderr();
  EXPECT_EQ(agg.Stderr().find("client bob registered"), std::string::npos) << "no message of bob's got through";
  EXPECT_TRUE(ReadJsonLines(dir + "/run.jsonl").empty()) << "no round can have run without bob";

  // 2. bob's key is added and the aggregator told: bob joins and rounds run.
  keys.List("bob");
  agg.Signal(SIGHUP);
  ASSERT_TRUE(WaitFor([&] { return agg.Stderr().find("allow-list reloaded from " + keys.allow + ": 2 keys") !=
                                   std::string::npos; },
                      seconds(10)))
      << agg.Stderr();
  bob = SecureClient(port, keys, "bob", 1, 2, dir + "/bob2");
  ASSERT_TRUE(WaitFor([&] { return ReadJsonLines(dir + "/run.jsonl").size() >= 3; }, seconds(60))) << agg.Stderr();
  const auto joined = ReadJsonLines(dir + "/run.jsonl");
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(joined[i]["clients_reported"], 2);
    EXPECT_EQ(joined[i]["secure"], true);
    EXPECT_EQ(joined[i]["allow_list_keys"], 2);
    EXPECT_GE(joined[i]["handshakes_refused"].get<int>(), 3) << "the monitor counted bob's refusals";
  }

  // 3. bob's key is removed: its live connection is cut off, and a new attempt is refused at
  // the handshake again.
  keys.Unlist("bob");
  agg.Signal(SIGHUP);
  EXPECT_EQ(bob->Wait(seconds(30)), 1) << bob->Stderr();
  EXPECT_NE(bob->Stderr().find("removed from the aggregator's allow-list"), std::string::npos) << bob->Stderr();
  const size_t refused_before = Count(agg.Stderr(), "key not on the allow-list (key " + bob_key);
  bob = SecureClient(port, keys, "bob", 1, 2, dir + "/bob3");
  EXPECT_EQ(bob->Wait(seconds(30)), 1) << bob->Stderr();
  EXPECT_NE(bob->Stderr().find("refused this key"), std::string::npos) << bob->Stderr();
  EXPECT_GT(Count(agg.Stderr(), "key not on the allow-list (key " + bob_key), refused_before);
  EXPECT_EQ(Count(agg.Stderr(), "client bob registered"), 1u) << agg.Stderr();

  agg.Signal(SIGTERM);
  EXPECT_EQ(agg.Wait(seconds(10)), 0) << agg.Stderr();
  alice->Signal(SIGTERM);
  EXPECT_EQ(alice->Wait(seconds(10)), 0) << alice->Stderr();
}

// The first 64 bytes of float data in the middle of the initial model (mlp:32 on digits,
// seed 7: AggregatorArgs), which round 1 sends to every client in full.
std::vector<uint8_t> InitialModelPattern() {
  auto backend = MakeBackend("cpu").value();
  auto model = nn::MakeModel("mlp:32", {64, 10}, backend.get()).value();
  ParameterArena params(model->Layout());
  model->Init(&params, 7);
  const auto bytes = protocol::AsBytes(params.span());
  const size_t mid = bytes.size() / 2;
  return std::vector<uint8_t>(bytes.begin() + mid, bytes.begin() + mid + 64);
}

// One 2-round run with one client whose traffic goes through a recording relay; the
// aggregator's log goes to `agg_log`.
TcpRelay::Recording RecordRun(const std::string& dir, bool secure, const std::string& client_name,
                              std::string* agg_log) {
  const int port = FreePort();
  const Keys keys(dir, {client_name}, {client_name});
  auto args = AggregatorArgs(port, 2, 1, dir + "/run.jsonl");
  args = Concat(args, secure ? SecureAggregatorFlags(keys.dir, keys.allow) : std::vector<std::string>{"--insecure"});
  Process agg("shoal-aggregator", args, dir + "/agg", kOneThread);
  EXPECT_TRUE(Listening(agg)) << agg.Stderr();
  TcpRelay relay(port);
  auto client_args = ClientArgs(relay.port(), 0, 1);
  client_args = Concat(client_args, secure ? SecureClientFlags(keys.dir, client_name)
                                           : std::vector<std::string>{"--name", client_name});
  Process client("shoal-client", client_args, dir + "/client", kOneThread);
  EXPECT_EQ(agg.Wait(seconds(60)), 0) << agg.Stderr();
  EXPECT_EQ(client.Wait(seconds(30)), 0) << client.Stderr();
  EXPECT_EQ(ReadJsonLines(dir + "/run.jsonl").size(), 2u);
  *agg_log = agg.Stderr();
  auto recordings = relay.Recordings();
  EXPECT_EQ(recordings.size(), 1u);
  TcpRelay::Recording all;
  for (const auto& r : recordings) {
    all.to_server.insert(all.to_server.end(), r.to_server.begin(), r.to_server.end());
    all.to_client.insert(all.to_client.end(), r.to_client.begin(), r.to_client.end());
  }
  return all;
}

// Every byte between client and aggregator is recorded by a relay: the model's bytes and the
// client's name are there in plaintext with --insecure (so the check can fail), and nowhere
// with CURVE on. The insecure aggregator says so in every round (docs/SECURITY.md), the
// secure one never.
TEST(Security, PlaintextNeverCrossesTheWire) {
  const std::vector<uint8_t> model = InitialModelPattern();
  const std::string name = "probe-7f3a9c";
  const std::vector<uint8_t> name_bytes(name.begin(), name.end());
  const size_t model_bytes = 2410 * sizeof(float);  // mlp:32 on digits

  std::string plain_log, secure_log;
  const auto plain = RecordRun(TempDir("wire-plain"), /*secure=*/false, name, &plain_log);
  EXPECT_TRUE(Contains(plain.to_client, model)) << "the insecure run must show the model on the wire";
  EXPECT_TRUE(Contains(plain.to_server, name_bytes));
  const std::string warning = "INSECURE: --insecure serves tcp://";
  EXPECT_EQ(Count(plain_log, warning), 2u) << "one warning per round: " << plain_log;

  const auto secure = RecordRun(TempDir("wire-curve"), /*secure=*/true, name, &secure_log);
  EXPECT_EQ(Count(secure_log, "INSECURE"), 0u) << secure_log;
  EXPECT_GT(secure.to_client.size(), 2 * model_bytes) << "the model did travel, encrypted";
  EXPECT_GT(secure.to_server.size(), 2 * model_bytes);
  EXPECT_FALSE(Contains(secure.to_client, model));
  EXPECT_FALSE(Contains(secure.to_server, model));
  EXPECT_FALSE(Contains(secure.to_client, name_bytes));
  EXPECT_FALSE(Contains(secure.to_server, name_bytes));
}

// Writes `bytes` to a fresh TCP connection to 127.0.0.1:port and reads until the peer closes
// it (or 5 s pass). Returns how many bytes came back.
size_t ReplayOverNewConnection(int port, const std::vector<uint8_t>& bytes) {
  const int fd = ConnectLoopback(port);
  if (fd < 0) {
    ADD_FAILURE() << "cannot connect to the aggregator for the replay";
    return 0;
  }
  size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the aggregator closed the connection: the handshake failed
    sent += static_cast<size_t>(n);
  }
  size_t received = 0;
  char buf[4096];
  const auto until = std::chrono::steady_clock::now() + seconds(5);
  while (std::chrono::steady_clock::now() < until) {
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 100) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    received += static_cast<size_t>(n);
  }
  ::close(fd);
  return received;
}

// What an attacker on bob's path does once round 1 is done.
enum class PathAttack { kNone, kReplay, kFlip };

// A 4-round run, alice direct and bob through a relay. Once round 1 is done, with kReplay
// bob's link is held while everything bob has sent so far (handshake, Hello, its round-1
// update, all encrypted) is replayed to the aggregator over a new connection; with kFlip one
// bit of the next bytes bob sends is flipped in transit. Returns the metrics.
std::vector<nlohmann::json> RunWithPathAttack(const std::string& dir, PathAttack attack) {
  const Keys keys(dir, {"alice", "bob"}, {"alice", "bob"});
  const int port = FreePort();
  auto args = Concat(AggregatorArgs(port, 4, 2, dir + "/run.jsonl"), SecureAggregatorFlags(keys.dir, keys.allow));
  SetFlag(args, "--local-epochs", "300");       // rounds of a few hundred ms: the attack lands inside the run
  SetFlag(args, "--heartbeat-timeout", "20");   // bob stays registered while its link is held
  Process agg("shoal-aggregator", args, dir + "/agg", kOneThread);
  EXPECT_TRUE(Listening(agg)) << agg.Stderr();
  TcpRelay relay(port);
  auto alice = SecureClient(port, keys, "alice", 0, 2, dir + "/alice");
  auto bob = SecureClient(relay.port(), keys, "bob", 1, 2, dir + "/bob");
  if (attack != PathAttack::kNone) {
    EXPECT_TRUE(WaitFor([&] { return !ReadJsonLines(dir + "/run.jsonl").empty(); }, seconds(60))) << agg.Stderr();
    EXPECT_LT(ReadJsonLines(dir + "/run.jsonl").size(), 4u) << "the run ended before the attack";
  }
  if (attack == PathAttack::kReplay) {
    relay.Pause();
    const auto recordings = relay.Recordings();
    EXPECT_EQ(recordings.size(), 1u);
    const std::vector<uint8_t> captured = recordings.at(0).to_server;
    EXPECT_GT(captured.size(), 2410 * sizeof(float)) << "the capture holds bob's round-1 update";
    ReplayOverNewConnection(port, captured);
    EXPECT_TRUE(WaitFor([&] { return agg.Stderr().find("handshake #1 failed") != std::string::npos; }, seconds(10)))
        << agg.Stderr();
    relay.Resume();
  } else if (attack == PathAttack::kFlip) {
    relay.CorruptNextToServer();
    // The flipped frame fails its MAC: the aggregator stops reading the connection, ZMTP's
    // heartbeat closes it (6 s), and bob comes back over a new one.
    EXPECT_TRUE(WaitFor([&] { return relay.Recordings().size() >= 2; }, seconds(60))) << bob->Stderr();
    EXPECT_TRUE(relay.corrupted());
  }
  EXPECT_EQ(agg.Wait(seconds(120)), 0) << agg.Stderr();
  EXPECT_EQ(alice->Wait(seconds(30)), 0) << alice->Stderr();
  EXPECT_EQ(bob->Wait(seconds(30)), 0) << bob->Stderr();
  return ReadJsonLines(dir + "/run.jsonl");
}

// A captured encrypted session replayed over a new connection dies in the CURVE handshake
// (the server's cookie is fresh per connection), and a bit flipped in transit kills the
// connection it was on (Poly1305): neither reaches anything above the transport, and the
// aggregate of every round is bit-identical to a run without the attacker.
TEST(Security, ReplayedOrAlteredTrafficIsRejectedAndTheAggregateIsUnchanged) {
  const auto baseline = RunWithPathAttack(TempDir("replay-base"), PathAttack::kNone);
  ASSERT_EQ(baseline.size(), 4u);
  EXPECT_EQ(baseline.back()["handshakes_failed"], 0);
  EXPECT_EQ(baseline.back()["connections"], 2);

  const auto replayed = RunWithPathAttack(TempDir("replay"), PathAttack::kReplay);
  ASSERT_EQ(replayed.size(), 4u);
  EXPECT_EQ(Hashes(replayed), Hashes(baseline));
  for (const auto& l : replayed) EXPECT_EQ(l["clients_reported"], 2);
  EXPECT_GE(replayed.back()["handshakes_failed"].get<int>(), 1);
  EXPECT_EQ(replayed.back()["frames_rejected"], 0) << "nothing of the replay reached the protocol layer";

  const auto flipped = RunWithPathAttack(TempDir("flip"), PathAttack::kFlip);
  ASSERT_EQ(flipped.size(), 4u);
  EXPECT_EQ(Hashes(flipped), Hashes(baseline));
  for (const auto& l : flipped) EXPECT_EQ(l["clients_reported"], 2);
  EXPECT_GE(flipped.back()["connections"].get<int>(), 3) << "bob reconnected";
  EXPECT_EQ(flipped.back()["clients_moved"], 1) << "bob kept its registration";
  // Nothing of the altered frame reached the protocol layer; a heartbeat bob sent on its new
  // connection before its Hello may be refused as not registered, and nothing else.
  const auto& codes = flipped.back()["rejected_by_code"];
  EXPECT_LE(flipped.back()["frames_rejected"].get<int>(), 1) << codes.dump();
  EXPECT_EQ(flipped.back()["frames_rejected"].get<int>(), codes.value("NotRegistered", 0)) << codes.dump();
}

// A raw CURVE client holding a listed key: it speaks the protocol by hand, to misbehave.
class RawClient {
 public:
  RawClient(int port, const Keys& keys, const std::string& name) : socket_(ctx_, zmq::socket_type::dealer) {
    const auto kp = crypto::ReadSecretKeyFile(keys.dir + "/" + name + ".key").value();
    std::array<uint8_t, crypto::kCurveKeyBytes> server{};
    EXPECT_TRUE(crypto::Z85DecodeTo(crypto::ReadPublicKey(keys.dir + "/agg.pub").value(), server).ok());
    zmq_setsockopt(socket_.handle(), ZMQ_CURVE_SERVERKEY, server.data(), server.size());
    zmq_setsockopt(socket_.handle(), ZMQ_CURVE_PUBLICKEY, kp.curve_public.data(), kp.curve_public.size());
    zmq_setsockopt(socket_.handle(), ZMQ_CURVE_SECRETKEY, kp.curve_secret.data(), kp.curve_secret.size());
    socket_.set(zmq::sockopt::linger, 0);
    socket_.connect(Endpoint(port));
  }
  void Send(const protocol::Frame& f) { socket_.send(zmq::buffer(f)); }
  // The next frame (verified), or nullopt after `timeout`.
  std::optional<zmq::message_t> Recv(milliseconds timeout) {
    zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
    if (zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
    zmq::message_t m;
    if (!socket_.recv(m)) return std::nullopt;
    return m;
  }
  // Keep the result while reading the envelope: a frame ZeroMQ delivered misaligned is read
  // from the result's aligned copy (returning only the pointer read freed memory, now and then).
  static protocol::Verified Verify(const zmq::message_t& m) {
    auto v = protocol::VerifyFrame({static_cast<const uint8_t*>(m.data()), m.size()}, 64 << 20);
    EXPECT_TRUE(v.ok()) << v.reason;
    return v;
  }

 private:
  zmq::context_t ctx_;
  zmq::socket_t socket_;
};

// A 3-round run of alice and bob; with `attack`, mallory (listed, authenticated) joins too.
// Once round 1 is open it claims another client's id, sends an update for a round that is not
// open and repeats a sequence number; in every round it is selected for, it then fails its
// round with an update in the wrong encoding, and it heartbeats until the Bye. Returns the
// metrics and, through `errors`, the error codes mallory got back.
std::vector<nlohmann::json> RunWithOptionalAttack(const std::string& dir, bool attack, std::set<wire::ErrorCode>* errors) {
  const Keys keys(dir, {"alice", "bob", "mallory"}, {"alice", "bob", "mallory"});
  const int port = FreePort();
  Process agg("shoal-aggregator",
              Concat(AggregatorArgs(port, 3, attack ? 3 : 2, dir + "/run.jsonl"),
                     SecureAggregatorFlags(keys.dir, keys.allow)),
              dir + "/agg", kOneThread);
  EXPECT_TRUE(Listening(agg)) << agg.Stderr();
  auto alice = SecureClient(port, keys, "alice", 0, 2, dir + "/alice");
  auto bob = SecureClient(port, keys, "bob", 1, 2, dir + "/bob");
  if (attack) {
    RawClient m(port, keys, "mallory");
    uint64_t seq = 1, session = 0, last_round = 0;
    uint32_t id = 0;
    m.Send(protocol::EncodeHello({0, 0, 0, seq}, "mallory", 100, "raw", codec::SupportedStages()));
    const protocol::ChunkRef empty{};
    auto last_heartbeat = std::chrono::steady_clock::now();
    bool bye = false;
    const auto until = std::chrono::steady_clock::now() + seconds(120);
    while (!bye && std::chrono::steady_clock::now() < until) {
      if (id != 0 && std::chrono::steady_clock::now() - last_heartbeat > milliseconds(200)) {
        m.Send(protocol::EncodeHeartbeat({session, last_round, id, ++seq}, false, 0.0f));
        last_heartbeat = std::chrono::steady_clock::now();
      }
      auto f = m.Recv(milliseconds(50));
      if (!f) continue;
      const protocol::Verified verified = RawClient::Verify(*f);
      const wire::Envelope* env = verified.envelope;
      if (!env) continue;
      switch (env->message_type()) {
        case wire::Message::Welcome:
          session = env->session();
          id = env->message_as_Welcome()->client_id();
          break;
        case wire::Message::Error:
          errors->insert(env->message_as_Error()->code());
          break;
        case wire::Message::Bye:
          bye = true;
          break;
        case wire::Message::RoundTask:
          if (env->round() == last_round) break;  // a further chunk of the same round
          last_round = env->round();
          if (last_round == 1) {
            const uint32_t someone_else = id == 1 ? 2 : 1;
            m.Send(protocol::EncodeUpdate({session, 1, someone_else, ++seq}, 100, {}, wire::PayloadEncoding::Codec, empty));
            m.Send(protocol::EncodeUpdate({session, 7, id, ++seq}, 100, {}, wire::PayloadEncoding::Codec, empty));
            m.Send(protocol::EncodeHeartbeat({session, 1, id, ++seq}, true, 0.5f));
            m.Send(protocol::EncodeHeartbeat({session, 1, id, seq}, true, 0.5f));  // the same sequence again
            // A second connection with mallory's key asks for alice's name: refused, since the
            // name belongs to alice's key.
            RawClient impostor(port, keys, "mallory");
            impostor.Send(protocol::EncodeHello({0, 0, 0, 1}, "alice", 100, "raw", codec::SupportedStages()));
            auto reply = impostor.Recv(seconds(10));
            const protocol::Verified verified_reply = reply ? RawClient::Verify(*reply) : protocol::Verified{};
            const wire::Envelope* r = verified_reply.envelope;
            EXPECT_TRUE(r && r->message_type() == wire::Message::Error &&
                        r->message_as_Error()->code() == wire::ErrorCode::Refused)
                << agg.Stderr();
          }
          m.Send(protocol::EncodeUpdate({session, last_round, id, ++seq}, 100, {}, wire::PayloadEncoding::DenseF32, empty));
          break;
        default:
          break;
      }
    }
    EXPECT_TRUE(bye) << agg.Stderr();
  }
  EXPECT_EQ(agg.Wait(seconds(120)), 0) << agg.Stderr();
  EXPECT_EQ(alice->Wait(seconds(30)), 0) << alice->Stderr();
  EXPECT_EQ(bob->Wait(seconds(30)), 0) << bob->Stderr();
  return ReadJsonLines(dir + "/run.jsonl");
}

// Every accepted message is bound to (session, round, sequence, authenticated sender): a
// listed client that claims another's id or name, reports for a closed round or repeats a
// sequence is rejected and counted, and the aggregate is bit-identical to a run without it.
TEST(Security, MessagesAreBoundToTheAuthenticatedSender) {
  std::set<wire::ErrorCode> none, errors;
  const auto baseline = RunWithOptionalAttack(TempDir("binding-base"), false, &none);
  const auto attacked = RunWithOptionalAttack(TempDir("binding"), true, &errors);
  EXPECT_EQ(errors, (std::set<wire::ErrorCode>{wire::ErrorCode::BadSender, wire::ErrorCode::StaleRound,
                                               wire::ErrorCode::Duplicate, wire::ErrorCode::MalformedFrame}));
  ASSERT_EQ(baseline.size(), 3u);
  ASSERT_EQ(attacked.size(), 3u);
  EXPECT_EQ(Hashes(attacked), Hashes(baseline));
  for (const auto& l : attacked) {
    EXPECT_EQ(l["clients_selected"], 3);
    EXPECT_EQ(l["clients_reported"], 2);
  }
  const auto& codes = attacked.back()["rejected_by_code"];
  EXPECT_EQ(codes.value("BadSender", 0), 1) << codes.dump();
  EXPECT_EQ(codes.value("StaleRound", 0), 1) << codes.dump();
  EXPECT_EQ(codes.value("Duplicate", 0), 1) << codes.dump();
  EXPECT_EQ(codes.value("Refused", 0), 1) << "the name grab: " << codes.dump();
  EXPECT_EQ(codes.value("MalformedFrame", 0), 3) << "one update in the wrong encoding per round: " << codes.dump();
}

// The first Error a raw client receives within `timeout` (nullopt if none), with its reason.
std::optional<std::pair<wire::ErrorCode, std::string>> NextError(RawClient& c, milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    auto f = c.Recv(milliseconds(50));
    if (!f) continue;
    const protocol::Verified v = RawClient::Verify(*f);
    if (v.envelope && v.envelope->message_type() == wire::Message::Error) {
      const wire::Error* e = v.envelope->message_as_Error();
      return std::make_pair(e->code(), e->reason() ? e->reason()->str() : std::string());
    }
  }
  return std::nullopt;
}

// The Welcome's (session, client id), or zeros when none came within 10 s.
std::pair<uint64_t, uint32_t> AwaitWelcome(RawClient& c) {
  const auto until = std::chrono::steady_clock::now() + seconds(10);
  while (std::chrono::steady_clock::now() < until) {
    auto f = c.Recv(milliseconds(50));
    if (!f) continue;
    const protocol::Verified v = RawClient::Verify(*f);
    if (v.envelope && v.envelope->message_type() == wire::Message::Welcome)
      return {v.envelope->session(), v.envelope->message_as_Welcome()->client_id()};
  }
  return {0, 0};
}

// The aggregator's transport and registration limits (docs/SECURITY.md, "Limits against
// denial of service"), each against the client it is for, on an aggregator that never starts
// a round (--min-clients 2, --max-clients 1):
// - a TCP connection that never starts its handshake is closed (ZMQ_HANDSHAKE_IVL, 5 s;
//   ZeroMQ's own default is 30 s);
// - a listed client's frame over --chunk-size + 256 KiB drops its connection before it is
//   read: the client's next message arrives on a new connection, which is not registered
//   (a frame the aggregator had read would have been refused as malformed instead);
// - a Hello past --max-clients is refused with "the aggregator is full".
TEST(Security, TheAggregatorsLimitsHoldAgainstAListedClient) {
  const std::string dir = TempDir("limits");
  const Keys keys(dir, {"mallory", "eve"}, {"mallory", "eve"});
  const int port = FreePort();
  auto args = Concat(AggregatorArgs(port, 1, 2, dir + "/run.jsonl"), SecureAggregatorFlags(keys.dir, keys.allow));
  SetFlag(args, "--chunk-size", "64K");
  SetFlag(args, "--max-clients", "1");
  SetFlag(args, "--heartbeat-timeout", "60");
  Process agg("shoal-aggregator", args, dir + "/agg", kOneThread);
  ASSERT_TRUE(Listening(agg)) << agg.Stderr();

  // A silent connection, watched while the rest goes on.
  std::atomic<bool> silent_closed{false};
  std::thread silent([&] {
    const int fd = ConnectLoopback(port);
    if (fd >= 0) {
      char buf[256];
      for (auto until = std::chrono::steady_clock::now() + seconds(20); std::chrono::steady_clock::now() < until;) {
        pollfd p{fd, POLLIN, 0};
        if (::poll(&p, 1, 100) <= 0) continue;
        const ssize_t n = ::recv(fd, buf, sizeof buf, 0);  // the server's greeting, then the close
        if (n == 0 || (n < 0 && errno == ECONNRESET)) {
          silent_closed = true;
          break;
        }
      }
      ::close(fd);
    }
  });
  auto join = [](std::thread* t) { t->join(); };
  std::unique_ptr<std::thread, decltype(join)> joiner(&silent, join);  // joined on every way out

  RawClient mallory(port, keys, "mallory");
  uint64_t seq = 0;
  mallory.Send(protocol::EncodeHello({0, 0, 0, ++seq}, "mallory", 100, "raw", codec::SupportedStages()));
  const auto [session, id] = AwaitWelcome(mallory);
  ASSERT_NE(id, 0u) << agg.Stderr();

  // eve, listed, finds the aggregator full.
  RawClient eve(port, keys, "eve");
  eve.Send(protocol::EncodeHello({0, 0, 0, 1}, "eve", 100, "raw", codec::SupportedStages()));
  const auto full = NextError(eve, seconds(10));
  ASSERT_TRUE(full.has_value()) << agg.Stderr();
  EXPECT_EQ(full->first, wire::ErrorCode::Refused);
  EXPECT_NE(full->second.find("the aggregator is full (1 clients)"), std::string::npos) << full->second;

  // A frame under the bound is read (and refused as no envelope); one over it is not read.
  mallory.Send(protocol::Frame((64 << 10) + (128 << 10), 0x5a));
  const auto read = NextError(mallory, seconds(10));
  ASSERT_TRUE(read.has_value()) << agg.Stderr();
  EXPECT_EQ(read->first, wire::ErrorCode::MalformedFrame) << read->second;
  mallory.Send(protocol::Frame((64 << 10) + (256 << 10) + 1, 0x5a));
  // What was queued behind it went with the connection: heartbeat until one is answered.
  std::optional<std::pair<wire::ErrorCode, std::string>> after;
  for (int i = 0; i < 40 && !after; ++i) {
    mallory.Send(protocol::EncodeHeartbeat({session, 0, id, ++seq}, false, 0.0f));
    after = NextError(mallory, milliseconds(500));
  }
  ASSERT_TRUE(after.has_value()) << agg.Stderr();
  EXPECT_EQ(after->first, wire::ErrorCode::NotRegistered) << "the oversized frame was read: " << after->second;

  joiner.reset();
  EXPECT_TRUE(silent_closed.load()) << "a connection that sent nothing was still open after 20 s";
  agg.Signal(SIGTERM);
  EXPECT_EQ(agg.Wait(seconds(30)), 0) << agg.Stderr();
}

// 1,000 unauthenticated connections keep sending garbage (random bytes, or a valid ZMTP
// greeting announcing CURVE followed by junk) while rounds run: the rounds complete with the
// honest clients, and the aggregator's memory stays under the bound docs/SECURITY.md states.
TEST(Security, FloodOfUnauthenticatedConnectionsDoesNotStopTheRound) {
  const std::string dir = TempDir("flood");
  const Keys keys(dir, {"alice", "bob"}, {"alice", "bob"});
  const int port = FreePort();
  auto args = Concat(AggregatorArgs(port, 3, 2, dir + "/run.jsonl"), SecureAggregatorFlags(keys.dir, keys.allow));
  SetFlag(args, "--chunk-size", "1M");
  SetFlag(args, "--local-epochs", "50");  // rounds long enough to run inside the flood
  SetFlag(args, "--heartbeat-timeout", "10");
  SetFlag(args, "--round-timeout", "60");
  Process agg("shoal-aggregator", args, dir + "/agg", kOneThread);
  ASSERT_TRUE(Listening(agg)) << agg.Stderr();
  const uint64_t rss_idle_kib = ProcMemoryKiB(agg.pid(), "VmRSS");
  ASSERT_GT(rss_idle_kib, 0u);

  constexpr int kConnections = 1000;
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> opened{0}, peak_kib{0}, max_rss_kib{0};
  std::thread flood([&] {
    // ZMTP 3.0 greeting: signature, version 3.0, mechanism "CURVE", as-server 0, filler.
    std::vector<uint8_t> greeting(64, 0);
    greeting[0] = 0xff;
    greeting[9] = 0x7f;
    greeting[10] = 3;
    std::memcpy(&greeting[12], "CURVE", 5);
    Rng rng(99);
    std::vector<int> fds(kConnections, -1);
    auto open = [&](int i) {
      fds[i] = ConnectLoopback(port);
      if (fds[i] < 0) return;
      ::fcntl(fds[i], F_SETFL, O_NONBLOCK);
      ++opened;
      std::vector<uint8_t> junk(256);
      for (auto& b : junk) b = static_cast<uint8_t>(rng.NextU64());
      if (i % 2 == 1) junk.insert(junk.begin(), greeting.begin(), greeting.end());
      (void)::send(fds[i], junk.data(), junk.size(), MSG_NOSIGNAL);
    };
    for (int i = 0; i < kConnections; ++i) open(i);
    char buf[4096];
    while (!stop) {
      // Reopen every connection the aggregator has closed, so the flood never lets up.
      for (int i = 0; i < kConnections && !stop; ++i) {
        if (fds[i] >= 0) {
          const ssize_t n = ::recv(fds[i], buf, sizeof buf, 0);
          if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) continue;
          ::close(fds[i]);
        }
        open(i);
      }
      peak_kib = std::max<uint64_t>(peak_kib, ProcMemoryKiB(agg.pid(), "VmHWM"));
      max_rss_kib = std::max<uint64_t>(max_rss_kib, ProcMemoryKiB(agg.pid(), "VmRSS"));
      std::this_thread::sleep_for(milliseconds(10));
    }
    for (int fd : fds)
      if (fd >= 0) ::close(fd);
  });
  // The flood first meets an aggregator waiting for clients, then runs through the rounds.
  ASSERT_TRUE(WaitFor([&] { return opened.load() >= 3 * kConnections; }, seconds(60)));
  // Past the first rate-limited log line (checked below).
  ASSERT_TRUE(WaitFor([&] { return agg.Stderr().find("handshake #1000 failed") != std::string::npos; }, seconds(120)));
  auto alice = SecureClient(port, keys, "alice", 0, 2, dir + "/alice");
  auto bob = SecureClient(port, keys, "bob", 1, 2, dir + "/bob");
  const int agg_exit = agg.Wait(seconds(180));
  stop = true;
  flood.join();
  ASSERT_EQ(agg_exit, 0) << agg.Stderr();
  EXPECT_EQ(alice->Wait(seconds(30)), 0) << alice->Stderr();
  EXPECT_EQ(bob->Wait(seconds(30)), 0) << bob->Stderr();
  const auto lines = ReadJsonLines(dir + "/run.jsonl");
  ASSERT_EQ(lines.size(), 3u);
  for (const auto& l : lines) EXPECT_EQ(l["clients_reported"], 2);
  // Every connection was accepted and closed without a handshake; those that sent a valid
  // greeting show up as failed handshakes (ZeroMQ reports random bytes only as a disconnect).
  EXPECT_GE(lines.back()["connections"].get<uint64_t>(), static_cast<uint64_t>(kConnections));
  EXPECT_GE(lines.back()["handshakes_failed"].get<uint64_t>(), static_cast<uint64_t>(kConnections / 2));
  EXPECT_EQ(lines.back()["frames_rejected"], 0) << "no garbage reached the protocol layer";

  // Failed handshakes are logged the first 10 in full, then every 1000th (docs/SECURITY.md):
  // the log holds #1..#10 and then only multiples of 1000, however long the flood went on.
  const std::string log = agg.Stderr();
  std::vector<uint64_t> logged;
  const std::string mark = "handshake #";
  for (size_t pos = log.find(mark); pos != std::string::npos; pos = log.find(mark, pos + 1))
    logged.push_back(std::stoull(log.substr(pos + mark.size())));
  ASSERT_GE(logged.size(), 11u) << log.substr(0, 4000);
  for (uint64_t i = 0; i < 10; ++i) EXPECT_EQ(logged[i], i + 1);
  for (size_t i = 10; i < logged.size(); ++i) EXPECT_EQ(logged[i] % 1000, 0u) << logged[i];
  EXPECT_LE(logged.size(), 10 + logged.back() / 1000) << "one line per 1000 after the first 10";

  // docs/SECURITY.md: resident memory <= idle + C x (64 KiB + bytes a connection has sent
  // before failing its handshake) + A x RCVHWM x MAXMSGSIZE, with C = connections in
  // handshake (at most 1000 here, each sending under 1 KiB) and A = 2 authenticated clients,
  // RCVHWM 8, MAXMSGSIZE 1 MiB + 256 KiB.
  const uint64_t bound_kib = rss_idle_kib + kConnections * (64 + 1) + 2 * 8 * (1024 + 256);
  std::printf("aggregator memory: resident %llu KiB idle, at most %llu KiB under the flood (peak %llu KiB); "
              "bound %llu KiB; %llu connections opened\n",
              static_cast<unsigned long long>(rss_idle_kib), static_cast<unsigned long long>(max_rss_kib.load()),
              static_cast<unsigned long long>(peak_kib.load()), static_cast<unsigned long long>(bound_kib),
              static_cast<unsigned long long>(opened.load()));
  EXPECT_LE(peak_kib.load(), bound_kib);
}

// Wrong keys and missing keys: one clear error line and a non-zero exit, quickly.
TEST(Security, KeyMistakesGiveClearErrors) {
  const std::string dir = TempDir("key-errors");
  const Keys keys(dir, {"alice", "stranger"}, {"alice"});
  MakeKeys(dir + "/empty-keys", {"x"});
  fs::create_directories(dir + "/empty-allow");
  const std::string loose = dir + "/loose.key";
  fs::copy_file(keys.dir + "/alice.key", loose);
  fs::permissions(loose, fs::perms::owner_read | fs::perms::owner_write | fs::perms::group_read | fs::perms::others_read);

  const int port = FreePort();
  Process agg("shoal-aggregator",
              Concat(AggregatorArgs(port, 0, 1, dir + "/run.jsonl"), SecureAggregatorFlags(keys.dir, keys.allow)),
              dir + "/agg", kOneThread);
  ASSERT_TRUE(Listening(agg)) << agg.Stderr();

  struct Case {
    std::string program;
    std::vector<std::string> args;
    int code;
    std::string needle;
  };
  const std::string ep = Endpoint(port);
  const auto client = [&](std::vector<std::string> extra) { return Concat(ClientArgs(port, 0, 1), extra); };
  const std::vector<Case> cases = {
      // The aggregator: keys go together, an empty list admits nobody, secrets stay private.
      {"shoal-aggregator", {"--listen", Endpoint(FreePort()), "--secret-key", keys.dir + "/agg.key"}, 2,
       "--secret-key needs --allow-keys"},
      {"shoal-aggregator", {"--listen", Endpoint(FreePort()), "--allow-keys", keys.allow}, 2,
       "--allow-keys needs --secret-key"},
      {"shoal-aggregator",
       {"--listen", Endpoint(FreePort()), "--secret-key", keys.dir + "/agg.key", "--allow-keys", dir + "/empty-allow"},
       1, "holds no keys"},
      {"shoal-aggregator", {"--listen", Endpoint(FreePort()), "--secret-key", loose, "--allow-keys", keys.allow}, 1,
       "readable by others"},
      {"shoal-aggregator",
       {"--listen", Endpoint(FreePort()), "--secret-key", keys.dir + "/agg.key", "--allow-keys", keys.allow,
        "--insecure"},
       2, "--insecure contradicts --secret-key"},
      {"shoal-aggregator", {"--listen", "tcp://*:" + std::to_string(FreePort())}, 1, "--secret-key and --allow-keys"},
      // The client: a refused key, a wrong server key, no keys at all, half a key pair.
      {"shoal-client", client(SecureClientFlags(keys.dir, "stranger")), 1, "refused this key"},
      {"shoal-client",
       client({"--secret-key", keys.dir + "/alice.key", "--server-key", keys.dir + "/stranger.pub"}), 1,
       "check that the public key given for it"},
      {"shoal-client", client({}), 1, "pass --secret-key and the server's public key"},
      {"shoal-client", client({"--secret-key", keys.dir + "/alice.key"}), 2, "--secret-key needs --server-key"},
      {"shoal-client", client({"--secret-key", keys.dir + "/alice.key", "--server-key", keys.dir + "/agg.key"}), 2,
       "is a secret key file"},
      {"shoal-client", {"--connect", "tcp://192.0.2.1:7070", "--connect-timeout", "1"}, 1, "is not a loopback address"},
      // A host name that starts like 127.x is not loopback (it once passed by its prefix).
      {"shoal-client", {"--connect", "tcp://127.example.com:7071", "--connect-timeout", "1"}, 1,
       "tcp://127.example.com:7071 is not a loopback address"},
      {"shoal-aggregator", {"--listen", "tcp://127.example.com:7071"}, 1, "is not a loopback address"},
  };
  for (const auto& c : cases) {
    const auto start = std::chrono::steady_clock::now();
    Process p(c.program, c.args, dir + "/case");
    EXPECT_EQ(p.Wait(seconds(30)), c.code) << c.program << " " << c.needle << ": " << p.Stderr();
    EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(15)) << "bounded retries: " << c.needle;
    const std::string err = p.Stderr();
    EXPECT_NE(err.find(c.needle), std::string::npos) << "stderr was: " << err;
    EXPECT_EQ(Count(err, "error:"), 1u) << err;
  }
  agg.Signal(SIGTERM);
  EXPECT_EQ(agg.Wait(seconds(10)), 0);
}

}  // namespace
}  // namespace shoal::testing
