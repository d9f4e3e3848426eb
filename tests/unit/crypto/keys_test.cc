#include "crypto/keys.h"
#include "crypto/crypto.h"

#include <sodium.h>

#include <gtest/gtest.h>

#include "temp_dir.h"
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

namespace shoal::crypto {
namespace {

namespace fs = std::filesystem;

std::string ReadAll(const std::string& path) {
  std::ifstream f(path);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

mode_t ModeOf(const std::string& path) {
  struct stat st {};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

// Writes `content` to `path` with mode 0600 (how a hand-edited secret file would be).
void WritePrivate(const std::string& path, const std::string& content) {
  { std::ofstream(path, std::ios::trunc) << content; }
  ASSERT_EQ(::chmod(path.c_str(), 0600), 0);
}

class KeysTest : public ::testing::Test {
 protected:
  void SetUp() override { prefix_ = dir_ + "/node"; }

  // A valid secret file's text for a fresh key pair, with one field's line replaced by `line`
  // (or removed, when `line` is empty).
  std::string SecretText(const KeyPair& kp, const std::string& label = "", const std::string& line = "") {
    const std::pair<std::string, std::string> fields[] = {
        {"curve-public", Z85Key(kp.curve_public)},
        {"curve-secret", Z85Key(kp.curve_secret)},
        {"ed25519-public", Z85Key(kp.sign_public)},
        {"ed25519-secret", Z85Encode(kp.sign_secret).value()},
    };
    std::string text = "# comment\n";
    for (const auto& [l, v] : fields) {
      if (l == label) {
        if (!line.empty()) text += line + "\n";
      } else {
        text += l + " = " + v + "\n";
      }
    }
    return text;
  }

  testing::TempDir tmp_;  // removed with everything in it after the test
  std::string dir_ = tmp_.path();
  std::string prefix_;
};

TEST_F(KeysTest, GenerateGivesConsistentDistinctKeys) {
  auto a = GenerateKeyPair(), b = GenerateKeyPair();
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_FALSE(*a == *b);
  EXPECT_EQ(Z85Key(a->curve_public).size(), kZ85KeyChars);
}

// One .pub names both keys: the CURVE pair is the X25519 form of the Ed25519 pair, so a trusted
// roster of .pub files can vouch for secure aggregation's Ed25519 identities.
TEST_F(KeysTest, TheCurveKeyIsTheX25519FormOfTheSigningKey) {
  for (int i = 0; i < 20; ++i) {
    auto kp = GenerateKeyPair();
    ASSERT_TRUE(kp.ok());
    auto curve = SignToCurvePublic(kp->sign_public);
    ASSERT_TRUE(curve.has_value());
    EXPECT_EQ(*curve, kp->curve_public);
    std::array<uint8_t, 32> derived{};
    ASSERT_EQ(crypto_scalarmult_base(derived.data(), kp->curve_secret.data()), 0);
    EXPECT_EQ(derived, kp->curve_public) << "the secret matches the public key";
  }
}

TEST_F(KeysTest, RoundTripAndModes) {
  auto kp = GenerateKeyPair();
  ASSERT_TRUE(kp.ok());
  ASSERT_TRUE(WriteKeyFiles(prefix_, *kp, false).ok());
  EXPECT_EQ(ModeOf(prefix_ + ".key"), 0600u);
  EXPECT_EQ(ModeOf(prefix_ + ".pub") & 0600u, 0600u);
  EXPECT_EQ(ModeOf(prefix_ + ".pub") & 0022u, 0u);
  EXPECT_EQ(ReadAll(prefix_ + ".pub"), Z85Key(kp->curve_public) + "\n");

  auto back = ReadSecretKeyFile(prefix_ + ".key");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(*back == *kp);

  // No temporary files are left behind.
  size_t files = 0;
  for (const auto& e : fs::directory_iterator(dir_)) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 2u);
}

// '=' is a Z85 character: keys containing it (in any position) must still parse.
TEST_F(KeysTest, KeysContainingEqualsSignRoundTrip) {
  int tested = 0;
  for (int i = 0; i < 400 && tested < 20; ++i) {
    auto kp = GenerateKeyPair();
    ASSERT_TRUE(kp.ok());
    const std::string cs = Z85Key(kp->curve_secret), ss = Z85Encode(kp->sign_secret).value();
    if (cs.find('=') == std::string::npos && ss.find('=') == std::string::npos) continue;
    ++tested;
    const std::string path = dir_ + "/eq" + std::to_string(i);
    ASSERT_TRUE(WriteKeyFiles(path, *kp, false).ok());
    auto back = ReadSecretKeyFile(path + ".key");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_TRUE(*back == *kp);
    auto pub = ReadPublicKey(path + ".pub");
    ASSERT_TRUE(pub.ok()) << pub.status().ToString();
    EXPECT_EQ(*pub, Z85Key(kp->curve_public));
  }
  EXPECT_EQ(tested, 20);
}

TEST_F(KeysTest, RefusesToOverwriteWithoutForce) {
  auto kp1 = GenerateKeyPair(), kp2 = GenerateKeyPair();
  ASSERT_TRUE(kp1.ok() && kp2.ok());
  ASSERT_TRUE(WriteKeyFiles(prefix_, *kp1, false).ok());

  Status st = WriteKeyFiles(prefix_, *kp2, false);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(prefix_ + ".key"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("--force"), std::string::npos) << st.message();
  auto still = ReadSecretKeyFile(prefix_ + ".key");
  ASSERT_TRUE(still.ok());
  EXPECT_TRUE(*still == *kp1);

  // Only the .pub exists: still refused, naming it, and no .key is written.
  fs::remove(prefix_ + ".key");
  st = WriteKeyFiles(prefix_, *kp2, false);
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find(prefix_ + ".pub"), std::string::npos) << st.message();
  EXPECT_FALSE(fs::exists(prefix_ + ".key"));

  // With force both are replaced, and the secret file is 0600 even if it was 0644 before.
  WritePrivate(prefix_ + ".key", "old");
  ASSERT_EQ(::chmod((prefix_ + ".key").c_str(), 0644), 0);
  ASSERT_TRUE(WriteKeyFiles(prefix_, *kp2, true).ok());
  EXPECT_EQ(ModeOf(prefix_ + ".key"), 0600u);
  auto now = ReadSecretKeyFile(prefix_ + ".key");
  ASSERT_TRUE(now.ok()) << now.status().ToString();
  EXPECT_TRUE(*now == *kp2);
  EXPECT_EQ(ReadAll(prefix_ + ".pub"), Z85Key(kp2->curve_public) + "\n");
}

TEST_F(KeysTest, RefusesSecretFileReadableByOthers) {
  auto kp = GenerateKeyPair();
  ASSERT_TRUE(kp.ok());
  ASSERT_TRUE(WriteKeyFiles(prefix_, *kp, false).ok());
  const std::string path = prefix_ + ".key";
  ASSERT_EQ(::chmod(path.c_str(), 0644), 0);
  auto r = ReadSecretKeyFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(), path + " is readable by others (mode 0644); chmod 600 " + path);

