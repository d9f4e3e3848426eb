// Exact top-k by magnitude (stage "topk", approx=0), the host's order: key = float bits with
// the sign cleared, larger key first, ties by lower index; output sorted by index.
//
// 1. A threshold from a deterministic strided sample (65,536 keys, sorted on the host) that
//    should leave about 2k + 64 candidates; 2. an order-preserving compaction of the indices
//    whose key reaches it (per-block counts, a scan, per-block writes with warp ballots; one
//    pass over x each), retried with a lower threshold if fewer than k survive; 3. a radix sort
//    (CUB) of the candidates by (key desc, index asc), the first k kept and re-sorted by index.
#include <cub/device/device_radix_sort.cuh>

#include <algorithm>
#include <functional>
#include <vector>

#include "codec_common.cuh"
#include "codec_kernels.h"

namespace shoal::cuda {
namespace {

constexpr int kBlocks = 1024;
constexpr int kThreads = 256;
constexpr size_t kSample = 65536;

__device__ inline uint32_t Key(float v) { return __float_as_uint(v) & 0x7fffffffu; }

__global__ void SampleKeys(size_t n, size_t samples, const float* x, uint32_t* out) {
  SHOAL_GRID_LOOP(j, samples) out[j] = Key(x[j * n / samples]);
}

// Block b owns [b*seg, min(n, (b+1)*seg)).
__global__ void CountAtLeast(size_t n, size_t seg, const float* x, uint32_t t, uint32_t* counts) {
  const size_t begin = blockIdx.x * seg, end = min(n, begin + seg);
  uint32_t c = 0;
  for (size_t i = begin + threadIdx.x; i < end; i += blockDim.x) c += Key(x[i]) >= t;
  for (int off = 16; off > 0; off /= 2) c += __shfl_down_sync(0xffffffffu, c, off);
  __shared__ uint32_t warp_counts[kThreads / 32];
  if (threadIdx.x % 32 == 0) warp_counts[threadIdx.x / 32] = c;
  __syncthreads();
  if (threadIdx.x == 0) {
    uint32_t total = 0;
    for (int w = 0; w < kThreads / 32; ++w) total += warp_counts[w];
    counts[blockIdx.x] = total;
  }
}

// Exclusive scan of the block counts (one block of kBlocks threads would also do; a single
// thread keeps it obviously ordered and costs ~1k additions). offsets[kBlocks] = total.
__global__ void ScanCounts(const uint32_t* counts, uint32_t* offsets) {
  uint32_t s = 0;
  for (int b = 0; b < kBlocks; ++b) {
    offsets[b] = s;
    s += counts[b];
  }
  offsets[kBlocks] = s;
}

// Writes block b's qualifying indices, in index order, from offsets[b].
__global__ void WriteAtLeast(size_t n, size_t seg, const float* x, uint32_t t, const uint32_t* offsets,
                             uint32_t* out) {
  __shared__ uint32_t warp_counts[kThreads / 32];
  const size_t begin = blockIdx.x * seg, end = min(n, begin + seg);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  uint32_t base = offsets[blockIdx.x];
  for (size_t tile = begin; tile < end; tile += blockDim.x) {
    const size_t i = tile + threadIdx.x;
    const bool take = i < end && Key(x[i]) >= t;
    const uint32_t ballot = __ballot_sync(0xffffffffu, take);
    if (lane == 0) warp_counts[warp] = __popc(ballot);
    __syncthreads();
    uint32_t before = 0, total = 0;
    for (int w = 0; w < kThreads / 32; ++w) {
      if (w < warp) before += warp_counts[w];
      total += warp_counts[w];
    }
    if (take) out[base + before + __popc(ballot & ((1u << lane) - 1u))] = static_cast<uint32_t>(i);
    base += total;
    __syncthreads();
  }
}

// Sort keys: key in the high half, ~index in the low half, so a descending sort gives larger
// key first and, among equal keys, the lower index first.
__global__ void MakeSortKeys(size_t c, const uint32_t* idx, const float* x, uint64_t* keys) {
  SHOAL_GRID_LOOP(j, c) keys[j] = (static_cast<uint64_t>(Key(x[idx[j]])) << 32) | (~idx[j] & 0xffffffffu);
}
__global__ void KeysToIndices(size_t k, const uint64_t* keys, uint32_t* idx) {
  SHOAL_GRID_LOOP(j, k) idx[j] = ~static_cast<uint32_t>(keys[j] & 0xffffffffu);
}
__global__ void Gather(size_t k, const uint32_t* idx, const float* x, float* values) {
  SHOAL_GRID_LOOP(j, k) values[j] = x[idx[j]];
}
__global__ void Iota(size_t n, uint32_t* idx) { SHOAL_GRID_LOOP(i, n) idx[i] = static_cast<uint32_t>(i); }
__global__ void Zero(size_t n, float* y) { SHOAL_GRID_LOOP(i, n) y[i] = 0.0f; }
__global__ void Scatter(size_t k, const uint32_t* idx, const float* values, float* y) {
  SHOAL_GRID_LOOP(j, k) y[idx[j]] = values[j];
}

uint32_t ToHost(cudaStream_t s, const uint32_t* p) {
  uint32_t v = 0;
  SHOAL_CUDA_CHECK(cudaMemcpyAsync(&v, p, sizeof v, cudaMemcpyDeviceToHost, s));
  SHOAL_CUDA_CHECK(cudaStreamSynchronize(s));
  return v;
}

}  // namespace

void TopK(Backend& backend, size_t n, size_t k, const float* x, uint32_t* indices, float* values) {
  const cudaStream_t s = StreamFor(backend);
  if (k == 0) return;
  if (n > 0xffffffffu) Fatal("TopK", "more than 2^32 values in one tensor", __FILE__, __LINE__);
  if (k >= n) {
    Iota<<<GridFor(n), 256, 0, s>>>(n, indices);
    SHOAL_CUDA_LAUNCHED();
    SHOAL_CUDA_CHECK(cudaMemcpyAsync(values, x, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
    return;
  }
  // 1. Sample the keys; the threshold is the sample key at the rank that leaves ~2k + 64.
  const size_t samples = std::min(n, kSample);
  std::vector<uint32_t> sample(samples);
  {
    TempBuffer dev(backend, samples * sizeof(uint32_t));
    SampleKeys<<<GridFor(samples), 256, 0, s>>>(n, samples, x, dev.as<uint32_t>());
    SHOAL_CUDA_LAUNCHED();
    SHOAL_CUDA_CHECK(
        cudaMemcpyAsync(sample.data(), dev.as<uint32_t>(), samples * sizeof(uint32_t), cudaMemcpyDeviceToHost, s));
    SHOAL_CUDA_CHECK(cudaStreamSynchronize(s));
  }
  std::sort(sample.begin(), sample.end(), std::greater<uint32_t>());
  double want = 2.0 * static_cast<double>(k) + 64.0;

  // 2. Candidates at or above the threshold, in index order.
  const size_t seg = (n + kBlocks - 1) / kBlocks;
  TempBuffer counts(backend, sizeof(uint32_t) * (2 * kBlocks + 1));
  uint32_t* offsets = counts.as<uint32_t>() + kBlocks;
  TempBuffer cand(backend, n * sizeof(uint32_t));
  uint32_t t = 0;
  size_t c = 0;
  for (;;) {
    const size_t rank = static_cast<size_t>(want / static_cast<double>(n) * static_cast<double>(samples));
    t = rank >= samples ? 0u : sample[rank];
    CountAtLeast<<<kBlocks, kThreads, 0, s>>>(n, seg, x, t, counts.as<uint32_t>());
    SHOAL_CUDA_LAUNCHED();
    ScanCounts<<<1, 1, 0, s>>>(counts.as<uint32_t>(), offsets);
    SHOAL_CUDA_LAUNCHED();
    c = ToHost(s, offsets + kBlocks);
    if (c >= k || t == 0) break;  // t == 0 admits every value: c == n >= k
    want *= 4.0;                  // the sample was unlucky: lower the threshold
  }
  WriteAtLeast<<<kBlocks, kThreads, 0, s>>>(n, seg, x, t, offsets, cand.as<uint32_t>());
  SHOAL_CUDA_LAUNCHED();

  // 3. Exact order among the candidates, then the first k by index.
  TempBuffer keys_in(backend, c * sizeof(uint64_t)), keys_out(backend, c * sizeof(uint64_t));
  MakeSortKeys<<<GridFor(c), 256, 0, s>>>(c, cand.as<uint32_t>(), x, keys_in.as<uint64_t>());
  SHOAL_CUDA_LAUNCHED();
  size_t temp_bytes = 0;
  SHOAL_CUDA_CHECK(cub::DeviceRadixSort::SortKeysDescending(nullptr, temp_bytes, keys_in.as<uint64_t>(),
                                                            keys_out.as<uint64_t>(), static_cast<int>(c), 0, 64, s));
  size_t temp2 = 0;
  SHOAL_CUDA_CHECK(cub::DeviceRadixSort::SortKeys(nullptr, temp2, cand.as<uint32_t>(), indices, static_cast<int>(k),
                                                  0, 32, s));
  TempBuffer temp(backend, std::max(temp_bytes, temp2));
  SHOAL_CUDA_CHECK(cub::DeviceRadixSort::SortKeysDescending(temp.as<void>(), temp_bytes, keys_in.as<uint64_t>(),
                                                            keys_out.as<uint64_t>(), static_cast<int>(c), 0, 64, s));
  KeysToIndices<<<GridFor(k), 256, 0, s>>>(k, keys_out.as<uint64_t>(), cand.as<uint32_t>());
  SHOAL_CUDA_LAUNCHED();
  temp2 = std::max(temp_bytes, temp2);
  SHOAL_CUDA_CHECK(
      cub::DeviceRadixSort::SortKeys(temp.as<void>(), temp2, cand.as<uint32_t>(), indices, static_cast<int>(k), 0, 32, s));
  Gather<<<GridFor(k), 256, 0, s>>>(k, indices, x, values);
  SHOAL_CUDA_LAUNCHED();
}

void ScatterTopK(Backend& backend, size_t n, size_t k, const uint32_t* indices, const float* values, float* y) {
  const cudaStream_t s = StreamFor(backend);
  if (n == 0) return;
  Zero<<<GridFor(n), 256, 0, s>>>(n, y);
  SHOAL_CUDA_LAUNCHED();
  if (k == 0) return;
  Scatter<<<GridFor(k), 256, 0, s>>>(k, indices, values, y);
  SHOAL_CUDA_LAUNCHED();
}

}  // namespace shoal::cuda
