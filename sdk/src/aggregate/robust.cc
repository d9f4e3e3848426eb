#include "aggregate/robust.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace shoal::aggregator::robust {
namespace {

double SquaredDistance(std::span<const float> a, std::span<const float> b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i];
    s += d * d;
  }
  return s;
}

// The median of sorted values (the mean of the two middle ones for an even count).
template <class T>
double MedianOfSorted(std::span<const T> c) {
  const size_t n = c.size();
  return n % 2 ? static_cast<double>(c[n / 2]) : (static_cast<double>(c[n / 2 - 1]) + c[n / 2]) / 2.0;
}

// Calls f(i, column) for each coordinate i with the n values of coordinate i, sorted.
template <class F>
void ForEachSortedColumn(Updates x, size_t d, F f) {
  std::vector<float> column(x.size());
  for (size_t i = 0; i < d; ++i) {
    for (size_t k = 0; k < x.size(); ++k) column[k] = x[k][i];
    std::sort(column.begin(), column.end());
    f(i, std::span<const float>(column));
  }
}

}  // namespace

void CoordinateMedian(Updates x, std::span<float> out) {
  ForEachSortedColumn(x, out.size(), [&](size_t i, std::span<const float> c) {
    out[i] = static_cast<float>(MedianOfSorted(c));
  });
}

void TrimmedMean(Updates x, size_t trim, std::span<float> out) {
  const size_t kept = x.size() - 2 * trim;
  ForEachSortedColumn(x, out.size(), [&](size_t i, std::span<const float> c) {
    double s = 0.0;
    for (size_t k = trim; k < trim + kept; ++k) s += c[k];
    out[i] = static_cast<float>(s / static_cast<double>(kept));
  });
}

std::vector<size_t> KrumSelect(Updates x, size_t f, size_t m) {
  const size_t n = x.size();
  std::vector<double> dist(n * n, 0.0);
  for (size_t a = 0; a < n; ++a)
    for (size_t b = a + 1; b < n; ++b) dist[a * n + b] = dist[b * n + a] = SquaredDistance(x[a], x[b]);
  const size_t nearest = n > f + 2 ? n - f - 2 : 0;
  std::vector<double> score(n), row;
  for (size_t a = 0; a < n; ++a) {
    row.clear();
    for (size_t b = 0; b < n; ++b)
      if (b != a) row.push_back(dist[a * n + b]);
    std::partial_sort(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(nearest), row.end());
    score[a] = std::accumulate(row.begin(), row.begin() + static_cast<std::ptrdiff_t>(nearest), 0.0);
  }
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return score[a] < score[b]; });
  order.resize(m);
  return order;
}

void MeanOf(Updates x, std::span<const size_t> pick, std::span<float> out) {
  std::vector<double> s(out.size(), 0.0);
  for (size_t k : pick)
    for (size_t i = 0; i < s.size(); ++i) s[i] += x[k][i];
  for (size_t i = 0; i < s.size(); ++i) out[i] = static_cast<float>(s[i] / static_cast<double>(pick.size()));
}

void CenteredClip(Updates x, std::span<const float> start, double tau, int iters, std::span<float> out) {
  const size_t n = x.size(), d = out.size();
  std::vector<double> v(start.begin(), start.end()), step(d);
  std::vector<double> norm(n);
  for (int it = 0; it < iters; ++it) {
    for (size_t k = 0; k < n; ++k) {
      double s = 0.0;
      for (size_t i = 0; i < d; ++i) {
        const double diff = x[k][i] - v[i];
        s += diff * diff;
      }
      norm[k] = std::sqrt(s);
    }
    double radius = tau;
    if (radius == 0.0) {
      std::vector<double> sorted = norm;
      std::sort(sorted.begin(), sorted.end());
      radius = MedianOfSorted(std::span<const double>(sorted));
    }
    std::fill(step.begin(), step.end(), 0.0);
    for (size_t k = 0; k < n; ++k) {
      const double scale = norm[k] > radius ? radius / norm[k] : 1.0;
      for (size_t i = 0; i < d; ++i) step[i] += (x[k][i] - v[i]) * scale;
    }
    for (size_t i = 0; i < d; ++i) v[i] += step[i] / static_cast<double>(n);
  }
  for (size_t i = 0; i < d; ++i) out[i] = static_cast<float>(v[i]);
}

}  // namespace shoal::aggregator::robust
