// Dataset loaders: the real digits file, CSV and IDX files written by the tests (plain and
// gzipped), and every error path a user can hit.

#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "shoal/data.h"
#include "temp_dir.h"

namespace shoal::data {
namespace {

using shoal::testing::TempDir;

bool Contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

void WritePlain(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void WriteGzip(const std::string& path, const std::string& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())), static_cast<int>(bytes.size()));
  ASSERT_EQ(gzclose(f), Z_OK);
}

// ---------------------------------------------------------------------------------------------
// digits (the real file)

TEST(DigitsTest, LoadsSklearnDigits) {
  const std::string dir = DefaultDataDir();
  const std::string file = dir + "/digits.csv.gz";
  if (!std::filesystem::exists(file)) {
    FAIL() << file << " is missing: run scripts/setup to fetch it (or set SHOAL_DATA_DIR to a directory that "
           << "holds digits.csv.gz)";
  }
  auto d = LoadDataset("digits", dir);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->name, "digits");
  EXPECT_EQ(d->n, 1797);
  EXPECT_EQ(d->dim, 64);
  EXPECT_EQ(d->num_classes, 10);
  ASSERT_EQ(d->x.size(), 1797u * 64u);
  ASSERT_EQ(d->y.size(), 1797u);

  // Pixels 0..16 scaled by 1/16: the range is exactly [0, 1].
  const auto [lo, hi] = std::minmax_element(d->x.begin(), d->x.end());
  EXPECT_EQ(*lo, 0.0f);
  EXPECT_EQ(*hi, 1.0f);
  // The first row starts 0,0,5,13,9,1 (a zero).
  EXPECT_EQ(d->x[2], 5.0f / 16.0f);
  EXPECT_EQ(d->x[3], 13.0f / 16.0f);
  EXPECT_EQ(d->y[0], 0);
  EXPECT_EQ(d->y[1], 1);

  // Class counts as sklearn reports them (np.bincount(load_digits().target)).
  const std::vector<int> expect = {178, 182, 177, 183, 181, 182, 181, 179, 174, 180};
  std::vector<int> counts(10);
  for (int32_t y : d->y) {
    ASSERT_GE(y, 0);
    ASSERT_LT(y, 10);
    ++counts[y];
  }
  EXPECT_EQ(counts, expect);
}

TEST(DigitsTest, MissingFileSaysHowToFetchIt) {
  TempDir dir;
  auto d = LoadDataset("digits", dir.path());
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  const std::string m = d.status().message();
  EXPECT_TRUE(Contains(m, dir.File("digits.csv.gz"))) << m;
  EXPECT_TRUE(Contains(m, "scripts/setup")) << m;
  EXPECT_TRUE(Contains(m, "SHOAL_DATA_DIR")) << m;
}

TEST(DigitsTest, FileOfTheWrongShapeIsRejected) {
  TempDir dir;
  WriteGzip(dir.File("digits.csv.gz"), "1,2,3\n4,5,6\n");
  auto d = LoadDataset("digits", dir.path());
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption) << d.status().ToString();
}

