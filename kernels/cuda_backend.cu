// The CUDA backend: Backend on one device, everything queued on one stream, device memory
// through the caching allocator, results the host needs (loss sums, norms) copied back through
// a small pinned buffer, large downloads through two pinned staging buffers so the copy of one
// chunk overlaps the host's handling of the previous one.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>
#include <string>

#include "activation.cuh"
#include "allocator.cuh"
#include "attention.cuh"
#include "bias.cuh"
#include "blas1.cuh"
#include "check.cuh"
#include "cuda_backend.h"
#include "embedding.cuh"
#include "gemm.cuh"
#include "layernorm.cuh"
#include "optimizer.cuh"
#include "reduce.cuh"
#include "softmax_xent.cuh"

namespace shoal::cuda {

void Fatal(const char* call, const char* error, const char* file, int line) {
  std::fprintf(stderr, "shoal: fatal CUDA error: %s: %s (%s:%d)\n", call, error, file, line);
  std::abort();
}

StatusOr<int> DeviceCount() {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::Unavailable(std::string("no usable CUDA device (cudaGetDeviceCount: ") + cudaGetErrorString(e) +
                               ")");
  }
  if (n == 0) return Status::Unavailable("no CUDA device found (cudaGetDeviceCount returned 0)");
  return n;
}

namespace {

constexpr size_t kStagingBytes = size_t{4} << 20;  // per pinned staging buffer
constexpr size_t kStagedCopyMin = size_t{1} << 20;  // smaller downloads go in one copy

// Device scratch that only grows.
class Scratch {
 public:
  explicit Scratch(CachingAllocator* alloc) : alloc_(alloc) {}
  ~Scratch() { alloc_->Free(p_); }
  void* Reserve(size_t bytes) {
    if (bytes > size_) {
      alloc_->Free(p_);
      p_ = alloc_->Alloc(bytes);
      if (p_ == nullptr) throw std::bad_alloc();
      size_ = bytes;
    }
    return p_;
  }

 private:
  CachingAllocator* alloc_;
  void* p_ = nullptr;
  size_t size_ = 0;
};

class CudaBackend final : public Backend {
 public:
  CudaBackend(int device, std::string name) : device_(device), name_(std::move(name)) {}
  ~CudaBackend() override {
    cudaSetDevice(device_);
    cudaStreamSynchronize(stream_);
    a16_.reset();
    b16_.reset();
    loss_rows_.reset();
    loss_totals_.reset();
    partials_.reset();
    if (blas_) cublasDestroy(blas_);
    for (int i = 0; i < 2; ++i) {
      if (staging_[i]) cudaFreeHost(staging_[i]);
      if (staged_[i]) cudaEventDestroy(staged_[i]);
    }
    if (host_result_) cudaFreeHost(host_result_);
    if (stream_) cudaStreamDestroy(stream_);
  }

