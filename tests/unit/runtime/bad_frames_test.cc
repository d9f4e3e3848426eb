// A peer that sends the aggregator bad frames gets an Error back, is counted, and does not
// disturb the real clients.
#include <gtest/gtest.h>

#include <limits>

#include "aggregate/exact_sum.h"
#include "codec/codec.h"
#include "federation.h"
#include "protocol/federated.h"
#include "protocol/limits.h"

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

// A trainer that trains as the built-in one does and claims `examples` examples for each
// update: an application's trainer may say anything, and the service bounds it.
class Claiming : public Trainer {
 public:
  Claiming(std::unique_ptr<Trainer> inner, uint64_t examples) : inner_(std::move(inner)), examples_(examples) {}
  std::string name() const override { return inner_->name(); }
  bool standardizes() const override { return inner_->standardizes(); }
  Status Configure(const TaskConfig& task) override { return inner_->Configure(task); }
  uint64_t num_examples() const override { return inner_->num_examples(); }
  Status Train(std::span<const float> global, const RoundConfig& round, const TrainContext& ctx,
               TrainResult* out) override {
    SHOAL_RETURN_IF_ERROR(inner_->Train(global, round, ctx, out));
    out->num_examples = examples_;
    return Status::Ok();
  }

 private:
  std::unique_ptr<Trainer> inner_;
  uint64_t examples_;
};

// docs/SECURITY.md: a listed client's num_examples (its FedAvg weight) is at most 2^40. Client 1
// claims 2^40 + 1 in every round: its update is refused at the service and counted, the round
// goes on with client 0. Claiming exactly 2^40 is accepted (the bound is where it is stated).
TEST_F(RuntimeTest, AnExampleCountOutOfRangeIsRefusedAtTheService) {
  auto run = [&](uint64_t claimed, const std::string& metrics) {
    Federation fed(Options(2, 2, 2000, metrics), 1);
    EXPECT_TRUE(fed.ok());
    int made = 0;
    fed.wrap_trainer = [&made, claimed](std::unique_ptr<Trainer> t) -> std::unique_ptr<Trainer> {
      if (made++ == 1) return std::make_unique<Claiming>(std::move(t), claimed);
      return t;
    };
    fed.AddClients(2);
    return fed.Run(kRunLimit);
  };
  const auto over = run(protocol::kMaxExamples + 1, "over.jsonl");
  ASSERT_NO_FATAL_FAILURE(ExpectRounds(over, 2));
  for (size_t r = 0; r < over.size(); ++r) {
    ExpectRound(over[r], 2, 1);
    EXPECT_EQ(over[r]["rejected_by_code"]["MalformedFrame"].get<uint64_t>(), r + 1) << over[r].dump();
  }
  const auto at = run(protocol::kMaxExamples, "at.jsonl");
  ASSERT_NO_FATAL_FAILURE(ExpectRounds(at, 2));
  for (const auto& line : at) {
    ExpectRound(line, 2, 2);
    EXPECT_EQ(line["frames_rejected"].get<uint64_t>(), 0u) << line.dump();
  }
}

// A raw member of the in-process network that registers and answers each round's task with
// the update `make(round)` gives, heartbeating in between, until the service's Bye. The
// codes of the Errors it receives are collected.
class RawMember {
 public:
  using Make = std::function<std::vector<uint8_t>(uint64_t round, uint64_t session, uint32_t id, uint64_t seq)>;
  RawMember(Federation& fed, std::string name, Make make)
      : channel_(fed.net().Connect(kAggregatorName)), name_(std::move(name)), make_(std::move(make)) {
    thread_ = std::thread([this] { Loop(); });
  }
  ~RawMember() { Join(); }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  std::vector<wire::ErrorCode> errors;  // read after Join
  bool bye = false;

