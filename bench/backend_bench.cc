// Backends side by side, each against a baseline measured in the same run (DESIGN.md: speed
// is measured in benchmarks, as ratios):
//   1. GEMM TFLOPS of Shoal's Backend::GemmEx (fp32, tf32, bf16, fp16) vs a plain BLAS call of
//      the same shape: cblas_sgemm on the CPU, cublasSgemm on CUDA.
//   2. Codec kernels' GB/s vs memcpy: the host codec stages against single-thread memcpy on
//      the CPU; the CUDA codec kernels against device-to-device cudaMemcpy on the GPU. GB/s
//      counts fp32 bytes (the input of an encoder, the output of a decoder).
//   3. One local training step (forward, backward, SGD) of the digits MLP and a larger MLP.
// The CPU is always measured; CUDA when a device is usable (otherwise the reason is printed).
// Run: build/bin/backend_bench [--quick]   (OPENBLAS_NUM_THREADS=1 for single-core CPU figures)
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "codec/bytes.h"
#include "codec/codec.h"
#include "codec/stages.h"
#include "core/rng.h"
#include "nn/model_registry.h"
#include "shoal/config.h"
#if SHOAL_HAVE_CUDA
#include "baseline.h"
#include "codec_kernels.h"
#endif

namespace shoal {
namespace {

bool g_quick = false;

using Clock = std::chrono::steady_clock;

// Best time of `reps` calls of f (after one warm-up), synchronizing the backend around each.
double Best(Backend& be, int reps, const std::function<void()>& f) {
  f();
  be.Synchronize();
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = Clock::now();
    f();
    be.Synchronize();
    best = std::min(best, std::chrono::duration<double>(Clock::now() - t0).count());
  }
  return best;
}

std::vector<float> Random(size_t n, uint64_t seed) {
  Rng rng(seed, 1);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.Normal() * 0.01);
  return v;
}

// 1. GEMM -----------------------------------------------------------------------------------
void BenchGemm(Backend& be, bool gpu) {
  const std::vector<int> sizes = gpu ? std::vector<int>{1024, 4096, 8192} : std::vector<int>{256, 512, 1024};
  std::printf("\n[%s] GEMM, square m = n = k, TFLOPS (2mnk / best time)\n", be.name().c_str());
  std::printf("%6s %10s %10s %10s %10s %10s %14s\n", "size", "plain", "fp32", "tf32", "bf16", "fp16", "fp32/plain");
  for (int s : sizes) {
    if (g_quick && s > sizes[1]) break;
    const size_t n = static_cast<size_t>(s) * s;
    const double flops = 2.0 * s * s * s;
    const int reps = s >= 4096 ? 5 : 10;
    DeviceArray<float> a(&be, n), b(&be, n), c(&be, n);
    const auto host = Random(n, 7);
    a.Upload(host.data(), n);
    b.Upload(host.data(), n);
    double plain;
#if SHOAL_HAVE_CUDA
    if (gpu) {
      plain = flops / cuda::PlainSgemmSeconds(be, s, s, s, reps) / 1e12;
    } else
#endif
    {
      std::vector<float> ha(host), hb(host), hc(n);
      plain = flops / Best(be, reps, [&] {
                cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, s, s, 1.0f, ha.data(), s, hb.data(), s, 0.0f,
                            hc.data(), s);
              }) / 1e12;
    }
    double tf[4];
    int i = 0;
    for (Precision p : {Precision::kFp32, Precision::kTf32, Precision::kBf16, Precision::kFp16})
      tf[i++] = flops / Best(be, reps, [&] { be.GemmEx(false, false, s, s, s, 1.0f, a.get(), b.get(), 0.0f, c.get(), p); }) / 1e12;
    std::printf("%6d %10.3f %10.3f %10.3f %10.3f %10.3f %14.3f\n", s, plain, tf[0], tf[1], tf[2], tf[3], tf[0] / plain);
  }
}

// 2. Codec kernels --------------------------------------------------------------------------
struct Row {
  std::string name;
  double gbps;
};

void PrintCodec(const std::string& backend, const std::string& baseline, double base_gbps, const std::vector<Row>& rows) {
  std::printf("\n[%s] codec kernels, GB/s of fp32 data, against %s at %.1f GB/s\n", backend.c_str(), baseline.c_str(),
              base_gbps);
  std::printf("%-28s %10s %10s\n", "kernel", "GB/s", "x memcpy");
  for (const Row& r : rows) std::printf("%-28s %10.2f %10.3f\n", r.name.c_str(), r.gbps, r.gbps / base_gbps);
}

