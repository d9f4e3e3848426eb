// Token datasets from text: a UTF-8 file as byte tokens (text:PATH) and the King James Bible
// with its 66 books as documents (kjv). Formats and errors in loaders.h.

#include <algorithm>
#include <cstdio>
#include <string_view>
#include <vector>

#include "data/gz_file.h"
#include "data/loaders.h"

namespace shoal::data {
namespace {

constexpr size_t kTextChunk = size_t{1} << 20;  // the buffer grows by at most this per read
constexpr size_t kKjvBooks = 66;

std::string Hex8(uint8_t v) {
  char buf[8];
  std::snprintf(buf, sizeof(buf), "0x%02x", v);
  return buf;
}

// The whole (decompressed) file, at most kMaxTextBytes.
StatusOr<std::vector<uint8_t>> ReadAll(const std::string& path, const std::string& missing_hint) {
  SHOAL_ASSIGN_OR_RETURN(GzHandle file, OpenForRead(path, missing_hint));
  std::vector<uint8_t> bytes;
  for (;;) {
    const size_t old = bytes.size();
    if (old > static_cast<size_t>(kMaxTextBytes)) {
      return Status::InvalidArgument(path + ": larger than " + std::to_string(kMaxTextBytes >> 20) +
                                     " MiB, the most a text dataset may hold");
    }
    bytes.resize(old + kTextChunk);
    SHOAL_ASSIGN_OR_RETURN(size_t got, ReadUpTo(file.get(), path, bytes.data() + old, kTextChunk));
    bytes.resize(old + got);
    if (got < kTextChunk) return bytes;
  }
}

// Length of the well-formed UTF-8 sequence at p[0..n) (n >= 1), or 0 when it is ill-formed.
// The ranges of the second byte are RFC 3629's table: they rule out overlong forms (E0, F0),
// surrogates (ED) and code points above U+10FFFF (F4).
size_t Utf8SequenceLength(const uint8_t* p, size_t n) {
  const uint8_t b = p[0];
  if (b < 0x80) return 1;
  size_t len;
  uint8_t lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    len = 2;
  } else if (b >= 0xE0 && b <= 0xEF) {
    len = 3;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;
  } else if (b >= 0xF0 && b <= 0xF4) {
    len = 4;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;
  } else {
    return 0;  // a continuation byte, C0/C1 (overlong) or F5..FF
  }
  if (n < len || p[1] < lo || p[1] > hi) return 0;
  for (size_t i = 2; i < len; ++i)
    if (p[i] < 0x80 || p[i] > 0xBF) return 0;
  return len;
}

}  // namespace

int64_t FirstInvalidUtf8(const uint8_t* bytes, size_t n) {
  size_t i = 0;
  while (i < n) {
    if (bytes[i] < 0x80) {  // the common case: a run of ASCII
      ++i;
      continue;
    }
    const size_t len = Utf8SequenceLength(bytes + i, n - i);
    if (len == 0) return static_cast<int64_t>(i);
    i += len;
  }
  return -1;
}

StatusOr<Dataset> LoadText(const std::string& path, const std::string& missing_hint) {
  SHOAL_ASSIGN_OR_RETURN(std::vector<uint8_t> bytes, ReadAll(path, missing_hint));
  if (bytes.empty()) return Status::InvalidArgument(path + ": empty file: a text dataset needs at least one byte");
  if (const int64_t bad = FirstInvalidUtf8(bytes.data(), bytes.size()); bad >= 0) {
    return Status::InvalidArgument(path + ": not valid UTF-8: ill-formed sequence at byte offset " +
                                   std::to_string(bad) + " (byte " + Hex8(bytes[static_cast<size_t>(bad)]) + ")");
  }
  Dataset d;
  d.name = "text:" + path;
  d.kind = DatasetKind::kTokens;
  d.n = static_cast<int64_t>(bytes.size());
  d.vocab_size = kByteVocabSize;
  d.tokens = std::move(bytes);
  d.documents.push_back(Document{path, 0});
  return d;
}

StatusOr<Dataset> LoadKjv(const std::string& path) {
  const std::string refetch = "run scripts/setup to prepare it (from Debian's bible-kjv package), or set "
                              "SHOAL_DATA_DIR to a directory that holds it";
  SHOAL_ASSIGN_OR_RETURN(Dataset d, LoadText(path, refetch));
  auto bad = [&](const std::string& what) {
    return Status::Corruption(path + ": not the kjv.txt scripts/setup writes (" + what + "); delete it and " + refetch);
  };
  const std::string_view text(reinterpret_cast<const char*>(d.tokens.data()), d.tokens.size());
  if (text.back() != '\n') return bad("it does not end with a newline");

  // Books: from offset 0, then after every empty line. Each is a name line and >= 1 verse line.
  d.documents.clear();
  size_t start = 0;
  while (start < text.size()) {
    const size_t sep = text.find("\n\n", start);
    const size_t end = sep == std::string_view::npos ? text.size() : sep + 1;  // the book's last '\n'
    const std::string_view book = text.substr(start, end - start);
    const size_t name_end = book.find('\n');
    const std::string where = "book " + std::to_string(d.documents.size() + 1) + " at byte offset " +
                              std::to_string(start);
    if (name_end == 0) return bad(where + " has an empty name line (two blank lines in a row?)");
    if (name_end + 1 == book.size()) return bad(where + " has a name but no verses");
    d.documents.push_back(Document{std::string(book.substr(0, name_end)), static_cast<int64_t>(start)});
    start = end + (sep == std::string_view::npos ? 0 : 1);
  }
  if (d.documents.size() != kKjvBooks)
    return bad(std::to_string(d.documents.size()) + " books, expected " + std::to_string(kKjvBooks));
  d.name = "kjv";
  return d;
}

}  // namespace shoal::data
