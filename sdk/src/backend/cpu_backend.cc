// The CPU reference backend. GEMM goes to OpenBLAS; everything else is plain loops that
// the compiler vectorizes. Reductions accumulate in double so results do not depend on
// vector width.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>

#include "backend/backend.h"

namespace shoal {
namespace {

constexpr float kInvSqrt2 = 0.70710678118654752440f;
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;

class CpuBackend final : public Backend {
 public:
  std::string name() const override { return "cpu"; }

  void* AllocBytes(size_t bytes) override {
    void* p = std::aligned_alloc(64, (bytes + 63) / 64 * 64);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void FreeBytes(void* p) override { std::free(p); }
  void CopyToDevice(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void CopyToHost(void* dst, const void* src, size_t bytes) override { std::memcpy(dst, src, bytes); }
  void CopyOnDevice(void* dst, const void* src, size_t bytes) override { std::memmove(dst, src, bytes); }

  void Gemm(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, const float* b,
            float beta, float* c) override {
    cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k,
                alpha, a, ta ? m : k, b, tb ? k : n, beta, c, n);
  }

  void Axpy(size_t n, float alpha, const float* x, float* y) override {
    for (size_t i = 0; i < n; ++i) y[i] += alpha * x[i];
  }
  void Scale(size_t n, float alpha, float* x) override {
    for (size_t i = 0; i < n; ++i) x[i] *= alpha;
  }
  void AddBiasRows(int rows, int cols, const float* bias, float* y) override {
    for (int r = 0; r < rows; ++r) {
      float* row = y + static_cast<size_t>(r) * cols;
      for (int c = 0; c < cols; ++c) row[c] += bias[c];
    }
  }
  void SumRows(int rows, int cols, const float* x, float beta, float* out) override {
    for (int c = 0; c < cols; ++c) {
      double s = 0.0;
      for (int r = 0; r < rows; ++r) s += x[static_cast<size_t>(r) * cols + c];
      out[c] = (beta == 0.0f ? 0.0f : beta * out[c]) + static_cast<float>(s);
    }
  }

  void Relu(size_t n, const float* x, float* y) override {
    for (size_t i = 0; i < n; ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
  }
  void ReluBackward(size_t n, const float* x, const float* dy, float* dx) override {
    for (size_t i = 0; i < n; ++i) dx[i] = x[i] > 0.0f ? dy[i] : 0.0f;
  }
  void Gelu(size_t n, const float* x, float* y) override {
    for (size_t i = 0; i < n; ++i) y[i] = 0.5f * x[i] * (1.0f + std::erf(x[i] * kInvSqrt2));
  }
  void GeluBackward(size_t n, const float* x, const float* dy, float* dx) override {
    for (size_t i = 0; i < n; ++i) {
      float cdf = 0.5f * (1.0f + std::erf(x[i] * kInvSqrt2));
      float pdf = kInvSqrt2Pi * std::exp(-0.5f * x[i] * x[i]);
      dx[i] = dy[i] * (cdf + x[i] * pdf);
    }
  }

  void SoftmaxCrossEntropy(int rows, int cols, const float* logits, const int32_t* labels, float* dlogits,
                           double* loss_sum, int64_t* correct) override {
    double total = 0.0;
    int64_t hits = 0;
    const float inv_rows = rows > 0 ? 1.0f / static_cast<float>(rows) : 0.0f;
    for (int r = 0; r < rows; ++r) {
      const float* z = logits + static_cast<size_t>(r) * cols;
      int argmax = 0;
      float mx = z[0];
      for (int c = 1; c < cols; ++c)
        if (z[c] > mx) { mx = z[c]; argmax = c; }
      double denom = 0.0;
      for (int c = 0; c < cols; ++c) denom += std::exp(static_cast<double>(z[c] - mx));
      const int y = labels[r];
      const double log_denom = std::log(denom);
      total += log_denom - static_cast<double>(z[y] - mx);
      if (argmax == y) ++hits;
      if (dlogits) {
        float* d = dlogits + static_cast<size_t>(r) * cols;
        for (int c = 0; c < cols; ++c) {
          float p = static_cast<float>(std::exp(static_cast<double>(z[c] - mx) - log_denom));
          d[c] = (p - (c == y ? 1.0f : 0.0f)) * inv_rows;
        }
      }
    }
    *loss_sum = total;
    *correct = hits;
  }

  void SgdStep(size_t n, float* w, const float* grad, float* buf, float lr, float momentum, float wd,
               bool nesterov, bool first_step) override {
    for (size_t i = 0; i < n; ++i) {
      float g = grad[i];
      if (wd != 0.0f) g += wd * w[i];
      if (momentum != 0.0f) {
        buf[i] = first_step ? g : momentum * buf[i] + g;
        g = nesterov ? g + momentum * buf[i] : buf[i];
      }
      w[i] -= lr * g;
    }
  }

  void AdamWStep(size_t n, float* w, const float* grad, float* m, float* v, float lr, float beta1,
                 float beta2, float eps, float wd, int64_t t) override {
    const double bc1 = 1.0 - std::pow(static_cast<double>(beta1), static_cast<double>(t));
    const double bc2 = 1.0 - std::pow(static_cast<double>(beta2), static_cast<double>(t));
    const float step_size = static_cast<float>(lr / bc1);
    const float bc2_sqrt = static_cast<float>(std::sqrt(bc2));
    for (size_t i = 0; i < n; ++i) {
      w[i] *= 1.0f - lr * wd;
      m[i] = beta1 * m[i] + (1.0f - beta1) * grad[i];
      v[i] = beta2 * v[i] + (1.0f - beta2) * grad[i] * grad[i];
      float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
      w[i] -= step_size * m[i] / denom;
    }
  }
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace shoal
