// Transfer throughput of 64 MiB updates client -> aggregator over TCP on loopback, CurveZMQ
// against no security, measured in the same run through Shoal's own channels (the sockets,
// options and chunking the aggregator and clients use). Each trial sends UPDATES updates of
// 64 MiB, each cut into 16 MiB chunk frames, from a ZmqChannel to a ZmqListener in two
// separate ZeroMQ contexts (one I/O thread each, as in two processes). The modes alternate,
// trial by trial, and the median of each is reported.
//   MiB/s       payload MiB per second, first send to last receive
//   cpu_s/GB    process CPU time (user + system, both ends) per GB of payload
//   curve/plain throughput ratio; crypto cpu_s/GB = the CPU CURVE adds per GB (encrypt + decrypt)
// It also times libsodium's crypto_box_easy_afternm (XSalsa20-Poly1305, what CURVE runs on
// every message) on one core, which bounds what CURVE can reach on this machine.
// Run: build/bin/transport_bench [UPDATES=8] [TRIALS=5]   (SHOAL_BENCH_CHUNK=BYTES: chunk size)
#include <sodium.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "crypto/keys.h"
#include "protocol/federated.h"
#include "transport/zmq/zmq_channel.h"
#include "transport/zmq/zap.h"

namespace shoal {
namespace {

constexpr size_t kUpdateBytes = size_t{64} << 20;
// The wire chunk (the aggregator's --chunk-size). Default 16 MiB; SHOAL_BENCH_CHUNK overrides.
size_t ChunkBytes() {
  const char* env = std::getenv("SHOAL_BENCH_CHUNK");
  return env && *env ? static_cast<size_t>(std::strtoull(env, nullptr, 10)) : size_t{16} << 20;
}

double CpuSeconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec) * 1e-6;
}

struct Trial {
  double mib_per_s = 0, cpu_s_per_gb = 0;
};

