// The DeMo optimizer (nn/demo_optimizer.h) against a naive reference written here: per-chunk
// O(n^2) DCT-II in double, naive per-chunk top-k, the update rule of the paper.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "backend/backend.h"
#include "core/rng.h"
#include "nn/demo_optimizer.h"
#include "nn/optimizer.h"

namespace shoal::nn {
namespace {

// ---- Naive reference -------------------------------------------------------------------------

int64_t Side(int64_t dim, int64_t chunk) {  // largest divisor of dim <= chunk
  if (dim <= chunk) return dim;
  for (int64_t d = chunk; d > 1; --d)
    if (dim % d == 0) return d;
  return 1;
}

double DctCoef(int64_t n, int64_t k, int64_t i) {  // orthonormal DCT-II matrix entry D_n[k][i]
  const double pi = 3.14159265358979323846;
  const double s = k == 0 ? std::sqrt(1.0 / static_cast<double>(n)) : std::sqrt(2.0 / static_cast<double>(n));
  return s * std::cos(pi * static_cast<double>((2 * i + 1) * k) / static_cast<double>(2 * n));
}

struct Shape {
  int64_t rows, cols;
};
Shape ShapeOf(const TensorSpec& t) {
  if (t.shape.size() == 1) return {1, t.shape[0]};
  int64_t cols = 1;
  for (size_t i = 1; i < t.shape.size(); ++i) cols *= t.shape[i];
  return {t.shape[0], cols};
}

// The orthonormal DCT-II matrix of size n, row k = frequency k (built naively in double).
std::vector<double> DctMatrix(int64_t n) {
  std::vector<double> d(static_cast<size_t>(n * n));
  for (int64_t k = 0; k < n; ++k)
    for (int64_t i = 0; i < n; ++i) d[static_cast<size_t>(k * n + i)] = DctCoef(n, k, i);
  return d;
}

// The R x C chunk at (bi, bj) of a rows x cols matrix x: its DCT coefficients D_R X D_C^T,
// row-major (two naive O(n^2) 1-D DCTs per line).
std::vector<double> ChunkDct(const std::vector<double>& x, Shape s, int64_t R, int64_t C, int64_t bi, int64_t bj) {
  const std::vector<double> dr = DctMatrix(R), dc = DctMatrix(C);
  std::vector<double> t(static_cast<size_t>(R * C), 0.0), y(static_cast<size_t>(R * C), 0.0);
  for (int64_t i = 0; i < R; ++i)
    for (int64_t v = 0; v < C; ++v)
      for (int64_t j = 0; j < C; ++j)
        t[static_cast<size_t>(i * C + v)] +=
            dc[static_cast<size_t>(v * C + j)] * x[static_cast<size_t>((bi * R + i) * s.cols + bj * C + j)];
  for (int64_t u = 0; u < R; ++u)
    for (int64_t v = 0; v < C; ++v)
      for (int64_t i = 0; i < R; ++i)
        y[static_cast<size_t>(u * C + v)] += dr[static_cast<size_t>(u * R + i)] * t[static_cast<size_t>(i * C + v)];
  return y;
}

// Writes the inverse, D_R^T Y D_C, of chunk coefficients y into chunk (bi, bj) of out.
void ChunkIdct(const std::vector<double>& y, Shape s, int64_t R, int64_t C, int64_t bi, int64_t bj,
               std::vector<double>* out) {
  const std::vector<double> dr = DctMatrix(R), dc = DctMatrix(C);
  std::vector<double> t(static_cast<size_t>(R * C), 0.0);
  for (int64_t u = 0; u < R; ++u)
    for (int64_t j = 0; j < C; ++j)
      for (int64_t v = 0; v < C; ++v)
        t[static_cast<size_t>(u * C + j)] += y[static_cast<size_t>(u * C + v)] * dc[static_cast<size_t>(v * C + j)];
  for (int64_t i = 0; i < R; ++i)
    for (int64_t j = 0; j < C; ++j) {
      double acc = 0.0;
      for (int64_t u = 0; u < R; ++u) acc += dr[static_cast<size_t>(u * R + i)] * t[static_cast<size_t>(u * C + j)];
      (*out)[static_cast<size_t>((bi * R + i) * s.cols + bj * C + j)] = acc;
    }
}

// Keeps the k largest |y| (ties: lower index), zeroes the rest.
void KeepTopK(std::vector<double>* y, size_t k) {
  std::vector<size_t> order(y->size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return std::fabs((*y)[a]) > std::fabs((*y)[b]); });
  for (size_t r = k; r < order.size(); ++r) (*y)[order[r]] = 0.0;
}

// q of one tensor (a slice of m) by the naive route.
std::vector<double> NaiveExtract(const std::vector<double>& m, Shape s, int64_t chunk, size_t k) {
  const int64_t R = Side(s.rows, chunk), C = Side(s.cols, chunk);
  std::vector<double> q(m.size(), 0.0);
  for (int64_t bi = 0; bi < s.rows / R; ++bi)
    for (int64_t bj = 0; bj < s.cols / C; ++bj) {
      std::vector<double> y = ChunkDct(m, s, R, C, bi, bj);
      KeepTopK(&y, k);
      ChunkIdct(y, s, R, C, bi, bj, &q);
    }
  return q;
}

struct Reference {
  std::vector<TensorSpec> layout;
  double decay, lr, wd;
  int64_t chunk;
  size_t k;
  std::vector<double> w, m, q, acc;