  ASSERT_EQ(::chmod(path.c_str(), 0620), 0);  // group-writable only
  r = ReadSecretKeyFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("chmod 600 " + path), std::string::npos) << r.status().message();

  ASSERT_EQ(::chmod(path.c_str(), 0400), 0);  // read-only for the owner is fine
  EXPECT_TRUE(ReadSecretKeyFile(path).ok());
}

TEST_F(KeysTest, MissingSecretFile) {
  auto r = ReadSecretKeyFile(dir_ + "/nope.key");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kNotFound);
  EXPECT_NE(r.status().message().find(dir_ + "/nope.key"), std::string::npos);
}

TEST_F(KeysTest, CorruptedSecretFilesGiveClearErrors) {
  auto kp = GenerateKeyPair(), other = GenerateKeyPair();
  ASSERT_TRUE(kp.ok() && other.ok());
  const std::string path = dir_ + "/bad.key";
  auto expect_error = [&](const std::string& text, const std::string& fragment) {
    WritePrivate(path, text);
    auto r = ReadSecretKeyFile(path);
    ASSERT_FALSE(r.ok()) << "accepted: " << text;
    EXPECT_NE(r.status().message().find(fragment), std::string::npos)
        << "message: " << r.status().message() << "\nwanted: " << fragment;
    EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  };

  // Sanity: the unmodified text is accepted.
  WritePrivate(path, SecretText(*kp));
  ASSERT_TRUE(ReadSecretKeyFile(path).ok());

  std::string bad_char = Z85Key(kp->curve_secret);
  bad_char[7] = '"';  // not in the Z85 alphabet
  expect_error(SecretText(*kp, "curve-secret", "curve-secret = " + bad_char),
               "curve-secret: invalid Z85 character at position 8");
  expect_error(SecretText(*kp, "curve-public", "curve-public = " + Z85Key(kp->curve_public).substr(0, 35)),
               "curve-public: expected 40 Z85 characters, got 35");
  expect_error(SecretText(*kp, "ed25519-secret", "ed25519-secret = " + Z85Key(kp->curve_secret)),
               "ed25519-secret: expected 80 Z85 characters, got 40");
  expect_error(SecretText(*kp, "curve-public", "curve-public = " + Z85Key(other->curve_public)),
               "curve-public does not match curve-secret");
  expect_error(SecretText(*kp, "ed25519-public", "ed25519-public = " + Z85Key(other->sign_public)),
               "ed25519-public does not match ed25519-secret");
  // A secret key whose embedded public half was replaced (with the matching public line).
  KeyPair tampered = *kp;
  std::copy(other->sign_public.begin(), other->sign_public.end(), tampered.sign_secret.begin() + 32);
  tampered.sign_public = other->sign_public;
  WritePrivate(path, SecretText(tampered));
  auto r = ReadSecretKeyFile(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("ed25519-secret is inconsistent"), std::string::npos) << r.status().message();

  expect_error(SecretText(*kp, "curve-secret", ""), "missing 'curve-secret' line");
  expect_error(SecretText(*kp, "ed25519-public", ""), "missing 'ed25519-public' line");
  expect_error(SecretText(*kp) + "curve-public = " + Z85Key(kp->curve_public) + "\n", "'curve-public' appears twice");
  expect_error(SecretText(*kp) + "colour = blue\n", "unknown label 'colour'");
  expect_error(SecretText(*kp) + "just some words\n", "expected 'label = value'");
  expect_error("", "missing 'curve-public' line");
  expect_error(Z85Key(kp->curve_public) + "\n", "expected 'label = value'");  // a .pub given as --secret-key
  // '=' is a Z85 character: a bare key may start like a label ("v=..."); still a bare key, and
  // not echoed (one random key in ~50 did, before).
  const std::string label_like = "v=" + Z85Key(kp->curve_public).substr(2);
  expect_error(label_like + "\n", "expected 'label = value'");
  WritePrivate(path, label_like + "\n");
  EXPECT_EQ(ReadSecretKeyFile(path).status().message().find("'v'"), std::string::npos);
}

