// The CPU reference backend. GEMM goes to OpenBLAS; everything else is plain loops that
// the compiler vectorizes. Reductions accumulate in double so results do not depend on
// vector width.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <vector>

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

  // One packed GEMM is a batch of one (the same cblas call, rounding included).
  void GemmEx(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, const float* b, float beta,
              float* c, Precision precision) override {
    GemmStridedBatched(ta, tb, m, n, k, alpha, a, ta ? m : k, 0, b, tb ? k : n, 0, beta, c, n, 0, 1, precision);
  }

  void GemmStridedBatched(bool ta, bool tb, int m, int n, int k, float alpha, const float* a, int lda,
                          int64_t stride_a, const float* b, int ldb, int64_t stride_b, float beta, float* c, int ldc,
                          int64_t stride_c, int batch, Precision precision) override {
    for (int i = 0; i < batch; ++i) {
      const float* ai = a + i * stride_a;
      const float* bi = b + i * stride_b;
      int ld_a = lda, ld_b = ldb;
      if (precision != Precision::kFp32) {
        // Tensor-core semantics, emulated: operands packed, rounded to the format; fp32 accumulation.
        ai = Rounded(ai, ta ? k : m, ta ? m : k, lda, precision, &round_a_);
        bi = Rounded(bi, tb ? n : k, tb ? k : n, ldb, precision, &round_b_);
        ld_a = ta ? m : k;
        ld_b = tb ? k : n;
      }
      cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, m, n, k, alpha, ai,
                  ld_a, bi, ld_b, beta, c + i * stride_c, ldc);
    }
  }

  void Axpy(size_t n, float alpha, const float* x, float* y) override {
    for (size_t i = 0; i < n; ++i) y[i] += alpha * x[i];
  }
  void Multiply(size_t n, const float* a, const float* b, float* out) override {
    for (size_t i = 0; i < n; ++i) out[i] = a[i] * b[i];
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
    // Row by row into double column sums (contiguous, vectorizable; the same additions, in
    // the same order per column, as a column-by-column loop).
    sums_.assign(static_cast<size_t>(cols), 0.0);
    for (int r = 0; r < rows; ++r) {
      const float* row = x + static_cast<size_t>(r) * cols;
      for (int c = 0; c < cols; ++c) sums_[c] += row[c];
    }
    for (int c = 0; c < cols; ++c) out[c] = (beta == 0.0f ? 0.0f : beta * out[c]) + static_cast<float>(sums_[c]);
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
  void GeluWithDerivative(size_t n, const float* x, float* y, float* dydx) override {
    for (size_t i = 0; i < n; ++i) {
      const float xi = x[i];  // dydx may alias x
      const float e = std::erf(xi * kInvSqrt2);
      const float cdf = 0.5f * (1.0f + e);
      const float pdf = kInvSqrt2Pi * std::exp(-0.5f * xi * xi);
      y[i] = 0.5f * xi * (1.0f + e);
      dydx[i] = cdf + xi * pdf;
    }
  }

  void LayerNorm(int rows, int cols, const float* x, const float* gamma, const float* beta, float eps, float* y,
                 float* mean, float* rstd) override {
    for (int r = 0; r < rows; ++r) {
      const float* xr = x + static_cast<size_t>(r) * cols;
      double s = 0.0, ss = 0.0;
      for (int c = 0; c < cols; ++c) s += xr[c];
      const double mu = s / cols;
      for (int c = 0; c < cols; ++c) ss += (xr[c] - mu) * (xr[c] - mu);
      const float m = static_cast<float>(mu);
      const float rs = static_cast<float>(1.0 / std::sqrt(ss / cols + static_cast<double>(eps)));
      mean[r] = m;
      rstd[r] = rs;
      float* yr = y + static_cast<size_t>(r) * cols;
      for (int c = 0; c < cols; ++c) yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c];
    }
  }
  void LayerNormBackward(int rows, int cols, const float* x, const float* gamma, const float* mean, const float* rstd,
                         const float* dy, float* dx, float* dgamma, float* dbeta) override {
    std::vector<double> dg(static_cast<size_t>(cols), 0.0), db(static_cast<size_t>(cols), 0.0);
    for (int r = 0; r < rows; ++r) {
      const float* xr = x + static_cast<size_t>(r) * cols;
      const float* dyr = dy + static_cast<size_t>(r) * cols;
      float* dxr = dx + static_cast<size_t>(r) * cols;
      // dx = rstd * (g - mean(g) - xhat * mean(g * xhat)), g = dy * gamma.
      double sum_g = 0.0, sum_gx = 0.0;
      for (int c = 0; c < cols; ++c) {
        const float xhat = (xr[c] - mean[r]) * rstd[r];
        const float g = dyr[c] * gamma[c];
        sum_g += g;
        sum_gx += static_cast<double>(g) * xhat;
        dg[static_cast<size_t>(c)] += static_cast<double>(dyr[c]) * xhat;
        db[static_cast<size_t>(c)] += dyr[c];
      }
      const float mg = static_cast<float>(sum_g / cols), mgx = static_cast<float>(sum_gx / cols);
      for (int c = 0; c < cols; ++c) {
        const float xhat = (xr[c] - mean[r]) * rstd[r];
        dxr[c] = rstd[r] * (dyr[c] * gamma[c] - mg - xhat * mgx);
      }
    }
    for (int c = 0; c < cols; ++c) {
      dgamma[c] = static_cast<float>(dg[static_cast<size_t>(c)]);
      dbeta[c] = static_cast<float>(db[static_cast<size_t>(c)]);
    }
  }
  void CausalSoftmax(int mats, int n, float scale, float* x) override {
    for (int64_t r = 0; r < static_cast<int64_t>(mats) * n; ++r) {
      float* row = x + r * n;
      const int seen = static_cast<int>(r % n) + 1;  // entries 0..i
      float top = -INFINITY;
      for (int j = 0; j < seen; ++j) top = std::max(top, scale * row[j]);
      double sum = 0.0;
      for (int j = 0; j < seen; ++j) sum += row[j] = std::exp(scale * row[j] - top);
      const float inv = static_cast<float>(1.0 / sum);
      for (int j = 0; j < seen; ++j) row[j] *= inv;
      for (int j = seen; j < n; ++j) row[j] = 0.0f;
    }
  }
  void CausalSoftmaxBackward(int mats, int n, float scale, const float* p, const float* dp, float* dx) override {
    for (int64_t r = 0; r < static_cast<int64_t>(mats) * n; ++r) {
      const float* pr = p + r * n;
      const float* dpr = dp + r * n;
      float* dxr = dx + r * n;
      const int seen = static_cast<int>(r % n) + 1;
      double dot = 0.0;
      for (int j = 0; j < seen; ++j) dot += static_cast<double>(pr[j]) * dpr[j];
      const float d = static_cast<float>(dot);
      for (int j = 0; j < seen; ++j) dxr[j] = scale * pr[j] * (dpr[j] - d);
      for (int j = seen; j < n; ++j) dxr[j] = 0.0f;
    }
  }

  void EmbeddingGather(int rows, int dim, const float* table, const int32_t* ids, float* out) override {
    for (int r = 0; r < rows; ++r)
      std::memcpy(out + static_cast<size_t>(r) * dim, table + static_cast<size_t>(ids[r]) * dim, sizeof(float) * dim);
  }
  void EmbeddingScatterAdd(int rows, int dim, const float* dout, const int32_t* ids, float* dtable) override {
    for (int r = 0; r < rows; ++r) {
      float* t = dtable + static_cast<size_t>(ids[r]) * dim;
      const float* d = dout + static_cast<size_t>(r) * dim;
      for (int c = 0; c < dim; ++c) t[c] += d[c];
    }
  }
  double SumSquares(size_t n, const float* x) override {
    double s = 0.0;
    for (size_t i = 0; i < n; ++i) s += static_cast<double>(x[i]) * x[i];
    return s;
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

 private:
  // The [rows, cols] matrix at x (rows ld apart), packed into *out and rounded to `p`.
  static const float* Rounded(const float* x, int rows, int cols, int ld, Precision p, std::vector<float>* out) {
    out->resize(static_cast<size_t>(rows) * cols);
    for (int r = 0; r < rows; ++r)
      std::memcpy(out->data() + static_cast<size_t>(r) * cols, x + static_cast<size_t>(r) * ld, sizeof(float) * cols);
    RoundTo(p, out->data(), out->size());
    return out->data();
  }

  std::vector<float> round_a_, round_b_;  // GEMM operands rounded to a reduced precision
  std::vector<double> sums_;              // SumRows' column sums
};

}  // namespace

std::unique_ptr<Backend> MakeCpuBackend() { return std::make_unique<CpuBackend>(); }

}  // namespace shoal
