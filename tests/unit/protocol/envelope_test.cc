#include "protocol/federated.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/rng.h"
#include "protocol/messages.h"

namespace shoal::protocol {
namespace {

TaskConfig SampleTask() {
  TaskConfig t;
  t.model = "mlp:8";
  t.layout = {{"fc0.weight", {4, 8}}, {"fc0.bias", {8}}, {"fc1.weight", {8, 3}}, {"fc1.bias", {3}}};
  t.dataset = "digits";
  t.optimizer.name = "adamw";
  t.optimizer.learning_rate = 0.01f;
  t.optimizer.weight_decay = 0.1f;
  t.local_epochs = 2;
  t.batch_size = 16;
  t.prox_mu = 0.5f;
  t.seed = 99;
  t.test_fraction = 0.25;
  t.codec = "ef|topk:ratio=0.01|int8";
  t.codec_down = "int8";
  t.codec_slow = "ef|sign";
  t.slow_below_mbps = 2.5;
  t.optimizer.demo_decay = 0.99f;
  t.optimizer.demo_chunk = 32;
  t.optimizer.demo_topk = 4;
  t.feature_mean = {0.5f, -2.0f, 1000.0f, 0.0f};
  t.feature_scale = {1.0f, 0.25f, 0.001f, 3.0f};
  return t;
}

// A Welcome carrying `task`, encoded, verified (the frame must pass) and decoded again.
StatusOr<WelcomeInfo> TaskRoundTrip(const TaskConfig& task) {
  WelcomeInfo w;
  w.client_id = 7;
  w.task = task;
  Frame f = EncodeWelcome({11, 0, 0, 3}, w);
  Verified v = VerifyFrame(f, f.size());
  EXPECT_TRUE(v.ok()) << v.reason;
  if (!v.ok()) return Status::Protocol("the frame did not verify: " + v.reason);
  return DecodeWelcome(v.envelope->message_as_Welcome());
}

TEST(Envelope, WelcomeRoundTripsEveryField) {
  WelcomeInfo w;
  w.client_id = 7;
  w.task = SampleTask();
  w.heartbeat_interval_ms = 500;
  w.heartbeat_timeout_ms = 4000;
  w.chunk_bytes = 4096;
  w.max_frame_bytes = 8192;
  Frame f = EncodeWelcome({11, 0, 0, 3}, w);
  Verified v = VerifyFrame(f, f.size());
  ASSERT_TRUE(v.ok()) << v.reason;
  EXPECT_EQ(v.envelope->session(), 11u);
  EXPECT_EQ(v.envelope->sequence(), 3u);
  auto back = DecodeWelcome(v.envelope->message_as_Welcome());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->client_id, 7u);
  EXPECT_EQ(back->task.layout, w.task.layout);
  EXPECT_EQ(back->task.model, "mlp:8");
  EXPECT_EQ(back->task.optimizer.name, "adamw");
  EXPECT_FLOAT_EQ(back->task.optimizer.weight_decay, 0.1f);
  EXPECT_EQ(back->task.local_epochs, 2u);
  EXPECT_EQ(back->task.batch_size, 16u);
  EXPECT_FLOAT_EQ(back->task.prox_mu, 0.5f);
  EXPECT_EQ(back->task.seed, 99u);
  EXPECT_DOUBLE_EQ(back->task.test_fraction, 0.25);
  EXPECT_EQ(back->task.codec_slow, "ef|sign");
  EXPECT_DOUBLE_EQ(back->task.slow_below_mbps, 2.5);
  EXPECT_EQ(back->chunk_bytes, 4096u);
  // Everything the task carries survives the trip, including the codecs and DeMo settings.
  EXPECT_TRUE(back->task == w.task);
}

// The committed rounds a Welcome lists (journal.h) come back as sent, and a list that is not
// positive and increasing, or longer than kMaxCommittedRounds, is refused.
TEST(Envelope, WelcomeCarriesTheClientsCommittedRounds) {
  auto trip = [](std::optional<std::vector<uint64_t>> rounds) {
    WelcomeInfo w;
    w.client_id = 7;
    w.task = SampleTask();
    w.committed_rounds = std::move(rounds);
    Frame f = EncodeWelcome({11, 0, 0, 3}, w);
    Verified v = VerifyFrame(f, f.size());
    EXPECT_TRUE(v.ok()) << v.reason;
    return DecodeWelcome(v.envelope->message_as_Welcome());
  };
  auto back = trip(std::vector<uint64_t>{3, 4, 9});
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->committed_rounds, (std::vector<uint64_t>{3, 4, 9}));
  EXPECT_EQ(trip(std::vector<uint64_t>{}).value().committed_rounds, std::vector<uint64_t>{}) << "empty is not absent";
  EXPECT_FALSE(trip(std::nullopt).value().committed_rounds);
  for (const auto& bad : std::vector<std::vector<uint64_t>>{{0}, {4, 4}, {5, 2}}) {
    auto refused = trip(bad);
    ASSERT_FALSE(refused.ok());
    EXPECT_NE(refused.status().message().find("increasing"), std::string::npos);
  }
  std::vector<uint64_t> many(kMaxCommittedRounds + 1);
  for (size_t i = 0; i < many.size(); ++i) many[i] = i + 1;
  auto refused = trip(many);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.status().message().find("more than"), std::string::npos);
}