  void Step(const std::vector<float>& g) {
    for (size_t i = 0; i < m.size(); ++i) m[i] = decay * m[i] + (static_cast<double>(g[i]) + wd * w[i]);
    size_t off = 0;
    for (const TensorSpec& t : layout) {
      const size_t n = static_cast<size_t>(t.numel());
      std::vector<double> mt(m.begin() + static_cast<std::ptrdiff_t>(off),
                             m.begin() + static_cast<std::ptrdiff_t>(off + n));
      std::vector<double> qt = NaiveExtract(mt, ShapeOf(t), chunk, k);
      std::copy(qt.begin(), qt.end(), q.begin() + static_cast<std::ptrdiff_t>(off));
      off += n;
    }
    for (size_t i = 0; i < m.size(); ++i) {
      m[i] -= q[i];
      acc[i] += q[i];
      w[i] -= lr * static_cast<double>((q[i] > 0) - (q[i] < 0));
    }
  }
};

// ---- Helpers -----------------------------------------------------------------------------------

std::vector<float> RandomVec(Rng& rng, size_t n, double scale = 1.0) {
  std::vector<float> v(n);
  for (auto& x : v) x = static_cast<float>(scale * rng.Normal());
  return v;
}

double MaxAbs(std::span<const float> v) {
  double a = 0.0;
  for (float x : v) a = std::max(a, static_cast<double>(std::fabs(x)));
  return a;
}

void ExpectNear(std::span<const float> got, const std::vector<double>& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], want[i], tol) << what << "[" << i << "]";
}

OptimizerConfig DemoConfig(float lr, uint32_t chunk, uint32_t topk, float decay = 0.9f, float wd = 0.0f) {
  OptimizerConfig c;
  c.name = "demo";
  c.learning_rate = lr;
  c.demo_chunk = chunk;
  c.demo_topk = topk;
  c.demo_decay = decay;
  c.weight_decay = wd;
  return c;
}

// A 6x8 matrix (3x4 chunks with chunk 4), a 12-vector (chunks of 4), a 7-vector (prime above
// the chunk: side 1, everything extracted) and a 2x3 matrix (one chunk of 6 values).
std::vector<TensorSpec> SmallLayout() {
  return {{"a", {6, 8}}, {"b", {12}}, {"c", {7}}, {"d", {2, 3}}};
}

// Runs `steps` steps of both implementations from the same w0 and gradients and compares m, q,
// Q and w after every step.
void CompareWithReference(const OptimizerConfig& cfg, int steps, uint64_t seed) {
  const auto layout = SmallLayout();
  const size_t n = LayoutSize(layout);
  auto backend = MakeCpuBackend();
  auto opt = MakeDemoOptimizer(cfg, layout, backend.get());
  ASSERT_TRUE(opt.ok()) << opt.status().ToString();
  Rng rng(seed);
  std::vector<float> w = RandomVec(rng, n);
  Reference ref{layout, cfg.demo_decay, cfg.learning_rate, cfg.weight_decay, cfg.demo_chunk, cfg.demo_topk,
                {w.begin(), w.end()}, std::vector<double>(n, 0.0), std::vector<double>(n, 0.0),
                std::vector<double>(n, 0.0)};
  for (int s = 0; s < steps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s + 1));
    const std::vector<float> g = RandomVec(rng, n);
    (*opt)->Step(w.data(), g.data());
    ref.Step(g);
    ExpectNear((*opt)->last_extracted(), ref.q, 1e-4, "q");
    ExpectNear((*opt)->momentum(), ref.m, 1e-4, "m");
    ExpectNear((*opt)->extracted(), ref.acc, 1e-4, "Q");
    // Where q is 0 in exact arithmetic (odd chunk sides have basis functions with zeros),
    // float rounding leaves +-1e-8 noise whose sign is arbitrary: there the float weight may
    // differ from the reference by one sign step; resynchronize the reference on it.
    size_t ambiguous = 0;
    for (size_t i = 0; i < n; ++i) {
      if (std::fabs(ref.q[i]) > 1e-5) {
        ASSERT_NEAR(w[i], ref.w[i], 1e-5) << "w[" << i << "]";
      } else {
        ++ambiguous;
        ASSERT_NEAR(w[i], ref.w[i], cfg.learning_rate + 1e-5) << "w[" << i << "]";
        ref.w[i] = w[i];
      }
    }
    EXPECT_LT(ambiguous, n / 8);
  }
  EXPECT_EQ((*opt)->steps(), steps);
}