void BenchCodecCpu(Backend& be) {
  const size_t n = g_quick ? (size_t{4} << 20) : (size_t{16} << 20);
  const double bytes = 4.0 * static_cast<double>(n);
  const auto x = Random(n, 11);
  std::vector<float> y(n);
  const double memcpy_gbps = bytes / Best(be, 5, [&] { std::memcpy(y.data(), x.data(), n * 4); }) / 1e9;
  std::vector<Row> rows;
  const codec::RoundContext ctx{1, 2, 3};
  for (const char* spec : {"int8", "bf16", "fp16", "sign", "qsgd:levels=16"}) {
    const auto st = codec::ParseSpec(spec).value().at(0);
    std::unique_ptr<codec::Quantizer> q;
    if (st.name == "int8") q = codec::MakeInt8(st).value();
    if (st.name == "bf16") q = codec::MakeBf16(st).value();
    if (st.name == "fp16") q = codec::MakeFp16(st).value();
    if (st.name == "sign") q = codec::MakeSign(st).value();
    if (st.name == "qsgd") q = codec::MakeQsgd(st).value();
    codec::ByteWriter w;
    w.Reserve(q->MaxEncodedBytes(n));
    rows.push_back({std::string(spec) + " encode", bytes / Best(be, 3, [&] {
                      w.Clear();
                      (void)q->Encode(x, ctx, 0, &w);
                    }) / 1e9});
    const std::vector<uint8_t> payload = w.bytes();
    rows.push_back({std::string(spec) + " decode", bytes / Best(be, 3, [&] {
                      codec::ByteReader r(payload);
                      (void)q->Decode(&r, y);
                    }) / 1e9});
  }
  const auto topk = codec::MakeTopK(codec::ParseSpec("topk:ratio=0.01").value().at(0)).value();
  std::vector<uint32_t> idx;
  rows.push_back({"topk 1% select", bytes / Best(be, 3, [&] { topk->Select(x, 0, ctx, 0, &idx); }) / 1e9});
  auto dct = codec::MakeDct(codec::ParseSpec("dct:chunk=64").value().at(0)).value();
  const codec::Shape2D shape{static_cast<int64_t>(n / 1024), 1024};
  std::vector<float> coeffs(n);
  rows.push_back({"dct forward (64x64 chunks)", bytes / Best(be, 3, [&] { dct->Forward(0, shape, x, coeffs); }) / 1e9});
  rows.push_back({"dct inverse (64x64 chunks)", bytes / Best(be, 3, [&] { dct->Inverse(shape, coeffs, y); }) / 1e9});
  PrintCodec(be.name(), "single-thread memcpy", memcpy_gbps, rows);
}

#if SHOAL_HAVE_CUDA
void BenchCodecGpu(Backend& be) {
  const size_t n = g_quick ? (size_t{16} << 20) : (size_t{64} << 20);
  const double bytes = 4.0 * static_cast<double>(n);
  const auto hx = Random(n, 11);
  DeviceArray<float> x(&be, n), y(&be, n), z(&be, n), scales(&be, (n + 255) / 256), one(&be, 1);
  x.Upload(hx.data(), n);
  DeviceArray<int8_t> q(&be, n);
  DeviceArray<uint16_t> h(&be, n);
  DeviceArray<uint8_t> bits(&be, n);  // large enough for sign bits and packed qsgd codes
  DeviceArray<uint32_t> codes(&be, n), idx(&be, n / 100);
  DeviceArray<float> vals(&be, n / 100);
  const double memcpy_gbps = cuda::DeviceMemcpyGBps(be, n * 4, 10);
  std::vector<Row> rows;
  auto add = [&](const std::string& name, const std::function<void()>& f) { rows.push_back({name, bytes / Best(be, 10, f) / 1e9}); };
  add("ef compensate", [&] { cuda::ErrorFeedbackCompensate(be, n, x.get(), y.get(), z.get()); });
  add("int8 quantize", [&] { cuda::QuantizeInt8(be, n, 256, x.get(), scales.get(), q.get()); });
  add("int8 dequantize", [&] { cuda::DequantizeInt8(be, n, 256, scales.get(), q.get(), y.get()); });
  add("bf16 encode", [&] { cuda::EncodeBf16(be, n, x.get(), h.get()); });
  add("bf16 decode", [&] { cuda::DecodeBf16(be, n, h.get(), y.get()); });
  add("fp16 encode", [&] { cuda::EncodeFp16(be, n, x.get(), h.get()); });
  add("fp16 decode", [&] { cuda::DecodeFp16(be, n, h.get(), y.get()); });
  add("sign quantize", [&] { cuda::QuantizeSign(be, n, x.get(), bits.get(), one.get()); });
  add("sign dequantize", [&] { cuda::DequantizeSign(be, n, bits.get(), one.get(), y.get()); });
  add("qsgd quantize (16 levels)", [&] { cuda::QuantizeQsgd(be, n, 16, x.get(), 5, codes.get(), one.get()); });
  add("qsgd pack (6 bits)", [&] { cuda::PackBits(be, n, 6, codes.get(), bits.get()); });
  add("qsgd unpack (6 bits)", [&] { cuda::UnpackBits(be, n, 6, bits.get(), codes.get()); });
  add("qsgd dequantize", [&] { cuda::DequantizeQsgd(be, n, 16, codes.get(), one.get(), y.get()); });
  add("topk 1% select", [&] { cuda::TopK(be, n, n / 100, x.get(), idx.get(), vals.get()); });
  add("topk 1% scatter", [&] { cuda::ScatterTopK(be, n, n / 100, idx.get(), vals.get(), y.get()); });
  add("dct forward (64x64 chunks)", [&] { cuda::DctForward(be, static_cast<int64_t>(n / 1024), 1024, 64, 64, x.get(), z.get()); });
  add("dct inverse (64x64 chunks)", [&] { cuda::DctInverse(be, static_cast<int64_t>(n / 1024), 1024, 64, 64, z.get(), y.get()); });
  PrintCodec(be.name(), "device-to-device cudaMemcpy", memcpy_gbps, rows);
}
#endif

