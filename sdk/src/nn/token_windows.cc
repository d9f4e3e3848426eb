#include "nn/token_windows.h"

namespace shoal::nn {

void CopyWindow(const data::Dataset& d, int64_t start, int seq, int32_t* tokens, int32_t* targets) {
  const uint8_t* w = d.tokens.data() + start;
  for (int i = 0; i < seq; ++i) {
    tokens[i] = w[i];
    targets[i] = w[i + 1];
  }
}

void DrawWindows(const data::Dataset& d, int rows, int seq, Rng& rng, int32_t* tokens, int32_t* targets) {
  const uint64_t count = static_cast<uint64_t>(WindowCount(d.n, seq));
  for (int r = 0; r < rows; ++r) {
    const int64_t start = static_cast<int64_t>(rng.Below(count));
    CopyWindow(d, start, seq, tokens + static_cast<size_t>(r) * seq, targets + static_cast<size_t>(r) * seq);
  }
}

std::vector<int64_t> EvalWindowStarts(int64_t n, int seq, int64_t max_windows) {
  std::vector<int64_t> starts;
  const int64_t count = WindowCount(n, seq);
  if (count <= 0 || max_windows <= 0) return starts;
  const int64_t back_to_back = (n - 1) / seq;  // windows of seq + 1 overlapping by one token
  if (back_to_back <= max_windows) {
    for (int64_t k = 0; k < back_to_back; ++k) starts.push_back(k * seq);
    return starts;
  }
  for (int64_t k = 0; k < max_windows; ++k) starts.push_back(k * (count - 1) / std::max<int64_t>(1, max_windows - 1));
  return starts;
}

}  // namespace shoal::nn