// ---- Tests -------------------------------------------------------------------------------------

TEST(DemoOptimizer, OneStepMatchesTheNaiveReference) { CompareWithReference(DemoConfig(0.01f, 4, 3), 1, 11); }

TEST(DemoOptimizer, ThreeStepsMatchTheNaiveReference) { CompareWithReference(DemoConfig(0.01f, 4, 3), 3, 12); }

TEST(DemoOptimizer, WeightDecayGoesIntoTheMomentum) {
  CompareWithReference(DemoConfig(0.02f, 4, 2, 0.999f, 0.1f), 3, 13);
}

TEST(DemoOptimizer, TheSplitIsExactUpToRoundingAndQIsKSparsePerChunk) {
  // Default chunk 64 / top-k 32 on a 128x192 matrix (64x64 chunks) and a 200-vector (chunks of 50).
  const std::vector<TensorSpec> layout = {{"w", {128, 192}}, {"b", {200}}};
  const size_t n = LayoutSize(layout);
  OptimizerConfig cfg = DemoConfig(0.01f, 64, 32, 0.999f);
  auto backend = MakeCpuBackend();
  auto opt = MakeDemoOptimizer(cfg, layout, backend.get());
  ASSERT_TRUE(opt.ok()) << opt.status().ToString();
  Rng rng(21);
  std::vector<float> w = RandomVec(rng, n);
  for (int s = 0; s < 3; ++s) {
    const std::vector<float> m_before((*opt)->momentum().begin(), (*opt)->momentum().end());
    const std::vector<float> g = RandomVec(rng, n);
    (*opt)->Step(w.data(), g.data());
    const auto m = (*opt)->momentum();
    const auto q = (*opt)->last_extracted();
    // decay * m_before + g == m_after + q.
    const double scale = MaxAbs(m) + MaxAbs(q) + 1.0;
    for (size_t i = 0; i < n; ++i)
      ASSERT_NEAR(0.999 * m_before[i] + g[i], static_cast<double>(m[i]) + q[i], 4e-6 * scale) << i;
    // q's naive DCT has at most k = 32 nonzero coefficients per chunk; m keeps most of its energy.
    size_t off = 0;
    for (const TensorSpec& t : layout) {
      const Shape sh = ShapeOf(t);
      const int64_t R = Side(sh.rows, 64), C = Side(sh.cols, 64);
      std::vector<double> qt(q.begin() + static_cast<std::ptrdiff_t>(off),
                             q.begin() + static_cast<std::ptrdiff_t>(off + static_cast<size_t>(t.numel())));
      const double tiny = 1e-4 * MaxAbs(std::span<const float>(q.data() + off, static_cast<size_t>(t.numel())));
      for (int64_t bi = 0; bi < sh.rows / R; ++bi)
        for (int64_t bj = 0; bj < sh.cols / C; ++bj) {
          const std::vector<double> y = ChunkDct(qt, sh, R, C, bi, bj);
          size_t nonzero = 0;
          for (double c : y) nonzero += std::fabs(c) > tiny;
          EXPECT_LE(nonzero, 32u) << t.name << " chunk " << bi << "," << bj;
          EXPECT_GE(nonzero, 16u) << t.name << " chunk " << bi << "," << bj;  // it did extract something
        }
      off += static_cast<size_t>(t.numel());
    }
  }
}

