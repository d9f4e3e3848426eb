// The CPU reference backend's newer ops against independent references: precision rounding
// against IEEE values worked out by hand, reduced-precision GEMM against a double-precision
// GEMM of the rounded operands, layer norm against its formula and finite differences,
// embeddings and sums of squares against loops, strided batched GEMM and causal softmax
// against naive references and finite differences. (tests/cuda/ checks CUDA against these.)
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "../nn/grad_check.h"
#include "backend/backend.h"
#include "backend/precision.h"
#include "nn/loss_scaler.h"

namespace shoal {
namespace {

using nn::testing::GradientMatches;
using nn::testing::UniformVector;

TEST(Precision, RoundingFollowsIeeeRoundHalfToEven) {
  // bf16 keeps 7 mantissa bits.
  EXPECT_EQ(RoundToBf16(1.0f + 0x1p-8f), 1.0f);                      // a tie: to even
  EXPECT_EQ(RoundToBf16(1.0f + 3 * 0x1p-8f), 1.0f + 0x1p-6f);        // a tie: to even (up)
  EXPECT_EQ(RoundToBf16(1.0f + 0x1p-8f + 0x1p-20f), 1.0f + 0x1p-7f);  // above the tie
  EXPECT_EQ(RoundToBf16(-2.5f), -2.5f);
  EXPECT_TRUE(std::isinf(RoundToBf16(FLT_MAX)));  // past the largest bf16: Inf, as IEEE
  EXPECT_TRUE(std::isnan(RoundToBf16(std::numeric_limits<float>::quiet_NaN())));
  // fp16: 10 mantissa bits, largest 65504, subnormals down to 2^-24.
  EXPECT_EQ(RoundToFp16(65504.0f), 65504.0f);
  EXPECT_EQ(RoundToFp16(65519.99f), 65504.0f);
  EXPECT_TRUE(std::isinf(RoundToFp16(65520.0f)));
  EXPECT_EQ(RoundToFp16(-70000.0f), -std::numeric_limits<float>::infinity());
  EXPECT_EQ(RoundToFp16(1.0f + 0x1p-11f), 1.0f);
  EXPECT_EQ(RoundToFp16(1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);
  EXPECT_EQ(RoundToFp16(0x1p-24f), 0x1p-24f);          // smallest subnormal
  EXPECT_EQ(RoundToFp16(0x1p-25f), 0.0f);              // half of it: a tie, to even (zero)
  EXPECT_EQ(RoundToFp16(3 * 0x1p-25f), 0x1p-23f);      // 1.5 steps: to even (2 steps)
  EXPECT_EQ(RoundToFp16(-5 * 0x1p-26f), -0x1p-24f);    // 1.25 steps: down
  EXPECT_EQ(RoundToFp16(0x1p-14f), 0x1p-14f);          // smallest normal
  // TF32: 10 mantissa bits, fp32's range.
  EXPECT_EQ(RoundToTf32(1.0f + 0x1p-11f), 1.0f);
  EXPECT_EQ(RoundToTf32(1.0f + 3 * 0x1p-11f), 1.0f + 0x1p-9f);
  EXPECT_EQ(RoundToTf32(1e30f), std::ldexp(std::round(std::ldexp(1e30f, -99) * 1024.0f) / 1024.0f, 99));
}

// C = A B with A [m,k], B [k,n] row-major, in double, from the given (already rounded) floats.
std::vector<double> NaiveGemm(int m, int n, int k, const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<double> c(static_cast<size_t>(m) * n, 0.0);
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int p = 0; p < k; ++p) c[i * n + j] += static_cast<double>(a[i * k + p]) * b[p * n + j];
  return c;
}

double Nmse(const std::vector<float>& got, const std::vector<double>& want) {
  double err = 0.0, ref = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    err += (got[i] - want[i]) * (got[i] - want[i]);
    ref += want[i] * want[i];
  }
  return ref > 0 ? err / ref : err;
}

TEST(CpuBackend, ReducedPrecisionGemmRoundsOperandsAndAccumulatesInFp32) {
  auto be = MakeCpuBackend();
  const int m = 37, n = 29, k = 53;  // odd sizes
  const auto a = UniformVector(static_cast<size_t>(m) * k, -2.0f, 2.0f, 1);
  const auto b = UniformVector(static_cast<size_t>(k) * n, -2.0f, 2.0f, 2);
  const auto exact = NaiveGemm(m, n, k, a, b);
  struct Case {
    Precision p;
    double bound_vs_fp32;  // NMSE against the unrounded product: the format's own error
  };
  for (const Case& c : {Case{Precision::kFp32, 1e-12}, Case{Precision::kTf32, 1e-6}, Case{Precision::kBf16, 1e-4},
                        Case{Precision::kFp16, 1e-6}}) {
    std::vector<float> out(static_cast<size_t>(m) * n);
    be->GemmEx(false, false, m, n, k, 1.0f, a.data(), b.data(), 0.0f, out.data(), c.p);
    std::vector<float> ra = a, rb = b;
    RoundTo(c.p, ra.data(), ra.size());
    RoundTo(c.p, rb.data(), rb.size());
    // Against the exact product of the rounded operands: only fp32 accumulation error.
    EXPECT_LT(Nmse(out, NaiveGemm(m, n, k, ra, rb)), 1e-12) << PrecisionName(c.p);
    EXPECT_LT(Nmse(out, exact), c.bound_vs_fp32) << PrecisionName(c.p);
    if (c.p != Precision::kFp32) {
      EXPECT_GT(Nmse(out, exact), 1e-14) << PrecisionName(c.p) << " did round";
    }
  }
  // Transposed operands take the same path.
  std::vector<float> at(a.size()), out_t(static_cast<size_t>(m) * n), out(static_cast<size_t>(m) * n);
  for (int i = 0; i < m; ++i)
    for (int p = 0; p < k; ++p) at[p * m + i] = a[i * k + p];
  be->GemmEx(true, false, m, n, k, 1.0f, at.data(), b.data(), 0.0f, out_t.data(), Precision::kBf16);
  be->GemmEx(false, false, m, n, k, 1.0f, a.data(), b.data(), 0.0f, out.data(), Precision::kBf16);
  EXPECT_LT(Nmse(out_t, std::vector<double>(out.begin(), out.end())), 1e-12);
  // fp16 overflows where fp32 does not: an operand of 70000 becomes Inf.
  std::vector<float> big = a;
  big[0] = 70000.0f;
  be->GemmEx(false, false, m, n, k, 1.0f, big.data(), b.data(), 0.0f, out.data(), Precision::kFp16);
  EXPECT_TRUE(std::isinf(out[0]) || std::isnan(out[0]));
  be->GemmEx(false, false, m, n, k, 1.0f, big.data(), b.data(), 0.0f, out.data(), Precision::kBf16);
  EXPECT_TRUE(std::isfinite(out[0]));
}

TEST(CpuBackend, LayerNormMatchesItsFormulaAndFiniteDifferences) {
  auto be = MakeCpuBackend();
  const int rows = 5, cols = 13;
  const float eps = 1e-5f;
  auto x = UniformVector(static_cast<size_t>(rows) * cols, -3.0f, 3.0f, 3);
  auto gamma = UniformVector(cols, 0.5f, 1.5f, 4);
  auto beta = UniformVector(cols, -0.5f, 0.5f, 5);
  std::vector<float> y(x.size()), mean(rows), rstd(rows);
  be->LayerNorm(rows, cols, x.data(), gamma.data(), beta.data(), eps, y.data(), mean.data(), rstd.data());
  for (int r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int c = 0; c < cols; ++c) mu += x[r * cols + c];
    mu /= cols;
    for (int c = 0; c < cols; ++c) var += (x[r * cols + c] - mu) * (x[r * cols + c] - mu);
    var /= cols;
    for (int c = 0; c < cols; ++c) {
      const double want = (x[r * cols + c] - mu) / std::sqrt(var + eps) * gamma[c] + beta[c];
      EXPECT_NEAR(y[r * cols + c], want, 1e-5) << r << "," << c;
    }
  }
  // Backward against central differences of L = sum(w * y).
  const auto w = UniformVector(x.size(), -1.0f, 1.0f, 6);
  auto loss = [&]() {
    std::vector<float> yy(x.size()), mm(rows), rs(rows);
    be->LayerNorm(rows, cols, x.data(), gamma.data(), beta.data(), eps, yy.data(), mm.data(), rs.data());
    double l = 0;
    for (size_t i = 0; i < yy.size(); ++i) l += static_cast<double>(w[i]) * yy[i];
    return l;
  };
  std::vector<float> dx(x.size()), dgamma(cols), dbeta(cols);
  be->LayerNormBackward(rows, cols, x.data(), gamma.data(), mean.data(), rstd.data(), w.data(), dx.data(),
                        dgamma.data(), dbeta.data());
  EXPECT_TRUE(GradientMatches(loss, &x, dx, 1e-2f, 2e-2, 2e-3));
  EXPECT_TRUE(GradientMatches(loss, &gamma, dgamma, 1e-2f, 2e-2, 2e-3));
  EXPECT_TRUE(GradientMatches(loss, &beta, dbeta, 1e-2f, 2e-2, 2e-3));
}