// 3. Training step ----------------------------------------------------------------------------
double StepMicros(Backend& be, const std::string& model, int input, int classes, int batch) {
  auto mlp = nn::MakeModel(model, {input, classes}, &be).value();
  ParameterArena host;
  mlp->Init(&host, 1);
  const size_t np = host.size();
  DeviceArray<float> w(&be, np), g(&be, np), buf(&be, np), x(&be, static_cast<size_t>(batch) * input);
  DeviceArray<int32_t> y(&be, batch);
  w.Upload(host.data(), np);
  const auto hx = Random(static_cast<size_t>(batch) * input, 3);
  x.Upload(hx.data(), hx.size());
  std::vector<int32_t> hy(batch);
  for (int i = 0; i < batch; ++i) hy[i] = i % classes;
  y.Upload(hy.data(), hy.size());
  const double t = Best(be, g_quick ? 5 : 20, [&] {
    mlp->ForwardBackward(w.get(), nn::Batch::Features(x.get(), y.get(), batch), g.get(), /*loss_scale=*/1.0f);
    be.SgdStep(np, w.get(), g.get(), buf.get(), 0.01f, 0.9f, 0.0f, false, false);
  });
  return t * 1e6;
}

struct StepCase {
  const char* label;
  const char* model;
  int input, classes, batch;
};
const StepCase kSteps[] = {
    {"digits mlp:64, batch 32", "mlp:64", 64, 10, 32},
    {"mlp:1024,1024, batch 256", "mlp:1024,1024", 784, 10, 256},
};

std::vector<double> BenchSteps(Backend& be) {
  std::printf("\n[%s] training step (forward, backward, SGD momentum), microseconds, best of runs\n", be.name().c_str());
  std::vector<double> out;
  for (const StepCase& c : kSteps) {
    out.push_back(StepMicros(be, c.model, c.input, c.classes, c.batch));
    std::printf("%-28s %12.1f\n", c.label, out.back());
  }
  return out;
}

}  // namespace
}  // namespace shoal

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--quick") == 0) shoal::g_quick = true;
  auto cpu = shoal::MakeCpuBackend();
  shoal::BenchGemm(*cpu, false);
  shoal::BenchCodecCpu(*cpu);
  const auto cpu_steps = shoal::BenchSteps(*cpu);
  auto gpu = shoal::MakeBackend("cuda");
  if (!gpu.ok()) {
    std::printf("\nCUDA: not measured: %s\n", gpu.status().message().c_str());
    return 0;
  }
  shoal::BenchGemm(**gpu, true);
#if SHOAL_HAVE_CUDA
  shoal::BenchCodecGpu(**gpu);
#endif
  const auto gpu_steps = shoal::BenchSteps(**gpu);
  std::printf("\ntraining step, CPU time / GPU time\n");
  for (size_t i = 0; i < gpu_steps.size(); ++i)
    std::printf("%-28s %12.2f\n", shoal::kSteps[i].label, cpu_steps[i] / gpu_steps[i]);
  return 0;
}