// Saves and restores one environment variable.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) ::setenv(name_, old_->c_str(), 1);
    else ::unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(DataDirTest, PrecedenceOfEnvironment) {
  ScopedEnv home("HOME", "/home/someone");
  {
    ScopedEnv shoal("SHOAL_DATA_DIR", "/data/shoal");
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(DefaultDataDir(), "/data/shoal");
  }
  {
    ScopedEnv shoal("SHOAL_DATA_DIR", nullptr);
    ScopedEnv xdg("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(DefaultDataDir(), "/xdg/shoal");
  }
  {
    ScopedEnv shoal("SHOAL_DATA_DIR", "");
    ScopedEnv xdg("XDG_CACHE_HOME", nullptr);
    EXPECT_EQ(DefaultDataDir(), "/home/someone/.cache/shoal");
  }
}

// ---------------------------------------------------------------------------------------------
// Dataset specs

TEST(SpecTest, UnknownSpecListsValidForms) {
  auto d = LoadDataset("mnist", "/nonexistent");
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  const std::string m = d.status().message();
  EXPECT_TRUE(Contains(m, "mnist")) << m;
  EXPECT_TRUE(Contains(m, "digits")) << m;
  EXPECT_TRUE(Contains(m, "csv:PATH")) << m;
  EXPECT_TRUE(Contains(m, "idx:IMAGES,LABELS")) << m;
  EXPECT_TRUE(Contains(m, "kjv")) << m;
  EXPECT_TRUE(Contains(m, "text:PATH")) << m;
}

TEST(SpecTest, MalformedPathSpecs) {
  for (const char* spec : {"csv:", "idx:", "text:", "idx:onlyone", "idx:,b", "idx:a,", "idx:a,b,c"}) {
    auto d = LoadDataset(spec, "/nonexistent");
    EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << spec << ": " << d.status().ToString();
  }
}

// ---------------------------------------------------------------------------------------------
// CSV

TEST(CsvTest, LoadsWithHeader) {
  TempDir dir;
  const std::string path = dir.File("d.csv");
  WritePlain(path, "a,b,label\n0.5,-1,2\n3,4e1,0\n");
  auto d = LoadDataset("csv:" + path, "");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->n, 2);
  EXPECT_EQ(d->dim, 2);
  EXPECT_EQ(d->num_classes, 3);  // largest label + 1
  EXPECT_EQ(d->x, (std::vector<float>{0.5f, -1.0f, 3.0f, 40.0f}));
  EXPECT_EQ(d->y, (std::vector<int32_t>{2, 0}));
}

TEST(CsvTest, LoadsWithoutHeaderGzippedCrlfBlankLinesAndBom) {
  TempDir dir;
  const std::string path = dir.File("d.csv.gz");
  WriteGzip(path, "\xEF\xBB\xBF" "1, 2 ,1\r\n\r\n  \n4,5,3.0\r\n6,7,0");  // no final newline
  auto d = LoadDataset("csv:" + path, "");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->n, 3);
  EXPECT_EQ(d->dim, 2);
  EXPECT_EQ(d->num_classes, 4);
  EXPECT_EQ(d->x, (std::vector<float>{1, 2, 4, 5, 6, 7}));
  EXPECT_EQ(d->y, (std::vector<int32_t>{1, 3, 0}));
}

TEST(CsvTest, LongFileAcrossReadChunks) {
  // Many lines, so line splitting crosses the reader's internal chunk boundaries.
  TempDir dir;
  const std::string path = dir.File("big.csv");
  std::string text;
  constexpr int kRows = 20000;
  for (int i = 0; i < kRows; ++i) text += std::to_string(i) + "," + std::to_string(i * 0.25) + "," + std::to_string(i % 7) + "\n";
  WritePlain(path, text);
  auto d = LoadDataset("csv:" + path, "");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  ASSERT_EQ(d->n, kRows);
  EXPECT_EQ(d->num_classes, 7);
  for (int i = 0; i < kRows; i += 997) {
    EXPECT_EQ(d->x[2 * i], static_cast<float>(i));
    EXPECT_EQ(d->x[2 * i + 1], static_cast<float>(i * 0.25));
    EXPECT_EQ(d->y[i], i % 7);
  }
}

// Loads CSV `text` and expects InvalidArgument whose message names the file and `where`.
void ExpectCsvError(const std::string& text, const std::string& where, const std::string& detail) {
  TempDir dir;
  const std::string path = dir.File("bad.csv");
  WritePlain(path, text);
  auto d = LoadDataset("csv:" + path, "");
  ASSERT_FALSE(d.ok()) << "accepted: " << text;
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << d.status().ToString();
  EXPECT_TRUE(Contains(d.status().message(), path + where)) << d.status().ToString();
  EXPECT_TRUE(Contains(d.status().message(), detail)) << d.status().ToString();
}

TEST(CsvTest, RaggedRowNamesFileAndLine) {
  ExpectCsvError("x,y,label\n1,2,0\n3,4,1\n5,1\n", ":4", "has 2 cells, expected 3");
  ExpectCsvError("1,2,0\n3,4,5,1\n", ":2", "has 4 cells, expected 3");
}