 private:
  void Loop() {
    (void)channel_->Send(protocol::EncodeHello({0, 0, 0, ++seq_}, name_, 100, "raw", codec::SupportedStages(),
                                               {"standardize"}),
                         milliseconds(1000));
    uint64_t session = 0, answered = 0;
    uint32_t id = 0;
    auto beat = Clock::now();
    for (auto until = Clock::now() + kRunLimit; !bye && Clock::now() < until;) {
      if (id && Clock::now() - beat > milliseconds(100)) {
        (void)channel_->Send(protocol::EncodeHeartbeat({session, answered, id, ++seq_}, false, 0.0f), milliseconds(100));
        beat = Clock::now();
      }
      auto in = channel_->Recv(milliseconds(20));
      if (!in.ok() || !*in) continue;
      protocol::Verified v = protocol::VerifyFrame((*in)->bytes(), protocol::MaxFrameBytes(protocol::kDefaultChunkBytes));
      if (!v.ok()) continue;
      const wire::Envelope* env = v.envelope;
      switch (env->message_type()) {
        case wire::Message::Welcome:
          session = env->session();
          id = env->message_as_Welcome()->client_id();
          break;
        case wire::Message::Error:
          errors.push_back(env->message_as_Error()->code());
          break;
        case wire::Message::Bye:
          bye = true;
          (void)channel_->Send(protocol::EncodeBye({session, answered, id, ++seq_}, "done"), milliseconds(100));
          break;
        case wire::Message::RoundTask:
          if (env->round() == answered) break;
          answered = env->round();
          (void)channel_->Send(make_(answered, session, id, ++seq_), milliseconds(1000));
          break;
        default:
          break;
      }
    }
  }
  std::unique_ptr<transport::Channel> channel_;
  std::string name_;
  Make make_;
  uint64_t seq_ = 0;
  std::thread thread_;
};

// A parent service takes an edge's exact partial sum (docs/SECURITY.md, "Edge aggregators")
// only after every check: a raw member sends one malformed partial sum per round (bytes that
// are no sum, a sum of another weight than declared, an empty sum, a sum whose mean is above
// --max-update-norm, a sum of another model's size): each is refused, counted, and the round
// goes on with the real client. A well-formed partial sum from the same member is taken
// (round 6), so the refusals are the checks', not the member's.
TEST_F(RuntimeTest, AParentRefusesMalformedPartialSums) {
  AggregatorOptions o = Options(2, 6);
  o.max_update_norm = 100.0;
  Federation fed(o, 1);
  ASSERT_TRUE(fed.ok());
  fed.StartService();
  const size_t n = 6 * 3 + 3;  // the linear model on 6 features, 3 classes
  auto sum_of = [](size_t size, float value, uint64_t weight) {
    aggregator::ExactSum s(size);
    if (weight) {
      EXPECT_TRUE(s.Add(std::vector<float>(size, value), weight).ok());
    }
    return s.Serialize();
  };
  RawMember edge(fed, "edge", [&](uint64_t round, uint64_t session, uint32_t id, uint64_t seq) {
    std::vector<uint8_t> payload;
    uint64_t weight = 40;
    switch (round) {
      case 1: payload.assign(64, 0x5a); break;                    // not a serialized sum
      case 2: payload = sum_of(n, 0.01f, 40); weight = 41; break;  // declared weight differs
      case 3: payload = sum_of(n, 0.0f, 0); break;                 // an empty sum (weight 0)
      case 4: payload = sum_of(n, 1000.0f, 40); break;             // mean norm ~4,600 > 100
      case 5: payload = sum_of(n + 1, 0.01f, 40); break;           // another model's size
      default: payload = sum_of(n, 0.01f, 40); break;              // well formed
    }
    protocol::ChunkRef chunk{0, 1, 0, payload.size(), payload};
    return protocol::EncodeUpdate({session, round, id, seq}, weight, {}, wire::PayloadEncoding::PartialSum, chunk);
  });
  fed.AddClients(1);
  fed.StartClients();
  fed.Finish(kRunLimit);
  edge.Join();
  const auto lines = fed.Metrics();
  ASSERT_NO_FATAL_FAILURE(ExpectRounds(lines, 6));
  for (size_t r = 0; r < 5; ++r) {
    ExpectRound(lines[r], 2, 1);
    EXPECT_EQ(lines[r]["frames_rejected"].get<uint64_t>(), r + 1) << lines[r].dump();
  }
  ExpectRound(lines[5], 2, 2);
  EXPECT_EQ(lines[5]["frames_rejected"].get<uint64_t>(), 5u) << lines[5].dump();
  EXPECT_TRUE(edge.bye);
  EXPECT_EQ(edge.errors.size(), 5u);
  const auto& codes = lines.back()["rejected_by_code"];
  EXPECT_EQ(codes.value("MalformedFrame", 0), 4) << codes.dump();
  EXPECT_EQ(codes.value("UpdateTooLarge", 0), 1) << codes.dump();
}

}  // namespace
}  // namespace shoal::testing
