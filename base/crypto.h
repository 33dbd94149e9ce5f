/*
 * Hashes, MACs, base64, random bytes, key derivation and authenticated
 * encryption over mbedTLS, Lua-free. Every function is thread-safe: all but
 * cr_random use only their arguments and the stack.
 */
#ifndef LUMA_CRYPTO_H
#define LUMA_CRYPTO_H

#include <stddef.h>

void cr_sha256(const void *data, size_t len, unsigned char out[32]);
/* Lowercase hex digest, NUL-terminated. */
void cr_sha256_hex(const void *data, size_t len, char out[65]);
void cr_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len, unsigned char out[32]);

/* Standard base64 (RFC 4648 §4) with padding, NUL-terminated: outcap must
   hold 4 * ceil(len / 3) + 1 bytes. Returns the length written, or 0 when it
   does not fit (and for empty input, which writes ""). */
size_t cr_base64_encode(const unsigned char *in, size_t len, char *out, size_t outcap);
/* Strict decoding: only the base64 alphabet, a length that is a multiple of
   4, padding only at the end and no stray bits in the last group. Returns 0
   and sets *outlen, -1 for invalid input, -2 when outcap is too small. */
int cr_base64_decode(const char *in, size_t len, unsigned char *out, size_t outcap, size_t *outlen);

/* Bytes from a CTR-DRBG seeded once from the system's entropy and reseeded in
   a forked child. Its state is process-wide, behind one mutex that is also
   held across fork(). Returns 0, or -1 when the entropy source failed. */
int cr_random(void *buf, size_t len);

/* PBKDF2-HMAC-SHA256 (RFC 8018) with a 32-byte output. Returns 0, or -1. */
int cr_pbkdf2_sha256(const char *pass, size_t passlen, const unsigned char *salt, size_t saltlen,
                     unsigned iterations, unsigned char out[32]);

/* AES-256-GCM with a 96-bit nonce and a 128-bit tag; cipher and plain are
   len bytes and may be the same buffer. A nonce must never repeat under one
   key. Encrypt returns 0 (or -1 on an internal failure); decrypt returns 0,
   or -1 when authentication fails, in which case plain is zeroed. */
int cr_aes256gcm_encrypt(const unsigned char key[32], const unsigned char nonce[12], const void *aad,
                         size_t aadlen, const void *plain, size_t len, unsigned char *cipher,
                         unsigned char tag[16]);
int cr_aes256gcm_decrypt(const unsigned char key[32], const unsigned char nonce[12], const void *aad,
                         size_t aadlen, const unsigned char *cipher, size_t len, const unsigned char tag[16],
                         void *plain);

#endif
