/* lct_auth.c — the challenge-response both sides compute: a connection's proof that its client holds a token. */
#include "lct_auth.h"

#include <sodium.h>

/* Domain separation: a proof answers this protocol's challenge and nothing else. */
static const uint8_t lct__auth_label[] = "lct auth 1"; /* with its NUL */

_Static_assert(LCT_AUTH_PROOF_BYTES == crypto_auth_hmacsha256_BYTES, "a proof is one HMAC-SHA-256");

int lct_auth_init(void) { return sodium_init() < 0 ? -1 : 0; }

void lct_auth_random(uint8_t *out, size_t n) { randombytes_buf(out, n); }

void lct_auth_proof(const uint8_t *token, size_t len, const uint8_t server_nonce[LCT_AUTH_NONCE_BYTES],
                    const uint8_t client_nonce[LCT_AUTH_NONCE_BYTES], uint8_t out[LCT_AUTH_PROOF_BYTES]) {
  crypto_auth_hmacsha256_state st;
  crypto_auth_hmacsha256_init(&st, token, len);
  crypto_auth_hmacsha256_update(&st, lct__auth_label, sizeof lct__auth_label);
  crypto_auth_hmacsha256_update(&st, server_nonce, LCT_AUTH_NONCE_BYTES);
  crypto_auth_hmacsha256_update(&st, client_nonce, LCT_AUTH_NONCE_BYTES);
  crypto_auth_hmacsha256_final(&st, out);
  sodium_memzero(&st, sizeof st);
}

int lct_auth_proof_equal(const uint8_t a[LCT_AUTH_PROOF_BYTES], const uint8_t b[LCT_AUTH_PROOF_BYTES]) {
  return crypto_verify_32(a, b) == 0;
}
