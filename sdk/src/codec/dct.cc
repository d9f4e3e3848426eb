// DeMo's chunked orthonormal DCT-II (stage "dct", StageId::kDct).
//
// A tensor viewed as rows x cols is cut into R x C chunks, R = the largest divisor of rows that
// is <= chunk, C = the same for cols (a vector, rows == 1, gets 1 x C chunks; a prime dimension
// above `chunk` gets side 1, i.e. no transform along it). Each chunk X becomes D_R X D_C^T
// with D_n the orthonormal DCT-II matrix of size n. Coefficients are laid out chunk-major:
// chunk (bi, bj) (row-major over the chunk grid) occupies [(bi*(cols/C)+bj)*R*C, +R*C), its
// coefficient (u, v) at offset u*C + v. ChunkSize = R*C, NumCoefficients = rows*cols.
//
// Forward uses OpenBLAS sgemm (one gemm per block-row of R rows for each side). Inverse, which
// runs on every decoder, uses a fixed-order loop instead: its result must be the same bits on
// every machine, and OpenBLAS picks CPU-specific kernels whose summation order may differ.
// It skips zero coefficients (a sparse top-k payload decodes much faster); this does not
// change a single bit of the result because adding +-0 to a sum never changes it.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <map>
#include <memory>
#include <mutex>

#include "codec/simd.h"
#include "codec/stages.h"
#include "codec/xform_params.h"

namespace shoal::codec {
namespace detail {

const std::vector<float>& DctMatrix(int64_t n) {
  static std::mutex mu;
  static std::map<int64_t, std::unique_ptr<std::vector<float>>> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(n);
  if (it != cache.end()) return *it->second;
  auto m = std::make_unique<std::vector<float>>(static_cast<size_t>(n * n));
  const double pi = 3.14159265358979323846264338327950288;
  const double s0 = std::sqrt(1.0 / static_cast<double>(n));
  const double s1 = std::sqrt(2.0 / static_cast<double>(n));
  for (int64_t k = 0; k < n; ++k) {
    for (int64_t i = 0; i < n; ++i) {
      // cos(pi (2i+1) k / 2n) has period 4n in (2i+1)k: reduce first for accuracy.
      const int64_t a = ((2 * i + 1) * k) % (4 * n);
      const double c = std::cos(pi * static_cast<double>(a) / static_cast<double>(2 * n));
      (*m)[static_cast<size_t>(k * n + i)] = static_cast<float>((k == 0 ? s0 : s1) * c);
    }
  }
  return *cache.emplace(n, std::move(m)).first->second;
}

}  // namespace detail

namespace {

std::vector<float> Transposed(const std::vector<float>& m, int64_t n) {
  std::vector<float> t(m.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t j = 0; j < n; ++j) t[static_cast<size_t>(j * n + i)] = m[static_cast<size_t>(i * n + j)];
  return t;
}

// dst(R x C, row stride dst_stride) = L(R x R) * src(R x C, row stride src_stride) * Rt(C x C),
// in a fixed summation order (portable bits). z is scratch of R*C floats.
// Always inlined, so that each SIMD clone below compiles it (and AxpyInOrder) at its level.
[[gnu::always_inline]] inline void ChunkProduct(int64_t R, int64_t C, const float* L, const float* Rt, const float* src,
                                                int64_t src_stride, float* dst, int64_t dst_stride, float* z,
                                                std::vector<char>& row_nz) {
  for (int64_t u = 0; u < R; ++u) {
    float* zr = z + u * C;
    std::fill(zr, zr + C, 0.0f);
    const float* s = src + u * src_stride;
    char nz = 0;
    for (int64_t v = 0; v < C; ++v) {
      const float a = s[v];
      if (a == 0.0f) continue;
      nz = 1;
      detail::AxpyInOrder(a, Rt + v * C, zr, C);
    }
    row_nz[static_cast<size_t>(u)] = nz;
  }
  for (int64_t up = 0; up < R; ++up) {
    float* d = dst + up * dst_stride;
    std::fill(d, d + C, 0.0f);
    for (int64_t u = 0; u < R; ++u) {
      if (!row_nz[static_cast<size_t>(u)]) continue;
      detail::AxpyInOrder(L[up * R + u], z + u * C, d, C);
    }
  }
}

// Every chunk of Inverse: out chunk = D_R^T * Y * D_C. The AVX2 clone vectorizes the same
// element-wise multiplies and adds (no contraction: -ffp-contract=off), so its bits are the
// baseline's: decoders stay bit-identical across machines.
struct InverseArgs {
  int64_t R, C, nbr, nbc, cols;
  const float* drt;
  const float* dc;
  const float* coeffs;
  float* out;
  float* z;
  std::vector<char>* nz;
};
[[gnu::always_inline]] inline void InverseChunksBody(const InverseArgs& a) {
  for (int64_t bi = 0; bi < a.nbr; ++bi)
    for (int64_t bj = 0; bj < a.nbc; ++bj)
      ChunkProduct(a.R, a.C, a.drt, a.dc, a.coeffs + (bi * a.nbc + bj) * a.R * a.C, a.C, a.out + bi * a.R * a.cols + bj * a.C,
                   a.cols, a.z, *a.nz);
}
SHOAL_SIMD_CLONES(void, InverseChunks, (const InverseArgs& a), (a))

class Dct final : public Transform {
 public:
  explicit Dct(int64_t chunk) : chunk_(chunk) {}

  StageId id() const override { return StageId::kDct; }
  bool linear() const override { return true; }
  size_t NumCoefficients(Shape2D shape) const override { return static_cast<size_t>(std::max<int64_t>(shape.size(), 0)); }
  size_t ChunkSize(Shape2D shape) const override {
    return static_cast<size_t>(detail::LargestDivisorAtMost(shape.rows, chunk_) *
                               detail::LargestDivisorAtMost(shape.cols, chunk_));
  }

