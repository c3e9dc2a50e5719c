/* lct_checksum.h — CRC-32C of tensor bytes, shared by lctd and liblct for end-to-end checks. */
#ifndef LCT_CHECKSUM_H
#define LCT_CHECKSUM_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* CRC-32C (Castagnoli, reflected polynomial 0x82F63B78, initial value and
 * final xor 0xFFFFFFFF) of n bytes, continuing from crc: pass 0 to start, and
 * the previous result to append bytes. lct_crc32c(0, "123456789", 9) is
 * 0xE3069283. Uses the SSE4.2 instruction when the CPU has it. Thread-safe. */
uint32_t lct_crc32c(uint32_t crc, const void *bytes, size_t n);

/* CRC-32C of A||B from crc_a = CRC(A), crc_b = CRC(B) and the length of B,
 * so that pieces checksummed in parallel combine into the whole's CRC. */
uint32_t lct_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b);

#ifdef __cplusplus
}
#endif
#endif