// Strided batched GEMM reads every operand through its leading dimension and stride: the
// attention layout (Q, K, V interleaved in fused rows, heads side by side), against per-matrix
// double GEMMs of the same elements, in every transpose combination and for bf16.
TEST(CpuBackend, StridedBatchedGemmReadsThroughLeadingDimensionsAndStrides) {
  auto be = MakeCpuBackend();
  const int m = 5, n = 4, k = 3, batch = 3, pad = 2;
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (Precision p : {Precision::kFp32, Precision::kBf16}) {
        const int a_rows = ta ? k : m, a_cols = ta ? m : k, b_rows = tb ? n : k, b_cols = tb ? k : n;
        const int lda = a_cols * batch + pad, ldb = b_cols * batch + pad, ldc = n + pad;
        // Matrix i of A starts i * a_cols floats into each row (heads side by side).
        auto a = UniformVector(static_cast<size_t>(a_rows) * lda, -1.0f, 1.0f, 21);
        auto b = UniformVector(static_cast<size_t>(b_rows) * ldb, -1.0f, 1.0f, 22);
        auto c = UniformVector(static_cast<size_t>(batch) * m * ldc, -1.0f, 1.0f, 23);
        const auto c0 = c;
        const float alpha = 0.75f, beta = 0.5f;
        be->GemmStridedBatched(ta, tb, m, n, k, alpha, a.data(), lda, a_cols, b.data(), ldb, b_cols, beta, c.data(),
                               ldc, static_cast<int64_t>(m) * ldc, batch, p);
        auto round = [&](float v) { return p == Precision::kBf16 ? RoundToBf16(v) : v; };
        for (int i = 0; i < batch; ++i)
          for (int r = 0; r < m; ++r)
            for (int col = 0; col < ldc; ++col) {
              const size_t at = static_cast<size_t>(i) * m * ldc + static_cast<size_t>(r) * ldc + col;
              if (col >= n) {
                EXPECT_EQ(c[at], c0[at]) << "padding is never written";
                continue;
              }
              double want = 0.0;
              for (int q = 0; q < k; ++q) {
                const float av = ta ? a[static_cast<size_t>(q) * lda + i * a_cols + r] : a[static_cast<size_t>(r) * lda + i * a_cols + q];
                const float bv = tb ? b[static_cast<size_t>(col) * ldb + i * b_cols + q] : b[static_cast<size_t>(q) * ldb + i * b_cols + col];
                want += static_cast<double>(round(av)) * round(bv);
              }
              want = alpha * want + beta * c0[at];
              EXPECT_NEAR(c[at], want, 1e-5) << ta << tb << " matrix " << i << " (" << r << "," << col << ")";
            }
      }
}

