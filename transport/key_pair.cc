// The public key-pair calls (include/tessera/security.h) over the transport's CURVE key code.
#include "tessera/security.h"
#include "transport/security.h"

namespace tessera::train {

KeyPair generate_key_pair() {
  internal::CurveKeyPair keys = internal::generate_curve_key_pair().value_or_raise();
  return KeyPair{std::move(keys.public_key), std::move(keys.secret_key)};
}

void write_key_pair(const std::string& prefix, const KeyPair& keys, bool overwrite) {
  internal::write_key_pair_files(prefix, internal::CurveKeyPair{keys.public_key, keys.secret_key}, overwrite).raise();
}

}  // namespace tessera::train
