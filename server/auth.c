/* auth.c — credentials: the token of auth_token_file, and which credential a challenge's proof or a plain token is. */
#include "auth.h"

#include <errno.h>
#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "access.h"
#include "lct_error.h"

int lct__auth_load(const char *path, lct__auth *out, char *err, size_t errlen) {
  memset(out, 0, sizeof *out);
  if (*path == '\0')
    return 0;
  int rc = lct_token_file_read(path, out->token, &out->len);
  if (rc == LCT_EIO) {
    snprintf(err, errlen, "auth_token_file: '%s' is not allowed: cannot read it (%s)", path, strerror(errno));
    return LCT_ECONFIG;
  }
  if (rc != 0 || out->len < LCT__TOKEN_MIN) {
    sodium_memzero(out, sizeof *out);
    snprintf(err, errlen,
             "auth_token_file: '%s' is not allowed: expected a file whose first line is a token of %d to %d bytes",
             path, LCT__TOKEN_MIN, LCT_TOKEN_MAX);
    return LCT_ECONFIG;
  }
  return 0;
}

int lct__token_equal(const uint8_t *token, size_t len, const uint8_t *given, size_t glen) {
  /* Every byte of the token is visited whatever given holds. */
  volatile uint8_t diff = len != glen;
  for (size_t i = 0; i < len; i++)
    diff |= (uint8_t)(token[i] ^ (i < glen ? given[i] : 0));
  return diff == 0;
}

/* who, or i where match is 1, without a branch on match. */
static int lct__select(int who, int i, int match) {
  unsigned mask = 0u - (unsigned)(match != 0);
  return (int)(((unsigned)i & mask) | ((unsigned)who & ~mask));
}

int lct__auth_prove(const lct__auth *a, const lct__access *acc, const uint8_t server_nonce[LCT_AUTH_NONCE_BYTES],
                    const uint8_t client_nonce[LCT_AUTH_NONCE_BYTES], const uint8_t proof[LCT_AUTH_PROOF_BYTES]) {
  uint8_t want[LCT_AUTH_PROOF_BYTES];
  int who = LCT__WHO_NONE;
  if (a->len > 0) {
    lct_auth_proof(a->token, a->len, server_nonce, client_nonce, want);
    who = lct__select(who, LCT__WHO_ALL, lct_auth_proof_equal(want, proof));
  }
  for (size_t i = 0; acc != NULL && i < acc->n; i++) {
    lct_auth_proof(acc->tenants[i].token, acc->tenants[i].token_len, server_nonce, client_nonce, want);
    who = lct__select(who, (int)i, lct_auth_proof_equal(want, proof));
  }
  sodium_memzero(want, sizeof want);
  return who;
}

int lct__auth_plain(const lct__auth *a, const lct__access *acc, const uint8_t *given, size_t len) {
  int who = a->len > 0 ? lct__select(LCT__WHO_NONE, LCT__WHO_ALL, lct__token_equal(a->token, a->len, given, len))
                       : LCT__WHO_NONE;
  for (size_t i = 0; acc != NULL && i < acc->n; i++)
    who = lct__select(who, (int)i, lct__token_equal(acc->tenants[i].token, acc->tenants[i].token_len, given, len));
  return who;
}

/* HMAC-SHA-256 of a proof: the key hashed first when longer than a block, the inner and outer key blocks, the
 * message (label and nonces, two blocks) and the inner hash. */
static uint64_t lct__proof_blocks(size_t token_len) { return 5 + (token_len > 64 ? (token_len + 9 + 63) / 64 : 0); }

uint64_t lct__auth_cost(const lct__auth *a, const lct__access *acc) {
  uint64_t blocks = a->len > 0 ? lct__proof_blocks(a->len) : 0;
  for (size_t i = 0; acc != NULL && i < acc->n; i++)
    blocks += lct__proof_blocks(acc->tenants[i].token_len);
  return blocks;
}

int lct__auth_budget_take(lct__auth_budget *b, uint64_t now_ms, uint64_t cost) {
  if (now_ms > b->at_ms) {
    uint64_t gained = (now_ms - b->at_ms) * LCT__AUTH_BLOCKS_PER_S / 1000;
    b->blocks = gained >= LCT__AUTH_BLOCKS_PER_S - b->blocks ? LCT__AUTH_BLOCKS_PER_S : b->blocks + gained;
    b->at_ms = now_ms;
  }
  /* An answer that costs more than a second's budget is still checked once the budget is full. */
  if (b->blocks < cost && b->blocks < LCT__AUTH_BLOCKS_PER_S)
    return 0;
  b->blocks -= cost < b->blocks ? cost : b->blocks;
  return 1;
}

void lct__auth_budget_refund(lct__auth_budget *b, uint64_t cost) {
  b->blocks = cost >= LCT__AUTH_BLOCKS_PER_S - b->blocks ? LCT__AUTH_BLOCKS_PER_S : b->blocks + cost;
}