  void Forward(size_t tensor_index, Shape2D shape, std::span<const float> in, std::span<float> coeffs) override {
    const int64_t rows = shape.rows, cols = shape.cols;
    if (rows <= 0 || cols <= 0) return;
    const size_t n = static_cast<size_t>(rows * cols);
    if (in.size() < n || coeffs.size() < n) return;  // caller bug; never touch memory outside the spans
    const int64_t R = detail::LargestDivisorAtMost(rows, chunk_);
    const int64_t C = detail::LargestDivisorAtMost(cols, chunk_);
    if (R == 1 && C == 1) {
      std::copy(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n), coeffs.begin());
      return;
    }
    const std::vector<float>& dr = detail::DctMatrix(R);
    const std::vector<float>& dc = detail::DctMatrix(C);
    const int64_t nbr = rows / R, nbc = cols / C;
    if (R > 1 && cols > INT_MAX) {  // beyond gemm's int dimensions: the portable loop
      const std::vector<float> dct = Transposed(dc, C);
      std::vector<float> z(static_cast<size_t>(R * C));
      std::vector<char> nz(static_cast<size_t>(R));
      for (int64_t bi = 0; bi < nbr; ++bi)
        for (int64_t bj = 0; bj < nbc; ++bj)
          ChunkProduct(R, C, dr.data(), dct.data(), in.data() + bi * R * cols + bj * C, cols,
                       coeffs.data() + (bi * nbc + bj) * R * C, C, z.data(), nz);
      return;
    }
    // A vector (R == 1) is already in chunk-major order: its gemm writes the coefficients.
    std::vector<float>& t1 = t1_;
    std::vector<float>& t2 = t2_;
    if (R > 1) {
      t1.resize(static_cast<size_t>(R * cols));
      t2.resize(static_cast<size_t>(R * cols));
    }
    for (int64_t bi = 0; bi < nbr; ++bi) {
      const float* blk = in.data() + bi * R * cols;
      float* t1_data = R == 1 ? coeffs.data() + bi * cols : t1.data();
      // t1 = block viewed as (R*nbc) x C segments, times D_C^T (all segments in one gemm).
      if (C > 1) {
        const int64_t segs = R * nbc;
        const int64_t step = INT_MAX / C;
        for (int64_t s0 = 0; s0 < segs; s0 += step) {
          const int m = static_cast<int>(std::min(step, segs - s0));
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, static_cast<int>(C), static_cast<int>(C), 1.0f,
                      blk + s0 * C, static_cast<int>(C), dc.data(), static_cast<int>(C), 0.0f, t1_data + s0 * C,
                      static_cast<int>(C));
        }
      } else {
        std::copy(blk, blk + R * cols, t1_data);
      }
      if (R == 1) continue;
      // t2 = D_R * t1 (R x cols).
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(R), static_cast<int>(cols),
                  static_cast<int>(R), 1.0f, dr.data(), static_cast<int>(R), t1.data(), static_cast<int>(cols), 0.0f,
                  t2.data(), static_cast<int>(cols));
      const float* res = t2.data();
      // Scatter into chunk-major order.
      for (int64_t bj = 0; bj < nbc; ++bj) {
        float* dst = coeffs.data() + (bi * nbc + bj) * R * C;
        for (int64_t u = 0; u < R; ++u) std::copy(res + u * cols + bj * C, res + u * cols + bj * C + C, dst + u * C);
      }
    }
  }

  void Inverse(Shape2D shape, std::span<const float> coeffs, std::span<float> out) const override {
    const int64_t rows = shape.rows, cols = shape.cols;
    if (rows <= 0 || cols <= 0) return;
    const size_t n = static_cast<size_t>(rows * cols);
    if (out.size() < n) return;
    if (coeffs.size() < n) {  // caller bug; never read outside the span
      std::fill(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), 0.0f);
      return;
    }
    const int64_t R = detail::LargestDivisorAtMost(rows, chunk_);
    const int64_t C = detail::LargestDivisorAtMost(cols, chunk_);
    if (R == 1 && C == 1) {
      std::copy(coeffs.begin(), coeffs.begin() + static_cast<std::ptrdiff_t>(n), out.begin());
      return;
    }
    // out chunk = D_R^T * Y * D_C.
    const std::vector<float> drt = Transposed(detail::DctMatrix(R), R);
    const std::vector<float>& dc = detail::DctMatrix(C);
    const int64_t nbr = rows / R, nbc = cols / C;
    std::vector<float> z(static_cast<size_t>(R * C));
    std::vector<char> nz(static_cast<size_t>(R));
    const InverseArgs args{R, C, nbr, nbc, cols, drt.data(), dc.data(), coeffs.data(), out.data(), z.data(), &nz};
    SHOAL_SIMD_CALL(InverseChunks, args);
  }

 private:
  int64_t chunk_;
  std::vector<float> t1_, t2_;  // Forward's scratch, kept across calls
};

constexpr ParamDecl kParams[] = {
    IntParam("chunk", 64, 1, 1024, "largest chunk side (each side: the largest divisor of the dimension <= chunk)"),
};

StatusOr<std::unique_ptr<Transform>> Build(const StageParams& p, const std::vector<TensorSpec>&) {
  return std::unique_ptr<Transform>(std::make_unique<Dct>(p.Int("chunk")));
}

}  // namespace

constinit const StageDecl kDctStage = {
    .name = "dct", .id = StageId::kDct, .slot = Slot::kTransform,
    .summary = "DeMo's chunked orthonormal DCT-II",
    .params = kParams, .factory = &Build};

}  // namespace shoal::codec
