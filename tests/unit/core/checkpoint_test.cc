// Checkpoints: bit-exact round trip, detection of every kind of damage, atomic replacement.

#include "core/checkpoint.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <limits>
#include <string>

#include "temp_dir.h"

namespace shoal {
namespace {

using shoal::testing::TempDir;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

void PutU32(std::string* s, uint32_t v) {
  for (int i = 0; i < 4; ++i) s->push_back(static_cast<char>(v >> (8 * i)));
}
void PutU64(std::string* s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s->push_back(static_cast<char>(v >> (8 * i)));
}
// Appends the crc32 of everything in *s, as the format does.
void SealWithCrc(std::string* s) {
  PutU32(s, static_cast<uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(s->data()), static_cast<uInt>(s->size()))));
}

// A checkpoint whose floats include every awkward bit pattern.
Checkpoint Sample() {
  Checkpoint c;
  c.round = (uint64_t{1} << 40) + 3;
  c.model_spec = "mlp:64,32";
  c.params = ParameterArena({{"fc0.weight", {3, 2}}, {"fc0.bias", {2}}, {"scale", {}}, {"empty", {0, 4}}});
  const float specials[] = {1.5f,
                            -0.0f,
                            std::numeric_limits<float>::denorm_min(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::max(),
                            std::bit_cast<float>(uint32_t{0x7fc01234}),  // NaN with a payload
                            3.14159265f,
                            -2.0e-38f,
                            42.0f};
  EXPECT_EQ(c.params.size(), std::size(specials));
  EXPECT_TRUE(c.params.Assign(specials).ok());
  c.sections = {{"strategy", std::string("\0\x01\xff binary", 10)}, {"empty", ""}, {"meta", R"({"seed":7})"}};
  return c;
}

void ExpectSame(const Checkpoint& a, const Checkpoint& b) {
  EXPECT_EQ(a.round, b.round);
  EXPECT_EQ(a.model_spec, b.model_spec);
  EXPECT_TRUE(a.params.SameLayout(b.params)) << LayoutToString(a.params.Layout()) << " vs "
                                             << LayoutToString(b.params.Layout());
  ASSERT_EQ(a.params.size(), b.params.size());
  if (a.params.size() > 0) {  // memcmp on an empty arena's null data() is undefined
    EXPECT_EQ(std::memcmp(a.params.data(), b.params.data(), a.params.size() * sizeof(float)), 0)
        << "parameters differ in some bit";
  }
  EXPECT_EQ(a.sections, b.sections);
}

TEST(CheckpointTest, RoundTripIsBitExact) {
  TempDir dir;
  const std::string path = dir.File("nested/deeper/model.ckpt");  // parents are created
  const Checkpoint c = Sample();
  ASSERT_TRUE(WriteCheckpoint(path, c).ok());
  auto back = ReadCheckpoint(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(c, *back);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(CheckpointTest, EmptyCheckpointRoundTrips) {
  TempDir dir;
  const std::string path = dir.File("empty.ckpt");
  ASSERT_TRUE(WriteCheckpoint(path, Checkpoint{}).ok());
  auto back = ReadCheckpoint(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(Checkpoint{}, *back);
}

TEST(CheckpointTest, FormatStartsWithMagicAndVersion) {
  TempDir dir;
  const std::string path = dir.File("c.ckpt");
  ASSERT_TRUE(WriteCheckpoint(path, Sample()).ok());
  const std::string bytes = ReadFile(path);
  ASSERT_GE(bytes.size(), 12u);
  EXPECT_EQ(bytes.substr(0, 8), "SHOALCKP");
  EXPECT_EQ(bytes.substr(8, 4), std::string("\x01\x00\x00\x00", 4));  // version 1, little-endian
  // round, little-endian, right after the version
  EXPECT_EQ(bytes.substr(12, 8), std::string("\x03\x00\x00\x00\x00\x01\x00\x00", 8));
}

TEST(CheckpointTest, MissingFileIsNotFound) {
  TempDir dir;
  const std::string path = dir.File("nope.ckpt");
  auto r = ReadCheckpoint(path);
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().ToString();
}

TEST(CheckpointTest, EveryFlippedByteIsDetected) {
  TempDir dir;
  const std::string path = dir.File("c.ckpt");
  ASSERT_TRUE(WriteCheckpoint(path, Sample()).ok());
  const std::string good = ReadFile(path);
  const std::string bad_path = dir.File("bad.ckpt");
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bytes = good;
    bytes[i] = static_cast<char>(bytes[i] ^ 0x10);
    WriteFile(bad_path, bytes);
    auto r = ReadCheckpoint(bad_path);
    ASSERT_FALSE(r.ok()) << "flipping byte " << i << " went unnoticed";
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << i << ": " << r.status().ToString();
    EXPECT_NE(r.status().message().find(bad_path), std::string::npos) << r.status().ToString();
  }
}

TEST(CheckpointTest, EveryTruncationIsDetected) {
  TempDir dir;
  const std::string path = dir.File("c.ckpt");
  ASSERT_TRUE(WriteCheckpoint(path, Sample()).ok());
  const std::string good = ReadFile(path);
  const std::string bad_path = dir.File("short.ckpt");
  for (size_t len = 0; len < good.size(); ++len) {
    WriteFile(bad_path, good.substr(0, len));
    auto r = ReadCheckpoint(bad_path);
    ASSERT_FALSE(r.ok()) << "truncation to " << len << " bytes went unnoticed";
    EXPECT_EQ(r.status().code(), StatusCode::kCorruption) << len << ": " << r.status().ToString();
  }
  // Appending is damage too.
  WriteFile(bad_path, good + "x");
  EXPECT_EQ(ReadCheckpoint(bad_path).status().code(), StatusCode::kCorruption);
}

TEST(CheckpointTest, WrongMagicAndVersionAreNamed) {
  TempDir dir;
  const std::string path = dir.File("c.ckpt");
  ASSERT_TRUE(WriteCheckpoint(path, Sample()).ok());
  const std::string good = ReadFile(path);

  std::string bytes = good;
  bytes[7] = 'Q';  // SHOALCKQ
  WriteFile(path, bytes);
  auto r = ReadCheckpoint(path);
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("magic"), std::string::npos) << r.status().ToString();

  // Version 2 with a correct CRC: refused because of the version, not the checksum.
  bytes = good.substr(0, good.size() - 4);
  bytes[8] = 2;
  SealWithCrc(&bytes);
  WriteFile(path, bytes);
  r = ReadCheckpoint(path);
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("version 2"), std::string::npos) << r.status().ToString();
}

// Files with a valid CRC whose counts lie: the reader must refuse them without trying to
// allocate what they claim.
TEST(CheckpointTest, ForgedCountsWithValidCrcAreRejected) {
  TempDir dir;
  const std::string path = dir.File("forged.ckpt");
  auto header = [] {
    std::string s = "SHOALCKP";
    PutU32(&s, 1);     // version
    PutU64(&s, 5);     // round
    PutU32(&s, 3);     // spec length
    s += "mlp";
    return s;
  };

  // 4 billion tensors.
  std::string s = header();
  PutU32(&s, 0xffffffffu);
  SealWithCrc(&s);
  WriteFile(path, s);
  EXPECT_EQ(ReadCheckpoint(path).status().code(), StatusCode::kCorruption);

  // One tensor of 2^31 x 2^31 floats, and a float count to match.
  s = header();
  PutU32(&s, 1);
  PutU32(&s, 1);
  s += "w";
  PutU32(&s, 2);
  PutU64(&s, uint64_t{1} << 31);
  PutU64(&s, uint64_t{1} << 31);
  PutU64(&s, uint64_t{1} << 62);
  SealWithCrc(&s);
  WriteFile(path, s);
  auto r = ReadCheckpoint(path);
  EXPECT_EQ(r.status().code(), StatusCode::kCorruption);
  EXPECT_NE(r.status().message().find("exceeds the file"), std::string::npos) << r.status().ToString();

  // Dims whose product overflows int64.
  s = header();
  PutU32(&s, 1);
  PutU32(&s, 1);
  s += "w";
  PutU32(&s, 3);
  PutU64(&s, uint64_t{1} << 62);
  PutU64(&s, 4);
  PutU64(&s, 0);
  PutU64(&s, 0);  // float count
  PutU32(&s, 0);  // sections
  SealWithCrc(&s);
  WriteFile(path, s);
  EXPECT_EQ(ReadCheckpoint(path).status().code(), StatusCode::kCorruption);

  // A negative dim.
  s = header();
  PutU32(&s, 1);
  PutU32(&s, 1);
  s += "w";
  PutU32(&s, 1);
  PutU64(&s, static_cast<uint64_t>(int64_t{-1}));
  PutU64(&s, 0);
  PutU32(&s, 0);
  SealWithCrc(&s);
  WriteFile(path, s);
  EXPECT_EQ(ReadCheckpoint(path).status().code(), StatusCode::kCorruption);

  // A section blob longer than the file.
  s = header();
  PutU32(&s, 0);  // tensors
  PutU64(&s, 0);  // floats
  PutU32(&s, 1);  // sections
  PutU32(&s, 1);
  s += "s";
  PutU64(&s, uint64_t{1} << 60);
  SealWithCrc(&s);
  WriteFile(path, s);
  EXPECT_EQ(ReadCheckpoint(path).status().code(), StatusCode::kCorruption);

  // And the same skeleton with honest counts reads fine (so the cases above fail for their
  // counts, not for the skeleton).
  s = header();
  PutU32(&s, 0);
  PutU64(&s, 0);
  PutU32(&s, 1);
  PutU32(&s, 1);
  s += "s";
  PutU64(&s, 2);
  s += "ok";
  SealWithCrc(&s);
  WriteFile(path, s);
  auto ok = ReadCheckpoint(path);
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->round, 5u);
  EXPECT_EQ(ok->model_spec, "mlp");
  ASSERT_EQ(ok->sections.size(), 1u);
  EXPECT_EQ(ok->sections[0].second, "ok");
}

