// Codec throughput: encode and decode bytes/s of each quantizer stage on its own and of full
// specs through Codec, on one tensor of SHOAL_BENCH_FLOATS floats (default 64M = 256 MiB),
// next to single-threaded memcpy of the same bytes measured in the same run.
//   bytes_per_second  input fp32 bytes per second (encode) / output fp32 bytes (decode)
//   x_memcpy          that rate as a fraction of the memcpy rate measured at startup
// Run: build/bin/codec_throughput_bench [--benchmark_filter=...]
//      SHOAL_BENCH_FLOATS=4194304 build/bin/codec_throughput_bench   (smaller tensor)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "codec/bytes.h"
#include "codec/codec.h"
#include "codec/stages.h"
#include "core/rng.h"

namespace shoal::codec {
namespace {

size_t NumFloats() {
  const char* env = std::getenv("SHOAL_BENCH_FLOATS");
  if (env && *env) return static_cast<size_t>(std::strtoull(env, nullptr, 10));
  return size_t{64} << 20;
}

const std::vector<float>& Input() {
  static const std::vector<float> v = [] {
    std::vector<float> x(NumFloats());
    Rng rng(42);
    for (auto& f : x) f = static_cast<float>(rng.Normal() * 0.01);
    return x;
  }();
  return v;
}

double g_memcpy_bps = 0;

// Single-thread memcpy of the input's bytes, best of a few runs (warm destination).
double MeasureMemcpy() {
  const auto& in = Input();
  std::vector<float> dst(in.size(), 1.0f);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    std::memcpy(dst.data(), in.data(), in.size() * 4);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, static_cast<double>(in.size() * 4) / s);
  }
  return best;
}

void SetRate(benchmark::State& state, size_t bytes_per_iter) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes_per_iter));
  state.counters["x_memcpy"] = benchmark::Counter(static_cast<double>(bytes_per_iter) / g_memcpy_bps,
                                                  benchmark::Counter::kIsIterationInvariantRate);
}

void BM_Memcpy(benchmark::State& state) {
  const auto& in = Input();
  std::vector<float> dst(in.size(), 1.0f);
  for (auto _ : state) {
    std::memcpy(dst.data(), in.data(), in.size() * 4);
    benchmark::DoNotOptimize(dst.data());
    benchmark::ClobberMemory();
  }
  SetRate(state, in.size() * 4);
}

std::unique_ptr<Quantizer> MakeQuantizer(const std::string& name) {
  StageSpec spec{name, {}};
  StatusOr<std::unique_ptr<Quantizer>> q = Status::Internal("unknown");
  if (name == "fp16") q = MakeFp16(spec);
  if (name == "bf16") q = MakeBf16(spec);
  if (name == "int8") q = MakeInt8(spec);
  if (name == "qsgd") q = MakeQsgd(spec);
  if (name == "sign") q = MakeSign(spec);
  if (!q.ok()) std::abort();
  return std::move(q).value();
}

void BM_QuantizerEncode(benchmark::State& state, const std::string& name) {
  auto q = MakeQuantizer(name);
  const auto& in = Input();
  ByteWriter w;
  w.Reserve(q->MaxEncodedBytes(in.size()));
  q->Encode(in, RoundContext{}, 0, &w);  // touch the pages once
  for (auto _ : state) {
    w.Clear();
    q->Encode(in, RoundContext{}, 0, &w);
    benchmark::DoNotOptimize(w.data());
  }
  state.counters["payload_bytes"] = static_cast<double>(w.size());
  SetRate(state, in.size() * 4);
}

void BM_QuantizerDecode(benchmark::State& state, const std::string& name) {
  auto q = MakeQuantizer(name);
  const auto& in = Input();
  ByteWriter w;
  q->Encode(in, RoundContext{}, 0, &w);
  std::vector<float> out(in.size(), 0.0f);
  for (auto _ : state) {
    ByteReader r(w.bytes());
    if (!q->Decode(&r, out).ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(out.data());
  }
  SetRate(state, in.size() * 4);
}

std::unique_ptr<Codec> MakeCodec(const std::string& spec) {
  auto c = Codec::Create(spec, {{"update", {static_cast<int64_t>(Input().size())}}});
  if (!c.ok()) std::abort();
  return std::move(c).value();
}

void BM_CodecEncode(benchmark::State& state, const std::string& spec) {
  auto c = MakeCodec(spec);
  const auto& in = Input();
  size_t bytes = 0;
  for (auto _ : state) {
    auto p = c->Encode(in, RoundContext{});
    if (!p.ok()) state.SkipWithError(p.status().ToString().c_str());
    bytes = p->size();
    benchmark::DoNotOptimize(p->data());
  }
  state.counters["payload_bytes"] = static_cast<double>(bytes);
  SetRate(state, in.size() * 4);
}

void BM_CodecDecode(benchmark::State& state, const std::string& spec) {
  auto c = MakeCodec(spec);
  const auto& in = Input();
  auto p = c->Encode(in, RoundContext{});
  if (!p.ok()) std::abort();
  std::vector<float> out(in.size(), 0.0f);
  for (auto _ : state) {
    if (!c->Decode(*p, RoundContext{}, out).ok()) state.SkipWithError("decode failed");
    benchmark::DoNotOptimize(out.data());
  }
  SetRate(state, in.size() * 4);
}

}  // namespace
}  // namespace shoal::codec

int main(int argc, char** argv) {
  using namespace shoal::codec;
  benchmark::Initialize(&argc, argv);
  g_memcpy_bps = MeasureMemcpy();
  benchmark::AddCustomContext("floats", std::to_string(Input().size()));
  benchmark::AddCustomContext("memcpy_GBps_at_start", std::to_string(g_memcpy_bps / 1e9));
  benchmark::RegisterBenchmark("memcpy", BM_Memcpy)->Unit(benchmark::kMillisecond)->UseRealTime();
  for (std::string q : {"bf16", "fp16", "int8", "sign", "qsgd"}) {
    benchmark::RegisterBenchmark(("quantize_encode/" + q).c_str(), BM_QuantizerEncode, q)->Unit(benchmark::kMillisecond)->UseRealTime();
    benchmark::RegisterBenchmark(("quantize_decode/" + q).c_str(), BM_QuantizerDecode, q)->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  for (std::string s : {"int8", "bf16", "ef|sign", "ef|topk:ratio=0.01|int8"}) {
    benchmark::RegisterBenchmark(("codec_encode/" + s).c_str(), BM_CodecEncode, s)->Unit(benchmark::kMillisecond)->UseRealTime();
    benchmark::RegisterBenchmark(("codec_decode/" + s).c_str(), BM_CodecDecode, s)->Unit(benchmark::kMillisecond)->UseRealTime();
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