// Causal softmax: each row is a softmax over the positions up to its own, exact zeros after,
// against a double reference; its backward against central differences of sum(w * p).
TEST(CpuBackend, CausalSoftmaxMasksLaterPositionsAndMatchesFiniteDifferences) {
  auto be = MakeCpuBackend();
  const int mats = 3, n = 6;
  const float scale = 0.7f;
  auto x = UniformVector(static_cast<size_t>(mats) * n * n, -4.0f, 4.0f, 31);
  std::vector<float> p = x;
  be->CausalSoftmax(mats, n, scale, p.data());
  for (int m = 0; m < mats; ++m)
    for (int i = 0; i < n; ++i) {
      const size_t row = (static_cast<size_t>(m) * n + i) * n;
      double z = 0.0;
      for (int j = 0; j <= i; ++j) z += std::exp(static_cast<double>(scale) * x[row + j]);
      for (int j = 0; j < n; ++j) {
        if (j > i) {
          EXPECT_EQ(p[row + j], 0.0f) << "position " << i << " sees " << j;
          continue;
        }
        EXPECT_NEAR(p[row + j], std::exp(static_cast<double>(scale) * x[row + j]) / z, 1e-6);
      }
    }
  const auto w = UniformVector(x.size(), -1.0f, 1.0f, 32);
  auto loss = [&]() {
    std::vector<float> q = x;
    be->CausalSoftmax(mats, n, scale, q.data());
    double l = 0.0;
    for (size_t i = 0; i < q.size(); ++i) l += static_cast<double>(w[i]) * q[i];
    return l;
  };
  std::vector<float> dx = w;  // in place: dx aliases dp
  be->CausalSoftmaxBackward(mats, n, scale, p.data(), dx.data(), dx.data());
  EXPECT_TRUE(GradientMatches(loss, &x, dx, 1e-2f, 2e-2, 1e-4));
  for (int i = 0; i < n; ++i)
    for (int j = i + 1; j < n; ++j) EXPECT_EQ(dx[static_cast<size_t>(i) * n + j], 0.0f);
}

