/* lct_auth.h — the challenge-response both sides compute: a connection's proof that its client holds a token. */
#ifndef LCT_AUTH_H
#define LCT_AUTH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define LCT_AUTH_NONCE_BYTES 32 /* Reply.auth_nonce and Request.auth_client_nonce */
#define LCT_AUTH_PROOF_BYTES 32 /* Request.auth_proof: an HMAC-SHA-256 */

/* Readies libsodium (idempotent, thread-safe): 0, or -1 when it cannot run. */
int lct_auth_init(void);

/* n unpredictable bytes (libsodium's randombytes; lct_auth_init first). */
void lct_auth_random(uint8_t *out, size_t n);

/* The proof of a token (len bytes) for the server's challenge and the
 * client's nonce: HMAC-SHA-256 keyed by the token over the label
 * "lct auth 1", a NUL, server_nonce and client_nonce (PROTOCOL.md, Access
 * control). The token itself never travels. */
void lct_auth_proof(const uint8_t *token, size_t len, const uint8_t server_nonce[LCT_AUTH_NONCE_BYTES],
                    const uint8_t client_nonce[LCT_AUTH_NONCE_BYTES], uint8_t out[LCT_AUTH_PROOF_BYTES]);

/* Whether two proofs are equal, in time independent of their bytes. */
int lct_auth_proof_equal(const uint8_t a[LCT_AUTH_PROOF_BYTES], const uint8_t b[LCT_AUTH_PROOF_BYTES]);

#ifdef __cplusplus
}
#endif
#endif