Trial Run(bool curve, int updates) {
  zmq::context_t server_ctx(1), client_ctx(1);
  transport::SocketOptions so;
  so.max_frame_bytes = static_cast<int64_t>(protocol::MaxFrameBytes(ChunkBytes()));
  std::unique_ptr<transport::ZapHandler> zap;
  const crypto::KeyPair server_keys = crypto::GenerateKeyPair().value();
  const crypto::KeyPair client_keys = crypto::GenerateKeyPair().value();
  transport::SocketOptions co = so;
  if (curve) {
    // An allow-list with the client's key, as the aggregator would load it.
    char path[] = "/tmp/shoal-bench-allow-XXXXXX";
    const int fd = mkstemp(path);
    const std::string line = crypto::Z85Key(client_keys.curve_public) + "\n";
    if (fd < 0 || write(fd, line.data(), line.size()) != static_cast<ssize_t>(line.size())) std::abort();
    close(fd);
    auto list = crypto::AllowList::Load(path);
    unlink(path);
    zap = transport::ZapHandler::Start(server_ctx, std::make_shared<const crypto::AllowList>(std::move(*list))).value();
    so.curve = std::make_shared<const crypto::KeyPair>(server_keys);
    co.curve = std::make_shared<const crypto::KeyPair>(client_keys);
    co.server_key = server_keys.curve_public;
  }
  auto server = transport::ZmqListener::Bind(server_ctx, "tcp://127.0.0.1:*", so).value();
  auto client = transport::ZmqChannel::Connect(client_ctx, server->endpoint(), co).value();

  // The real chunk frames of a 64 MiB update, encoded once and sent `updates` times.
  std::vector<uint8_t> update(kUpdateBytes);
  for (size_t i = 0; i < update.size(); ++i) update[i] = static_cast<uint8_t>(i * 2654435761u >> 24);
  std::vector<protocol::Frame> frames;
  for (const auto& chunk : protocol::SplitPayload(update, ChunkBytes()))
    frames.push_back(protocol::EncodeUpdate({1, 1, 1, frames.size() + 1}, 1, {}, wire::PayloadEncoding::Codec, chunk));

  // Warm-up: one small frame each way completes the (CURVE) handshake before timing starts.
  const std::vector<uint8_t> ping{1, 2, 3, 4};
  for (bool got = false; !got;) {
    (void)client->Send(ping, std::chrono::milliseconds(100));
    (void)client->Recv(std::chrono::milliseconds(1));
    auto in = server->Recv(std::chrono::milliseconds(100));
    got = in.ok() && in->has_value();
  }

  const size_t total_frames = frames.size() * static_cast<size_t>(updates);
  const double cpu0 = CpuSeconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::thread sender([&] {
    for (int u = 0; u < updates; ++u)
      for (const auto& f : frames)
        if (!client->Send(f, std::chrono::milliseconds(60000)).ok()) std::abort();
  });
  size_t received = 0, payload = 0;
  while (received < total_frames) {
    auto in = server->Recv(std::chrono::milliseconds(60000));
    if (!in.ok() || !in->has_value()) std::abort();
    payload += (*in)->frame.size();
    ++received;
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const double cpu = CpuSeconds() - cpu0;
  sender.join();
  const double bytes = static_cast<double>(kUpdateBytes) * updates;
  (void)payload;
  return {bytes / seconds / (1 << 20), cpu / (bytes / 1e9)};
}

// Single-core crypto_box_easy_afternm over one 16 MiB buffer, best of 3, in MB/s.
double BoxMegabytesPerSecond() {
  if (sodium_init() < 0) std::abort();
  const size_t n = size_t{16} << 20;
  std::vector<unsigned char> m(n, 7), c(n + crypto_box_MACBYTES), key(crypto_box_BEFORENMBYTES, 1),
      nonce(crypto_box_NONCEBYTES, 2);
  double best = 0;
  for (int t = 0; t < 3; ++t) {
    const auto t0 = std::chrono::steady_clock::now();
    crypto_box_easy_afternm(c.data(), m.data(), n, nonce.data(), key.data());
    best = std::max(best, n / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 1e6);
  }
  return best;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace
}  // namespace shoal

int main(int argc, char** argv) {
  const int updates = argc > 1 ? std::atoi(argv[1]) : 8;
  const int trials = argc > 2 ? std::atoi(argv[2]) : 5;
  std::vector<double> plain_mibs, curve_mibs, plain_cpu, curve_cpu;
  for (int t = 0; t < trials; ++t) {
    for (bool curve : {false, true}) {
      const auto r = shoal::Run(curve, updates);
      (curve ? curve_mibs : plain_mibs).push_back(r.mib_per_s);
      (curve ? curve_cpu : plain_cpu).push_back(r.cpu_s_per_gb);
      std::fprintf(stderr, "trial %d %-5s %8.1f MiB/s %6.3f cpu_s/GB\n", t + 1, curve ? "curve" : "plain", r.mib_per_s,
                   r.cpu_s_per_gb);
    }
  }
  const double pm = shoal::Median(plain_mibs), cm = shoal::Median(curve_mibs);
  const double pc = shoal::Median(plain_cpu), cc = shoal::Median(curve_cpu);
  std::printf("%d x 64 MiB updates per trial, %d trials, medians\n", updates, trials);
  std::printf("%-8s %10s %10s\n", "mode", "MiB/s", "cpu_s/GB");
  std::printf("%-8s %10.1f %10.3f\n", "plain", pm, pc);
  std::printf("%-8s %10.1f %10.3f\n", "curve", cm, cc);
  std::printf("curve/plain throughput ratio: %.3f\n", cm / pm);
  std::printf("CPU added by CURVE (encrypt + decrypt): %.3f s per GB\n", cc - pc);
  std::printf("crypto_box_easy_afternm on one core: %.0f MB/s (%u cores here)\n", shoal::BoxMegabytesPerSecond(),
              std::thread::hardware_concurrency());
  return 0;
}
