// Test data: well-separated Gaussian blobs written as a CSV (header line, label last), for
// tests that need a small real classification file the loaders can read.
#pragma once

#include <fstream>
#include <string>

#include "core/rng.h"

namespace shoal::testing {

// Writes `rows` examples of `dim` features in `classes` blobs to `path`. Feature j of an
// example of class c is centred on 2 when j % classes == c and on -1 otherwise (sd 0.6).
inline void WriteBlobsCsv(const std::string& path, int rows, int dim, int classes, uint64_t seed) {
  std::ofstream out(path);
  for (int j = 0; j < dim; ++j) out << 'f' << j << ',';
  out << "label\n";
  Rng rng(seed);
  for (int i = 0; i < rows; ++i) {
    const int label = i % classes;
    for (int j = 0; j < dim; ++j) out << ((j % classes == label ? 2.0 : -1.0) + 0.6 * rng.Normal()) << ",";
    out << label << "\n";
  }
}

}  // namespace shoal::testing