// A per-client upload codec needs a positive, finite rate bound; a task without one decodes
// with none.
TEST(Envelope, WelcomeRefusesACodecSlowWithoutAValidRate) {
  for (double rate : {0.0, -1.0, std::nan(""), static_cast<double>(INFINITY)}) {
    TaskConfig t = SampleTask();
    t.slow_below_mbps = rate;
    auto back = TaskRoundTrip(t);
    ASSERT_FALSE(back.ok()) << rate;
    EXPECT_NE(back.status().message().find("slow_below_mbps"), std::string::npos);
  }
  TaskConfig plain = SampleTask();
  plain.codec_slow.clear();
  plain.slow_below_mbps = 0;
  auto back = TaskRoundTrip(plain);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->task.codec_slow, "");
}

// A task's standardization: equal lengths, finite numbers, scales > 0; refused otherwise with
// a message naming it. Hello's capabilities travel beside its codecs.
TEST(Envelope, StandardizationIsCheckedAndHelloCarriesItsFeatures) {
  auto back = TaskRoundTrip(SampleTask());
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->task.feature_mean, SampleTask().feature_mean);
  EXPECT_EQ(back->task.feature_scale, SampleTask().feature_scale);
  TaskConfig shorter = SampleTask();
  shorter.feature_scale.pop_back();
  EXPECT_NE(TaskRoundTrip(shorter).status().message().find("differ in length"), std::string::npos);
  for (float bad : {0.0f, -1.0f, std::nanf(""), INFINITY}) {
    TaskConfig t = SampleTask();
    t.feature_scale[1] = bad;
    EXPECT_NE(TaskRoundTrip(t).status().message().find("standardization of feature 1"), std::string::npos) << bad;
  }
  TaskConfig nan_mean = SampleTask();
  nan_mean.feature_mean[2] = std::nanf("");
  EXPECT_FALSE(TaskRoundTrip(nan_mean).ok());

  Frame hello = EncodeHello({0, 0, 0, 1}, "c", 10, "builtin", {"int8"}, {"standardize"});
  Verified v = VerifyFrame(hello, hello.size());
  ASSERT_TRUE(v.ok()) << v.reason;
  auto m = DecodeMessage(v);
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  const auto& h = std::get<Hello>(m->body);
  EXPECT_EQ(h.codecs, std::vector<std::string>{"int8"});
  EXPECT_EQ(h.features, std::vector<std::string>{"standardize"});
}

// ZeroMQ delivers small frames at any offset of its receive buffer: a frame at every
// misalignment verifies and decodes to the same task (read from an aligned copy; UBSan in
// scripts/test would flag a misaligned read).
TEST(Envelope, MisalignedFramesVerifyAndDecode) {
  WelcomeInfo w;
  w.client_id = 5;
  w.task = SampleTask();
  Frame f = EncodeWelcome({11, 0, 0, 3}, w);
  std::vector<uint64_t> storage(f.size() / 8 + 2);
  for (size_t shift = 0; shift < 8; ++shift) {
    uint8_t* at = reinterpret_cast<uint8_t*>(storage.data()) + shift;
    std::memcpy(at, f.data(), f.size());
    Verified v = VerifyFrame({at, f.size()}, f.size());
    ASSERT_TRUE(v.ok()) << "shift " << shift << ": " << v.reason;
    EXPECT_EQ(v.aligned != nullptr, shift != 0);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(v.envelope) % alignof(uint32_t), 0u);
    Verified moved = std::move(v);  // the envelope stays valid when the result moves
    auto back = DecodeWelcome(moved.envelope->message_as_Welcome());
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_TRUE(back->task == w.task) << "shift " << shift;
  }
}

