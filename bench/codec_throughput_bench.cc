// Codec throughput: encode and decode bytes/s of each quantizer stage on its own, of the top-k
// selector, and of full specs through Codec (EncodeInto with the payload buffer reused, as the
// runtime does), on one tensor of SHOAL_BENCH_FLOATS floats (default 64M = 256 MiB), next to
// single-threaded memcpy of the same bytes measured in the same run. Every benchmark runs at
// each SIMD level the CPU has (name suffix /baseline, /avx2; codec/simd.h).
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
#include "codec/simd.h"
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
  if (!q->Encode(in, RoundContext{}, 0, &w).ok()) state.SkipWithError("encode failed");  // touch the pages once
  for (auto _ : state) {
    w.Clear();
    (void)q->Encode(in, RoundContext{}, 0, &w);
    benchmark::DoNotOptimize(w.data());
  }
  state.counters["payload_bytes"] = static_cast<double>(w.size());
  SetRate(state, in.size() * 4);
}

void BM_QuantizerDecode(benchmark::State& state, const std::string& name) {
  auto q = MakeQuantizer(name);
  const auto& in = Input();
  ByteWriter w;
  if (!q->Encode(in, RoundContext{}, 0, &w).ok()) state.SkipWithError("encode failed");
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
  std::vector<uint8_t> payload;
  if (!c->EncodeInto(in, RoundContext{}, &payload).ok()) state.SkipWithError("encode failed");  // warm the buffers
  for (auto _ : state) {
    if (Status s = c->EncodeInto(in, RoundContext{}, &payload); !s.ok()) state.SkipWithError(s.ToString().c_str());
    benchmark::DoNotOptimize(payload.data());
  }
  state.counters["payload_bytes"] = static_cast<double>(payload.size());
  SetRate(state, in.size() * 4);
}

// Top-k alone, over the whole tensor (chunk 0) or per chunk (as DeMo's preset after its DCT).
void BM_SelectTopK(benchmark::State& state, const std::string& params, size_t chunk) {
  const size_t eq = params.find('=');
  const StageSpec spec{"topk", {{params.substr(0, eq), params.substr(eq + 1)}}};
  auto sel = MakeTopK(spec);
  if (!sel.ok()) std::abort();
  const auto& in = Input();
  std::vector<uint32_t> idx;
  for (auto _ : state) {
    (*sel)->Select(in, chunk, RoundContext{}, 0, &idx);
    benchmark::DoNotOptimize(idx.data());
  }
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
  // Each benchmark at each SIMD level: the level is forced around the registered function.
  for (simd::Level level : {simd::Level::kBaseline, simd::Level::kAvx2}) {
    if (!simd::Supported(level)) continue;
    const std::string suffix = std::string("/") + simd::Name(level);
    auto at_level = [level](auto fn) {
      return [level, fn](benchmark::State& state) {
        simd::ForceForTesting(level);
        fn(state);
        simd::ForceForTesting(std::nullopt);
      };
    };
    auto add = [&](const std::string& name, auto fn) {
      benchmark::RegisterBenchmark((name + suffix).c_str(), at_level(fn))->Unit(benchmark::kMillisecond)->UseRealTime();
    };
    for (std::string q : {"bf16", "fp16", "int8", "sign", "qsgd"}) {
      add("quantize_encode/" + q, [q](benchmark::State& st) { BM_QuantizerEncode(st, q); });
      add("quantize_decode/" + q, [q](benchmark::State& st) { BM_QuantizerDecode(st, q); });
    }
    add("select/topk:ratio=0.01", [](benchmark::State& st) { BM_SelectTopK(st, "ratio=0.01", 0); });
    add("select/topk:k=8,chunk=64", [](benchmark::State& st) { BM_SelectTopK(st, "k=8", 64); });
    for (std::string s : {"int8", "bf16", "ef|int8", "ef|sign", "ef|topk:ratio=0.01|int8", "dct:chunk=64",
                          "demo:chunk=64,topk=8,bits=1"}) {
      add("codec_encode/" + s, [s](benchmark::State& st) { BM_CodecEncode(st, s); });
      add("codec_decode/" + s, [s](benchmark::State& st) { BM_CodecDecode(st, s); });
    }
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