TEST(CsvTest, NonNumericCellNamesFileAndLine) {
  ExpectCsvError("1,2,0\n3,abc,1\n", ":2", "'abc' is not a number");
  ExpectCsvError("1,2,0\n3,,1\n", ":2", "is not a number");
  ExpectCsvError("1,2,0\n3,nan,1\n", ":2", "not a finite");
  ExpectCsvError("1,2,0\n3,1e39,1\n", ":2", "not a finite");
  // A first line that mixes numbers and words is not a header.
  ExpectCsvError("1,b,0\n3,4,1\n", ":1", "'b' is not a number");
}

TEST(CsvTest, LabelsMustBeNonNegativeIntegers) {
  ExpectCsvError("1,2,0\n3,4,-1\n", ":2", "non-negative integer");
  ExpectCsvError("1,2,0\n3,4,1.5\n", ":2", "non-negative integer");
  ExpectCsvError("1,2,0\n3,4,1e12\n", ":2", "exceeds");
}

// A header, a label column chosen by name and holding names (classes in sorted order), the
// features in natural units as written.
TEST(CsvTest, LabelByNameWithNamedClasses) {
  TempDir dir;
  const std::string path = dir.File("wine.csv");
  WritePlain(path, "cultivar,alcohol,proline\nclass_b,14.2,1065\nclass_a,13.2,1050\nclass_c,12.4,480\nclass_a,13.0,735\n");
  auto d = LoadDataset("csv:" + path + ",label=cultivar", "");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->dim, 2);
  EXPECT_EQ(d->num_classes, 3);
  EXPECT_EQ(d->class_names, (std::vector<std::string>{"class_a", "class_b", "class_c"}));
  EXPECT_EQ(d->feature_names, (std::vector<std::string>{"alcohol", "proline"}));
  EXPECT_EQ(d->y, (std::vector<int32_t>{1, 0, 2, 0}));
  EXPECT_EQ(d->x, (std::vector<float>{14.2f, 1065, 13.2f, 1050, 12.4f, 480, 13.0f, 735}));
  // By number (1-based), the same; a mixed label column is names throughout ("0" sorts first).
  auto by_number = LoadDataset("csv:" + path + ",label=1", "");
  ASSERT_TRUE(by_number.ok()) << by_number.status().ToString();
  EXPECT_EQ(by_number->y, d->y);
  const std::string mixed = dir.File("mixed.csv");
  WritePlain(mixed, "1,2,0\n3,4,cat\n");
  auto m = LoadDataset("csv:" + mixed, "");
  ASSERT_TRUE(m.ok()) << m.status().ToString();
  EXPECT_EQ(m->class_names, (std::vector<std::string>{"0", "cat"}));
  // header=yes reads a first line of numbers as names; header=no reads a line of words as data
  // (and then finds its first cell is not a number).
  const std::string numeric_header = dir.File("h.csv");
  WritePlain(numeric_header, "1,2,3\n4,5,0\n");
  auto h = LoadDataset("csv:" + numeric_header + ",header=yes", "");
  ASSERT_TRUE(h.ok()) << h.status().ToString();
  EXPECT_EQ(h->n, 1);
  EXPECT_EQ(h->feature_names, (std::vector<std::string>{"1", "2"}));
  auto no = LoadDataset("csv:" + path + ",header=no", "");
  EXPECT_EQ(no.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(no.status().message(), ":1: column 1: 'cultivar' is not a number")) << no.status().ToString();
}

