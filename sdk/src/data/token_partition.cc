// The held-out split and the partitioners of token datasets. Text is sequential, so every
// piece is a contiguous run of the stream: the held-out split is the tail, "iid" cuts the rest
// into near-equal shards, "books" gives each part whole documents (the KJV's books: a natural
// non-IID split). Nothing here is random; every process derives the same runs from the data.
//
// "books" is the linear partition problem: cut D documents of sizes s_0..s_{D-1} into `count`
// non-empty contiguous groups. First the smallest capacity C for which the greedy grouping
// (fill a group while it stays <= C) needs at most `count` groups: the best possible largest
// part (binary search; greedy is optimal for a fixed C). Then the cuts, left to right: cut p
// may land on any boundary j that keeps its part <= C, leaves at least count - p documents
// and lets the documents after it fit in count - p groups of <= C (fewest[j] <= count - p);
// of those it takes the boundary nearest p * n / count, so the parts stay balanced by bytes
// wherever the optimal largest part leaves room. Such a boundary always exists: the greedy
// group's end qualifies unless it leaves too few documents, and then D - (count - p) does
// (count - p documents, each <= C, fill count - p groups).

#include <algorithm>
#include <cmath>

#include "data/tokens.h"

namespace shoal::data {
namespace {

constexpr const char* kTokenSchemes =
    "token schemes: iid (contiguous near-equal shards), books (whole documents per part)";

// Sizes in tokens of the documents of `d` (which cover its stream).
std::vector<int64_t> DocumentSizes(const Dataset& d) {
  std::vector<int64_t> sizes(d.documents.size());
  for (size_t i = 0; i < sizes.size(); ++i)
    sizes[i] = (i + 1 < sizes.size() ? d.documents[i + 1].start : d.n) - d.documents[i].start;
  return sizes;
}

// How many groups the greedy grouping of `sizes` (each <= cap) into runs of <= cap makes.
uint64_t GreedyGroups(const std::vector<int64_t>& sizes, int64_t cap) {
  uint64_t groups = 0;
  int64_t fill = cap;  // so that the first document opens a group
  for (int64_t s : sizes) {
    if (fill + s > cap) {
      ++groups;
      fill = 0;
    }
    fill += s;
  }
  return groups;
}

// The document indices where parts 1..count-1 begin, plus 0 in front and D at the back.
std::vector<size_t> BookCuts(const std::vector<int64_t>& sizes, uint32_t count) {
  const size_t num_docs = sizes.size();
  std::vector<int64_t> prefix(num_docs + 1, 0);  // prefix[j]: tokens before document j
  for (size_t i = 0; i < num_docs; ++i) prefix[i + 1] = prefix[i] + sizes[i];
  const int64_t total = prefix[num_docs];

  int64_t lo = *std::max_element(sizes.begin(), sizes.end()), hi = total;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (GreedyGroups(sizes, mid) <= count) hi = mid; else lo = mid + 1;
  }
  const int64_t cap = lo;

  // next[j]: where a part that starts at document j and holds <= cap tokens can end at the
  // latest; fewest[j]: the fewest such parts documents j.. need (greedy).
  std::vector<size_t> next(num_docs + 1, num_docs), fewest(num_docs + 1, 0);
  for (size_t j = 0, k = 0; j < num_docs; ++j) {
    k = std::max(k, j);
    while (k < num_docs && prefix[k + 1] - prefix[j] <= cap) ++k;
    next[j] = k;
  }
  for (size_t j = num_docs; j-- > 0;) fewest[j] = 1 + fewest[next[j]];

  std::vector<size_t> cuts = {0};
  size_t first_ok = 1;  // smallest boundary after the last cut with fewest[] <= parts left
  for (uint32_t p = 1; p < count; ++p) {
    const size_t prev = cuts.back(), left = count - p;
    first_ok = std::max(first_ok, prev + 1);
    while (fewest[first_ok] > left) ++first_ok;
    const size_t last_ok = std::min(next[prev], num_docs - left);
    // The boundary in [first_ok, last_ok] nearest the balanced position (ties: the earlier).
    const double target = static_cast<double>(p) * static_cast<double>(total) / count;
    size_t j = static_cast<size_t>(
        std::lower_bound(prefix.begin() + first_ok, prefix.begin() + last_ok + 1, target,
                         [](int64_t v, double t) { return static_cast<double>(v) < t; }) - prefix.begin());
    if (j > last_ok) j = last_ok;
    if (j > first_ok && target - prefix[j - 1] <= prefix[j] - target) --j;
    cuts.push_back(j);
  }
  cuts.push_back(num_docs);
  return cuts;
}

}  // namespace

