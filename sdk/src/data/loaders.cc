// CSV, IDX and digits loaders. All reads go through zlib's gz* interface (data/gz_file.h),
// which reads gzip and plain files alike, so every format may be compressed.

#include "data/loaders.h"

#include <sys/stat.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>
#include <vector>

#include "data/gz_file.h"

namespace shoal::data {
namespace {

// Limits that keep a hostile or broken file from exhausting memory.
constexpr size_t kMaxLineBytes = size_t{64} << 20;   // one CSV line
constexpr uint64_t kMaxCsvCells = uint64_t{1} << 30;  // 4 GiB of floats
constexpr double kMaxLabel = 1 << 20;                 // num_classes stays small enough to count
constexpr size_t kReadChunk = size_t{1} << 20;        // IDX payloads grow at most this far ahead

// ---------------------------------------------------------------------------------------------
// CSV

// Splits a gz stream into lines ('\n', with a trailing '\r' removed), without holding more
// than one line plus one read chunk in memory.
class LineReader {
 public:
  LineReader(gzFile f, const std::string& path) : f_(f), path_(path) {}

  // Sets *line to the next line and returns true; false at the end of the file or on error
  // (then status() says which).
  bool Next(std::string_view* line) {
    for (;;) {
      const size_t nl = buf_.find('\n', scan_);
      if (nl != std::string::npos) {
        *line = Take(nl, nl + 1);
        return true;
      }
      if (eof_) {
        if (pos_ == buf_.size()) return false;
        *line = Take(buf_.size(), buf_.size());  // last line without a newline
        return true;
      }
      if (buf_.size() - pos_ > kMaxLineBytes) {
        status_ = Status::InvalidArgument(path_ + ":" + std::to_string(line_no_ + 1) + ": line longer than " +
                                          std::to_string(kMaxLineBytes >> 20) + " MiB");
        return false;
      }
      // Drop consumed bytes, then append the next chunk.
      buf_.erase(0, pos_);
      pos_ = 0;
      scan_ = buf_.size();
      const size_t old = buf_.size();
      buf_.resize(old + kChunk);
      auto got = ReadUpTo(f_, path_, buf_.data() + old, kChunk);
      if (!got.ok()) {
        status_ = got.status();
        return false;
      }
      buf_.resize(old + *got);
      if (*got < kChunk) eof_ = true;
    }
  }

  // 1-based number of the line last returned by Next().
  int64_t line_no() const { return line_no_; }
  const Status& status() const { return status_; }

 private:
  static constexpr size_t kChunk = 64 * 1024;

  std::string_view Take(size_t end, size_t next) {
    std::string_view s(buf_.data() + pos_, end - pos_);
    if (!s.empty() && s.back() == '\r') s.remove_suffix(1);
    pos_ = next;
    scan_ = next;
    ++line_no_;
    return s;
  }