  Status Init() {
    SHOAL_RETURN_IF_ERROR(Try(cudaSetDevice(device_), "cudaSetDevice"));
    SHOAL_RETURN_IF_ERROR(Try(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate"));
    if (cublasCreate(&blas_) != CUBLAS_STATUS_SUCCESS) return Status::Unavailable(name_ + ": cublasCreate failed");
    SHOAL_CUDA_CHECK(cublasSetStream(blas_, stream_));
    for (int i = 0; i < 2; ++i) {
      SHOAL_RETURN_IF_ERROR(Try(cudaMallocHost(&staging_[i], kStagingBytes), "cudaMallocHost"));
      SHOAL_RETURN_IF_ERROR(Try(cudaEventCreateWithFlags(&staged_[i], cudaEventDisableTiming), "cudaEventCreate"));
    }
    SHOAL_RETURN_IF_ERROR(Try(cudaMallocHost(&host_result_, 64), "cudaMallocHost"));
    a16_ = std::make_unique<Scratch>(&alloc_);
    b16_ = std::make_unique<Scratch>(&alloc_);
    loss_rows_ = std::make_unique<Scratch>(&alloc_);
    loss_totals_ = std::make_unique<Scratch>(&alloc_);
    partials_ = std::make_unique<Scratch>(&alloc_);
    return Status::Ok();
  }

  std::string name() const override { return name_; }
  void* native_queue() override { return stream_; }
  cudaStream_t stream() const { return stream_; }
  const CachingAllocator& allocator() const { return alloc_; }

  // Memory ---------------------------------------------------------------------------------
  void* AllocBytes(size_t bytes) override {
    Bind();
    void* p = alloc_.Alloc(bytes);
    if (p == nullptr) throw std::bad_alloc();
    return p;
  }
  void FreeBytes(void* p) override { alloc_.Free(p); }
  void CopyToDevice(void* dst, const void* host_src, size_t bytes) override {
    if (bytes == 0) return;
    Bind();
    SHOAL_CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
    SHOAL_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the caller may reuse host_src at once
  }
  void CopyToHost(void* host_dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    Bind();
    if (bytes < kStagedCopyMin) {
      SHOAL_CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
      SHOAL_CUDA_CHECK(cudaStreamSynchronize(stream_));
      return;
    }
    // Double-buffered through pinned memory: chunk i is copied by the DMA engine while the host
    // moves chunk i-1 out of the other staging buffer.
    const char* s = static_cast<const char*>(src);
    char* d = static_cast<char*>(host_dst);
    const size_t chunks = (bytes + kStagingBytes - 1) / kStagingBytes;
    auto len = [&](size_t i) { return std::min(kStagingBytes, bytes - i * kStagingBytes); };
    for (size_t i = 0; i <= chunks; ++i) {
      if (i < chunks) {
        SHOAL_CUDA_CHECK(cudaMemcpyAsync(staging_[i % 2], s + i * kStagingBytes, len(i), cudaMemcpyDeviceToHost,
                                         stream_));
        SHOAL_CUDA_CHECK(cudaEventRecord(staged_[i % 2], stream_));
      }
      if (i > 0) {
        const size_t j = i - 1;
        SHOAL_CUDA_CHECK(cudaEventSynchronize(staged_[j % 2]));
        std::memcpy(d + j * kStagingBytes, staging_[j % 2], len(j));
      }
    }
  }
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override {
    if (bytes == 0) return;
    Bind();
    SHOAL_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream_));
  }
  void Synchronize() override {
    Bind();
    SHOAL_CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  // Linear algebra ---------------------------------------------------------------------------
  void GemmEx(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, const float* b, float beta,
              float* c, Precision p) override {
    Bind();
    void *a16 = nullptr, *b16 = nullptr;
    if (p == Precision::kBf16 || p == Precision::kFp16) {
      a16 = a16_->Reserve(2 * static_cast<size_t>(m) * k + 2);
      b16 = b16_->Reserve(2 * static_cast<size_t>(k) * n + 2);
    }
    cuda::Gemm(blas_, stream_, ta, tb, m, n, k, alpha, a, b, beta, c, p, a16, b16);
  }
  void GemmStridedBatched(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                          int64_t stride_a, const float* b, int ldb, int64_t stride_b, float beta, float* c, int ldc,
                          int64_t stride_c, int batch, Precision p) override {
    Bind();
    void *a16 = nullptr, *b16 = nullptr;
    if (p == Precision::kBf16 || p == Precision::kFp16) {
      a16 = a16_->Reserve(2 * cuda::StridedSpan(ta ? k : m, ta ? m : k, lda, stride_a, batch) + 2);
      b16 = b16_->Reserve(2 * cuda::StridedSpan(tb ? n : k, tb ? k : n, ldb, stride_b, batch) + 2);
    }
    cuda::GemmStridedBatched(blas_, stream_, ta, tb, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc,
                             stride_c, batch, p, a16, b16);
  }
  void Axpy(size_t n, float alpha, const float* x, float* y) override {
    Bind();
    LaunchAxpy(stream_, n, alpha, x, y);
  }
  void Scale(size_t n, float alpha, float* x) override {
    Bind();
    LaunchScale(stream_, n, alpha, x);
  }
  void Multiply(size_t n, const float* a, const float* b, float* out) override {
    Bind();
    LaunchMultiply(stream_, n, a, b, out);
  }
  void AddBiasRows(int rows, int cols, const float* bias, float* y) override {
    Bind();
    LaunchAddBiasRows(stream_, rows, cols, bias, y);
  }
  void SumRows(int rows, int cols, const float* x, float beta, float* out) override {
    Bind();
    LaunchSumRows(stream_, rows, cols, x, beta, out);
  }

  // Activations --------------------------------------------------------------------------------
  void Relu(size_t n, const float* x, float* y) override {
    Bind();
    LaunchRelu(stream_, n, x, y);
  }
  void ReluBackward(size_t n, const float* x, const float* dy, float* dx) override {
    Bind();
    LaunchReluBackward(stream_, n, x, dy, dx);
  }
  void Gelu(size_t n, const float* x, float* y) override {
    Bind();
    LaunchGelu(stream_, n, x, y);
  }
  void GeluBackward(size_t n, const float* x, const float* dy, float* dx) override {
    Bind();
    LaunchGeluBackward(stream_, n, x, dy, dx);
  }
  void GeluWithDerivative(size_t n, const float* x, float* y, float* dydx) override {
    Bind();
    LaunchGeluWithDerivative(stream_, n, x, y, dydx);
  }

  // Normalization, embeddings, reductions --------------------------------------------------------
  void LayerNorm(int rows, int cols, const float* x, const float* gamma, const float* beta, float eps, float* y,
                 float* mean, float* rstd) override {
    Bind();
    LaunchLayerNorm(stream_, rows, cols, x, gamma, beta, eps, y, mean, rstd);
  }
  void LayerNormBackward(int rows, int cols, const float* x, const float* gamma, const float* mean, const float* rstd,
                         const float* dy, float* dx, float* dgamma, float* dbeta) override {
    Bind();
    LaunchLayerNormBackward(stream_, rows, cols, x, gamma, mean, rstd, dy, dx, dgamma, dbeta);
  }
  void CausalSoftmax(int mats, int n, float scale, float* x) override {
    Bind();
    LaunchCausalSoftmax(stream_, mats, n, scale, x);
  }
  void CausalSoftmaxBackward(int mats, int n, float scale, const float* p, const float* dp, float* dx) override {
    Bind();
    LaunchCausalSoftmaxBackward(stream_, mats, n, scale, p, dp, dx);
  }
  void EmbeddingGather(int rows, int dim, const float* table, const int32_t* ids, float* out) override {
    Bind();
    LaunchEmbeddingGather(stream_, rows, dim, table, ids, out);
  }
  void EmbeddingScatterAdd(int rows, int dim, const float* dout, const int32_t* ids, float* dtable) override {
    Bind();
    LaunchEmbeddingScatterAdd(stream_, rows, dim, dout, ids, dtable);
  }
  double SumSquares(size_t n, const float* x) override {
    Bind();
    auto* partials = static_cast<double*>(partials_->Reserve(sizeof(double) * (kReduceBlocks + 1)));
    LaunchSumSquares(stream_, n, x, partials, partials + kReduceBlocks);
    double out = 0.0;
    SHOAL_CUDA_CHECK(cudaMemcpyAsync(host_result_, partials + kReduceBlocks, sizeof(double), cudaMemcpyDeviceToHost,
                                     stream_));
    SHOAL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(&out, host_result_, sizeof out);
    return out;
  }

  // Loss ------------------------------------------------------------------------------------------
  void SoftmaxCrossEntropy(int rows, int cols, const float* logits, const int32_t* labels, float* dlogits,
                           double* loss_sum, int64_t* correct) override {
    Bind();
    const size_t r = static_cast<size_t>(rows > 0 ? rows : 1);
    auto* row_loss = static_cast<double*>(loss_rows_->Reserve(r * (sizeof(double) + sizeof(int32_t))));
    auto* row_correct = reinterpret_cast<int32_t*>(row_loss + r);
    auto* totals = static_cast<double*>(loss_totals_->Reserve(2 * sizeof(double)));
    LaunchSoftmaxCrossEntropy(stream_, rows, cols, logits, labels, dlogits, row_loss, row_correct, totals,
                              reinterpret_cast<int64_t*>(totals + 1));
    SHOAL_CUDA_CHECK(cudaMemcpyAsync(host_result_, totals, 2 * sizeof(double), cudaMemcpyDeviceToHost, stream_));
    SHOAL_CUDA_CHECK(cudaStreamSynchronize(stream_));
    std::memcpy(loss_sum, host_result_, sizeof(double));
    std::memcpy(correct, static_cast<char*>(host_result_) + sizeof(double), sizeof(int64_t));
  }

  // Optimizers ---------------------------------------------------------------------------------------
  void SgdStep(size_t n, float* w, const float* grad, float* buf, float lr, float momentum, float weight_decay,
               bool nesterov, bool first_step) override {
    Bind();
    LaunchSgdStep(stream_, n, w, grad, buf, lr, momentum, weight_decay, nesterov, first_step);
  }
  void AdamWStep(size_t n, float* w, const float* grad, float* m, float* v, float lr, float beta1, float beta2,
                 float eps, float weight_decay, int64_t t) override {
    Bind();
    // Bias corrections on the host in double, exactly as the CPU backend computes them.
    const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
    const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
    LaunchAdamWStep(stream_, n, w, grad, m, v, lr, beta1, beta2, eps, weight_decay, static_cast<float>(lr / bc1),
                    static_cast<float>(std::sqrt(bc2)));
  }

 private:
  // The worker thread that trains is not the one that created the backend: make this
  // backend's device current for every call (cheap when it already is).
  void Bind() const { SHOAL_CUDA_CHECK(cudaSetDevice(device_)); }
  Status Try(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return Status::Ok();
    (void)cudaGetLastError();
    return Status::Unavailable(name_ + ": " + what + " failed: " + cudaGetErrorString(e));
  }

  int device_;
  std::string name_;
  cudaStream_t stream_ = nullptr;
  cublasHandle_t blas_ = nullptr;
  CachingAllocator alloc_;
  std::unique_ptr<Scratch> a16_, b16_, loss_rows_, loss_totals_, partials_;
  void* staging_[2] = {nullptr, nullptr};
  cudaEvent_t staged_[2] = {nullptr, nullptr};
  void* host_result_ = nullptr;  // pinned, for values the host waits for
};

}  // namespace

StatusOr<std::unique_ptr<Backend>> MakeCudaBackend(int index) {
  SHOAL_ASSIGN_OR_RETURN(int count, DeviceCount());
  if (index < 0 || index >= count)
    return Status::Unavailable("--device cuda:" + std::to_string(index) + ": this machine has " +
                               std::to_string(count) + " CUDA device(s), numbered from 0");
  cudaDeviceProp prop{};
  const cudaError_t e = cudaGetDeviceProperties(&prop, index);
  if (e != cudaSuccess) {
    (void)cudaGetLastError();
    return Status::Unavailable("cuda:" + std::to_string(index) + ": " + cudaGetErrorString(e));
  }
  const std::string name = "cuda:" + std::to_string(index) + " (" + prop.name + ", sm_" +
                           std::to_string(prop.major) + std::to_string(prop.minor) + ")";
  if (prop.major < 8)
    return Status::Unavailable(name + ": compute capability " + std::to_string(prop.major) + "." +
                               std::to_string(prop.minor) + " is older than this build's 8.0 and 9.0 targets");
  auto backend = std::make_unique<CudaBackend>(index, name);
  SHOAL_RETURN_IF_ERROR(backend->Init());
  return std::unique_ptr<Backend>(std::move(backend));
}

void* StreamOf(Backend* backend) { return backend->native_queue(); }

MemoryStats MemoryStatsOf(Backend* backend) {
  auto* cuda = dynamic_cast<CudaBackend*>(backend);
  if (!cuda) return {};
  const auto s = cuda->allocator().stats();
  return {s.in_use_bytes, s.cached_bytes, s.peak_bytes, s.reused, s.device_allocs};
}

}  // namespace shoal::cuda