// GELU with its derivative kept: y bit-identical to Gelu, and dy * dydx (Multiply)
// bit-identical to GeluBackward, also when the derivative overwrites the input.
TEST(CpuBackend, GeluWithDerivativeMatchesGeluAndItsBackwardBitForBit) {
  auto be = MakeCpuBackend();
  const size_t n = 1001;
  const auto x = UniformVector(n, -6.0f, 6.0f, 61), dy = UniformVector(n, -1.0f, 1.0f, 62);
  std::vector<float> y(n), dx(n), y2(n), d(n), dx2(n);
  be->Gelu(n, x.data(), y.data());
  be->GeluBackward(n, x.data(), dy.data(), dx.data());
  be->GeluWithDerivative(n, x.data(), y2.data(), d.data());
  be->Multiply(n, dy.data(), d.data(), dx2.data());
  EXPECT_EQ(0, std::memcmp(y.data(), y2.data(), n * sizeof(float)));
  EXPECT_EQ(0, std::memcmp(dx.data(), dx2.data(), n * sizeof(float)));
  std::vector<float> in_place = x;
  be->GeluWithDerivative(n, in_place.data(), y2.data(), in_place.data());
  EXPECT_EQ(0, std::memcmp(in_place.data(), d.data(), n * sizeof(float)));
}

TEST(CpuBackend, EmbeddingGatherAndScatterAdd) {
  auto be = MakeCpuBackend();
  const int vocab = 7, dim = 5, rows = 6;
  const auto table = UniformVector(static_cast<size_t>(vocab) * dim, -1.0f, 1.0f, 7);
  const std::vector<int32_t> ids = {3, 0, 6, 3, 3, 1};
  std::vector<float> out(static_cast<size_t>(rows) * dim);
  be->EmbeddingGather(rows, dim, table.data(), ids.data(), out.data());
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < dim; ++c) EXPECT_EQ(out[r * dim + c], table[ids[r] * dim + c]);
  const auto dout = UniformVector(out.size(), -1.0f, 1.0f, 8);
  std::vector<float> dtable(table.size(), 0.5f);
  be->EmbeddingScatterAdd(rows, dim, dout.data(), ids.data(), dtable.data());
  for (int v = 0; v < vocab; ++v)
    for (int c = 0; c < dim; ++c) {
      double want = 0.5;
      for (int r = 0; r < rows; ++r)
        if (ids[r] == v) want += dout[r * dim + c];
      EXPECT_NEAR(dtable[v * dim + c], want, 1e-6) << v << "," << c;
    }
}

TEST(CpuBackend, SumSquaresIsExactInDoubleAndPropagatesNonFinite) {
  auto be = MakeCpuBackend();
  std::vector<float> x = UniformVector(1001, -4.0f, 4.0f, 9);
  double want = 0;
  for (float v : x) want += static_cast<double>(v) * v;
  EXPECT_DOUBLE_EQ(be->SumSquares(x.size(), x.data()), want);
  EXPECT_EQ(be->SumSquares(0, x.data()), 0.0);
  x[500] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isinf(be->SumSquares(x.size(), x.data())));
  x[500] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(be->SumSquares(x.size(), x.data())));
}

TEST(LossScaler, HalvesOnOverflowAndGrowsAfterCleanSteps) {
  nn::DynamicLossScaler::Options o;
  o.init_scale = 1024.0f;
  o.growth_interval = 3;
  nn::DynamicLossScaler s(o);
  s.Update(true);
  EXPECT_EQ(s.scale(), 512.0f);
  s.Update(false);
  s.Update(false);
  EXPECT_EQ(s.scale(), 512.0f);
  s.Update(false);
  EXPECT_EQ(s.scale(), 1024.0f) << "3 clean steps in a row";
  s.Update(false);
  s.Update(true);  // an overflow resets the clean count
  s.Update(false);
  s.Update(false);
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_EQ(s.skipped_steps(), 2u);
  for (int i = 0; i < 40; ++i) s.Update(true);
  EXPECT_EQ(s.scale(), 1.0f) << "never below min_scale";
}

}  // namespace
}  // namespace shoal