Status CheckTokens(const Dataset& d) {
  const std::string what = "token dataset '" + d.name + "' is inconsistent: ";
  if (d.n < 0 || static_cast<size_t>(d.n) != d.tokens.size())
    return Status::InvalidArgument(what + "n = " + std::to_string(d.n) + " but it holds " +
                                   std::to_string(d.tokens.size()) + " tokens");
  if (d.vocab_size != kByteVocabSize)
    return Status::InvalidArgument(what + "vocab_size " + std::to_string(d.vocab_size) + ", expected " +
                                   std::to_string(kByteVocabSize) + " (byte tokens)");
  if (d.dim != 0 || d.num_classes != 0 || !d.x.empty() || !d.y.empty())
    return Status::InvalidArgument(what + "it also holds features or labels");
  for (size_t i = 0; i < d.documents.size(); ++i) {
    const int64_t start = d.documents[i].start;
    const int64_t floor = i == 0 ? 0 : d.documents[i - 1].start + 1;
    if ((i == 0 && start != 0) || start < floor || start >= d.n)
      return Status::InvalidArgument(what + "document " + std::to_string(i) + " ('" + d.documents[i].name +
                                     "') starts at " + std::to_string(start) +
                                     " (documents must start at 0, strictly increase and stay below n = " +
                                     std::to_string(d.n) + ")");
  }
  return Status::Ok();
}

StatusOr<Split> SplitTokens(const Dataset& d, double test_fraction) {
  SHOAL_RETURN_IF_ERROR(CheckTokens(d));
  if (d.n == 0) return Status::InvalidArgument("dataset '" + d.name + "' holds no tokens");
  const int64_t test = std::llround(test_fraction * static_cast<double>(d.n));
  if (test >= d.n) {
    return Status::InvalidArgument("test fraction " + std::to_string(test_fraction) + " leaves no training tokens in '" +
                                   d.name + "'");
  }
  return Split{Slice(d, 0, d.n - test), Slice(d, d.n - test, d.n)};
}

StatusOr<std::vector<TokenRange>> PartitionTokens(const Dataset& d, uint32_t count, const std::string& scheme,
                                                  int64_t min_per_part) {
  if (d.kind != DatasetKind::kTokens)
    return Status::InvalidArgument("PartitionTokens: dataset '" + d.name + "' holds features (use Partition)");
  if (count == 0) return Status::InvalidArgument("number of parts must be at least 1");
  if (min_per_part < 0) return Status::InvalidArgument("min_per_part must be >= 0, got " + std::to_string(min_per_part));
  SHOAL_RETURN_IF_ERROR(CheckTokens(d));
  if (d.n == 0) return Status::InvalidArgument("cannot partition an empty dataset");

  std::vector<TokenRange> parts;
  if (scheme == "iid") {
    if (min_per_part > 0 && d.n / min_per_part < static_cast<int64_t>(count)) {
      return Status::InvalidArgument(std::to_string(d.n) + " tokens cannot give " + std::to_string(count) +
                                     " parts of at least " + std::to_string(min_per_part) + " tokens each");
    }
    const int64_t base = d.n / count, extra = d.n % count;
    int64_t start = 0;
    for (uint32_t p = 0; p < count; ++p) {
      const int64_t size = base + (p < extra ? 1 : 0);  // the first n % count parts get one more
      parts.push_back({start, start + size});
      start += size;
    }
    return parts;
  }
  if (scheme == "books") {
    if (d.documents.empty())
      return Status::InvalidArgument("partition scheme 'books': dataset '" + d.name +
                                     "' has no documents (book boundaries); use iid");
    if (d.documents.size() < count)
      return Status::InvalidArgument("partition scheme 'books': dataset '" + d.name + "' holds " +
                                     std::to_string(d.documents.size()) + " documents (a training half only those "
                                     "before its held-out tail), fewer than the " + std::to_string(count) +
                                     " parts (each part gets whole documents)");
    const std::vector<size_t> cuts = BookCuts(DocumentSizes(d), count);
    auto start_of = [&](size_t doc) { return doc < d.documents.size() ? d.documents[doc].start : d.n; };
    for (uint32_t p = 0; p < count; ++p) {
      const TokenRange r{start_of(cuts[p]), start_of(cuts[p + 1])};
      if (r.end - r.begin < min_per_part) {
        return Status::InvalidArgument("partition scheme 'books' gives part " + std::to_string(p) + " (" +
                                       d.documents[cuts[p]].name + " ..) " + std::to_string(r.end - r.begin) +
                                       " tokens, fewer than the minimum of " + std::to_string(min_per_part) +
                                       "; use fewer parts or a smaller minimum");
      }
      parts.push_back(r);
    }
    return parts;
  }
  if (scheme.starts_with("dirichlet:")) {
    return Status::InvalidArgument("partition scheme '" + scheme + "' skews labels, and dataset '" + d.name +
                                   "' holds tokens, which have none; " + kTokenSchemes);
  }
  return Status::InvalidArgument("unknown partition scheme '" + scheme + "' for token dataset '" + d.name + "'; " +
                                 kTokenSchemes);
}

}  // namespace shoal::data
