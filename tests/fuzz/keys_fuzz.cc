// The key material a user hands Shoal: the input is written to a file (mode 0600) and read as
// a secret key file, a public key file and an allow-list, and given to Z85Decode. Whatever
// loads must be valid: 40-character keys, an allow-list whose every key is a valid key taken
// from the file and found by Contains.
#include <fcntl.h>
#include <unistd.h>

#include <string>
#include <string_view>

#include "crypto/keys.h"
#include "fuzz.h"

namespace {

const std::string& Path() {
  static const std::string path = "/tmp/shoal-fuzz-keys-" + std::to_string(::getpid());
  return path;
}

bool WriteFile(const uint8_t* data, size_t size) {
  const int fd = ::open(Path().c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) return false;
  const bool ok = ::write(fd, data, size) == static_cast<ssize_t>(size);
  ::close(fd);
  return ok;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shoal::crypto;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto bytes = Z85Decode(text); bytes.ok()) FUZZ_CHECK(bytes->size() * 5 == size * 4);
  if (!WriteFile(data, size)) return 0;
  if (auto keys = ReadSecretKeyFile(Path()); keys.ok()) FUZZ_CHECK(Z85Key(keys->curve_public).size() == kZ85KeyChars);
  if (auto pub = ReadPublicKey(Path()); pub.ok()) FUZZ_CHECK(pub->size() == kZ85KeyChars);
  if (auto list = AllowList::Load(Path()); list.ok()) {
    // Every key it admits is a 40-character Z85 key that decodes to 32 bytes, appears in the
    // file as written, and is found by Contains in both its forms.
    for (const std::string& key : list->keys()) {
      FUZZ_CHECK(key.size() == kZ85KeyChars);
      auto raw = Z85Decode(key);
      FUZZ_CHECK(raw.ok() && raw->size() == 32);
      FUZZ_CHECK(text.find(key) != std::string_view::npos);
      FUZZ_CHECK(list->Contains(key));
      FUZZ_CHECK(list->Contains(std::string_view(reinterpret_cast<const char*>(raw->data()), raw->size())));
    }
    if (list->size() > 0) FUZZ_CHECK(!list->source().empty());
  }
  ::unlink(Path().c_str());
  return 0;
}
