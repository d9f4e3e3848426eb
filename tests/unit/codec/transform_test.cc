// Transforms: DeMo's chunked DCT-II against a naive O(n^2) DCT in double (orthonormality,
// inverse, Parseval, chunk-side rule, 2-D chunk-major layout, determinism) and PowerSGD
// (rank-r reconstruction, error against an SVD-free reference with a known spectrum, warm
// start, pass-through, parameter validation).

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "codec/stages.h"
#include "codec/xform_params.h"
#include "core/rng.h"

namespace shoal::codec {
namespace {

const double kPi = 3.14159265358979323846;

StageSpec Spec(std::string name, std::vector<std::pair<std::string, std::string>> params = {}) {
  return StageSpec{std::move(name), std::move(params)};
}

std::vector<float> RandomVec(size_t n, uint64_t seed) {
  Rng rng(seed, 1);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(rng.Normal());
  return v;
}

double Norm2(const std::vector<float>& v) {
  double s = 0;
  for (float x : v) s += static_cast<double>(x) * x;
  return s;
}

double DiffNorm(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); ++i) s += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
  return std::sqrt(s);
}

// Naive orthonormal DCT-II basis value in double.
double NaiveD(int64_t n, int64_t k, int64_t i) {
  const double s = k == 0 ? std::sqrt(1.0 / n) : std::sqrt(2.0 / n);
  return s * std::cos(kPi * (2 * i + 1) * k / (2.0 * n));
}

// Chunk-major 2-D DCT, naively in double (R, C given).
std::vector<double> NaiveChunkedDct(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t R, int64_t C) {
  std::vector<double> out(x.size());
  const int64_t nbc = cols / C;
  for (int64_t bi = 0; bi < rows / R; ++bi)
    for (int64_t bj = 0; bj < nbc; ++bj)
      for (int64_t u = 0; u < R; ++u)
        for (int64_t v = 0; v < C; ++v) {
          double s = 0;
          for (int64_t i = 0; i < R; ++i)
            for (int64_t j = 0; j < C; ++j)
              s += NaiveD(R, u, i) * NaiveD(C, v, j) * x[static_cast<size_t>((bi * R + i) * cols + bj * C + j)];
          out[static_cast<size_t>((bi * nbc + bj) * R * C + u * C + v)] = s;
        }
  return out;
}

