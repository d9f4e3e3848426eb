// Backend: the primitive ops every model, optimizer and (later) codec is built from (ggml style).
// The CPU backend is the reference and always built; the CUDA backend is a module built from
// kernels/ (libshoal-cuda.so) that MakeBackend loads on demand (backend/module.h). All matrices are row-major and densely packed.
// Pointers are in the backend's memory space (host memory for the CPU backend).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backend/precision.h"
#include "shoal/status.h"

namespace shoal {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  // Memory -------------------------------------------------------------------------------
  virtual void* AllocBytes(size_t bytes) = 0;
  virtual void FreeBytes(void* p) = 0;
  virtual void CopyToDevice(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void CopyToHost(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void CopyOnDevice(void* dst, const void* src, size_t bytes) = 0;
  // Blocks until all queued work is done (no-op on the CPU).
  virtual void Synchronize() {}
  // The queue the backend's work runs on, for kernels outside the interface (the CUDA
  // backend's cudaStream_t; nullptr for the CPU). Works across the module boundary, where
  // RTTI does not (backend/module.h).
  virtual void* native_queue() { return nullptr; }

  // Linear algebra -----------------------------------------------------------------------
  // C[m,n] = alpha * op(A) * op(B) + beta * C, op(A) is [m,k], op(B) is [k,n].
  // A is stored [m,k] (or [k,m] when trans_a), B is [k,n] (or [n,k] when trans_b).
  // `precision` other than fp32 rounds A and B to that format and accumulates in fp32
  // (tensor cores on CUDA; the same rounding, emulated, on the CPU). C is always fp32.
  virtual void GemmEx(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                      const float* b, float beta, float* c, Precision precision) = 0;
  void Gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, const float* b,
            float beta, float* c) {
    GemmEx(trans_a, trans_b, m, n, k, alpha, a, b, beta, c, Precision::kFp32);
  }
  // `batch` GEMMs with leading dimensions, row-major as GemmEx: for i < batch,
  // C_i = alpha * op(A_i) op(B_i) + beta * C_i, where X_i starts at x + i * stride_x and the
  // rows of X_i (as stored) lie ldx floats apart. Attention runs one call per sequence,
  // batched over heads, reading Q, K and V in place from the fused qkv rows and writing each
  // head's output into its columns. `precision` as GemmEx.
  virtual void GemmStridedBatched(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                                  int lda, int64_t stride_a, const float* b, int ldb, int64_t stride_b, float beta,
                                  float* c, int ldc, int64_t stride_c, int batch, Precision precision) = 0;
  // y += alpha * x
  virtual void Axpy(size_t n, float alpha, const float* x, float* y) = 0;
  // out = a * b, elementwise (out may alias a or b).
  virtual void Multiply(size_t n, const float* a, const float* b, float* out) = 0;
  // x *= alpha
  virtual void Scale(size_t n, float alpha, float* x) = 0;
  // y[r, c] += bias[c] for every row r of a [rows, cols] matrix.
  virtual void AddBiasRows(int rows, int cols, const float* bias, float* y) = 0;
  // out[c] = beta * out[c] + sum_r x[r, c]  (bias gradient).
  virtual void SumRows(int rows, int cols, const float* x, float beta, float* out) = 0;

  // Activations (elementwise) ---------------------------------------------------------------
  virtual void Relu(size_t n, const float* x, float* y) = 0;
  // dx = dy * (x > 0)
  virtual void ReluBackward(size_t n, const float* x, const float* dy, float* dx) = 0;
  // Exact GELU: x * Phi(x) with the error function (PyTorch's default).
  virtual void Gelu(size_t n, const float* x, float* y) = 0;
  virtual void GeluBackward(size_t n, const float* x, const float* dy, float* dx) = 0;
  // Gelu and its derivative at once, for a backward pass that keeps it: y as Gelu, and
  // dydx = Phi(x) + x * phi(x), so that Multiply(dy, dydx) is GeluBackward(x, dy) bit for bit,
  // with one erf and one exp per element in all instead of two erf and one exp. dydx may alias x.
  virtual void GeluWithDerivative(size_t n, const float* x, float* y, float* dydx) = 0;

  // Normalization and embeddings ----------------------------------------------------------------
  // Layer norm over each row of x[rows, cols]: y = (x - mean) * rstd * gamma + beta, with
  // rstd = 1 / sqrt(var + eps) (biased variance, as torch.nn.LayerNorm). Also writes mean[rows]
  // and rstd[rows] for the backward pass.
  virtual void LayerNorm(int rows, int cols, const float* x, const float* gamma, const float* beta, float eps,
                         float* y, float* mean, float* rstd) = 0;
  // From dy[rows, cols]: OVERWRITES dx[rows, cols], dgamma[cols] and dbeta[cols].
  virtual void LayerNormBackward(int rows, int cols, const float* x, const float* gamma, const float* mean,
                                 const float* rstd, const float* dy, float* dx, float* dgamma, float* dbeta) = 0;
  // out[r, :] = table[ids[r], :] for r < rows; every id must be in [0, vocab) (callers check).
  virtual void EmbeddingGather(int rows, int dim, const float* table, const int32_t* ids, float* out) = 0;
  // dtable[ids[r], :] += dout[r, :] (ids may repeat; on CUDA the order of the additions is not fixed).
  virtual void EmbeddingScatterAdd(int rows, int dim, const float* dout, const int32_t* ids, float* dtable) = 0;

  // Attention ------------------------------------------------------------------------------------
  // Causal softmax, in place, over `mats` contiguous [n, n] score matrices: row i becomes
  // softmax(scale * x[i, 0..i]) on its first i + 1 entries (position i attends to positions
  // up to i) and exactly 0 after them.
  virtual void CausalSoftmax(int mats, int n, float scale, float* x) = 0;
  // Its backward from the probabilities p (CausalSoftmax's output) and dp = dL/dp:
  // OVERWRITES dx = dL/dx = scale * p * (dp - sum_j p_j dp_j), row by row (0 where masked).
  // dx may alias dp.
  virtual void CausalSoftmaxBackward(int mats, int n, float scale, const float* p, const float* dp, float* dx) = 0;

  // Reductions (result on the host) ----------------------------------------------------------
  // sum of x[i]^2, accumulated in double; NaN or Inf anywhere gives a non-finite result, which
  // is how mixed precision detects an overflowed gradient.
  virtual double SumSquares(size_t n, const float* x) = 0;

  // Loss ----------------------------------------------------------------------------------------
  // Mean softmax cross-entropy over `rows` examples of `cols` classes. Writes d(loss)/d(logits)
  // to dlogits (may be null), returns the summed loss (not mean) in *loss_sum and the number
  // of rows whose argmax equals the label in *correct. Labels must be in [0, cols).
  virtual void SoftmaxCrossEntropy(int rows, int cols, const float* logits, const int32_t* labels,
                                   float* dlogits, double* loss_sum, int64_t* correct) = 0;

  // Optimizer steps over a whole arena (fused, PyTorch semantics) -----------------------------
  // torch.optim.SGD: g += wd*w; buf = first ? g : momentum*buf + g; g = nesterov ? g + momentum*buf : buf;
  // w -= lr * g. With momentum == 0 `buf` may be null.
  virtual void SgdStep(size_t n, float* w, const float* grad, float* buf, float lr, float momentum,
                       float weight_decay, bool nesterov, bool first_step) = 0;
  // torch.optim.AdamW: w *= 1 - lr*wd; m,v moments; bias correction with step t >= 1.
  virtual void AdamWStep(size_t n, float* w, const float* grad, float* m, float* v, float lr,
                         float beta1, float beta2, float eps, float weight_decay, int64_t t) = 0;
};

// Writes n zeros at x (backend memory) through a host copy: never reads x, so NaN there does
// not survive (as it would a Scale by 0). For rare paths; not for every step on a GPU.
inline void UploadZeros(Backend* backend, float* x, size_t n) {
  const std::vector<float> zeros(n, 0.0f);
  backend->CopyToDevice(x, zeros.data(), n * sizeof(float));
}

// The CPU reference backend (OpenBLAS for GEMM). Never fails to construct.
std::unique_ptr<Backend> MakeCpuBackend();

// "auto" | "cpu" | "cuda" | "cuda:N". auto picks CUDA when an NVIDIA driver is present, the
// CUDA module loads and a device is usable, else the CPU, and logs which. "cuda" without a
// usable device is an Unavailable error that names the reason (no driver, module missing or
// from another build, no device).
StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& device);
// The device index of "cuda" (0) or "cuda:N"; InvalidArgument for anything else.
StatusOr<int> CudaDeviceIndex(const std::string& device);

