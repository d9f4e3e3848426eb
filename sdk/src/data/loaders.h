// File loaders behind LoadDataset (internal to sdk/src/data): CSV, IDX and digits in
// loaders.cc, text and the KJV in text.cc. Each one reads a file that may be hostile: every
// size is checked against what the file really holds before memory is allocated for it, and
// every error names the file (and the line or offset, for text formats).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "shoal/data.h"
#include "shoal/status.h"

namespace shoal::data {

// What a NotFound error appends after the path, so the user knows what to do.
// Default for user-supplied files; the digits loader passes its own ("run scripts/setup").
inline constexpr const char* kUserFileHint = "check the path (a relative path is resolved from the current directory)";

// How a CSV file is read (the csv: spec's options, data.h).
struct CsvOptions {
  std::string label;  // the label column: a header name or a 1-based number; empty = the last
  enum class Header { kAuto, kYes, kNo } header = Header::kAuto;  // kAuto: a first line with no number
  uint64_t skip = 0;  // lines at the top of the file that are neither header nor data (sklearn's counts line)
};

// A CSV file, plain or gzip-compressed: one example per line, numeric features and one label
// column. The first line is a header (its names go to feature_names) per options.header. Blank
// lines are ignored. Features are kept as written (no scaling: see Standardize). Labels that
// are all non-negative integers are classes as written (num_classes = largest + 1); any other
// label makes every label a name, and the sorted distinct names classes 0, 1, ... (class_names).
// Errors: NotFound (missing file, message ends with `missing_hint`); InvalidArgument naming
// PATH:LINE for a ragged row (when the first data row differs from the first line, the message
// suggests skip=1: such a first line is usually a count, as in sklearn's files), a non-numeric or non-finite feature (by its header name, if
// any), numeric labels that are not non-negative integers, an unknown label column;
// IoError / Corruption when the file cannot be read or decompressed.
StatusOr<Dataset> LoadCsv(const std::string& path, const CsvOptions& options = {},
                          const std::string& missing_hint = kUserFileHint);

// A pair of MNIST-format IDX files, plain or gzip-compressed: `images` has magic 0x00000803
// (unsigned bytes, dims N x ROWS x COLS), `labels` has magic 0x00000801 (N unsigned bytes).
// Pixels are scaled by 1/255 into [0, 1]; dim = ROWS * COLS.
// Errors: NotFound; Corruption for a bad magic, a truncated file or trailing bytes (the
// declared sizes must match the file exactly); InvalidArgument when the two counts differ.
StatusOr<Dataset> LoadIdx(const std::string& images, const std::string& labels);

// sklearn's digits from `path` (digits.csv.gz: 64 pixels in 0..16, then the label 0..9).
// Features are scaled by 1/16 into [0, 1]. A missing file gives NotFound with the hint to run
// scripts/setup or set SHOAL_DATA_DIR; a file of another shape gives Corruption.
StatusOr<Dataset> LoadDigits(const std::string& path);

// The largest text a token dataset may hold (decompressed), so that a gzip bomb or a wrong
// path fails with a message rather than exhausting memory.
inline constexpr int64_t kMaxTextBytes = int64_t{1} << 30;

// The offset of the first byte of the first ill-formed UTF-8 sequence in `bytes` (RFC 3629:
// no overlong forms, no surrogates, nothing above U+10FFFF, no sequence cut short by the end),
// or -1 when all of it is valid.
int64_t FirstInvalidUtf8(const uint8_t* bytes, size_t n);

// A text file, plain or gzip-compressed, as a token dataset: its bytes, vocab_size 256, one
// document named `path`. Errors: NotFound (message ends with `missing_hint`); InvalidArgument
// for an empty file, a file larger than kMaxTextBytes, or one that is not valid UTF-8 (the
// message gives the byte offset of the first bad sequence); IoError / Corruption when the file
// cannot be read or decompressed. The dataset is named "text:" + path.
StatusOr<Dataset> LoadText(const std::string& path, const std::string& missing_hint = kUserFileHint);

// The King James Bible from `path` (<data_dir>/kjv.txt), as scripts/setup writes it from
// Debian's bible-kjv package (the package's own `bible` program prints the verses):
//   - UTF-8 (in fact ASCII) text with '\n' line ends, ending in '\n';
//   - the 66 books in canonical order, Genesis .. Revelation, separated by one empty line;
//   - each book is its name on a line of its own ("Genesis", "1 Samuel", "Song of Solomon"),
//     then its verses, one per line, without their chapter:verse labels.
// The tokens are the file's bytes exactly (text:PATH on the same file gives the same stream);
// document i is book i, from the first byte of its name line (offset 0, then each offset just
// after a "\n\n"), named by that line. A missing file gives NotFound with the hint to run
// scripts/setup; a file in another shape (not 66 books, an empty book, a blank line inside a
// book) gives Corruption. The dataset is named "kjv".
StatusOr<Dataset> LoadKjv(const std::string& path);

}  // namespace shoal::data
