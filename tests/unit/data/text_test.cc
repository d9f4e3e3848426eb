// Token datasets from text: text:PATH (bytes of a UTF-8 file, the UTF-8 check against an
// exhaustive reference), kjv on files written by the tests, and the real KJV when
// scripts/setup has prepared it.

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "data/loaders.h"
#include "shoal/data.h"
#include "temp_dir.h"

namespace shoal::data {
namespace {

using shoal::testing::TempDir;
using namespace std::string_literals;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

void WritePlain(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string AsString(const std::vector<uint8_t>& tokens) { return std::string(tokens.begin(), tokens.end()); }

// ---------------------------------------------------------------------------------------------
// text:PATH

TEST(TextTest, RoundTripsTheBytesOfAFile) {
  TempDir dir;
  const std::string path = dir.File("poem.txt");
  const std::string bytes = "Héllo, wörld ✓ 𝄞\nsecond line\r\n\tand a NUL \0 too\n"s;
  ASSERT_EQ(bytes.size(), 54u);
  WritePlain(path, bytes);

  auto d = LoadDataset("text:" + path, "/nonexistent");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->name, "text:" + path);
  EXPECT_EQ(d->kind, DatasetKind::kTokens);
  EXPECT_EQ(d->n, static_cast<int64_t>(bytes.size()));
  EXPECT_EQ(AsString(d->tokens), bytes);
  EXPECT_EQ(d->vocab_size, 256);
  EXPECT_EQ(d->documents, (std::vector<Document>{{path, 0}}));
  // The feature fields stay empty.
  EXPECT_EQ(d->dim, 0);
  EXPECT_EQ(d->num_classes, 0);
  EXPECT_TRUE(d->x.empty());
  EXPECT_TRUE(d->y.empty());
}

TEST(TextTest, GzippedFileGivesTheDecompressedBytes) {
  TempDir dir;
  const std::string text = "In the beginning was the Word.\n";
  gzFile f = gzopen(dir.File("t.txt.gz").c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
  auto d = LoadText(dir.File("t.txt.gz"));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(AsString(d->tokens), text);
}

TEST(TextTest, InvalidUtf8IsRefusedWithItsOffset) {
  struct Case {
    std::string bytes;
    int64_t offset;
  };
  const std::vector<Case> cases = {
      {"abc\xff", 3},                  // never in UTF-8
      {"a\x80", 1},                    // a lone continuation byte
      {"ok \xc3", 3},                  // cut short by the end of the file
      {"\xc3\xa9\xe2\x82 x", 2},       // é, then a 3-byte sequence missing its last byte
      {"xy\xc0\xaf", 2},               // overlong '/'
      {"\xe0\x80\xaf", 0},             // overlong, 3 bytes
      {"ab\xed\xa0\x80", 2},           // a UTF-16 surrogate (U+D800)
      {"\xf4\x90\x80\x80", 0},         // above U+10FFFF
      {"\xf0\x9d\x84\x9e!\xf8", 5},    // 𝄞, '!', then F8
  };
  TempDir dir;
  for (const Case& c : cases) {
    EXPECT_EQ(FirstInvalidUtf8(reinterpret_cast<const uint8_t*>(c.bytes.data()), c.bytes.size()), c.offset);
    const std::string path = dir.File("bad.txt");
    WritePlain(path, c.bytes);
    auto d = LoadDataset("text:" + path, "");
    ASSERT_EQ(d.status().code(), StatusCode::kInvalidArgument) << d.status().ToString();
    const std::string m = d.status().message();
    EXPECT_TRUE(Contains(m, path)) << m;
    EXPECT_TRUE(Contains(m, "UTF-8")) << m;
    EXPECT_TRUE(Contains(m, "byte offset " + std::to_string(c.offset) + " ")) << m;
  }
}

// The UTF-8 encoding of code point `cp`.
std::string Encode(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += static_cast<char>(cp);
  } else if (cp < 0x800) {
    s += static_cast<char>(0xC0 | (cp >> 6));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += static_cast<char>(0xE0 | (cp >> 12));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    s += static_cast<char>(0xF0 | (cp >> 18));
    s += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    s += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return s;
}

// Reference: a byte string of length 3 is valid exactly when it is a concatenation of
// encodings of scalar values (code points that are not surrogates): 3, 1+2, 2+1 or 1+1+1
// bytes. Every one of the 2^24 strings is checked.
TEST(TextTest, Utf8CheckMatchesTheDefinitionOnEveryThreeByteString) {
  std::vector<std::string> by_len[4];
  for (uint32_t cp = 0; cp < 0x10000; ++cp)
    if (cp < 0xD800 || cp > 0xDFFF) by_len[Encode(cp).size()].push_back(Encode(cp));
  std::vector<uint8_t> one_seq(1u << 24, 0);  // one_seq[b0 | b1 << 8 | b2 << 16]
  auto mark = [&](const std::string& s) {
    one_seq[static_cast<uint8_t>(s[0]) | static_cast<uint32_t>(static_cast<uint8_t>(s[1])) << 8 |
            static_cast<uint32_t>(static_cast<uint8_t>(s[2])) << 16] = 1;
  };
  for (const std::string& a : by_len[3]) mark(a);
  for (const std::string& a : by_len[1]) {
    for (const std::string& b : by_len[2]) mark(a + b), mark(b + a);
    for (const std::string& b : by_len[1])
      for (const std::string& c : by_len[1]) mark(a + b + c);
  }
  uint8_t s[3];
  int64_t mismatches = 0;
  for (uint32_t k = 0; k < (1u << 24); ++k) {
    s[0] = k & 0xFF, s[1] = (k >> 8) & 0xFF, s[2] = k >> 16;
    const bool valid = FirstInvalidUtf8(s, 3) < 0;
    if (valid != (one_seq[k] != 0) && ++mismatches <= 5)
      ADD_FAILURE() << "bytes " << int{s[0]} << " " << int{s[1]} << " " << int{s[2]} << ": check says " << valid;
  }
  EXPECT_EQ(mismatches, 0);
  // Four bytes: every scalar value above U+FFFF is valid, the boundaries around them are not.
  for (uint32_t cp : {0x10000u, 0x1D11Eu, 0x10FFFFu}) {
    const std::string e = Encode(cp);
    EXPECT_EQ(FirstInvalidUtf8(reinterpret_cast<const uint8_t*>(e.data()), e.size()), -1) << cp;
  }
  for (const char* bad : {"\xf0\x8f\xbf\xbf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xf0\x90\x80\x7f"})
    EXPECT_EQ(FirstInvalidUtf8(reinterpret_cast<const uint8_t*>(bad), 4), 0) << bad;
}

TEST(TextTest, EmptyFileIsRefused) {
  TempDir dir;
  WritePlain(dir.File("empty.txt"), "");
  auto d = LoadDataset("text:" + dir.File("empty.txt"), "");
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(d.status().message(), "empty")) << d.status().ToString();
}

TEST(TextTest, MissingFileIsNotFoundNamingIt) {
  auto d = LoadDataset("text:/nonexistent/book.txt", "");
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(d.status().message(), "/nonexistent/book.txt")) << d.status().ToString();
  EXPECT_EQ(LoadDataset("text:", "").status().code(), StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------
// kjv, on files written here

// A file in kjv.txt's format with `books` books: "Book i", then i verse lines.
std::string FakeKjv(int books) {
  std::string s;
  for (int b = 1; b <= books; ++b) {
    if (b > 1) s += "\n";
    s += "Book " + std::to_string(b) + "\n";
    for (int v = 0; v < b; ++v) s += "Verse " + std::to_string(v) + " of book " + std::to_string(b) + ".\n";
  }
  return s;
}

TEST(KjvTest, BooksAreTheDocuments) {
  TempDir dir;
  const std::string text = FakeKjv(66);
  WritePlain(dir.File("kjv.txt"), text);
  auto d = LoadDataset("kjv", dir.path());
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->name, "kjv");
  EXPECT_EQ(d->kind, DatasetKind::kTokens);
  EXPECT_EQ(AsString(d->tokens), text);  // the file's bytes exactly
  ASSERT_EQ(d->documents.size(), 66u);
  size_t at = 0;
  for (int b = 1; b <= 66; ++b) {
    const std::string name = "Book " + std::to_string(b);
    at = text.find(name + "\n", at);
    EXPECT_EQ(d->documents[b - 1], (Document{name, static_cast<int64_t>(at)}));
  }
}

TEST(KjvTest, FileInAnotherShapeIsCorruption) {
  TempDir dir;
  const std::string ok = FakeKjv(66);
  const std::vector<std::pair<std::string, std::string>> cases = {
      {FakeKjv(65), "65 books"},
      {ok.substr(0, ok.size() - 1), "newline"},
      {"\n" + ok, "empty name"},
      {"Lonely\n\n" + ok.substr(0, ok.rfind("\nBook 66\n") + 1), "no verses"},
  };
  for (const auto& [text, why] : cases) {
    WritePlain(dir.File("kjv.txt"), text);
    auto d = LoadDataset("kjv", dir.path());
    EXPECT_EQ(d.status().code(), StatusCode::kCorruption) << why << ": " << d.status().ToString();
    EXPECT_TRUE(Contains(d.status().message(), why)) << d.status().ToString();
    EXPECT_TRUE(Contains(d.status().message(), "scripts/setup")) << d.status().ToString();
  }
}

TEST(KjvTest, MissingFileSaysToRunSetup) {
  TempDir empty;
  auto d = LoadDataset("kjv", empty.path());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  const std::string m = d.status().message();
  EXPECT_TRUE(Contains(m, empty.File("kjv.txt"))) << m;
  EXPECT_TRUE(Contains(m, "scripts/setup")) << m;
}

// ---------------------------------------------------------------------------------------------
// kjv, the real file

TEST(KjvTest, LoadsTheKingJamesBible) {
  const std::string dir = DefaultDataDir();
  if (!std::filesystem::exists(dir + "/kjv.txt"))
    GTEST_SKIP() << dir << "/kjv.txt is missing: run scripts/setup to prepare it from Debian's bible-kjv";
  auto d = LoadDataset("kjv", dir);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  const std::vector<std::string> books = {
      "Genesis", "Exodus", "Leviticus", "Numbers", "Deuteronomy", "Joshua", "Judges", "Ruth", "1 Samuel",
      "2 Samuel", "1 Kings", "2 Kings", "1 Chronicles", "2 Chronicles", "Ezra", "Nehemiah", "Esther", "Job",
      "Psalms", "Proverbs", "Ecclesiastes", "Song of Solomon", "Isaiah", "Jeremiah", "Lamentations", "Ezekiel",
      "Daniel", "Hosea", "Joel", "Amos", "Obadiah", "Jonah", "Micah", "Nahum", "Habakkuk", "Zephaniah", "Haggai",
      "Zechariah", "Malachi", "Matthew", "Mark", "Luke", "John", "Acts", "Romans", "1 Corinthians",
      "2 Corinthians", "Galatians", "Ephesians", "Philippians", "Colossians", "1 Thessalonians",
      "2 Thessalonians", "1 Timothy", "2 Timothy", "Titus", "Philemon", "Hebrews", "James", "1 Peter", "2 Peter",
      "1 John", "2 John", "3 John", "Jude", "Revelation"};
  ASSERT_EQ(d->documents.size(), books.size());
  for (size_t i = 0; i < books.size(); ++i) EXPECT_EQ(d->documents[i].name, books[i]) << i;

  const std::string text = AsString(d->tokens);
  EXPECT_GT(d->n, 4'000'000);
  EXPECT_LT(d->n, 4'500'000);
  EXPECT_TRUE(text.starts_with("Genesis\nIn the beginning God created the heaven and the earth.\n")) << text.substr(0, 80);
  EXPECT_TRUE(text.ends_with("\nThe grace of our Lord Jesus Christ be with you all. Amen.\n"));
  // Each book starts with its name line; no chapter:verse label is left anywhere.
  for (const Document& doc : d->documents) EXPECT_EQ(text.compare(doc.start, doc.name.size() + 1, doc.name + "\n"), 0);
  for (size_t i = 0; i + 2 < text.size(); ++i) {
    if (text[i + 1] == ':' && std::isdigit(static_cast<unsigned char>(text[i])) &&
        std::isdigit(static_cast<unsigned char>(text[i + 2]))) {
      ADD_FAILURE() << "verse label at byte " << i << ": " << text.substr(i > 20 ? i - 20 : 0, 60);
      break;
    }
  }
  // Psalms is the longest book (223,740 bytes with its name line and the empty line after
  // it, just ahead of Jeremiah), 2 John the shortest (1,561).
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < d->documents.size(); ++i)
    sizes.push_back((i + 1 < d->documents.size() ? d->documents[i + 1].start : d->n) - d->documents[i].start);
  EXPECT_EQ(std::max_element(sizes.begin(), sizes.end()) - sizes.begin(), 18);  // Psalms
  EXPECT_EQ(std::min_element(sizes.begin(), sizes.end()) - sizes.begin(), 62);  // 2 John
}

}  // namespace
}  // namespace shoal::data