// An array in a backend's memory: RAII and move-only (cppzmq style).
template <typename T>
class DeviceArray {
 public:
  DeviceArray() = default;
  DeviceArray(Backend* backend, size_t n)
      : backend_(backend), n_(n), p_(n ? static_cast<T*>(backend->AllocBytes(n * sizeof(T))) : nullptr) {}
  ~DeviceArray() { reset(); }
  DeviceArray(DeviceArray&& o) noexcept : backend_(o.backend_), n_(o.n_), p_(o.p_) { o.p_ = nullptr; o.n_ = 0; }
  DeviceArray& operator=(DeviceArray&& o) noexcept {
    if (this != &o) {
      reset();
      backend_ = o.backend_; n_ = o.n_; p_ = o.p_;
      o.p_ = nullptr; o.n_ = 0;
    }
    return *this;
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;

  void reset() {
    if (p_) backend_->FreeBytes(p_);
    p_ = nullptr;
    n_ = 0;
  }
  T* get() { return p_; }
  const T* get() const { return p_; }
  size_t size() const { return n_; }
  void Upload(const T* host, size_t n) { backend_->CopyToDevice(p_, host, n * sizeof(T)); }
  void Download(T* host, size_t n) const { backend_->CopyToHost(host, p_, n * sizeof(T)); }

 private:
  Backend* backend_ = nullptr;
  size_t n_ = 0;
  T* p_ = nullptr;
};

}  // namespace shoal
