// PowerSGD rank-r approximation (stage "powersgd", StageId::kPowerSgd), Vogels et al. 2019.
//
// For a matrix M (rows x cols) and r = min(rank, rows, cols), one warm-started power step:
//   P = M Q            (Q: cols x r, the Q this transform produced for the same tensor index
//                       last time; initially N(0,1) entries from Rng(seed, tensor_index), so
//                       every client starts from the same Q)
//   P = orth(P)        (modified Gram-Schmidt in double, two passes; a column that is zero or
//                       numerically in the span of the previous ones becomes zero)
//   Q = M^T P          (kept for the next Forward of this tensor index)
// Coefficients: [P (rows x r, row-major) ; Q (cols x r, row-major)], r*(rows+cols) floats;
// Inverse: M ~= P Q^T, in a fixed summation order (same bits on every machine).
// A tensor passes through unchanged (coefficients = values) when it is a vector (rows == 1)
// or when the factors would not be smaller than the tensor (r*(rows+cols) >= rows*cols).
// A zero or non-finite column of the kept Q (e.g. after an all-zero update) is redrawn from
// the Rng, so the approximation never gets stuck below rank r.
#include <cblas.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstring>

#include "codec/bytes.h"
#include "codec/stages.h"
#include "codec/xform_params.h"
#include "core/rng.h"

namespace shoal::codec {
namespace {

class PowerSgd final : public Transform {
 public:
  PowerSgd(int64_t rank, uint64_t seed, size_t num_tensors) : rank_(rank), seed_(seed), state_(num_tensors) {}

  StageId id() const override { return StageId::kPowerSgd; }

  size_t NumCoefficients(Shape2D shape) const override {
    if (shape.rows <= 0 || shape.cols <= 0) return 0;
    if (PassThrough(shape)) return static_cast<size_t>(shape.size());
    return static_cast<size_t>(Rank(shape) * (shape.rows + shape.cols));
  }

  void Forward(size_t tensor_index, Shape2D shape, std::span<const float> in, std::span<float> coeffs) override {
    const size_t nc = NumCoefficients(shape);
    const size_t n = static_cast<size_t>(std::max<int64_t>(shape.size(), 0));
    if (n == 0 || in.size() < n || coeffs.size() < nc) return;  // caller bug: never touch outside the spans
    if (PassThrough(shape)) {
      std::copy(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(n), coeffs.begin());
      return;
    }
    const int64_t rows = shape.rows, cols = shape.cols, r = Rank(shape);
    if (tensor_index >= state_.size()) state_.resize(tensor_index + 1);
    State& st = state_[tensor_index];
    if (st.rows != rows || st.cols != cols || st.r != r) {
      st = State{rows, cols, r, std::vector<float>(static_cast<size_t>(cols * r)), 0};
      Rng rng(seed_, tensor_index);
      for (float& x : st.q) x = static_cast<float>(rng.Normal());
    }
    float* p = coeffs.data();
    float* q = coeffs.data() + rows * r;
    const float* m = in.data();
    // P = M Q.
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, static_cast<int>(rows), static_cast<int>(r),
                static_cast<int>(cols), 1.0f, m, static_cast<int>(cols), st.q.data(), static_cast<int>(r), 0.0f, p,
                static_cast<int>(r));
    Orthonormalize(p, rows, r);
    // Q = M^T P.
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, static_cast<int>(cols), static_cast<int>(r),
                static_cast<int>(rows), 1.0f, m, static_cast<int>(cols), p, static_cast<int>(r), 0.0f, q,
                static_cast<int>(r));
    std::copy(q, q + cols * r, st.q.begin());
    // Redraw degenerate columns of the kept Q.
    for (int64_t k = 0; k < r; ++k) {
      bool degenerate = true;
      for (int64_t j = 0; j < cols; ++j) {
        const float x = st.q[static_cast<size_t>(j * r + k)];
        if (!std::isfinite(x)) {
          degenerate = true;
          break;
        }
        if (x != 0.0f) degenerate = false;
      }
      if (!degenerate) continue;
      Rng rng(seed_ ^ 0x5851f42d4c957f2dULL, (static_cast<uint64_t>(tensor_index) << 24) + ++st.redraws);
      for (int64_t j = 0; j < cols; ++j) st.q[static_cast<size_t>(j * r + k)] = static_cast<float>(rng.Normal());
    }
  }

  // Per tensor: rows, cols, r, redraws (varints), then Q's cols * r floats.
  std::vector<uint8_t> SaveState() const override {
    ByteWriter w;
    w.PutVarint(state_.size());
    for (const State& st : state_) {
      for (uint64_t v : {static_cast<uint64_t>(st.rows), static_cast<uint64_t>(st.cols), static_cast<uint64_t>(st.r),
                         st.redraws})
        w.PutVarint(v);
      w.PutFloats(st.q);
    }
    return w.Release();
  }
  Status LoadState(std::span<const uint8_t> blob) override {
    ByteReader r(blob);
    uint64_t n = 0;
    SHOAL_RETURN_IF_ERROR(r.ReadVarint(&n, "powersgd state tensors"));
    if (n > r.remaining()) return Status::Corruption("powersgd state: " + std::to_string(n) + " tensors");
    std::vector<State> loaded(n);
    for (State& st : loaded) {
      uint64_t v[4];
      for (uint64_t& x : v) SHOAL_RETURN_IF_ERROR(r.ReadVarint(&x, "powersgd state shape"));
      if (v[0] > (uint64_t{1} << 40) || v[1] > (uint64_t{1} << 40) || v[2] > 4096 || v[1] * v[2] * 4 > r.remaining())
        return Status::Corruption("powersgd state: a bad tensor shape");
      st.rows = static_cast<int64_t>(v[0]);
      st.cols = static_cast<int64_t>(v[1]);
      st.r = static_cast<int64_t>(v[2]);
      st.redraws = v[3];
      SHOAL_RETURN_IF_ERROR(r.ReadFloats(v[1] * v[2], &st.q, "powersgd state Q"));
    }
    if (!r.empty()) return Status::Corruption("powersgd state: trailing bytes");
    state_ = std::move(loaded);
    return Status::Ok();
  }