TEST_F(KeysTest, ReadPublicKeyFromKeyOrFile) {
  auto kp = GenerateKeyPair();
  ASSERT_TRUE(kp.ok());
  const std::string z85 = Z85Key(kp->curve_public);
  auto direct = ReadPublicKey(z85);
  ASSERT_TRUE(direct.ok()) << direct.status().ToString();
  EXPECT_EQ(*direct, z85);

  ASSERT_TRUE(WriteKeyFiles(prefix_, *kp, false).ok());
  auto from_file = ReadPublicKey(prefix_ + ".pub");
  ASSERT_TRUE(from_file.ok()) << from_file.status().ToString();
  EXPECT_EQ(*from_file, z85);

  // Comments, blank lines and CRLF are tolerated.
  const std::string edited = dir_ + "/edited.pub";
  { std::ofstream(edited) << "# the aggregator\r\n\r\n  " << z85 << "  \r\n"; }
  auto e = ReadPublicKey(edited);
  ASSERT_TRUE(e.ok()) << e.status().ToString();
  EXPECT_EQ(*e, z85);

  // A path of exactly 40 characters, all in the Z85 alphabet, is still a file: it once was
  // taken for a key ("/tmp/shoal-it-12453-binding/keys/agg.pub" broke a CURVE handshake).
  const std::string forty = std::string(36, 'k') + ".pub";  // relative to dir_
  std::array<uint8_t, kCurveKeyBytes> ignored{};
  ASSERT_TRUE(Z85DecodeTo(forty, ignored).ok()) << "the path must look like a key for this test to mean anything";
  { std::ofstream(dir_ + "/" + forty) << z85 << "\n"; }
  const auto cwd = std::filesystem::current_path();
  std::filesystem::current_path(dir_);
  auto f = ReadPublicKey(forty);
  std::filesystem::current_path(cwd);
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_EQ(*f, z85);
}

TEST_F(KeysTest, ReadPublicKeyErrors) {
  auto kp = GenerateKeyPair();
  ASSERT_TRUE(kp.ok());
  ASSERT_TRUE(WriteKeyFiles(prefix_, *kp, false).ok());

  auto r = ReadPublicKey(dir_ + "/missing.pub");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("neither a 40-character Z85 public key nor a readable file"), std::string::npos)
      << r.status().message();

  std::string bad = Z85Key(kp->curve_public);
  bad[0] = ' ';
  EXPECT_FALSE(ReadPublicKey(bad).ok());
  EXPECT_FALSE(ReadPublicKey(Z85Key(kp->curve_public).substr(0, 39)).ok());

  r = ReadPublicKey(prefix_ + ".key");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("is a secret key file"), std::string::npos) << r.status().message();

  const std::string two = dir_ + "/two.pub";
  { std::ofstream(two) << Z85Key(kp->curve_public) << "\n" << Z85Key(kp->sign_public) << "\n"; }
  r = ReadPublicKey(two);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("line 2"), std::string::npos) << r.status().message();

  const std::string empty = dir_ + "/empty.pub";
  { std::ofstream(empty) << "# nothing\n"; }
  r = ReadPublicKey(empty);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("no public key"), std::string::npos) << r.status().message();

  const std::string short_key = dir_ + "/short.pub";
  { std::ofstream(short_key) << Z85Key(kp->curve_public).substr(0, 30) << "\n"; }
  r = ReadPublicKey(short_key);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("expected 40 Z85 characters, got 30"), std::string::npos)
      << r.status().message();
}

}  // namespace
}  // namespace shoal::crypto
