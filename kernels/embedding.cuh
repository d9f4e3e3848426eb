// Embedding lookup (gather rows of a table) and its gradient (scatter-add into the table).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

namespace shoal::cuda {
void LaunchEmbeddingGather(cudaStream_t s, int rows, int dim, const float* table, const int32_t* ids, float* out);
// atomicAdd: repeated ids are summed, in no fixed order.
void LaunchEmbeddingScatterAdd(cudaStream_t s, int rows, int dim, const float* dout, const int32_t* ids,
                               float* dtable);
}  // namespace shoal::cuda