  gzFile f_;
  const std::string& path_;
  std::string buf_;
  size_t pos_ = 0;   // start of the unconsumed bytes in buf_
  size_t scan_ = 0;  // where to resume looking for '\n'
  bool eof_ = false;
  int64_t line_no_ = 0;
  Status status_;
};

std::string_view Trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IsBlank(std::string_view s) { return Trim(s).empty(); }

// Splits a line on commas; cells are trimmed of spaces and tabs.
void SplitCells(std::string_view line, std::vector<std::string_view>* cells) {
  cells->clear();
  for (;;) {
    const size_t comma = line.find(',');
    cells->push_back(Trim(line.substr(0, comma)));
    if (comma == std::string_view::npos) return;
    line.remove_prefix(comma + 1);
  }
}

// Parses a whole cell as a number ("1", "-0.5", "2e3", "+4"). False when anything is left over.
bool ParseNumber(std::string_view cell, double* out) {
  if (!cell.empty() && cell.front() == '+') cell.remove_prefix(1);
  if (cell.empty()) return false;
  const char* end = cell.data() + cell.size();
  auto [ptr, ec] = std::from_chars(cell.data(), end, *out);
  return ec == std::errc() && ptr == end;
}

// Shortens a cell for an error message.
std::string Quote(std::string_view cell) {
  constexpr size_t kMax = 32;
  if (cell.size() <= kMax) return "'" + std::string(cell) + "'";
  return "'" + std::string(cell.substr(0, kMax)) + "...'";
}

}  // namespace

StatusOr<Dataset> LoadCsv(const std::string& path, const CsvOptions& options, const std::string& missing_hint) {
  SHOAL_ASSIGN_OR_RETURN(GzHandle file, OpenForRead(path, missing_hint));
  LineReader reader(file.get(), path);

  Dataset d;
  d.name = "csv:" + path;
  std::vector<std::string_view> cells;
  std::vector<std::string> header;  // the header's names, when the file has one
  size_t columns = 0;               // set by the header or the first data row
  size_t label_col = 0;             // 0-based, once `columns` is known
  int64_t columns_line = 0;
  bool seen_first = false;  // the first non-blank line (the header candidate) was handled
  std::vector<std::string> labels;  // as written; classes are assigned at the end
  std::vector<int64_t> label_lines;  // the line of each

  // The label column, once the first line gave the column count (and perhaps the names).
  auto resolve_label = [&](const std::string& where) -> Status {
    if (columns < 2)
      return Status::InvalidArgument(where + ": need at least one feature and a label per row, found " +
                                     std::to_string(columns) + " column");
    if (options.label.empty()) {
      label_col = columns - 1;
      return Status::Ok();
    }
    const bool number = std::all_of(options.label.begin(), options.label.end(), [](char c) { return c >= '0' && c <= '9'; });
    if (number) {
      const unsigned long col = std::strtoul(options.label.c_str(), nullptr, 10);
      if (col < 1 || col > columns)
        return Status::InvalidArgument(path + ": label=" + options.label + " is not a column (1.." +
                                       std::to_string(columns) + ")");
      label_col = col - 1;
      return Status::Ok();
    }
    if (header.empty())
      return Status::InvalidArgument(path + ": label=" + options.label +
                                     " names a column, but the file has no header row (give its number, or header=yes)");
    auto it = std::find(header.begin(), header.end(), options.label);
    if (it == header.end()) {
      std::string names;
      for (const std::string& h : header) names += (names.empty() ? "" : ", ") + h;
      return Status::InvalidArgument(path + ": no column named '" + options.label + "' in the header (" + names + ")");
    }
    label_col = static_cast<size_t>(it - header.begin());
    return Status::Ok();
  };
  auto column_name = [&](size_t c) {
    return "column " + std::to_string(c + 1) + (header.empty() ? "" : " (" + header[c] + ")");
  };

  std::string_view line;
  while (reader.Next(&line)) {
    // A UTF-8 byte order mark (spreadsheet exports) is not part of the first cell.
    if (reader.line_no() == 1 && line.starts_with("\xEF\xBB\xBF")) line.remove_prefix(3);
    if (static_cast<uint64_t>(reader.line_no()) <= options.skip) continue;
    if (IsBlank(line)) continue;
    auto where = [&] { return path + ":" + std::to_string(reader.line_no()); };
    SplitCells(line, &cells);

    // The first non-blank line is a header when asked, or (auto) when none of its cells is a
    // number. A line with some numeric and some other cells is data: with a label of names,
    // a row such as "5.1,3.5,setosa" is one.
    if (!seen_first) {
      seen_first = true;
      double ignored;
      const bool any_number =
          std::any_of(cells.begin(), cells.end(), [&](std::string_view c) { return ParseNumber(c, &ignored); });
      const bool is_header = options.header == CsvOptions::Header::kYes ||
                             (options.header == CsvOptions::Header::kAuto && !any_number);
      columns = cells.size();
      columns_line = reader.line_no();
      if (is_header) {
        for (std::string_view c : cells) header.emplace_back(c);
        SHOAL_RETURN_IF_ERROR(resolve_label(where()));
        continue;
      }
      SHOAL_RETURN_IF_ERROR(resolve_label(where()));
    }
    // A first line that is neither header nor row (sklearn's files start "569,30,malignant,
    // benign": counts and names) fails as data on itself or on the row after it: say so.
    const auto skip_hint = [&] {
      return std::string("; if line ") + std::to_string(columns_line) +
             " is not a row (a count line, as sklearn's files start), skip it: csv:" + path +
             ",skip=" + std::to_string(columns_line);
    };
    const bool first_rows = header.empty() && labels.size() <= 1;  // the first line, or the row after it
    if (cells.size() != columns) {
      return Status::InvalidArgument(where() + ": row has " + std::to_string(cells.size()) + " cells, expected " +
                                     std::to_string(columns) + " (as on line " + std::to_string(columns_line) + ")" +
                                     (first_rows ? skip_hint() : std::string()));
    }
    if (static_cast<uint64_t>(d.x.size()) + columns > kMaxCsvCells) {
      return Status::InvalidArgument(where() + ": file holds more than " + std::to_string(kMaxCsvCells) +
                                     " cells, the most a CSV dataset may have");
    }
    for (size_t c = 0; c < columns; ++c) {
      if (c == label_col) continue;
      double v;
      if (!ParseNumber(cells[c], &v)) {
        return Status::InvalidArgument(where() + ": " + column_name(c) + ": " + Quote(cells[c]) +
                                       " is not a number (only the label column may hold names)" +
                                       (first_rows ? skip_hint() : std::string()));
      }
      if (!std::isfinite(v) || std::fabs(v) > 3.4e38) {
        return Status::InvalidArgument(where() + ": " + column_name(c) + ": " + Quote(cells[c]) +
                                       " is not a finite float");
      }
      d.x.push_back(static_cast<float>(v));
    }
    if (cells[label_col].empty())
      return Status::InvalidArgument(where() + ": the label (" + column_name(label_col) + ") is empty");
    labels.emplace_back(cells[label_col]);
    label_lines.push_back(reader.line_no());
  }
  if (!reader.status().ok()) return reader.status();
  if (labels.empty()) return Status::InvalidArgument(path + ": no data rows");

  // Labels: all numbers, or names. Numbers must be non-negative integers ("3" or "3.0").
  double ignored;
  const bool numeric =
      std::all_of(labels.begin(), labels.end(), [&](const std::string& l) { return ParseNumber(l, &ignored); });
  int32_t max_label = -1;
  if (numeric) {
    for (size_t i = 0; i < labels.size(); ++i) {
      double label;
      ParseNumber(labels[i], &label);
      if (!(label >= 0) || label != std::floor(label))
        return Status::InvalidArgument(path + ":" + std::to_string(label_lines[i]) + ": label " + Quote(labels[i]) +
                                       " is not a non-negative integer (numeric labels are class numbers)");
      if (label > kMaxLabel)
        return Status::InvalidArgument(path + ":" + std::to_string(label_lines[i]) + ": label " + Quote(labels[i]) +
                                       " exceeds the largest supported label " +
                                       std::to_string(static_cast<int64_t>(kMaxLabel)));
      d.y.push_back(static_cast<int32_t>(label));
      max_label = std::max(max_label, d.y.back());
    }
  } else {
    std::vector<std::string> names = labels;
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    if (names.size() > static_cast<size_t>(kMaxLabel))
      return Status::InvalidArgument(path + ": " + std::to_string(names.size()) + " distinct labels, more classes than supported");
    for (const std::string& l : labels)
      d.y.push_back(static_cast<int32_t>(std::lower_bound(names.begin(), names.end(), l) - names.begin()));
    max_label = static_cast<int32_t>(names.size()) - 1;
    d.class_names = std::move(names);
  }
  for (size_t c = 0; c < header.size(); ++c)
    if (c != label_col) d.feature_names.push_back(header[c]);

  d.n = static_cast<int64_t>(d.y.size());
  d.dim = static_cast<int64_t>(columns - 1);
  d.num_classes = max_label + 1;
  return d;
}

// ---------------------------------------------------------------------------------------------
// IDX

namespace {

constexpr uint32_t kIdxImagesMagic = 0x00000803;  // unsigned bytes, 3 dims
constexpr uint32_t kIdxLabelsMagic = 0x00000801;  // unsigned bytes, 1 dim

std::string Hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

uint32_t BigEndian32(const unsigned char* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

// One IDX file of unsigned bytes: its dims and its payload.
struct IdxArray {
  std::vector<uint32_t> dims;
  std::vector<uint8_t> data;
};

// Reads an IDX file whose magic must be `magic` (which fixes the number of dims). The payload
// is read in chunks of at most kReadChunk, so a header that declares terabytes costs no more
// memory than the file really holds; for an uncompressed file the declared size is also checked
// against the file length before anything is read.
StatusOr<IdxArray> ReadIdx(const std::string& path, uint32_t magic, const char* what) {
  SHOAL_ASSIGN_OR_RETURN(GzHandle file, OpenForRead(path, kUserFileHint));
  gzFile f = file.get();

  unsigned char head[4];
  SHOAL_ASSIGN_OR_RETURN(size_t got, ReadUpTo(f, path, head, sizeof(head)));
  if (got < sizeof(head)) return Status::Corruption(path + ": truncated IDX header (" + std::to_string(got) + " bytes)");
  const uint32_t found = BigEndian32(head);
  if (found != magic) {
    return Status::Corruption(path + ": bad IDX magic " + Hex32(found) + ", expected " + Hex32(magic) + " (" + what +
                              ")");
  }

  IdxArray a;
  const size_t ndims = magic & 0xff;
  std::vector<unsigned char> raw(4 * ndims);
  SHOAL_ASSIGN_OR_RETURN(got, ReadUpTo(f, path, raw.data(), raw.size()));
  if (got < raw.size()) return Status::Corruption(path + ": truncated IDX header (dimensions)");
  uint64_t total = 1;
  for (size_t i = 0; i < ndims; ++i) {
    const uint32_t dim = BigEndian32(&raw[4 * i]);
    a.dims.push_back(dim);
    if (__builtin_mul_overflow(total, uint64_t{dim}, &total)) {
      return Status::Corruption(path + ": IDX dimensions overflow 64 bits");
    }
  }
  const uint64_t header_bytes = 4 + 4 * ndims;

  // Uncompressed file: its length must be exactly header + payload. (gzdirect is only
  // meaningful after the first read, which the header provided.)
  if (gzdirect(f)) {
    struct stat st;
    if (::stat(path.c_str(), &st) == 0) {
      const uint64_t have = static_cast<uint64_t>(st.st_size) - std::min<uint64_t>(st.st_size, header_bytes);
      if (have < total) {
        return Status::Corruption(path + ": truncated: header declares " + std::to_string(total) +
                                  " bytes of data, the file holds " + std::to_string(have));
      }
      if (have > total) {
        return Status::Corruption(path + ": " + std::to_string(have - total) +
                                  " trailing bytes after the data the header declares");
      }
    }
  }

  // Compressed (or checked) payload: grow as data actually arrives.
  while (a.data.size() < total) {
    const size_t old = a.data.size();
    const size_t want = static_cast<size_t>(std::min<uint64_t>(total - old, kReadChunk));
    a.data.resize(old + want);
    SHOAL_ASSIGN_OR_RETURN(got, ReadUpTo(f, path, a.data.data() + old, want));
    a.data.resize(old + got);
    if (got < want) {
      return Status::Corruption(path + ": truncated: header declares " + std::to_string(total) +
                                " bytes of data, the file holds " + std::to_string(a.data.size()));
    }
  }
  unsigned char extra;
  SHOAL_ASSIGN_OR_RETURN(got, ReadUpTo(f, path, &extra, 1));
  if (got != 0) return Status::Corruption(path + ": trailing bytes after the data the header declares");
  return a;
}

}  // namespace

StatusOr<Dataset> LoadIdx(const std::string& images, const std::string& labels) {
  SHOAL_ASSIGN_OR_RETURN(IdxArray img, ReadIdx(images, kIdxImagesMagic, "IDX ubyte images, N x ROWS x COLS"));
  const uint32_t n = img.dims[0], rows = img.dims[1], cols = img.dims[2];
  if (n == 0) return Status::InvalidArgument(images + ": holds no images");
  if (rows == 0 || cols == 0) return Status::InvalidArgument(images + ": images of size 0");

  SHOAL_ASSIGN_OR_RETURN(IdxArray lab, ReadIdx(labels, kIdxLabelsMagic, "IDX ubyte labels, N"));
  if (lab.dims[0] != n) {
    return Status::InvalidArgument(images + " holds " + std::to_string(n) + " images but " + labels + " holds " +
                                   std::to_string(lab.dims[0]) + " labels");
  }

  Dataset d;
  d.name = "idx:" + images + "," + labels;
  d.n = n;
  d.dim = int64_t{rows} * cols;
  d.x.resize(img.data.size());
  for (size_t i = 0; i < img.data.size(); ++i) d.x[i] = static_cast<float>(img.data[i]) / 255.0f;
  d.y.assign(lab.data.begin(), lab.data.end());
  d.num_classes = *std::max_element(d.y.begin(), d.y.end()) + 1;
  return d;
}

// ---------------------------------------------------------------------------------------------
// digits

StatusOr<Dataset> LoadDigits(const std::string& path) {
  constexpr int64_t kDim = 64;          // 8 x 8 pixels
  constexpr float kMaxPixel = 16.0f;    // pixel values are counts 0..16
  constexpr int32_t kNumClasses = 10;
  const std::string refetch = "run scripts/setup to fetch it, or set SHOAL_DATA_DIR to a directory that holds it";

  SHOAL_ASSIGN_OR_RETURN(Dataset d, LoadCsv(path, {}, refetch));
  if (d.dim != kDim || d.num_classes > kNumClasses) {
    return Status::Corruption(path + ": not sklearn's digits (" + std::to_string(d.dim) + " features, " +
                              std::to_string(d.num_classes) + " classes; expected 64 and 10); " + refetch);
  }
  for (float& v : d.x) {
    if (!(v >= 0.0f && v <= kMaxPixel)) {
      return Status::Corruption(path + ": pixel value " + std::to_string(v) + " outside 0..16; " + refetch);
    }
    v /= kMaxPixel;
  }
  d.name = "digits";
  d.num_classes = kNumClasses;
  return d;
}

}  // namespace shoal::data
