// File loaders behind LoadDataset (internal to sdk/src/data). Each one reads a file that
// may be hostile: every size is checked against what the file really holds before memory is
// allocated for it, and every error names the file (and the line, for text formats).
#pragma once

#include <string>

#include "shoal/data.h"
#include "shoal/status.h"

namespace shoal::data {

// What a NotFound error appends after the path, so the user knows what to do.
// Default for user-supplied files; the digits loader passes its own ("run scripts/setup").
inline constexpr const char* kUserFileHint = "check the path (a relative path is resolved from the current directory)";

// A numeric CSV file, plain or gzip-compressed: one example per line, features first and the
// label in the last column. The first line is a header, and skipped, when none of its cells is
// a number. Blank lines are ignored. Features are kept as written (no scaling).
// Errors: NotFound (missing file, message ends with `missing_hint`); InvalidArgument naming
// PATH:LINE for a ragged row, a non-numeric or non-finite cell, or a label that is not a
// non-negative integer; IoError / Corruption when the file cannot be read or decompressed.
// num_classes = largest label + 1.
StatusOr<Dataset> LoadCsv(const std::string& path, const std::string& missing_hint = kUserFileHint);

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

}  // namespace shoal::data