TEST(Envelope, VerifierRejectsTruncatedFramesAtEveryLength) {
  Frame f = EncodeHello({0, 0, 0, 1}, "client-a", 100, "builtin", {"int8", "topk"});
  ASSERT_TRUE(VerifyFrame(f, 1 << 20).ok());
  for (size_t n = 0; n < f.size(); ++n) {
    Verified v = VerifyFrame(std::span<const uint8_t>(f.data(), n), 1 << 20);
    if (v.ok()) {
      // Only trailing alignment padding (at most 7 bytes) may go without harm, and then the
      // content must be intact.
      EXPECT_GE(n + 8, f.size()) << "prefix of " << n << " bytes accepted";
      const wire::Hello* h = v.envelope->message_as_Hello();
      ASSERT_NE(h, nullptr);
      EXPECT_EQ(h->client_name()->str(), "client-a");
      EXPECT_EQ(h->num_examples(), 100u);
    } else {
      EXPECT_EQ(v.error, wire::ErrorCode::MalformedFrame);
    }
  }
}

TEST(Envelope, VerifierRejectsRandomBytes) {
  Rng rng(1);
  for (int i = 0; i < 2000; ++i) {
    Frame f(rng.Below(300));
    for (auto& b : f) b = static_cast<uint8_t>(rng.NextU64());
    if (f.size() >= 8 && i % 2) std::memcpy(f.data() + 4, "SHOL", 4);  // get past the identifier check
    EXPECT_FALSE(VerifyFrame(f, 1 << 20).ok());
  }
}

TEST(Envelope, VerifierRejectsOversizedFrames) {
  Frame f = EncodeHello({0, 0, 0, 1}, "client-a", 100, "builtin", {"int8", "topk"});
  Verified v = VerifyFrame(f, f.size() - 1);
  EXPECT_FALSE(v.ok());
  EXPECT_NE(v.reason.find("exceeds"), std::string::npos);
}

TEST(Envelope, WrongVersionNamesBothVersions) {
  flatbuffers::FlatBufferBuilder fbb;
  auto msg = wire::CreateHelloDirect(fbb, "x", 1, "t");
  wire::EnvelopeBuilder eb(fbb);
  eb.add_version(kProtocolVersion + 1);
  eb.add_message_type(wire::Message::Hello);
  eb.add_message(msg.Union());
  fbb.Finish(eb.Finish(), wire::EnvelopeIdentifier());
  Verified v = VerifyFrame({fbb.GetBufferPointer(), fbb.GetSize()}, 1 << 20);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.error, wire::ErrorCode::VersionMismatch);
  EXPECT_NE(v.reason.find("version " + std::to_string(kProtocolVersion + 1)), std::string::npos) << v.reason;
  EXPECT_NE(v.reason.find("version " + std::to_string(kProtocolVersion)), std::string::npos) << v.reason;
}

TEST(Envelope, EnvelopeWithoutMessageIsRejected) {
  flatbuffers::FlatBufferBuilder fbb;
  wire::EnvelopeBuilder eb(fbb);
  eb.add_version(kProtocolVersion);
  fbb.Finish(eb.Finish(), wire::EnvelopeIdentifier());
  EXPECT_FALSE(VerifyFrame({fbb.GetBufferPointer(), fbb.GetSize()}, 1 << 20).ok());
}

