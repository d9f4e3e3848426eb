// Writes seed inputs for the fuzz harnesses into OUT/<harness>/: valid frames of each kind,
// valid payloads of each codec, key files, a config file. scripts/fuzz starts each run from
// these and the committed corpus; a seed that reaches deep code saves the fuzzer from finding
// the FlatBuffers layout or a payload header byte by byte.
//   shoal_fuzz_seeds OUT
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "codec/codec.h"
#include "core/rng.h"
#include "crypto/keys.h"
#include "protocol/federated.h"
#include "protocol/peer.h"
#include "protocol/secagg.h"

namespace {

namespace fs = std::filesystem;
using namespace shoal;

void Write(const fs::path& dir, const std::string& name, const std::vector<uint8_t>& bytes) {
  fs::create_directories(dir);
  std::ofstream(dir / name, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()),
                                                    static_cast<std::streamsize>(bytes.size()));
}
void WriteText(const fs::path& dir, const std::string& name, const std::string& text) {
  Write(dir, name, std::vector<uint8_t>(text.begin(), text.end()));
}

void Frames(const fs::path& dir) {
  protocol::Header h;
  h.session = 7;
  h.round = 2;
  h.sender = 3;
  h.sequence = 9;
  const std::vector<uint8_t> payload(64, 0x3c);
  protocol::ChunkRef chunk;
  chunk.total_bytes = payload.size();
  chunk.data = payload;
  Write(dir, "hello", protocol::EncodeHello(h, "client-1", 100, "builtin", {"none", "int8"}));
  protocol::WelcomeInfo welcome;
  Write(dir, "welcome", protocol::EncodeWelcome(h, welcome));
  welcome.committed_rounds = std::vector<uint64_t>{2, 3, 7};
  Write(dir, "welcome-committed", protocol::EncodeWelcome(h, welcome));
  RoundConfig rc;
  rc.round = 2;
  rc.learning_rate = 0.1f;
  rc.local_epochs = 1;
  Write(dir, "task", protocol::EncodeRoundTask(h, rc, 1000, std::string(64, 'a'), wire::PayloadEncoding::DenseF32, chunk));
  protocol::UpdateReport report;
  report.train_loss = 0.5;
  Write(dir, "update", protocol::EncodeUpdate(h, 100, report, wire::PayloadEncoding::Codec, chunk));
  Write(dir, "resync", protocol::EncodeResync(h, std::string(64, 'b')));
  Write(dir, "ack", protocol::EncodeAck(h, true, h.round));
  Write(dir, "error", protocol::EncodeError(h, wire::ErrorCode::MalformedFrame, "bad"));
  Write(dir, "heartbeat", protocol::EncodeHeartbeat(h, true, 0.5f));
  Write(dir, "bye", protocol::EncodeBye(h, "done"));
  protocol::PeerInfo peer{"peer-1", "tcp://127.0.0.1:5555", "", {}};
  Write(dir, "join", protocol::EncodeJoin(h, peer, true));
  Write(dir, "state-request", protocol::EncodeStateRequest(h, "behind"));
  Write(dir, "update-fetch", protocol::EncodeUpdateFetch(h, "peer-2"));
  Write(dir, "commit", protocol::EncodeCommit(h, {"peer-1"}, {std::string(64, 'c')}, std::string(64, 'd')));
  Write(dir, "peer-update", protocol::EncodePeerUpdate(h, "peer-1", std::string(64, 'e'), 10, 0.5, chunk, {}));
  Write(dir, "state", protocol::EncodeState(h, std::string(64, 'f'), std::string(64, 'g'), chunk));
  privacy::secagg::AdvertiseKeys keys;
  keys.client_id = 3;
  Write(dir, "secagg-keys", protocol::EncodeSecAggKeys(h, keys));
  Write(dir, "secagg-masked", protocol::EncodeSecAggMasked(h, 3, 0, 100, chunk));
}

void CodecPayloads(const fs::path& dir, const std::vector<std::string>& specs) {
  const std::vector<TensorSpec> layout = {{"w", {16, 24}}, {"b", {24}}, {"conv", {5, 3, 2}}, {"one", {1}}, {"big", {64, 64}}};
  std::vector<float> update(LayoutSize(layout));
  Rng rng(5);
  for (float& v : update) v = static_cast<float>(0.1 * rng.Normal());
  codec::RoundContext ctx;
  ctx.round = 3;
  ctx.shared_seed = 11;
  for (size_t i = 0; i < specs.size(); ++i) {
    auto c = codec::Codec::Create(specs[i], layout);
    if (!c.ok()) continue;
    auto payload = (*c)->Encode(update, ctx);
    if (!payload.ok()) continue;
    payload->insert(payload->begin(), static_cast<uint8_t>(i));
    Write(dir, "spec-" + std::to_string(i), *payload);
  }
}

void Keys(const fs::path& dir) {
  auto k = crypto::GenerateKeyPair();
  if (!k.ok()) return;
  const fs::path tmp = fs::temp_directory_path() / "shoal-fuzz-seed-key";
  fs::remove(tmp.string() + ".key");
  fs::remove(tmp.string() + ".pub");
  if (!crypto::WriteKeyFiles(tmp.string(), *k, true).ok()) return;
  std::ifstream key(tmp.string() + ".key"), pub(tmp.string() + ".pub");
  const std::string key_text((std::istreambuf_iterator<char>(key)), {}), pub_text((std::istreambuf_iterator<char>(pub)), {});
  WriteText(dir, "secret-key-file", key_text);
  WriteText(dir, "public-key-file", pub_text);
  WriteText(dir, "allow-list", "# clients\n" + pub_text + crypto::Z85Key(k->sign_public) + "  # another\n\n");
  fs::remove(tmp.string() + ".key");
  fs::remove(tmp.string() + ".pub");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: shoal_fuzz_seeds OUT\n");
    return 2;
  }
  const fs::path out(argv[1]);
  Frames(out / "envelope");
  CodecPayloads(out / "codec",
                {"none", "fp16", "bf16", "int8:chunk=7", "int8:stochastic=1", "qsgd:levels=16", "qsgd:levels=5|zstd",
                 "ef|sign", "topk:ratio=0.05|int8", "ef|topk:ratio=0.01|int8|zstd", "topk:k=3", "randk:ratio=0.1|fp16",
                 "dct:chunk=8|topk:k=4|sign", "demo:chunk=64,topk=8,bits=1", "demo:chunk=16,topk=4,bits=32|zstd",
                 "powersgd:rank=2|bf16", "ef|powersgd:rank=1", "zstd"});
  Keys(out / "keys");
  WriteText(out / "config", "strategy",
            "# shoal-aggregator config\nrounds = 5\nstrategy = trimmed_mean\nbyzantine = 0.1\ncodec = ef|topk:ratio=0.01|int8\n"
            "codec-down = int8\nmin-clients = 2\nfraction = 0.5\n");
  WriteText(out / "config", "dp", "dp-clip = 1\ndp-noise-multiplier = 1.1\nstrategy = fedadam\nserver-tau = 0.001\n");
  return 0;
}
