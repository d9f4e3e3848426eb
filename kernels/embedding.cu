#include "check.cuh"
#include "embedding.cuh"

namespace shoal::cuda {
namespace {
__global__ void Gather(size_t n, int dim, const float* table, const int32_t* ids, float* out) {
  SHOAL_GRID_LOOP(i, n) {
    const size_t r = i / static_cast<size_t>(dim), c = i % static_cast<size_t>(dim);
    out[i] = table[static_cast<size_t>(ids[r]) * dim + c];
  }
}
__global__ void ScatterAdd(size_t n, int dim, const float* dout, const int32_t* ids, float* dtable) {
  SHOAL_GRID_LOOP(i, n) {
    const size_t r = i / static_cast<size_t>(dim), c = i % static_cast<size_t>(dim);
    atomicAdd(dtable + static_cast<size_t>(ids[r]) * dim + c, dout[i]);
  }
}
}  // namespace

void LaunchEmbeddingGather(cudaStream_t s, int rows, int dim, const float* table, const int32_t* ids, float* out) {
  const size_t n = static_cast<size_t>(rows) * dim;
  if (n == 0) return;
  Gather<<<GridFor(n), 256, 0, s>>>(n, dim, table, ids, out);
  SHOAL_CUDA_LAUNCHED();
}
void LaunchEmbeddingScatterAdd(cudaStream_t s, int rows, int dim, const float* dout, const int32_t* ids,
                               float* dtable) {
  const size_t n = static_cast<size_t>(rows) * dim;
  if (n == 0) return;
  ScatterAdd<<<GridFor(n), 256, 0, s>>>(n, dim, dout, ids, dtable);
  SHOAL_CUDA_LAUNCHED();
}
}  // namespace shoal::cuda