// sklearn's CSVs start with a count line ("569,30,malignant,benign": rows, features, class
// names) whose cell count differs from the rows: the error says so and suggests skip=1, which
// reads the file.
TEST(CsvTest, ACountLineIsNamedAndSkipped) {
  TempDir dir;
  const std::string path = dir.File("sk.csv");
  WritePlain(path, "4,2,no,yes\n1.5,2,0\n3,4,1\n5,6,0\n6,7.25,1\n");
  auto bad = LoadDataset("csv:" + path, "");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(bad.status().message(), ":1: column 3: 'no' is not a number")) << bad.status().ToString();
  EXPECT_TRUE(Contains(bad.status().message(), "skip it: csv:" + path + ",skip=1")) << bad.status().ToString();
  WritePlain(path, "4,2,7\n1.5,2\n3,4\n");  // all numbers: the row after it is ragged
  auto ragged = LoadDataset("csv:" + path, "");
  EXPECT_TRUE(Contains(ragged.status().message(), ":2: row has 2 cells, expected 3 (as on line 1)")) << ragged.status().ToString();
  EXPECT_TRUE(Contains(ragged.status().message(), "skip it: csv:" + path + ",skip=1")) << ragged.status().ToString();
  WritePlain(path, "4,2,no,yes\n1.5,2,0\n3,4,1\n5,6,0\n6,7.25,1\n");
  auto d = LoadDataset("csv:" + path + ",skip=1", "");
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->n, 4);
  EXPECT_EQ(d->dim, 2);
  EXPECT_EQ(d->x, (std::vector<float>{1.5f, 2, 3, 4, 5, 6, 6, 7.25f}));
  EXPECT_EQ(d->y, (std::vector<int32_t>{0, 1, 0, 1}));
  // A ragged row further down gets no such suggestion; skip must be a number.
  WritePlain(path, "1,2,0\n3,4,1\n3,4\n");
  auto later = LoadDataset("csv:" + path, "");
  EXPECT_TRUE(Contains(later.status().message(), "row has 2 cells")) << later.status().ToString();
  EXPECT_FALSE(Contains(later.status().message(), "skip")) << later.status().ToString();
  EXPECT_TRUE(Contains(LoadDataset("csv:" + path + ",skip=x", "").status().message(), "unknown option 'skip=x'"));
}

TEST(CsvTest, BadLabelColumnsAndOptionsAreNamed) {
  TempDir dir;
  const std::string path = dir.File("d.csv");
  WritePlain(path, "a,b,label\n1,2,0\n");
  auto missing = LoadDataset("csv:" + path + ",label=species", "");
  EXPECT_TRUE(Contains(missing.status().message(), "no column named 'species' in the header (a, b, label)"))
      << missing.status().ToString();
  EXPECT_TRUE(Contains(LoadDataset("csv:" + path + ",label=4", "").status().message(), "label=4 is not a column (1..3)"));
  EXPECT_TRUE(Contains(LoadDataset("csv:" + path + ",colour=red", "").status().message(), "unknown option 'colour=red'"));
  const std::string bare = dir.File("bare.csv");
  WritePlain(bare, "1,2,0\n");
  EXPECT_TRUE(Contains(LoadDataset("csv:" + bare + ",label=label", "").status().message(), "has no header row"));
  // Names in a feature column are named by the header.
  ExpectCsvError("a,b,label\n1,x,0\n", ":2", "column 2 (b): 'x' is not a number");
}

// Standardization against a naive reference: mean 0 and standard deviation 1 per feature on
// the fitted rows, the same map on other rows, constant features left at scale 1.
TEST(StandardizeTest, MatchesANaiveReference) {
  Dataset d;
  d.dim = 3;
  d.n = 4;
  d.num_classes = 2;
  d.x = {1, 1000, 5, 2, 3000, 5, 3, 2000, 5, 4, 4000, 5};
  d.y = {0, 1, 1, 1};
  const Standardization s = FitStandardization(d);
  EXPECT_FLOAT_EQ(s.mean[0], 2.5f);
  EXPECT_FLOAT_EQ(s.mean[1], 2500.0f);
  EXPECT_FLOAT_EQ(s.scale[0], static_cast<float>(1 / std::sqrt(1.25)));
  EXPECT_FLOAT_EQ(s.scale[1], static_cast<float>(1 / std::sqrt(1.25e6)));
  EXPECT_EQ(s.scale[2], 1.0f);  // constant
  Dataset t = d;
  ASSERT_TRUE(Standardize(s, &t).ok());
  for (int j = 0; j < 2; ++j) {
    double sum = 0, sq = 0;
    for (int i = 0; i < 4; ++i) sum += t.x[i * 3 + j];
    for (int i = 0; i < 4; ++i) sq += t.x[i * 3 + j] * t.x[i * 3 + j];
    EXPECT_NEAR(sum / 4, 0.0, 1e-6);
    EXPECT_NEAR(sq / 4, 1.0, 1e-5);
  }
  EXPECT_EQ(t.x[2], 0.0f);  // 5 - 5
  EXPECT_DOUBLE_EQ(MajorityClassRate(d), 0.75);
  Dataset wrong;
  wrong.dim = 2;
  EXPECT_EQ(Standardize(s, &wrong).code(), StatusCode::kInvalidArgument);
}

