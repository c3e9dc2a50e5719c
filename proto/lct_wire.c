/* lct_wire.c — frame prefix, split and header validation shared by lctd and liblct. */
#include "lct_wire.h"

#include <sodium.h>
#include <stdio.h>
#include <string.h>

#include "lct_error.h"

static const uint8_t lct__magic[4] = {'L', 'C', 'T', 'P'};

static uint32_t lct__rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

void lct_wire_prefix(uint8_t *dst, size_t header_len) {
  memcpy(dst, lct__magic, 4);
  dst[4] = LCT_WIRE_VERSION;
  dst[5] = 0; /* flags */
  dst[6] = 0; /* reserved */
  dst[7] = 0;
  dst[8] = (uint8_t)header_len;
  dst[9] = (uint8_t)(header_len >> 8);
  dst[10] = (uint8_t)(header_len >> 16);
  dst[11] = (uint8_t)(header_len >> 24);
}

int lct_wire_split(const void *msg, size_t len, lct_wire_frame *out) {
  const uint8_t *p = msg;
  if (len < LCT_WIRE_PREFIX_BYTES || memcmp(p, lct__magic, 4) != 0)
    return LCT_EPROTO;
  if (p[4] != LCT_WIRE_VERSION)
    return LCT_EVERSION;
  if (p[5] != 0 || p[6] != 0 || p[7] != 0)
    return LCT_EPROTO;
  uint32_t hlen = lct__rd32(p + 8);
  if (hlen == 0 || hlen > LCT_WIRE_HEADER_MAX || hlen > len - LCT_WIRE_PREFIX_BYTES)
    return LCT_EPROTO;
  out->header = p + LCT_WIRE_PREFIX_BYTES;
  out->header_len = hlen;
  out->payload = out->header + hlen;
  out->payload_len = len - LCT_WIRE_PREFIX_BYTES - hlen;
  return 0;
}

int lct_wire_key_check(const uint8_t *key, size_t len) {
  if (len == 0 || len > LCT_KEY_MAX || key == NULL)
    return LCT_ENAMETOOLONG;
  if (memchr(key, 0, len) != NULL)
    return LCT_EINVAL;
  return 0;
}

static int lct__meta_check(const Lctpb__TensorMeta *m) {
  return m->n_shape > LCT_MAX_DIMS ? LCT_EPROTO : 0;
}

int lct_wire_request_parse(const lct_wire_frame *frame, Lctpb__Request **out) {
  Lctpb__Request *rq = lctpb__request__unpack(NULL, frame->header_len, frame->header);
  if (rq == NULL)
    return LCT_EPROTO;
  int rc = 0;
  if (rq->payload_bytes != frame->payload_len)
    rc = LCT_EPROTO;
  else if (rq->has_key && (rc = lct_wire_key_check(rq->key.data, rq->key.len)) != 0)
    ;
  else if ((rq->has_prefix && rq->prefix.len > LCT_KEY_MAX) ||
           (rq->has_cursor && rq->cursor.len > LCT_KEY_MAX))
    rc = LCT_ENAMETOOLONG;
  else if ((rq->has_auth_token && rq->auth_token.len > LCT_TOKEN_MAX) ||
           (rq->has_auth_client_nonce && rq->auth_client_nonce.len != LCT_AUTH_NONCE_BYTES) ||
           (rq->has_auth_proof && rq->auth_proof.len != LCT_AUTH_PROOF_BYTES))
    rc = LCT_EPROTO;
  else if (rq->device != NULL && (rq->device->ipc_handle.len != LCT_IPC_HANDLE_BYTES ||
                                   rq->device->gpu_uuid.len != LCT_GPU_UUID_BYTES ||
                                   rq->device->boot_id.len != LCT_BOOT_ID_BYTES))
    rc = LCT_EPROTO;
  else if (rq->meta != NULL && (rc = lct__meta_check(rq->meta)) != 0)
    ;
  else if (rq->n_items > LCT_DEVICE_ITEMS_MAX)
    rc = LCT_E2BIG; /* before a pass over them */
  for (size_t i = 0; i < rq->n_items && rc == 0; i++) {
    const Lctpb__DeviceItem *it = rq->items[i];
    if ((rc = lct_wire_key_check(it->key.data, it->key.len)) == 0 && it->meta != NULL)
      rc = lct__meta_check(it->meta);
  }
  if (rc != 0) {
    lctpb__request__free_unpacked(rq, NULL);
    return rc;
  }
  *out = rq;
  return 0;
}

int lct_wire_reply_parse(const lct_wire_frame *frame, Lctpb__Reply **out) {
  Lctpb__Reply *rp = lctpb__reply__unpack(NULL, frame->header_len, frame->header);
  if (rp == NULL)
    return LCT_EPROTO;
  /* A reply is held to the limits of a request: its counts, keys and shapes. */
  int bad = rp->payload_bytes != frame->payload_len || (rp->meta != NULL && lct__meta_check(rp->meta)) ||
            rp->n_entries > LCT_LIST_MAX || rp->n_metas > LCT_DEVICE_ITEMS_MAX ||
            (rp->has_auth_nonce && rp->auth_nonce.len != LCT_AUTH_NONCE_BYTES) ||
            (rp->has_next_cursor && lct_wire_key_check(rp->next_cursor.data, rp->next_cursor.len));
  for (size_t i = 0; i < rp->n_metas && !bad; i++)
    bad = lct__meta_check(rp->metas[i]) != 0;
  for (size_t i = 0; i < rp->n_entries && !bad; i++)
    bad = lct_wire_key_check(rp->entries[i]->key.data, rp->entries[i]->key.len) != 0 ||
          lct__meta_check(rp->entries[i]->meta) != 0;
  if (bad) {
    lctpb__reply__free_unpacked(rp, NULL);
    return LCT_EPROTO;
  }
  *out = rp;
  return 0;
}

int lct_wire_boot_id(uint8_t out[LCT_BOOT_ID_BYTES]) {
  FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
  if (f == NULL)
    return LCT_EIO;
  size_t n = fread(out, 1, LCT_BOOT_ID_BYTES, f);
  fclose(f);
  return n == LCT_BOOT_ID_BYTES ? 0 : LCT_EIO;
}

int lct_token_file_read(const char *path, uint8_t token[LCT_TOKEN_MAX], size_t *len) {
  FILE *f = fopen(path, "r");
  if (f == NULL)
    return LCT_EIO;
  /* The token passes through stdio's buffer and the line: both ours, both
   * wiped, so that no copy outlives the call in freed memory. */
  char iobuf[LCT_TOKEN_MAX + 8], line[LCT_TOKEN_MAX + 3];
  setvbuf(f, iobuf, _IOFBF, sizeof iobuf);
  size_t n = 0;
  if (fgets(line, sizeof line, f) != NULL)
    n = strcspn(line, "\r\n");
  int whole = n < sizeof line - 1 || line[n] == '\n';
  fclose(f);
  int rc = n == 0 || n > LCT_TOKEN_MAX || !whole ? LCT_EINVAL : 0;
  if (rc == 0) {
    memcpy(token, line, n);
    *len = n;
  }
  sodium_memzero(iobuf, sizeof iobuf);
  sodium_memzero(line, sizeof line);
  return rc;
}
