// Datasets (public API): loaders for real data (sklearn's digits, IDX, CSV, the King James
// Bible, any UTF-8 text), the held-out split and the partitioners that give each client its
// part. Every process derives the same split and parts from (dataset, scheme, seed), so an
// application with its own trainer can use them to train on exactly the part a built-in client
// would (see examples/).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shoal/status.h"

namespace shoal::data {

// What a dataset holds: labelled feature rows (classification) or one stream of tokens (text
// for a language model).
enum class DatasetKind {
  kFeatures,
  kTokens,
};

// "features" | "tokens", for messages.
inline const char* DatasetKindName(DatasetKind kind) { return kind == DatasetKind::kTokens ? "tokens" : "features"; }

// One document of a token dataset (a book of the Bible, a whole text: file): it begins at
// token `start` and runs to the next document's start, or to the end of the stream.
struct Document {
  std::string name;
  int64_t start = 0;
  bool operator==(const Document&) const = default;
};

// Byte-level tokens: every byte value is a token id.
inline constexpr int32_t kByteVocabSize = 256;

// A dataset held in memory, of one of two kinds.
//
// kFeatures: a classification dataset, n examples of `dim` float features (row-major) and
// integer labels in [0, num_classes). Invariants: x.size() == n * dim, y.size() == n; the
// token fields are empty (vocab_size 0).
//
// kTokens: one stream of n tokens, byte-level (ids in [0, vocab_size), vocab_size = 256: the
// bytes of UTF-8 text, each its own token). Stored as one byte per token: a byte is exactly
// the vocabulary, and the KJV costs its 4.1 MB rather than 16.6 MB as int32 ids (shoal-sim's
// virtual clients share their parts of one copy); a model widens the ids of each batch window
// as it copies them into its batch. Invariants: tokens.size() == n; dim == 0, num_classes ==
// 0, x and y empty; `documents` is either empty (no known boundaries) or covers the stream:
// documents[0].start == 0 and the starts strictly increase and stay below n, so every token
// belongs to exactly one non-empty document. The split and the parts of a token dataset are
// contiguous runs of the stream (Slice) whose documents are clipped to the run, their starts
// rebased to it.
struct Dataset {
  std::string name;
  DatasetKind kind = DatasetKind::kFeatures;
  int64_t n = 0;  // examples (kFeatures) or tokens (kTokens)
  // kFeatures
  int64_t dim = 0;
  int32_t num_classes = 0;
  std::vector<float> x;    // n * dim
  std::vector<int32_t> y;  // n
  // Names from a CSV header (else empty): of the dim features, in order; and of the classes,
  // when the labels were names (class i is class_names[i]; names sorted, so every process
  // that reads the file maps them alike).
  std::vector<std::string> feature_names;
  std::vector<std::string> class_names;
  // kTokens
  int32_t vocab_size = 0;           // 256 (kByteVocabSize); 0 for kFeatures
  std::vector<uint8_t> tokens;      // n
  std::vector<Document> documents;  // ascending starts, see above
};

// Where `--dataset digits` and friends are cached: $SHOAL_DATA_DIR if set, else
// $XDG_CACHE_HOME/shoal, else $HOME/.cache/shoal.
std::string DefaultDataDir();

// Loads a dataset from a spec:
//   "digits"               sklearn's 1797 8x8 digits, <data_dir>/digits.csv.gz (features / 16);
//                          an empty data_dir means DefaultDataDir()
//   "csv:PATH[,label=COL][,header=auto|yes|no][,skip=N]"
//                          CSV (plain or gzip) with numeric features as written and a label
//                          column: COL is a header name or a 1-based column number (default:
//                          the last column). header=auto (default) takes the first line as a
//                          header when none of its cells is a number; skip=N ignores the
//                          file's first N lines (sklearn's files start with a count line,
//                          e.g. "569,30,malignant,benign"). Labels are non-negative
//                          integers, or names (any non-numeric label): then the distinct names,
//                          sorted, become classes 0, 1, ... (class_names). PATH must not hold
//                          a comma.
//   "idx:IMAGES,LABELS"    MNIST-format IDX files (ubyte images scaled to [0,1], ubyte labels),
//                          gzip-compressed or not
//   "kjv"                  tokens: the King James Bible, <data_dir>/kjv.txt as scripts/setup
//                          prepares it from Debian's bible-kjv (format: data/loaders.h): the
//                          file's bytes (verse labels stripped), one document per book (66,
//                          Genesis .. Revelation)
//   "text:PATH"            tokens: the bytes of a UTF-8 file (or of a gzip-compressed one),
//                          one document named PATH
// Feature datasets: num_classes = largest label + 1 (10 for digits). Token datasets are
// byte-level (vocab_size 256). Errors name the file and what to do:
//   NotFound         a missing file ("run scripts/setup to fetch it, or set SHOAL_DATA_DIR")
//   InvalidArgument  an unknown spec (the message lists the valid forms), a malformed CSV
//                    (PATH:LINE), IDX files whose counts differ, an empty text file, a text
//                    file that is not UTF-8 (the message gives the offset of the first bad byte)
//   Corruption       a bad IDX magic, a truncated IDX file, a bad gzip stream, a kjv.txt not
//                    in scripts/setup's format
//   IoError          the OS failed to read the file
// Relative csv:/idx:/text: paths are resolved from the current directory.
StatusOr<Dataset> LoadDataset(const std::string& spec, const std::string& data_dir);

// A per-feature affine map fitted on a training split, x'[j] = (x[j] - mean[j]) * scale[j]:
// the mean and 1 / standard deviation (population) of each feature, computed in double in row
// order, so every process fitting the same rows gets the same floats; a constant feature keeps
// scale 1. Empty = no standardization.
struct Standardization {
  std::vector<float> mean, scale;
  bool empty() const { return mean.empty(); }
};
// Whether a --standardize setting ("auto": on for csv: datasets; "on"; "off") asks to
// standardize dataset `spec`; InvalidArgument for another setting.
StatusOr<bool> WantsStandardization(const std::string& setting, const std::string& spec);
// Fits `train` (a feature dataset with at least one row).
Standardization FitStandardization(const Dataset& train);
// Applies `s` to every row of `d`; InvalidArgument when `d` holds tokens or its dim differs
// from the map's.
Status Standardize(const Standardization& s, Dataset* d);
// The share of the most frequent label in `d` (features; 0 for an empty one): the accuracy of
// always predicting it.
double MajorityClassRate(const Dataset& d);

// OK for a feature dataset; for a token dataset InvalidArgument naming the dataset and `who`
// ("dataset 'kjv' holds tokens (byte-level text, vocabulary 256); the built-in trainer needs
// features and labels ..."), for the consumers that read only rows and labels.
Status RequireFeatures(const Dataset& d, const std::string& who);

// The rows `indices` of feature dataset `d`, in that order. Every index must lie in [0, d.n)
// and `d` must hold features (a caller bug otherwise: the process aborts with a message rather
// than read out of bounds).
Dataset Subset(const Dataset& d, const std::vector<int64_t>& indices);

// Tokens [begin, end) of token dataset `d`, with the documents that overlap them, clipped to
// the run and rebased to it (a document cut by `begin` starts at 0 in the slice, keeping its
// name). 0 <= begin <= end <= d.n and `d` must hold tokens (a caller bug otherwise: the
// process aborts).
Dataset Slice(const Dataset& d, int64_t begin, int64_t end);

struct Split {
  Dataset train;
  Dataset test;  // held out: the aggregator evaluates on it; never given to clients
};
// Features: a stratified, deterministic split: within each class a seeded shuffle, then the
// first round(test_fraction * count) examples of the class go to test. Both halves keep the
// dataset's order.
// Tokens: text is sequential, so the held-out part is the END of the stream: test = the last
// round(test_fraction * n) tokens, train = the rest (Slice; the seed plays no part). A
// document that the cut crosses is in both halves, clipped; one wholly in the tail is in the
// test half only.
// InvalidArgument when test_fraction is outside [0, 1), the dataset is empty or inconsistent,
// or no training example (token) would remain.
StatusOr<Split> TrainTestSplit(const Dataset& d, double test_fraction, uint64_t seed);

// "i/n" -> {i, n}, 0 <= i < n (decimal, no sign or spaces); InvalidArgument otherwise.
struct PartitionRef {
  uint32_t index = 0;
  uint32_t count = 1;
};
StatusOr<PartitionRef> ParsePartition(const std::string& text);

// Splits example indices 0..labels.size()-1 of a feature dataset into `count` disjoint parts
// that together use every example exactly once. scheme:
//   "iid"              seeded shuffle, then contiguous near-equal parts
//   "dirichlet:ALPHA"  label skew: for each class, proportions ~ Dir(ALPHA) over the parts
//                      (smaller ALPHA = more skew); redrawn until every part has at least
//                      min_per_part examples (the usual FL benchmark recipe, as in Hsu et
//                      al. 2019 / NIID-Bench: a part that already holds n / count examples
//                      gets no share of the classes placed after that).
// Each part's indices are sorted ascending; every part holds at least min_per_part examples
// (iid parts differ in size by at most one, so it holds whenever n >= count * min_per_part).
// InvalidArgument for an unknown scheme, a bad ALPHA, labels outside [0, num_classes),
// n < count * min_per_part, or when 1000 Dirichlet draws all leave some part too small; also
// for "books", which partitions a token dataset (PartitionTokens).
StatusOr<std::vector<std::vector<int64_t>>> Partition(const std::vector<int32_t>& labels, int32_t num_classes,
                                                      uint32_t count, const std::string& scheme, uint64_t seed,
                                                      int64_t min_per_part = 10);

// A run of tokens [begin, end) of a token dataset.
struct TokenRange {
  int64_t begin = 0;
  int64_t end = 0;
  bool operator==(const TokenRange&) const = default;
};
// Splits the stream of token dataset `d` (the training half of a split) into `count`
// contiguous runs, in order, that together cover it exactly once: parts[0].begin == 0, each
// part begins where the one before it ends, the last ends at d.n. No randomness (parts are
// fixed by the data alone). scheme:
//   "iid"    near-equal shards: sizes differ by at most one token (the first n % count parts
//            get one more). Named after the feature scheme (no part is skewed on purpose),
//            though each part is one stretch of the text, not a sample of all of it.
//   "books"  whole documents: each part gets a contiguous run of at least one document (in a
//            split's training half, the documents clipped to it). The largest part is as small
//            as any such assignment allows; among those, each cut is the document boundary
//            nearest its byte-balanced position (i * n / count).
// min_per_part is a number of TOKENS: every part must hold at least that many.
// InvalidArgument for a feature dataset, an empty or inconsistent one, an unknown scheme,
// "dirichlet:..." (a label skew; tokens have no labels), "books" when the dataset has no
// documents or fewer documents than parts, or when some part would hold fewer than
// min_per_part tokens.
StatusOr<std::vector<TokenRange>> PartitionTokens(const Dataset& d, uint32_t count, const std::string& scheme,
                                                  int64_t min_per_part = 10);

// Every client's training data in one call: the held-out split (TrainTestSplit with
// test_fraction and seed) taken out, then the rest partitioned into `count` parts by `scheme`
// (Partition with the same seed, or PartitionTokens for a token dataset: parts[i] is then
// Slice(train, ranges[i]), a copy of its run: all parts together hold the training stream
// once). parts[i] is exactly what the client with partition i of count trains on, in every
// process. Errors as TrainTestSplit and Partition / PartitionTokens.
StatusOr<std::vector<Dataset>> TrainingParts(const Dataset& d, double test_fraction, uint64_t seed, uint32_t count,
                                             const std::string& scheme, int64_t min_per_part = 10);
// One of them: TrainingParts(...)[part.index] with count = part.count (InvalidArgument when
// the index is not below the count).
StatusOr<Dataset> TrainingPart(const Dataset& d, double test_fraction, uint64_t seed, PartitionRef part,
                               const std::string& scheme, int64_t min_per_part = 10);
// The same from a split already made (TrainTestSplit(d, test_fraction, seed), with this
// `seed`), for a caller that also keeps its held-out part: the split is not made twice.
StatusOr<std::vector<Dataset>> TrainingParts(const Split& split, uint64_t seed, uint32_t count,
                                             const std::string& scheme, int64_t min_per_part = 10);
StatusOr<Dataset> TrainingPart(const Split& split, uint64_t seed, PartitionRef part, const std::string& scheme,
                               int64_t min_per_part = 10);

}  // namespace shoal::data