TEST(CheckpointTest, OverwriteReplacesWholeFile) {
  TempDir dir;
  const std::string path = dir.File("c.ckpt");
  ASSERT_TRUE(WriteCheckpoint(path, Sample()).ok());
  Checkpoint small;
  small.round = 9;
  small.params = ParameterArena({{"w", {1}}});
  ASSERT_TRUE(WriteCheckpoint(path, small).ok());
  auto back = ReadCheckpoint(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(small, *back);
}

TEST(CheckpointTest, FailedCreateLeavesPreviousCheckpoint) {
  TempDir dir;
  const std::string path = dir.File("c.ckpt");
  const Checkpoint first = Sample();
  ASSERT_TRUE(WriteCheckpoint(path, first).ok());

  // The temporary file cannot be created: a directory sits where it would go.
  ASSERT_TRUE(std::filesystem::create_directory(path + ".tmp"));
  Checkpoint second;
  second.round = 99;
  Status s = WriteCheckpoint(path, second);
  EXPECT_EQ(s.code(), StatusCode::kIoError);
  EXPECT_NE(s.message().find(path), std::string::npos) << s.ToString();

  auto back = ReadCheckpoint(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(first, *back);
}

TEST(CheckpointTest, FailedWriteLeavesPreviousCheckpointAndNoTemp) {
  if (::access("/dev/full", W_OK) != 0) GTEST_SKIP() << "needs /dev/full to simulate a full disk";
  TempDir dir;
  const std::string path = dir.File("c.ckpt");
  const Checkpoint first = Sample();
  ASSERT_TRUE(WriteCheckpoint(path, first).ok());

  // Every write to the temporary file fails with ENOSPC.
  ASSERT_EQ(::symlink("/dev/full", (path + ".tmp").c_str()), 0);
  Checkpoint second = Sample();
  second.round = 100;
  Status s = WriteCheckpoint(path, second);
  EXPECT_EQ(s.code(), StatusCode::kIoError) << s.ToString();

  auto back = ReadCheckpoint(path);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ExpectSame(first, *back);
  struct stat st;
  EXPECT_NE(::lstat((path + ".tmp").c_str(), &st), 0) << "the failed temporary file was left behind";

  // With the obstacle gone, writing works again.
  ASSERT_TRUE(WriteCheckpoint(path, second).ok());
  EXPECT_EQ(ReadCheckpoint(path)->round, 100u);
}

TEST(CheckpointTest, ReadingADirectoryFails) {
  TempDir dir;
  auto r = ReadCheckpoint(dir.path());
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find(dir.path()), std::string::npos);
}

}  // namespace
}  // namespace shoal