TEST(Chunks, SplitAndReassembleIsExactForEverySizeAndChunk) {
  Rng rng(3);
  for (size_t total = 0; total <= 300; total += (total < 40 ? 1 : 7)) {
    std::vector<uint8_t> payload(total);
    for (auto& b : payload) b = static_cast<uint8_t>(rng.NextU64());
    for (size_t chunk = 1; chunk <= 64; chunk += (chunk < 10 ? 1 : 9)) {
      auto chunks = SplitPayload(payload, chunk);
      ASSERT_FALSE(chunks.empty());
      // Deliver in a shuffled order through real encoded frames.
      std::vector<size_t> order(chunks.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = i;
      rng.Shuffle(std::span<size_t>(order));
      ChunkAssembler a(total);
      for (size_t i : order) {
        EXPECT_LE(chunks[i].data.size(), chunk);
        Frame f = EncodeUpdate({1, 1, 1, i + 1}, 5, {}, wire::PayloadEncoding::Codec, chunks[i]);
        Verified v = VerifyFrame(f, 1 << 20);
        ASSERT_TRUE(v.ok());
        ASSERT_TRUE(a.Add(v.envelope->message_as_Update()->payload()).ok()) << total << "/" << chunk;
      }
      ASSERT_TRUE(a.complete());
      EXPECT_EQ(a.Take(), payload) << total << "/" << chunk;
    }
  }
}

// Builds a Chunk table by hand so tests can send inconsistent ones.
struct RawChunk {
  flatbuffers::FlatBufferBuilder fbb;
  const wire::Chunk* Make(uint32_t index, uint32_t count, uint64_t offset, uint64_t total, size_t len) {
    fbb.Clear();
    std::vector<uint8_t> data(len, 0xab);
    fbb.Finish(wire::CreateChunk(fbb, index, count, offset, total, fbb.CreateVector(data)));
    return flatbuffers::GetRoot<wire::Chunk>(fbb.GetBufferPointer());
  }
};

// What an assembler holds follows the bytes that arrived, not the total the first chunk
// declares (issue 32, finding 6: a member could make every ring slot allocate the declared
// total with one small chunk): one 64 KiB chunk of a declared 64 MiB payload holds at most
// twice its size, in order or not; the payload still assembles.
TEST(Chunks, AnAssemblerHoldsWhatArrivedNotWhatWasDeclared) {
  const uint64_t total = uint64_t{64} << 20, count = 1024, len = total / count;
  RawChunk rc;
  ChunkAssembler first(total), last(total);
  ASSERT_TRUE(first.Add(rc.Make(0, count, 0, total, len)).ok());
  EXPECT_LE(first.held_bytes(), 2 * len);
  ASSERT_TRUE(last.Add(rc.Make(count - 1, count, (count - 1) * len, total, len)).ok());
  EXPECT_LE(last.held_bytes(), 2 * len);
  for (uint32_t i = 1; i < 8; ++i) ASSERT_TRUE(first.Add(rc.Make(i, count, i * len, total, len)).ok());
  EXPECT_LE(first.held_bytes(), 16 * len) << "8 chunks in: at most twice 8 chunks";
  EXPECT_FALSE(first.Add(rc.Make(3, count, 3 * len, total, len)).ok()) << "a duplicate, in order";
  EXPECT_FALSE(last.Add(rc.Make(count - 1, count, (count - 1) * len, total, len)).ok()) << "a duplicate, ahead";
}

TEST(Chunks, AssemblerRejectsInconsistentChunks) {
  RawChunk rc;
  {
    ChunkAssembler a(100);
    EXPECT_FALSE(a.Add(rc.Make(0, 1, 0, 101, 101)).ok()) << "over the size limit";
  }
  {
    ChunkAssembler a(100);
    EXPECT_FALSE(a.Add(rc.Make(2, 2, 0, 10, 5)).ok()) << "index past count";
  }
  {
    ChunkAssembler a(100);
    EXPECT_FALSE(a.Add(rc.Make(0, 2, 0, 10, 4)).ok()) << "wrong length (balanced chunk is 5)";
  }
  {
    ChunkAssembler a(100);
    EXPECT_FALSE(a.Add(rc.Make(1, 2, 4, 10, 5)).ok()) << "wrong offset";
  }
  {
    ChunkAssembler a(100);
    ASSERT_TRUE(a.Add(rc.Make(0, 2, 0, 10, 5)).ok());
    EXPECT_FALSE(a.Add(rc.Make(0, 2, 0, 10, 5)).ok()) << "duplicate";
    EXPECT_FALSE(a.Add(rc.Make(1, 3, 5, 10, 5)).ok()) << "count changed";
    EXPECT_FALSE(a.Add(rc.Make(1, 2, 5, 12, 5)).ok()) << "total changed";
    EXPECT_TRUE(a.Add(rc.Make(1, 2, 5, 10, 5)).ok());
    EXPECT_TRUE(a.complete());
  }
  {
    ChunkAssembler a(100);
    EXPECT_FALSE(a.Add(rc.Make(0, 11, 0, 10, 1)).ok()) << "more chunks than bytes";
    EXPECT_FALSE(a.Add(nullptr).ok());
  }
}

// A payload in one chunk is taken where it lies (the ring's pieces, without a copy), after the
// checks Add makes; several chunks, or none, are left to Add.
TEST(Chunks, AWholePayloadInOneChunkIsAViewAfterAddsChecks) {
  RawChunk rc;
  const wire::Chunk* one = rc.Make(0, 1, 0, 10, 10);
  auto whole = ChunkAssembler::Whole(ViewChunk(one), 100);
  ASSERT_TRUE(whole.ok() && *whole);
  EXPECT_EQ((*whole)->data(), one->data()->data()) << "a view into the frame, not a copy";
  EXPECT_EQ((*whole)->size(), 10u);
  auto several = ChunkAssembler::Whole(ViewChunk(rc.Make(0, 2, 0, 10, 5)), 100);
  ASSERT_TRUE(several.ok());
  EXPECT_FALSE(*several) << "two chunks: assembled by Add";
  auto none = ChunkAssembler::Whole(ViewChunk(nullptr), 100);
  ASSERT_TRUE(none.ok());
  EXPECT_FALSE(*none) << "no chunk: Add says so";
  const auto message = [](const ChunkView& c, uint64_t limit) {
    ChunkAssembler a(limit);
    const std::string added = a.Add(c).message();
    auto w = ChunkAssembler::Whole(c, limit);
    EXPECT_FALSE(w.ok());
    EXPECT_EQ(w.status().message(), added);
    return added;
  };
  EXPECT_NE(message(ViewChunk(rc.Make(0, 1, 0, 101, 101)), 100), "") << "over the size limit";
  EXPECT_NE(message(ViewChunk(rc.Make(0, 1, 1, 10, 9)), 100), "") << "wrong offset and length";
}

TEST(Payload, DenseDecodeChecksSizeAndFiniteness) {
  std::vector<float> v = {1.0f, -2.5f, 3.0f};
  auto ok = DecodeDenseF32(AsBytes(v), 3);
  ASSERT_TRUE(ok.ok());
  EXPECT_EQ(*ok, v);
  EXPECT_FALSE(DecodeDenseF32(AsBytes(v), 4).ok());
  v[1] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(DecodeDenseF32(AsBytes(v), 3).ok());
  v[1] = std::numeric_limits<float>::infinity();
  EXPECT_FALSE(DecodeDenseF32(AsBytes(v), 3).ok());
}

TEST(Task, DecodeRejectsHostileFields) {
  auto encode_and_decode = [](const TaskConfig& t) { return TaskRoundTrip(t).status(); };
  EXPECT_TRUE(encode_and_decode(SampleTask()).ok());
  TaskConfig t = SampleTask();
  t.layout[0].shape = {4, 0};
  EXPECT_FALSE(encode_and_decode(t).ok()) << "zero dimension";
  t = SampleTask();
  t.layout[0].shape = {1 << 20, 1 << 20};
  EXPECT_FALSE(encode_and_decode(t).ok()) << "larger than the payload limit";
  t = SampleTask();
  t.layout.clear();
  EXPECT_FALSE(encode_and_decode(t).ok()) << "empty layout";
  t = SampleTask();
  t.batch_size = 0;
  EXPECT_FALSE(encode_and_decode(t).ok());
  t = SampleTask();
  t.optimizer.learning_rate = std::numeric_limits<float>::quiet_NaN();
  EXPECT_FALSE(encode_and_decode(t).ok());
  t = SampleTask();
  t.test_fraction = 1.5;
  EXPECT_FALSE(encode_and_decode(t).ok());
}

TEST(Task, RoundConfigChecks) {
  flatbuffers::FlatBufferBuilder fbb;
  auto make = [&](float lr, uint32_t epochs, uint32_t steps, float mu) {
    fbb.Clear();
    fbb.Finish(wire::CreateRoundConfig(fbb, lr, epochs, steps, mu));
    return flatbuffers::GetRoot<wire::RoundConfig>(fbb.GetBufferPointer());
  };
  EXPECT_TRUE(DecodeRoundConfig(make(0.1f, 1, 0, 0.0f), 3).ok());
  EXPECT_EQ(DecodeRoundConfig(make(0.1f, 1, 0, 0.0f), 3)->round, 3u);
  EXPECT_FALSE(DecodeRoundConfig(make(0.0f, 1, 0, 0.0f), 3).ok());
  EXPECT_FALSE(DecodeRoundConfig(make(0.1f, 0, 0, 0.0f), 3).ok());
  EXPECT_FALSE(DecodeRoundConfig(make(0.1f, 1, 0, -1.0f), 3).ok());
  EXPECT_FALSE(DecodeRoundConfig(nullptr, 3).ok());
}

}  // namespace
}  // namespace shoal::protocol
