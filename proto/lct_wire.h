/* lct_wire.h — frame layout of the lctd protocol (proto/PROTOCOL.md): prefix, limits, split and build. */
#ifndef LCT_WIRE_H
#define LCT_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "lct.pb-c.h"
#include "lct_auth.h"

#ifdef __cplusplus
extern "C" {
#endif

#define LCT_WIRE_VERSION 1            /* protocol version, byte 4 of every frame */
#define LCT_WIRE_PREFIX_BYTES 12      /* "LCTP", version, flags, reserved u16, header length u32 */
#define LCT_WIRE_HEADER_MAX (1u << 20) /* longest protobuf header accepted */
#define LCT_KEY_MAX 1024              /* longest key, bytes */
#define LCT_MAX_DIMS 8                /* most dimensions of a shape */
#define LCT_LIST_MAX 512              /* most entries in one LIST reply */
#define LCT_TOKEN_MAX 4096            /* longest auth token */
#define LCT_DEVICE_ITEMS_MAX 1024     /* most tensors in one PUT_DEVICE_MANY or GET_DEVICE_MANY */
#define LCT_FRAME_DEFAULT (16u << 20) /* default payload bytes per frame */
#define LCT_FRAME_MIN (64u << 10)     /* smallest frame size either side accepts */
#define LCT_FRAME_MAX (1u << 30)      /* largest: frame + header + prefix stays below INT_MAX */
#define LCT_IPC_HANDLE_BYTES 64       /* DeviceBuffer.ipc_handle: a cudaIpcMemHandle_t */
#define LCT_GPU_UUID_BYTES 16         /* DeviceBuffer.gpu_uuid */
#define LCT_BOOT_ID_BYTES 36          /* DeviceBuffer.boot_id: a UUID in text */

/* Largest whole message for a payload bound: what NN_RCVMAXSIZE is set to. */
static inline int lct_wire_msg_max(size_t frame_bytes) {
  return (int)(frame_bytes + LCT_WIRE_HEADER_MAX + LCT_WIRE_PREFIX_BYTES);
}

/* A received frame, split in place (pointers into the message). */
typedef struct lct_wire_frame {
  const uint8_t *header;
  size_t header_len;
  const uint8_t *payload;
  size_t payload_len;
} lct_wire_frame;

/* Validates the prefix of a message of len bytes and splits it. Returns 0,
 * LCT_EPROTO (short, bad magic, nonzero flags or reserved bytes, header length
 * beyond LCT_WIRE_HEADER_MAX or the message) or LCT_EVERSION. */
int lct_wire_split(const void *msg, size_t len, lct_wire_frame *out);

/* Writes the 12-byte prefix for a header of header_len bytes. */
void lct_wire_prefix(uint8_t *dst, size_t header_len);

/* Unpacks and validates a request header against the frame: op present,
 * payload_bytes equal to the payload length, key/prefix/cursor lengths, the
 * shape rank of meta and of every item's meta, the item count, every
 * item's key, the lengths of the auth token, client nonce and proof, and
 * the device buffer's handle, UUID and boot id lengths within bounds. On success *out must be freed with
 * lctpb__request__free_unpacked(*out, NULL). Returns 0, LCT_EPROTO,
 * LCT_ENAMETOOLONG (key empty or over LCT_KEY_MAX), LCT_EINVAL (NUL in key)
 * or LCT_E2BIG (more than LCT_DEVICE_ITEMS_MAX items). */
int lct_wire_request_parse(const lct_wire_frame *frame, Lctpb__Request **out);

/* Unpacks a reply header and checks payload_bytes against the frame, its
 * counts, keys and shapes against the limits requests have, and the
 * challenge's length. */
int lct_wire_reply_parse(const lct_wire_frame *frame, Lctpb__Reply **out);

/* This host's boot id (/proc/sys/kernel/random/boot_id, LCT_BOOT_ID_BYTES
 * of text, no NUL) into out: two processes with the same one share a host,
 * and a CUDA IPC handle of one can be opened by the other. LCT_EIO if it
 * cannot be read. */
int lct_wire_boot_id(uint8_t out[LCT_BOOT_ID_BYTES]);

/* The auth token file format shared by lctd and its clients: the token is the
 * file's first line, without its line end, 1..LCT_TOKEN_MAX bytes. Returns 0,
 * LCT_EIO when the file cannot be read (errno says why), or LCT_EINVAL. */
int lct_token_file_read(const char *path, uint8_t token[LCT_TOKEN_MAX], size_t *len);

/* Checks a key read from the wire or from a caller: 1..LCT_KEY_MAX bytes, no NUL. */
int lct_wire_key_check(const uint8_t *key, size_t len);

#ifdef __cplusplus
}
#endif
#endif