TEST(CsvTest, DegenerateFiles) {
  ExpectCsvError("", "", "no data rows");
  ExpectCsvError("a,b,label\n\n", "", "no data rows");
  ExpectCsvError("1\n2\n", ":1", "at least one feature");
}

TEST(CsvTest, MissingFileIsNotFound) {
  TempDir dir;
  const std::string path = dir.File("absent.csv");
  auto d = LoadDataset("csv:" + path, "");
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(d.status().message(), path)) << d.status().ToString();
}

TEST(CsvTest, DirectoryIsRejected) {
  TempDir dir;
  auto d = LoadDataset("csv:" + dir.path(), "");
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << d.status().ToString();
}

// ---------------------------------------------------------------------------------------------
// IDX

std::string BigEndian(uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

std::string IdxImages(uint32_t n, uint32_t rows, uint32_t cols, const std::string& pixels) {
  return BigEndian(0x00000803) + BigEndian(n) + BigEndian(rows) + BigEndian(cols) + pixels;
}

std::string IdxLabels(uint32_t n, const std::string& labels) { return BigEndian(0x00000801) + BigEndian(n) + labels; }

// 3 images of 2x2: pixel j of image i is 10 * i + j (and 255 for the last one).
std::string Pixels() { return std::string("\x00\x01\x02\x03\x0a\x0b\x0c\x0d\x14\x15\x16\xff", 12); }
std::string Labels() { return std::string("\x07\x00\x02", 3); }

class IdxTest : public ::testing::TestWithParam<bool> {
 protected:
  // Writes a file, gzipped when the parameter says so.
  void Write(const std::string& path, const std::string& bytes) {
    if (GetParam()) WriteGzip(path, bytes);
    else WritePlain(path, bytes);
  }
  StatusOr<Dataset> Load(const std::string& images, const std::string& labels) {
    Write(dir_.File("img"), images);
    Write(dir_.File("lab"), labels);
    return LoadDataset("idx:" + dir_.File("img") + "," + dir_.File("lab"), "");
  }
  TempDir dir_;
};

TEST_P(IdxTest, Loads) {
  auto d = Load(IdxImages(3, 2, 2, Pixels()), IdxLabels(3, Labels()));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->n, 3);
  EXPECT_EQ(d->dim, 4);
  EXPECT_EQ(d->num_classes, 8);
  EXPECT_EQ(d->y, (std::vector<int32_t>{7, 0, 2}));
  ASSERT_EQ(d->x.size(), 12u);
  EXPECT_EQ(d->x[0], 0.0f);
  EXPECT_EQ(d->x[5], 11.0f / 255.0f);
  EXPECT_EQ(d->x[11], 1.0f);
}

TEST_P(IdxTest, BadMagic) {
  // Images and labels swapped.
  auto d = Load(IdxLabels(3, Labels()), IdxImages(3, 2, 2, Pixels()));
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
  EXPECT_TRUE(Contains(d.status().message(), "magic 0x00000801, expected 0x00000803")) << d.status().ToString();
  EXPECT_TRUE(Contains(d.status().message(), dir_.File("img"))) << d.status().ToString();
  // A float IDX (type 0x0d) is not ubyte.
  d = Load(BigEndian(0x00000d03) + IdxImages(3, 2, 2, Pixels()).substr(4), IdxLabels(3, Labels()));
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
}

TEST_P(IdxTest, TruncatedFiles) {
  const std::string images = IdxImages(3, 2, 2, Pixels());
  auto d = Load(images.substr(0, images.size() - 1), IdxLabels(3, Labels()));
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
  EXPECT_TRUE(Contains(d.status().message(), "truncated")) << d.status().ToString();

  d = Load(images, IdxLabels(3, Labels()).substr(0, 9));
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
  EXPECT_TRUE(Contains(d.status().message(), dir_.File("lab"))) << d.status().ToString();

  // Cut inside the header.
  d = Load(images.substr(0, 6), IdxLabels(3, Labels()));
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
  d = Load(images.substr(0, 2), IdxLabels(3, Labels()));
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
  d = Load("", IdxLabels(3, Labels()));
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
}

TEST_P(IdxTest, TrailingBytes) {
  auto d = Load(IdxImages(3, 2, 2, Pixels() + "x"), IdxLabels(3, Labels()));
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption);
  EXPECT_TRUE(Contains(d.status().message(), "trailing")) << d.status().ToString();
}

