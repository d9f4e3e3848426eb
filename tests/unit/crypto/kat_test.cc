// Known-answer tests for every libsodium primitive Shoal calls directly, for Z85, and for
// OpenSSL's ChaCha20 against libsodium's.
// Vectors are copied from the cited documents; each was also cross-checked against an
// independent implementation (Python hashlib / pyca/cryptography, libzmq for Z85).
#include <gtest/gtest.h>
#include <sodium.h>
#include <zmq.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "crypto/crypto.h"
#include "crypto/keys.h"

namespace shoal::crypto {
namespace {

std::vector<uint8_t> Hex(const std::string& hex) {
  if (hex.empty()) return {};  // sodium_hex2bin must not get a null buffer
  std::vector<uint8_t> out(hex.size() / 2);
  size_t len = 0;
  EXPECT_EQ(sodium_hex2bin(out.data(), out.size(), hex.data(), hex.size(), nullptr, &len, nullptr), 0) << hex;
  EXPECT_EQ(len, out.size()) << hex;
  return out;
}

std::string ToHex(const uint8_t* p, size_t n) {
  std::string s(n * 2 + 1, '\0');
  sodium_bin2hex(s.data(), s.size(), p, n);
  s.pop_back();
  return s;
}
template <typename C>
std::string ToHex(const C& c) {
  return ToHex(c.data(), c.size());
}

class KatTest : public ::testing::Test {
 protected:
  void SetUp() override { EnsureInit(); }
};

// ---- ChaCha20: RFC 8439 ----

// RFC 8439 §2.3.2: the keystream block of key 00..1f, nonce 00:00:00:09:00:00:00:4a:00:00:00:00,
// block counter 1 (cross-checked with pyca/cryptography), and the block after it continues the
// same stream.
TEST_F(KatTest, ChaCha20Rfc8439Section2_3_2) {
  StreamKey key;
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<uint8_t>(i);
  StreamNonce nonce{0, 0, 0, 9, 0, 0, 0, 0x4a, 0, 0, 0, 0};
  std::vector<uint8_t> block(64), two(128);
  ChaCha20(key, nonce, 1, block);
  EXPECT_EQ(ToHex(block),
            "10f1e7e4d13b5915500fdd1fa32071c4c7d1f4c733c068030422aa9ac3d46c4e"
            "d2826446079faa0914c2d705d98b02a2b5129cd1de164eb9cbd083e8a2503c4e");
  ChaCha20(key, nonce, 0, two);
  EXPECT_TRUE(std::equal(block.begin(), block.end(), two.begin() + 64));
}

// The keystream (OpenSSL's ChaCha20 since SecAgg+'s masks moved to it) is libsodium's IETF
// ChaCha20 bit for bit: random keys, nonces and counters, lengths that are not whole blocks,
// empty, and longer than one 64 KiB call into OpenSSL.
TEST_F(KatTest, ChaCha20IsTheIetfKeystreamOfLibsodium) {
  for (uint32_t trial = 0; trial < 40; ++trial) {
    StreamKey key;
    StreamNonce nonce;
    randombytes_buf(key.data(), key.size());
    randombytes_buf(nonce.data(), nonce.size());
    const uint32_t counter = trial < 20 ? trial * 977 : randombytes_uniform(1u << 20);
    const size_t length = trial == 0 ? 0 : trial == 1 ? (size_t{1} << 16) * 3 + 5 : randombytes_uniform(200000);
    std::vector<uint8_t> ours(length, 0x55), theirs(length, 0);
    ChaCha20(key, nonce, counter, ours);
    if (length > 0)  // libsodium takes no null buffer
      crypto_stream_chacha20_ietf_xor_ic(theirs.data(), theirs.data(), theirs.size(), nonce.data(), counter, key.data());
    ASSERT_EQ(ours, theirs) << "trial " << trial << ", counter " << counter << ", length " << length;
  }
}

// ---- X25519: RFC 7748 ----

// RFC 7748 §5.2, the two single scalar-multiplication vectors.
TEST_F(KatTest, X25519Rfc7748Section5_2) {
  struct Vector {
    const char* scalar;
    const char* u;
    const char* out;
  };
  const Vector vectors[] = {
      {"a546e36bf0527c9d3b16154b82465edd62144c0ac1fc5a18506a2244ba449ac4",
       "e6db6867583030db3594c1a424b15f7c726624ec26b3353b10a903a6d0ab1c4c",
       "c3da55379de9c6908e94ea4df28d084f32eccf03491c71f754b4075577a28552"},
      {"4b66e9d4d1b4673c5ad22691957d6af5c11b6421e0ea01d42ca4169e7918ba0d",
       "e5210f12786811d3f4b7959d0538ae2c31dbe7106fc03c3efc4cd549c715a493",
       "95cbde9476e8907d7aade45cb4b873f88b595a68799fa152e6f8f7647aac7957"},
  };
  for (const auto& v : vectors) {
    const auto k = Hex(v.scalar), u = Hex(v.u);
    std::array<uint8_t, crypto_scalarmult_BYTES> out{};
    ASSERT_EQ(crypto_scalarmult(out.data(), k.data(), u.data()), 0);
    EXPECT_EQ(ToHex(out), v.out);
  }
}

// RFC 7748 §5.2, iterated: k = u = 9; repeatedly k, u = X25519(k, u), k. Results after 1 and
// 1,000 iterations (the 1,000,000-iteration value is left out for speed).
TEST_F(KatTest, X25519Rfc7748Section5_2Iterated) {
  std::array<uint8_t, 32> k{}, u{}, r{};
  k[0] = 9;
  u[0] = 9;
  for (int i = 1; i <= 1000; ++i) {
    ASSERT_EQ(crypto_scalarmult(r.data(), k.data(), u.data()), 0);
    u = k;
    k = r;
    if (i == 1) {
      EXPECT_EQ(ToHex(k), "422c8e7a6227d7bca1350b3e2bb7279f7897b87bb6854b783c60e80311ae3079");
    }
  }
  EXPECT_EQ(ToHex(k), "684cf59ba83309552800ef566f2f4d3c1c3887c49360e3875f2eb94d99532c51");
}

// RFC 7748 §6.1, Diffie-Hellman: Alice's and Bob's public keys and their shared secret.
TEST_F(KatTest, X25519Rfc7748Section6_1) {
  const auto a = Hex("77076d0a7318a57d3c16c17251b26645df4c2f87ebc0992ab177fba51db92c2a");
  const auto b = Hex("5dab087e624a8a4b79e17f8b83800ee66f3bb1292618b6fd1c2f8b27ff88e0eb");
  std::array<uint8_t, 32> a_pub{}, b_pub{}, k_ab{}, k_ba{};
  ASSERT_EQ(crypto_scalarmult_base(a_pub.data(), a.data()), 0);
  ASSERT_EQ(crypto_scalarmult_base(b_pub.data(), b.data()), 0);
  EXPECT_EQ(ToHex(a_pub), "8520f0098930a754748b7ddcb43ef75a0dbf3a0d26381af4eba4a98eaa9b4e6a");
  EXPECT_EQ(ToHex(b_pub), "de9edb7d7b7dc1b4d35b61c2ece435373f8343c85b78674dadfc7e146f882b4f");
  ASSERT_EQ(crypto_scalarmult(k_ab.data(), a.data(), b_pub.data()), 0);
  ASSERT_EQ(crypto_scalarmult(k_ba.data(), b.data(), a_pub.data()), 0);
  EXPECT_EQ(ToHex(k_ab), "4a5d9d5ba4ce2de1728e3bf480350f25e07e21c947d19e3376f09b3c1e161742");
  EXPECT_EQ(ToHex(k_ba), ToHex(k_ab));
}

// crypto_box_keypair (what CurveZMQ uses) yields public = X25519(secret, 9).
TEST_F(KatTest, BoxKeypairIsX25519) {
  std::array<uint8_t, 32> pk{}, sk{}, derived{};
  ASSERT_EQ(crypto_box_keypair(pk.data(), sk.data()), 0);
  ASSERT_EQ(crypto_scalarmult_base(derived.data(), sk.data()), 0);
  EXPECT_EQ(ToHex(derived), ToHex(pk));
}

// ---- Ed25519: RFC 8032 §7.1, TEST 1, TEST 2, TEST 3 ----

TEST_F(KatTest, Ed25519Rfc8032Section7_1) {
  struct Vector {
    const char* name;
    const char* secret;  // the 32-byte seed
    const char* pub;
    const char* message;
    const char* signature;
  };
  const Vector vectors[] = {
      {"TEST 1", "9d61b19deffd5a60ba844af492ec2cc44449c5697b326919703bac031cae7f60",
       "d75a980182b10ab7d54bfed3c964073a0ee172f3daa62325af021a68f707511a", "",
       "e5564300c360ac729086e2cc806e828a84877f1eb8e5d974d873e065224901555fb8821590a33bacc61e39701cf9b46bd25bf5f0595bbe24655141438e7a100b"},
      {"TEST 2", "4ccd089b28ff96da9db6c346ec114e0f5b8a319f35aba624da8cf6ed4fb8a6fb",
       "3d4017c3e843895a92b70aa74d1b7ebc9c982ccf2ec4968cc0cd55f12af4660c", "72",
       "92a009a9f0d4cab8720e820b5f642540a2b27b5416503f8fb3762223ebdb69da085ac1e43e15996e458f3613d0f11d8c387b2eaeb4302aeeb00d291612bb0c00"},
      {"TEST 3", "c5aa8df43f9f837bedb7442f31dcb7b166d38535076f094b85ce3a2e0b4458f7",
       "fc51cd8e6218a1a38da47ed00230f0580816ed13ba3303ac5deb911548908025", "af82",
       "6291d657deec24024827e69c3abe01a30ce548a284743a445e3680d7db5ac3ac18ff9b538d16f290ae67f760984dc6594a7c15e9716ed28dc027beceea1ec40a"},
  };
  for (const auto& v : vectors) {
    SCOPED_TRACE(v.name);
    const auto seed = Hex(v.secret);
    const auto msg = Hex(v.message);
    std::array<uint8_t, crypto_sign_PUBLICKEYBYTES> pk{}, pk_from_sk{};
    std::array<uint8_t, crypto_sign_SECRETKEYBYTES> sk{};
    ASSERT_EQ(crypto_sign_seed_keypair(pk.data(), sk.data(), seed.data()), 0);
    EXPECT_EQ(ToHex(pk), v.pub);
    crypto_sign_ed25519_sk_to_pk(pk_from_sk.data(), sk.data());
    EXPECT_EQ(ToHex(pk_from_sk), v.pub);

    std::array<uint8_t, crypto_sign_BYTES> sig{};
    unsigned long long sig_len = 0;
    ASSERT_EQ(crypto_sign_detached(sig.data(), &sig_len, msg.data(), msg.size(), sk.data()), 0);
    EXPECT_EQ(sig_len, sig.size());
    EXPECT_EQ(ToHex(sig), v.signature);

    const auto expected_sig = Hex(v.signature);
    EXPECT_EQ(crypto_sign_verify_detached(expected_sig.data(), msg.data(), msg.size(), pk.data()), 0);
    // A flipped bit in the signature, the message or the public key must fail.
    auto bad_sig = expected_sig;
    bad_sig[5] ^= 0x01;
    EXPECT_NE(crypto_sign_verify_detached(bad_sig.data(), msg.data(), msg.size(), pk.data()), 0);
    if (!msg.empty()) {
      auto bad_msg = msg;
      bad_msg[0] ^= 0x80;
      EXPECT_NE(crypto_sign_verify_detached(expected_sig.data(), bad_msg.data(), bad_msg.size(), pk.data()), 0);
    }
    auto bad_pk = pk;
    bad_pk[0] ^= 0x01;
    EXPECT_NE(crypto_sign_verify_detached(expected_sig.data(), msg.data(), msg.size(), bad_pk.data()), 0);
    // Shoal's own wrappers (crypto::Sign / Verify) give and accept the published signature.
    EXPECT_EQ(ToHex(Sign(msg, std::span<const uint8_t, 64>(sk))), v.signature);
    Signature published{};
    std::copy(expected_sig.begin(), expected_sig.end(), published.begin());
    EXPECT_TRUE(Verify(published, msg, std::span<const uint8_t, 32>(pk)));
    Signature flipped = published;
    flipped[63] ^= 0x40;
    EXPECT_FALSE(Verify(flipped, msg, std::span<const uint8_t, 32>(pk)));
  }
}

// ---- BLAKE2b ----

// RFC 7693 Appendix A: BLAKE2b-512("abc").
TEST_F(KatTest, Blake2b512Rfc7693AppendixA) {
  const std::string abc = "abc";
  std::array<uint8_t, 64> out{};
  ASSERT_EQ(crypto_generichash(out.data(), out.size(), reinterpret_cast<const uint8_t*>(abc.data()), abc.size(),
                               nullptr, 0),
            0);
  EXPECT_EQ(ToHex(out),
            "ba80a53f981c4d0d6a2797b69f12f6e94c212f14685ac4b74b12bb6fdbffa2d1"
            "7d87c5392aab792dc252d5de4533cc9518d38aa8dbf1925ab92386edd4009923");
}

// crypto::HashHex is BLAKE2b-256 (unkeyed, 32-byte digest). Expected values computed with
// Python: hashlib.blake2b(b'abc', digest_size=32).hexdigest() (and b'' for the empty input).
TEST_F(KatTest, HashHexIsBlake2b256) {
  const std::string abc = "abc";
  EXPECT_EQ(HashHex({reinterpret_cast<const uint8_t*>(abc.data()), abc.size()}),
            "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319");
  EXPECT_EQ(HashHex({}), "0e5751c026e543b2e8ab2eb06099daa1d1e5df47778f7787faab45cdf12fe3a8");
  EXPECT_EQ(ToHex(Hash256({reinterpret_cast<const uint8_t*>(abc.data()), abc.size()})),
            "bddd813c634239723171ef3fee98579b94964e3bb1cb3e427262c8c068d52319");
}

// ---- Z85: ZeroMQ RFC 32 ----

// The specification's test vector: 86 4F D2 6F B5 59 F7 5B <-> "HelloWorld".
TEST_F(KatTest, Z85ZeroMqRfc32) {
  const std::vector<uint8_t> bytes = {0x86, 0x4F, 0xD2, 0x6F, 0xB5, 0x59, 0xF7, 0x5B};
  auto text = Z85Encode(bytes);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  EXPECT_EQ(*text, "HelloWorld");
  auto back = Z85Decode("HelloWorld");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, bytes);
}

// Our Z85 agrees with libzmq's (zmq_z85_encode/decode) on random data, and a key pair from
// GenerateKeyPair is one libzmq's CURVE accepts (zmq_curve_public derives the same public key).
TEST_F(KatTest, Z85MatchesLibzmq) {
  for (size_t n : {4u, 32u, 64u, 128u}) {
    std::vector<uint8_t> bytes(n);
    randombytes_buf(bytes.data(), bytes.size());
    auto ours = Z85Encode(bytes);
    ASSERT_TRUE(ours.ok());
    std::string theirs(n / 4 * 5 + 1, '\0');
    ASSERT_NE(zmq_z85_encode(theirs.data(), bytes.data(), bytes.size()), nullptr);
    theirs.pop_back();
    EXPECT_EQ(*ours, theirs);
    std::vector<uint8_t> decoded(n);
    ASSERT_NE(zmq_z85_decode(decoded.data(), ours->c_str()), nullptr);
    EXPECT_EQ(decoded, bytes);
  }
  auto kp = GenerateKeyPair();
  ASSERT_TRUE(kp.ok());
  const std::string secret = Z85Key(kp->curve_secret);
  char pub[41] = {};
  ASSERT_EQ(zmq_curve_public(pub, secret.c_str()), 0);
  EXPECT_EQ(std::string(pub), Z85Key(kp->curve_public));
}

TEST_F(KatTest, Z85RejectsBadInput) {
  EXPECT_FALSE(Z85Encode(std::vector<uint8_t>(3)).ok());
  EXPECT_FALSE(Z85Decode("Hello Worl").ok());  // space is not in the alphabet
  EXPECT_FALSE(Z85Decode("HelloWorl").ok());   // not a multiple of 5
  EXPECT_FALSE(Z85Decode("#####").ok());       // 84 * (85^4 + ... + 1) overflows 32 bits
  auto max = Z85Decode("%nSc0");               // 0xFFFFFFFF, the largest group
  ASSERT_TRUE(max.ok()) << max.status().ToString();
  EXPECT_EQ(*max, (std::vector<uint8_t>{0xFF, 0xFF, 0xFF, 0xFF}));
}

}  // namespace
}  // namespace shoal::crypto