TEST(DemoOptimizer, MomentumPersistsAcrossRoundsAndResetClearsIt) {
  const auto layout = SmallLayout();
  const size_t n = LayoutSize(layout);
  const OptimizerConfig cfg = DemoConfig(0.01f, 4, 3);
  auto backend = MakeCpuBackend();
  auto opt = MakeDemoOptimizer(cfg, layout, backend.get());
  ASSERT_TRUE(opt.ok());
  Rng rng(31);
  std::vector<float> w = RandomVec(rng, n);
  Reference ref{layout, cfg.demo_decay, cfg.learning_rate, 0.0, 4, 3, {w.begin(), w.end()},
                std::vector<double>(n, 0.0), std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)};
  // Round 1: two steps.
  (*opt)->BeginRound();
  for (int s = 0; s < 2; ++s) {
    const auto g = RandomVec(rng, n);
    (*opt)->Step(w.data(), g.data());
    ref.Step(g);
  }
  ASSERT_GT(MaxAbs((*opt)->momentum()), 0.1);  // a residual stayed
  // Round 2 starts from a new global model but round 1's residual; Q restarts at zero.
  (*opt)->BeginRound();
  EXPECT_EQ(MaxAbs((*opt)->extracted()), 0.0);
  ExpectNear((*opt)->momentum(), ref.m, 1e-4, "m kept");
  w = RandomVec(rng, n);
  ref.w.assign(w.begin(), w.end());
  std::fill(ref.acc.begin(), ref.acc.end(), 0.0);
  const auto g = RandomVec(rng, n);
  (*opt)->Step(w.data(), g.data());
  ref.Step(g);
  ExpectNear((*opt)->last_extracted(), ref.q, 1e-4, "round-2 q");
  ExpectNear((*opt)->extracted(), ref.acc, 1e-4, "round-2 Q");
  ExpectNear((*opt)->momentum(), ref.m, 1e-4, "round-2 m");
  // A fresh momentum would give a different q: the residual matters.
  std::vector<double> fresh_m(n);
  for (size_t i = 0; i < n; ++i) fresh_m[i] = g[i];
  const auto fresh_q = NaiveExtract(std::vector<double>(fresh_m.begin(), fresh_m.begin() + 48), {6, 8}, 4, 3);
  double diff = 0.0;
  for (size_t i = 0; i < 48; ++i) diff = std::max(diff, std::fabs(fresh_q[i] - ref.q[i]));
  EXPECT_GT(diff, 0.1);

  (*opt)->Reset();
  EXPECT_EQ(MaxAbs((*opt)->momentum()), 0.0);
  EXPECT_EQ(MaxAbs((*opt)->extracted()), 0.0);
  EXPECT_EQ((*opt)->steps(), 0);
}

TEST(DemoOptimizer, ValidationAndTheFactory) {
  auto backend = MakeCpuBackend();
  EXPECT_TRUE(ValidateOptimizerConfig(DemoConfig(0.01f, 64, 32, 0.999f)).ok());
  EXPECT_TRUE(ValidateOptimizerConfig(DemoConfig(0.01f, 64, 32, 1.0f)).ok());
  struct Case {
    OptimizerConfig c;
    const char* needle;
  };
  const Case bad[] = {{DemoConfig(0.01f, 64, 32, 1.5f), "demo_decay"},
                      {DemoConfig(0.01f, 64, 32, -0.1f), "demo_decay"},
                      {DemoConfig(0.01f, 64, 32, std::nanf("")), "demo_decay"},
                      {DemoConfig(0.01f, 0, 32), "demo_chunk"},
                      {DemoConfig(0.01f, 2048, 32), "demo_chunk"},
                      {DemoConfig(0.01f, 64, 0), "demo_topk"},
                      {DemoConfig(-1.0f, 64, 32), "learning rate"}};
  for (const Case& b : bad) {
    Status st = ValidateOptimizerConfig(b.c);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << b.needle;
    EXPECT_NE(st.message().find(b.needle), std::string::npos) << st.message();
    EXPECT_FALSE(MakeDemoOptimizer(b.c, SmallLayout(), backend.get()).ok()) << b.needle;
  }
  // The generic factory builds it over the arena as one vector.
  auto generic = MakeOptimizer(DemoConfig(0.01f, 4, 3), 10, backend.get());
  ASSERT_TRUE(generic.ok()) << generic.status().ToString();
  EXPECT_EQ((*generic)->name(), "demo");
  EXPECT_EQ((*generic)->size(), 10u);
  EXPECT_FALSE(MakeDemoOptimizer(OptimizerConfig{}, SmallLayout(), backend.get()).ok());  // name "sgd"
  EXPECT_FALSE(MakeDemoOptimizer(DemoConfig(0.01f, 4, 3), SmallLayout(), nullptr).ok());
}

TEST(DemoOptimizer, ZeroGradientAndZeroMomentumLeaveTheWeights) {
  const auto layout = SmallLayout();
  const size_t n = LayoutSize(layout);
  auto backend = MakeCpuBackend();
  auto opt = MakeDemoOptimizer(DemoConfig(0.5f, 4, 3), layout, backend.get());
  ASSERT_TRUE(opt.ok());
  Rng rng(41);
  std::vector<float> w = RandomVec(rng, n);
  const std::vector<float> w0 = w, g(n, 0.0f);
  (*opt)->Step(w.data(), g.data());
  EXPECT_EQ(w, w0);  // sign(0) = 0
  EXPECT_EQ(MaxAbs((*opt)->extracted()), 0.0);
}

}  // namespace
}  // namespace shoal::nn
