/* lct_checksum.c — CRC-32C: slicing-by-8 tables, the SSE4.2 instruction, and GF(2) combination. */
#include "lct_checksum.h"

#include <pthread.h>
#include <string.h>

#define LCT__CRC32C_POLY 0x82F63B78u /* reflected x^32 + ... (Castagnoli) */

static uint32_t lct__crc_table[8][256];
static pthread_once_t lct__crc_once = PTHREAD_ONCE_INIT;
static int lct__crc_hw;

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define LCT__CRC_X86 1
__attribute__((target("sse4.2"))) static uint32_t lct__crc_sse42(uint32_t crc, const uint8_t *p,
                                                                  size_t n) {
  uint64_t c = crc;
  while (n > 0 && ((uintptr_t)p & 7) != 0) {
    c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
    n--;
  }
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    c = __builtin_ia32_crc32di(c, w);
    p += 8;
    n -= 8;
  }
  while (n-- > 0)
    c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
  return (uint32_t)c;
}

/* Below this many bytes one stream is used: combining three costs a few
 * hundred GF(2) steps. */
#define LCT__CRC_3WAY_MIN (64u << 10)

/* The crc32 instruction has a latency of three cycles and a throughput of
 * one: three independent streams over three thirds of the buffer keep it busy,
 * and lct_crc32c_combine joins them. Takes and returns the conditioned CRC. */
__attribute__((target("sse4.2"))) static uint32_t lct__crc_sse42_3way(uint32_t crc, const uint8_t *p,
                                                                       size_t n) {
  size_t third = n / 24 * 8;
  const uint8_t *a = p, *b = p + third, *c = p + 2 * third;
  uint64_t ca = ~crc, cb = 0xFFFFFFFFu, cc = 0xFFFFFFFFu;
  for (size_t i = 0; i < third; i += 8) {
    uint64_t wa, wb, wc;
    memcpy(&wa, a + i, 8);
    memcpy(&wb, b + i, 8);
    memcpy(&wc, c + i, 8);
    ca = __builtin_ia32_crc32di(ca, wa);
    cb = __builtin_ia32_crc32di(cb, wb);
    cc = __builtin_ia32_crc32di(cc, wc);
  }
  uint32_t r = lct_crc32c_combine(~(uint32_t)ca, ~(uint32_t)cb, third);
  r = lct_crc32c_combine(r, ~(uint32_t)cc, third);
  return ~lct__crc_sse42(~r, p + 3 * third, n - 3 * third);
}
#endif

/* a * b modulo the polynomial, both in reflected form (bit 31 is x^0). */
static uint32_t lct__gf2_mul(uint32_t a, uint32_t b) {
  uint32_t p = 0;
  for (uint32_t m = 1u << 31; m != 0; m >>= 1) {
    if (a & m)
      p ^= b;
    b = (b & 1) ? (b >> 1) ^ LCT__CRC32C_POLY : b >> 1;
  }
  return p;
}

/* x^(8 * 2^k) modulo the polynomial, reflected: joining a piece of n bytes
 * multiplies by the powers of n's set bits. */
static uint32_t lct__byte_shift[64];

static void lct__crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++)
      c = (c & 1) ? (c >> 1) ^ LCT__CRC32C_POLY : c >> 1;
    lct__crc_table[0][i] = c;
  }
  for (uint32_t i = 0; i < 256; i++)
    for (int t = 1; t < 8; t++)
      lct__crc_table[t][i] =
          (lct__crc_table[t - 1][i] >> 8) ^ lct__crc_table[0][lct__crc_table[t - 1][i] & 0xff];
  uint32_t power = 1u << 23; /* x^8 */
  for (int k = 0; k < 64; k++) {
    lct__byte_shift[k] = power;
    power = lct__gf2_mul(power, power);
  }
#ifdef LCT__CRC_X86
  __builtin_cpu_init();
  lct__crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

/* Table-driven CRC on the pre-conditioned register value. */
static uint32_t lct__crc_sw(uint32_t c, const uint8_t *p, size_t n) {
  while (n >= 8) {
    uint32_t lo, hi;
    memcpy(&lo, p, 4);
    memcpy(&hi, p + 4, 4);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    lo = __builtin_bswap32(lo);
    hi = __builtin_bswap32(hi);
#endif
    lo ^= c;
    c = lct__crc_table[7][lo & 0xff] ^ lct__crc_table[6][(lo >> 8) & 0xff] ^
        lct__crc_table[5][(lo >> 16) & 0xff] ^ lct__crc_table[4][lo >> 24] ^
        lct__crc_table[3][hi & 0xff] ^ lct__crc_table[2][(hi >> 8) & 0xff] ^
        lct__crc_table[1][(hi >> 16) & 0xff] ^ lct__crc_table[0][hi >> 24];
    p += 8;
    n -= 8;
  }
  while (n-- > 0)
    c = (c >> 8) ^ lct__crc_table[0][(c ^ *p++) & 0xff];
  return c;
}

uint32_t lct_crc32c(uint32_t crc, const void *bytes, size_t n) {
  pthread_once(&lct__crc_once, lct__crc_init);
  uint32_t c = ~crc;
#ifdef LCT__CRC_X86
  if (lct__crc_hw)
    return n >= LCT__CRC_3WAY_MIN ? lct__crc_sse42_3way(crc, bytes, n) : ~lct__crc_sse42(c, bytes, n);
#endif
  return ~lct__crc_sw(c, bytes, n);
}

/* CRC(A||B) = CRC(A) * x^(8 len_b) + CRC(B) modulo the polynomial: the
 * initial and final inversions of the two pieces cancel in the sum.
 * x^(8 len_b) is the product of the tabled powers of len_b's set bits (the
 * power itself for a power-of-two segment size). */
uint32_t lct_crc32c_combine(uint32_t crc_a, uint32_t crc_b, uint64_t len_b) {
  if (len_b == 0)
    return crc_a ^ crc_b; /* crc_b is 0 */
  pthread_once(&lct__crc_once, lct__crc_init);
  uint64_t bytes = len_b;
  uint32_t shift = lct__byte_shift[__builtin_ctzll(bytes)];
  for (bytes &= bytes - 1; bytes != 0; bytes &= bytes - 1)
    shift = lct__gf2_mul(shift, lct__byte_shift[__builtin_ctzll(bytes)]);
  return lct__gf2_mul(crc_a, shift) ^ crc_b;
}
