// Reductions: sum of squares to a double on the device, and the block-level and column-sum
// helpers the other kernels use. Grids and summation orders are fixed, so a result does not
// depend on scheduling.
#pragma once
#include <cuda_runtime.h>

#include <cstddef>

namespace shoal::cuda {

constexpr int kReduceBlocks = 1024;

// *out (device) = sum of x[i]^2 in double; `partials` holds kReduceBlocks doubles.
void LaunchSumSquares(cudaStream_t s, size_t n, const float* x, double* partials, double* out);

// Sum of `v` over the block (blockDim.x a multiple of 32, at most 1024); the result is valid
// in every thread. Uses 32 doubles of shared memory.
__device__ inline double BlockSum(double v) {
  __shared__ double warp_sums[32];
  for (int off = 16; off > 0; off /= 2) v += __shfl_down_sync(0xffffffffu, v, off);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // warp_sums may still be read by a previous call
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  double total = 0.0;
  const int warps = blockDim.x / 32;
  for (int w = 0; w < warps; ++w) total += warp_sums[w];
  return total;
}

// Column sums of a row-major [rows, cols] operand, for blocks of kColumnTile x kRowLanes
// threads, one block per kColumnTile columns: thread (x, y) adds term(r, acc) for the rows
// r = y, y + kRowLanes, ... of column blockIdx.x * kColumnTile + x (consecutive x read
// consecutive addresses), then row y == 0 of the block adds the kRowLanes partials in lane
// order. Deterministic, and kRowLanes times the parallelism of one thread per column (which
// left all but cols/256 multiprocessors idle: 44% of a 114M GPT's bf16 step on an H200 went to
// LayerNorm's parameter gradients). `term` must add nothing for a column past the end; every
// thread of the block must call this (it synchronizes). The N totals are valid in y == 0.
constexpr int kColumnTile = 32, kRowLanes = 32;
inline dim3 ColumnSumBlock() { return dim3(kColumnTile, kRowLanes); }
inline unsigned ColumnSumGrid(int cols) { return static_cast<unsigned>((cols + kColumnTile - 1) / kColumnTile); }
template <int N, class Term>
__device__ void ColumnSums(int rows, Term term, double (&total)[N]) {
  __shared__ double lanes[N][kRowLanes][kColumnTile];
  double acc[N] = {};
  for (int r = threadIdx.y; r < rows; r += kRowLanes) term(r, acc);
  for (int k = 0; k < N; ++k) lanes[k][threadIdx.y][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y == 0) {
    for (int k = 0; k < N; ++k) {
      double s = 0.0;
      for (int l = 0; l < kRowLanes; ++l) s += lanes[k][l][threadIdx.x];
      total[k] = s;
    }
  }
}

}  // namespace shoal::cuda