TEST_P(IdxTest, CountMismatch) {
  auto d = Load(IdxImages(3, 2, 2, Pixels()), IdxLabels(2, Labels().substr(0, 2)));
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(d.status().message(), "3 images")) << d.status().ToString();
  EXPECT_TRUE(Contains(d.status().message(), "2 labels")) << d.status().ToString();
}

TEST_P(IdxTest, HugeDeclaredSizeFailsWithoutAllocating) {
  // 4 billion images of 65535 x 65535: 2^64-ish bytes declared, 12 present. Must fail fast.
  auto d = Load(IdxImages(0xffffffffu, 0xffff, 0xffff, Pixels()), IdxLabels(3, Labels()));
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption) << d.status().ToString();
  // The product overflows 64 bits.
  d = Load(IdxImages(0xffffffffu, 0xffffffffu, 0xffffffffu, Pixels()), IdxLabels(3, Labels()));
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption) << d.status().ToString();
  // Labels that claim 4 billion entries.
  d = Load(IdxImages(3, 2, 2, Pixels()), IdxLabels(0xffffffffu, Labels()));
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption) << d.status().ToString();
}

TEST_P(IdxTest, EmptyImages) {
  auto d = Load(IdxImages(0, 2, 2, ""), IdxLabels(0, ""));
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << d.status().ToString();
  d = Load(IdxImages(3, 0, 2, ""), IdxLabels(3, Labels()));
  EXPECT_EQ(d.status().code(), StatusCode::kInvalidArgument) << d.status().ToString();
}

INSTANTIATE_TEST_SUITE_P(PlainAndGzip, IdxTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& param_info) { return param_info.param ? "Gzip" : "Plain"; });

TEST(IdxFileTest, MissingFileIsNotFound) {
  TempDir dir;
  WritePlain(dir.File("img"), IdxImages(3, 2, 2, Pixels()));
  auto d = LoadDataset("idx:" + dir.File("img") + "," + dir.File("missing"), "");
  EXPECT_EQ(d.status().code(), StatusCode::kNotFound);
  EXPECT_TRUE(Contains(d.status().message(), dir.File("missing"))) << d.status().ToString();
}

TEST(IdxFileTest, CorruptGzipStream) {
  TempDir dir;
  WriteGzip(dir.File("img.gz"), IdxImages(3, 2, 2, Pixels()));
  WritePlain(dir.File("lab"), IdxLabels(3, Labels()));
  // Keep the gzip header but cut the deflate stream short.
  std::ifstream in(dir.File("img.gz"), std::ios::binary);
  std::string gz((std::istreambuf_iterator<char>(in)), {});
  WritePlain(dir.File("img.gz"), gz.substr(0, gz.size() - 12));
  auto d = LoadDataset("idx:" + dir.File("img.gz") + "," + dir.File("lab"), "");
  EXPECT_EQ(d.status().code(), StatusCode::kCorruption) << d.status().ToString();
}

// ---------------------------------------------------------------------------------------------
// Subset

TEST(SubsetTest, PicksRowsInOrder) {
  Dataset d;
  d.name = "t";
  d.n = 4;
  d.dim = 2;
  d.num_classes = 3;
  d.x = {0, 1, 10, 11, 20, 21, 30, 31};
  d.y = {0, 1, 2, 1};
  Dataset s = Subset(d, {3, 0, 3});
  EXPECT_EQ(s.n, 3);
  EXPECT_EQ(s.dim, 2);
  EXPECT_EQ(s.num_classes, 3);
  EXPECT_EQ(s.x, (std::vector<float>{30, 31, 0, 1, 30, 31}));
  EXPECT_EQ(s.y, (std::vector<int32_t>{1, 0, 1}));
  EXPECT_EQ(Subset(d, {}).n, 0);
}

TEST(SubsetDeathTest, OutOfRangeIndexAborts) {
  Dataset d;
  d.n = 1;
  d.dim = 1;
  d.num_classes = 1;
  d.x = {1};
  d.y = {0};
  EXPECT_DEATH(Subset(d, {1}), "out of range");
}

}  // namespace
}  // namespace shoal::data