std::unique_ptr<Transform> Dct(int64_t chunk) {
  auto t = MakeDct(Spec("dct", {{"chunk", std::to_string(chunk)}}));
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

// DCT ---------------------------------------------------------------------------------------

TEST(DctTest, MatrixIsOrthonormalAndMatchesNaive) {
  for (int64_t n : {1, 2, 3, 7, 8, 50, 64, 97}) {
    const std::vector<float>& d = detail::DctMatrix(n);
    ASSERT_EQ(d.size(), static_cast<size_t>(n * n));
    for (int64_t a = 0; a < n; ++a) {
      for (int64_t b = 0; b < n; ++b) {
        double s = 0;
        for (int64_t i = 0; i < n; ++i) s += static_cast<double>(d[a * n + i]) * d[b * n + i];
        EXPECT_NEAR(s, a == b ? 1.0 : 0.0, 2e-6) << "n=" << n << " (" << a << "," << b << ")";
      }
      for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(d[a * n + i], NaiveD(n, a, i), 1e-7);
    }
  }
  // Cached: the same storage comes back.
  EXPECT_EQ(&detail::DctMatrix(64), &detail::DctMatrix(64));
}

TEST(DctTest, ChunkSideIsLargestDivisorAtMostChunk) {
  EXPECT_EQ(detail::LargestDivisorAtMost(100, 64), 50);
  EXPECT_EQ(detail::LargestDivisorAtMost(97, 64), 1);  // prime above the chunk: no transform
  EXPECT_EQ(detail::LargestDivisorAtMost(97, 100), 97);
  EXPECT_EQ(detail::LargestDivisorAtMost(64, 64), 64);
  EXPECT_EQ(detail::LargestDivisorAtMost(128, 64), 64);
  EXPECT_EQ(detail::LargestDivisorAtMost(96, 64), 48);
  EXPECT_EQ(detail::LargestDivisorAtMost(30, 64), 30);
  EXPECT_EQ(detail::LargestDivisorAtMost(784, 64), 56);
  EXPECT_EQ(detail::LargestDivisorAtMost(1, 64), 1);
  auto dct = Dct(64);
  EXPECT_EQ(dct->ChunkSize({100, 97}), 50u);
  EXPECT_EQ(dct->ChunkSize({1, 100}), 50u);
  EXPECT_EQ(dct->ChunkSize({128, 784}), 64u * 56u);
  EXPECT_EQ(dct->NumCoefficients({128, 784}), 128u * 784u);
  EXPECT_EQ(dct->id(), StageId::kDct);

  // A prime length above the chunk is the identity (1-element chunks).
  std::vector<float> x = RandomVec(97, 3), c(97);
  dct->Forward(0, {1, 97}, x, c);
  EXPECT_EQ(0, std::memcmp(x.data(), c.data(), x.size() * sizeof(float)));
}

TEST(DctTest, ForwardMatchesNaiveDct1D) {
  // 1 x 200, chunk 64: chunks of 50.
  const int64_t n = 200;
  std::vector<float> x = RandomVec(n, 5), c(n);
  Dct(64)->Forward(0, {1, n}, x, c);
  std::vector<double> want = NaiveChunkedDct(x, 1, n, 1, 50);
  for (int64_t i = 0; i < n; ++i) EXPECT_NEAR(c[i], want[i], 1e-5) << i;
}

TEST(DctTest, ForwardMatchesNaiveDct2DChunkMajor) {
  // 12 x 20, chunk 8: R = 6, C = 5, a 2 x 4 grid of 30-coefficient chunks.
  const int64_t rows = 12, cols = 20;
  auto dct = Dct(8);
  EXPECT_EQ(dct->ChunkSize({rows, cols}), 30u);
  std::vector<float> x = RandomVec(rows * cols, 6), c(rows * cols);
  dct->Forward(0, {rows, cols}, x, c);
  std::vector<double> want = NaiveChunkedDct(x, rows, cols, 6, 5);
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(c[i], want[i], 1e-5) << i;

  // The DC coefficient of each chunk is the chunk mean times sqrt(R*C): checks the layout
  // independently of the naive reference.
  for (int64_t bi = 0; bi < 2; ++bi)
    for (int64_t bj = 0; bj < 4; ++bj) {
      double s = 0;
      for (int64_t i = 0; i < 6; ++i)
        for (int64_t j = 0; j < 5; ++j) s += x[(bi * 6 + i) * cols + bj * 5 + j];
      EXPECT_NEAR(c[(bi * 4 + bj) * 30], s / std::sqrt(30.0), 1e-5);
    }
}

TEST(DctTest, InverseParsevalAndDeterminism) {
  const Shape2D shapes[] = {{1, 4096}, {128, 192}, {100, 97}, {7, 13}, {1, 1}, {64, 1}, {1, 100}, {256, 64}};
  auto dct = Dct(64);
  uint64_t seed = 10;
  for (Shape2D s : shapes) {
    const size_t n = static_cast<size_t>(s.size());
    std::vector<float> x = RandomVec(n, ++seed), c(n), y(n), c2(n), y2(n);
    dct->Forward(0, s, x, c);
    dct->Inverse(s, c, y);
    const double nx = std::sqrt(Norm2(x));
    EXPECT_LE(DiffNorm(x, y), 1e-5 * nx) << s.rows << "x" << s.cols;
    EXPECT_NEAR(Norm2(c), Norm2(x), 1e-5 * Norm2(x)) << "Parseval " << s.rows << "x" << s.cols;
    dct->Forward(0, s, x, c2);
    dct->Inverse(s, c, y2);
    EXPECT_EQ(0, std::memcmp(c.data(), c2.data(), n * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(y.data(), y2.data(), n * sizeof(float)));
  }
}

TEST(DctTest, InverseOfSparseCoefficientsMatchesNaive) {
  // Inverse skips zeros: it must still equal D_R^T Y D_C per chunk.
  const int64_t rows = 16, cols = 24;  // chunk 8: R = 8, C = 8
  std::vector<float> c(rows * cols, 0.0f), y(rows * cols);
  Rng rng(9, 0);
  for (int i = 0; i < 20; ++i) c[rng.Below(c.size())] = static_cast<float>(rng.Normal());
  Dct(8)->Inverse({rows, cols}, c, y);
  for (int64_t bi = 0; bi < 2; ++bi)
    for (int64_t bj = 0; bj < 3; ++bj)
      for (int64_t i = 0; i < 8; ++i)
        for (int64_t j = 0; j < 8; ++j) {
          double s = 0;
          for (int64_t u = 0; u < 8; ++u)
            for (int64_t v = 0; v < 8; ++v) s += NaiveD(8, u, i) * NaiveD(8, v, j) * c[(bi * 3 + bj) * 64 + u * 8 + v];
          EXPECT_NEAR(y[(bi * 8 + i) * cols + bj * 8 + j], s, 1e-6);
        }
}

TEST(DctTest, ValidatesParameters) {
  for (const char* bad : {"0", "-3", "abc", "2000", "8x", ""}) {
    auto t = MakeDct(Spec("dct", {{"chunk", bad}}));
    ASSERT_FALSE(t.ok()) << bad;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("dct"), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find("chunk"), std::string::npos) << t.status().message();
  }
  auto u = MakeDct(Spec("dct", {{"size", "8"}}));
  ASSERT_FALSE(u.ok());
  EXPECT_NE(u.status().message().find("size"), std::string::npos);
  EXPECT_TRUE(MakeDct(Spec("dct")).ok());
}

// PowerSGD ------------------------------------------------------------------------------------

std::unique_ptr<Transform> PowerSgd(int rank, const std::vector<TensorSpec>& layout = {}, uint64_t seed = 0) {
  auto t = MakePowerSgd(Spec("powersgd", {{"rank", std::to_string(rank)}, {"seed", std::to_string(seed)}}), layout);
  EXPECT_TRUE(t.ok()) << t.status().ToString();
  return std::move(t).value();
}

// ||M - P Q^T||_F after one Forward/Inverse.
double StepError(Transform* t, size_t ti, Shape2D s, const std::vector<float>& m) {
  std::vector<float> c(t->NumCoefficients(s)), y(m.size());
  t->Forward(ti, s, m, c);
  t->Inverse(s, c, y);
  return DiffNorm(m, y);
}

// Columns of a (n x k) with orthonormal columns, by Gram-Schmidt in double.
std::vector<double> Orthonormal(int64_t n, int64_t k, uint64_t seed) {
  Rng rng(seed, 2);
  std::vector<double> a(static_cast<size_t>(n * k));
  for (int64_t j = 0; j < k; ++j) {
    std::vector<double> c(n);
    for (double& x : c) x = rng.Normal();
    for (int pass = 0; pass < 2; ++pass)
      for (int64_t p = 0; p < j; ++p) {
        double d = 0;
        for (int64_t i = 0; i < n; ++i) d += c[i] * a[i * k + p];
        for (int64_t i = 0; i < n; ++i) c[i] -= d * a[i * k + p];
      }
    double nn = 0;
    for (double x : c) nn += x * x;
    for (int64_t i = 0; i < n; ++i) a[i * k + j] = c[i] / std::sqrt(nn);
  }
  return a;
}

// M = U diag(s) V^T with known singular values s: the best rank-r error is exactly
// sqrt(sum_{k >= r} s_k^2) (Eckart-Young), no SVD needed.
std::vector<float> KnownSpectrum(int64_t rows, int64_t cols, const std::vector<double>& s, uint64_t seed) {
  const int64_t k = static_cast<int64_t>(s.size());
  std::vector<double> u = Orthonormal(rows, k, seed), v = Orthonormal(cols, k, seed + 1);
  std::vector<float> m(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) {
      double x = 0;
      for (int64_t p = 0; p < k; ++p) x += u[i * k + p] * s[p] * v[j * k + p];
      m[i * cols + j] = static_cast<float>(x);
    }
  return m;
}

TEST(PowerSgdTest, ShapesAndPassThrough) {
  auto t = PowerSgd(4);
  EXPECT_EQ(t->id(), StageId::kPowerSgd);
  EXPECT_EQ(t->NumCoefficients({64, 48}), 4u * (64 + 48));
  EXPECT_EQ(t->NumCoefficients({64, 2}), 128u);    // r = 2: 2*(66) >= 128 -> passes through
  EXPECT_EQ(t->NumCoefficients({1, 100}), 100u);   // vector
  EXPECT_EQ(t->NumCoefficients({100, 1}), 100u);   // column
  EXPECT_EQ(t->NumCoefficients({10, 10}), 80u);    // 4*20 < 100
  EXPECT_EQ(t->NumCoefficients({8, 8}), 64u);      // 4*16 >= 64 -> passes through
  for (Shape2D s : {Shape2D{1, 100}, Shape2D{100, 1}, Shape2D{8, 8}}) {
    std::vector<float> x = RandomVec(static_cast<size_t>(s.size()), 4), c(x.size()), y(x.size());
    t->Forward(0, s, x, c);
    EXPECT_EQ(0, std::memcmp(x.data(), c.data(), x.size() * sizeof(float)));
    t->Inverse(s, c, y);
    EXPECT_EQ(0, std::memcmp(x.data(), y.data(), x.size() * sizeof(float)));
  }
}

TEST(PowerSgdTest, ReconstructsRankRMatrix) {
  const int64_t rows = 96, cols = 80;
  for (int r : {1, 2, 4}) {
    // M = A B^T, rank r.
    std::vector<float> a = RandomVec(rows * r, 20 + r), b = RandomVec(cols * r, 30 + r), m(rows * cols, 0.0f);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        for (int p = 0; p < r; ++p) m[i * cols + j] += a[i * r + p] * b[j * r + p];
    auto t = PowerSgd(r);
    const double nm = std::sqrt(Norm2(m));
    EXPECT_LE(StepError(t.get(), 0, {rows, cols}, m), 1e-4 * nm) << "rank " << r << " step 1";
    EXPECT_LE(StepError(t.get(), 0, {rows, cols}, m), 1e-4 * nm) << "rank " << r << " step 2";
  }
}

TEST(PowerSgdTest, PIsOrthonormal) {
  const int64_t rows = 64, cols = 40, r = 4;
  std::vector<float> m = RandomVec(rows * cols, 41), c(r * (rows + cols));
  auto t = PowerSgd(r);
  t->Forward(0, {rows, cols}, m, c);
  for (int a = 0; a < r; ++a)
    for (int b = 0; b < r; ++b) {
      double s = 0;
      for (int64_t i = 0; i < rows; ++i) s += static_cast<double>(c[i * r + a]) * c[i * r + b];
      EXPECT_NEAR(s, a == b ? 1.0 : 0.0, 1e-5);
    }
}

TEST(PowerSgdTest, ErrorApproachesBestRankRWithWarmStart) {
  const int64_t rows = 120, cols = 90, r = 4;
  std::vector<double> s(40);
  for (size_t k = 0; k < s.size(); ++k) s[k] = 10.0 * std::pow(0.8, static_cast<double>(k));
  std::vector<float> m = KnownSpectrum(rows, cols, s, 50);
  double best2 = 0, total2 = 0;
  for (size_t k = 0; k < s.size(); ++k) {
    total2 += s[k] * s[k];
    if (k >= static_cast<size_t>(r)) best2 += s[k] * s[k];
  }
  const double best = std::sqrt(best2), total = std::sqrt(total2);
  auto t = PowerSgd(r);
  std::vector<double> err;
  for (int round = 0; round < 12; ++round) err.push_back(StepError(t.get(), 3, {rows, cols}, m));
  EXPECT_GE(err[0], best * (1 - 1e-4));        // never better than optimal
  EXPECT_LE(err[0], total);                    // a projection never adds energy
  EXPECT_LT(err[11], err[0]);                  // warm start improves
  EXPECT_LE(err[11], best * 1.01) << "best " << best << " first " << err[0];  // converges to optimal
  for (int i = 1; i < 12; ++i) EXPECT_LE(err[i], err[i - 1] * (1 + 1e-3)) << i;

  // A fresh transform (cold start) on the same matrix is worse than the warm one.
  auto cold = PowerSgd(r);
  EXPECT_GT(StepError(cold.get(), 3, {rows, cols}, m), err[11]);
}

TEST(PowerSgdTest, GaussianMatrixErrorDecreasesWithRank) {
  const int64_t rows = 100, cols = 70;
  std::vector<float> m = RandomVec(rows * cols, 60);
  const double nm = std::sqrt(Norm2(m));
  double prev = nm;
  for (int r : {1, 2, 4, 8, 16}) {
    auto t = PowerSgd(r);
    double e = 0;
    for (int round = 0; round < 4; ++round) e = StepError(t.get(), 0, {rows, cols}, m);
    EXPECT_LT(e, prev) << "rank " << r;
    EXPECT_LE(e, nm);
    prev = e;
  }
}

TEST(PowerSgdTest, DeterministicSharedStartAndPerTensorState) {
  const Shape2D s{32, 24};
  std::vector<float> m1 = RandomVec(s.size(), 70), m2 = RandomVec(s.size(), 71);
  const size_t nc = 4 * (32 + 24);
  auto a = PowerSgd(4), b = PowerSgd(4), other = PowerSgd(4, {}, 9);
  std::vector<float> ca(nc), cb(nc), co(nc);
  a->Forward(0, s, m1, ca);
  b->Forward(0, s, m1, cb);
  other->Forward(0, s, m1, co);
  EXPECT_EQ(0, std::memcmp(ca.data(), cb.data(), nc * sizeof(float)));  // same seed: same start
  EXPECT_NE(0, std::memcmp(ca.data(), co.data(), nc * sizeof(float)));  // another seed differs
  // State is per tensor index: tensor 1 on b does not disturb tensor 0.
  b->Forward(1, s, m2, cb);
  a->Forward(0, s, m1, ca);
  b->Forward(0, s, m1, cb);
  EXPECT_EQ(0, std::memcmp(ca.data(), cb.data(), nc * sizeof(float)));
}

TEST(PowerSgdTest, RecoversAfterZeroUpdate) {
  // An all-zero update must not leave the warm-started Q at zero forever.
  const int64_t rows = 40, cols = 30, r = 2;
  std::vector<float> zero(rows * cols, 0.0f), c(r * (rows + cols)), y(rows * cols);
  auto t = PowerSgd(r, {TensorSpec{"w", {rows, cols}}});
  t->Forward(0, {rows, cols}, zero, c);
  for (float x : c) EXPECT_EQ(x, 0.0f);
  t->Inverse({rows, cols}, c, y);
  for (float x : y) EXPECT_EQ(x, 0.0f);
  std::vector<float> a = RandomVec(rows * r, 80), b = RandomVec(cols * r, 81), m(rows * cols, 0.0f);
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j)
      for (int p = 0; p < r; ++p) m[i * cols + j] += a[i * r + p] * b[j * r + p];
  EXPECT_LE(StepError(t.get(), 0, {rows, cols}, m), 1e-4 * std::sqrt(Norm2(m)));
}

TEST(PowerSgdTest, ValidatesParameters) {
  for (auto [key, bad] : std::vector<std::pair<std::string, std::string>>{
           {"rank", "0"}, {"rank", "-1"}, {"rank", "x"}, {"seed", "-1"}, {"seed", "1.5"}}) {
    auto t = MakePowerSgd(Spec("powersgd", {{key, bad}}), {});
    ASSERT_FALSE(t.ok()) << key << "=" << bad;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find("powersgd"), std::string::npos);
    EXPECT_NE(t.status().message().find(key), std::string::npos) << t.status().message();
  }
  EXPECT_FALSE(MakePowerSgd(Spec("powersgd", {{"rnak", "4"}}), {}).ok());
  EXPECT_TRUE(MakePowerSgd(Spec("powersgd"), {}).ok());
}

}  // namespace
}  // namespace shoal::codec
