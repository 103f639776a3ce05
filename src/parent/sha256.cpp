// Sha256Hex (include/basal/manifest.h): the hash of manifests, flow sources and every text the
// journal keeps by its hash, through OpenSSL's libcrypto. In the store library, which keys texts by it.
#include <openssl/evp.h>

#include <new>
#include <string>
#include <string_view>

#include "basal/manifest.h"

namespace basal {

std::string Sha256Hex(std::string_view data) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  // EVP_Digest fails only when libcrypto cannot allocate its context: nothing to hash with then.
  if (EVP_Digest(data.data(), data.size(), digest, &size, EVP_sha256(), nullptr) != 1 || size != 32)
    throw std::bad_alloc();
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "sha256:";
  out.reserve(7 + 64);
  for (unsigned int i = 0; i < size; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 0xF];
  }
  return out;
}

}  // namespace basal