  void Inverse(Shape2D shape, std::span<const float> coeffs, std::span<float> out) const override {
    const size_t nc = NumCoefficients(shape);
    const size_t n = static_cast<size_t>(std::max<int64_t>(shape.size(), 0));
    if (n == 0 || out.size() < n) return;
    if (coeffs.size() < nc) {  // caller bug: never read outside the span
      std::fill(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(n), 0.0f);
      return;
    }
    if (PassThrough(shape)) {
      std::copy(coeffs.begin(), coeffs.begin() + static_cast<std::ptrdiff_t>(n), out.begin());
      return;
    }
    const int64_t rows = shape.rows, cols = shape.cols, r = Rank(shape);
    const float* p = coeffs.data();
    const float* q = coeffs.data() + rows * r;
    std::vector<float> qt(static_cast<size_t>(r * cols));  // Q^T, r x cols
    for (int64_t j = 0; j < cols; ++j)
      for (int64_t k = 0; k < r; ++k) qt[static_cast<size_t>(k * cols + j)] = q[j * r + k];
    for (int64_t i = 0; i < rows; ++i) {
      float* o = out.data() + i * cols;
      std::fill(o, o + cols, 0.0f);
      for (int64_t k = 0; k < r; ++k) detail::AxpyInOrder(p[i * r + k], qt.data() + k * cols, o, cols);
    }
  }

 private:
  struct State {
    int64_t rows = 0, cols = 0, r = 0;
    std::vector<float> q;  // cols x r
    uint64_t redraws = 0;
  };

  int64_t Rank(Shape2D s) const { return std::min({rank_, s.rows, s.cols}); }
  bool PassThrough(Shape2D s) const {
    return s.rows <= 1 || s.cols <= 1 || Rank(s) * (s.rows + s.cols) >= s.rows * s.cols;
  }

  // Modified Gram-Schmidt on the columns of p (rows x r, row-major), in double, two passes.
  static void Orthonormalize(float* p, int64_t rows, int64_t r) {
    std::vector<double> cols_d(static_cast<size_t>(rows * r));  // column-major copy
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t k = 0; k < r; ++k) cols_d[static_cast<size_t>(k * rows + i)] = p[i * r + k];
    for (int64_t k = 0; k < r; ++k) {
      double* c = cols_d.data() + k * rows;
      double n0 = 0;
      for (int64_t i = 0; i < rows; ++i) n0 += c[i] * c[i];
      n0 = std::sqrt(n0);
      for (int pass = 0; pass < 2; ++pass) {
        for (int64_t j = 0; j < k; ++j) {
          const double* b = cols_d.data() + j * rows;
          double dot = 0;
          for (int64_t i = 0; i < rows; ++i) dot += b[i] * c[i];
          for (int64_t i = 0; i < rows; ++i) c[i] -= dot * b[i];
        }
      }
      double n1 = 0;
      for (int64_t i = 0; i < rows; ++i) n1 += c[i] * c[i];
      n1 = std::sqrt(n1);
      if (std::isfinite(n0) && std::isfinite(n1) && n0 > 0 && n1 > 1e-4 * n0) {
        for (int64_t i = 0; i < rows; ++i) c[i] /= n1;
      } else {
        std::fill(c, c + rows, 0.0);
      }
    }
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t k = 0; k < r; ++k) p[i * r + k] = static_cast<float>(cols_d[static_cast<size_t>(k * rows + i)]);
  }

  int64_t rank_;
  uint64_t seed_;
  std::vector<State> state_;
};

constexpr ParamDecl kParams[] = {
    IntParam("rank", 4, 1, 1024, "rank r of the approximation"),
    IntParam("seed", 0, 0, INT64_MAX, "seed of the initial Q (the same on every client)"),
};

StatusOr<std::unique_ptr<Transform>> Build(const StageParams& p, const std::vector<TensorSpec>& layout) {
  for (const TensorSpec& t : layout) {
    // gemm takes int dimensions.
    int64_t rows = t.shape.empty() ? 1 : t.shape[0];
    int64_t cols = rows > 0 ? t.numel() / rows : 0;
    if (t.shape.size() == 1) {
      rows = 1;
      cols = t.shape[0];
    }
    if (rows > INT_MAX || cols > INT_MAX) {
      return Status::InvalidArgument("powersgd: tensor '" + t.name + "' has a dimension above " +
                                     std::to_string(INT_MAX));
    }
  }
  return std::unique_ptr<Transform>(
      std::make_unique<PowerSgd>(p.Int("rank"), static_cast<uint64_t>(p.Int("seed")), layout.size()));
}

}  // namespace

constinit const StageDecl kPowerSgdStage = {
    .name = "powersgd", .id = StageId::kPowerSgd, .slot = Slot::kTransform,
    .summary = "PowerSGD rank-r approximation of each matrix, warm-started",
    .params = kParams, .factory = &Build};

}  // namespace shoal::codec
