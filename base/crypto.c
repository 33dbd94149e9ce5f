#define _DEFAULT_SOURCE

#include "crypto.h"

#include <pthread.h>
#include <string.h>
#include <unistd.h>

#include <mbedtls/base64.h>
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/gcm.h>
#include <mbedtls/md.h>
#include <mbedtls/pkcs5.h>
#include <mbedtls/platform_util.h>
#include <mbedtls/sha256.h>

void cr_sha256(const void *data, size_t len, unsigned char out[32]) {
  mbedtls_sha256_ret(data, len, out, 0);
}

void cr_sha256_hex(const void *data, size_t len, char out[65]) {
  static const char hex[] = "0123456789abcdef";
  unsigned char d[32];
  cr_sha256(data, len, d);
  for (int i = 0; i < 32; i++) {
    out[2 * i] = hex[d[i] >> 4];
    out[2 * i + 1] = hex[d[i] & 15];
  }
  out[64] = '\0';
}

void cr_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len, unsigned char out[32]) {
  mbedtls_md_hmac(mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), key, keylen, data, len, out);
}

size_t cr_base64_encode(const unsigned char *in, size_t len, char *out, size_t outcap) {
  size_t olen = 0;
  if (outcap == 0) return 0;
  out[0] = '\0';
  if (mbedtls_base64_encode((unsigned char *)out, outcap, &olen, in, len) != 0) return 0;
  return olen;
}

static int b64_value(char c) {
  if (c >= 'A' && c <= 'Z') return c - 'A';
  if (c >= 'a' && c <= 'z') return c - 'a' + 26;
  if (c >= '0' && c <= '9') return c - '0' + 52;
  if (c == '+') return 62;
  if (c == '/') return 63;
  return -1;
}

/* mbedTLS accepts line breaks and spaces, and ignores stray bits; the store
   wants one canonical text per byte string, so check that first. */
static int b64_canonical(const char *in, size_t len) {
  if (len % 4) return 0;
  size_t pad = 0;
  if (len && in[len - 1] == '=') pad = len > 1 && in[len - 2] == '=' ? 2 : 1;
  for (size_t i = 0; i < len - pad; i++)
    if (b64_value(in[i]) < 0) return 0;
  if (pad == 2) return (b64_value(in[len - 3]) & 15) == 0;
  if (pad == 1) return (b64_value(in[len - 2]) & 3) == 0;
  return 1;
}

int cr_base64_decode(const char *in, size_t len, unsigned char *out, size_t outcap, size_t *outlen) {
  if (!b64_canonical(in, len)) return -1;
  size_t need = len / 4 * 3 - (len && in[len - 1] == '=') - (len > 1 && in[len - 2] == '=');
  if (need > outcap) return -2;
  *outlen = 0;
  if (len == 0) return 0;
  return mbedtls_base64_decode(out, outcap, outlen, (const unsigned char *)in, len) == 0 ? 0 : -1;
}

/* The process-wide generator. rng_lock guards every field; it is held across
   fork() (pthread_atfork) so that a child never inherits it locked. */
static pthread_mutex_t rng_lock = PTHREAD_MUTEX_INITIALIZER;
static mbedtls_entropy_context rng_entropy;
static mbedtls_ctr_drbg_context rng_drbg;
static int rng_ready;
static pid_t rng_pid;

static void rng_prepare(void) { pthread_mutex_lock(&rng_lock); }
static void rng_release(void) { pthread_mutex_unlock(&rng_lock); }

static int rng_seed(void) {
  static const char pers[] = "luma-lua cr_random";
  mbedtls_entropy_init(&rng_entropy);
  mbedtls_ctr_drbg_init(&rng_drbg);
  if (mbedtls_ctr_drbg_seed(&rng_drbg, mbedtls_entropy_func, &rng_entropy, (const unsigned char *)pers,
                            sizeof pers - 1) != 0) {
    mbedtls_ctr_drbg_free(&rng_drbg);
    mbedtls_entropy_free(&rng_entropy);
    return -1;
  }
  if (pthread_atfork(rng_prepare, rng_release, rng_release) != 0) {
    mbedtls_ctr_drbg_free(&rng_drbg);
    mbedtls_entropy_free(&rng_entropy);
    return -1;
  }
  rng_ready = 1;
  rng_pid = getpid();
  return 0;
}

/* A forked child starts with its parent's generator state: without fresh
   entropy both would return the same bytes. */
static int rng_check_fork(void) {
  pid_t pid = getpid();
  if (pid == rng_pid) return 0;
  if (mbedtls_ctr_drbg_reseed(&rng_drbg, (const unsigned char *)&pid, sizeof pid) != 0) return -1;
  rng_pid = pid;
  return 0;
}

int cr_random(void *buf, size_t len) {
  unsigned char *p = buf;
  int rc = 0;
  pthread_mutex_lock(&rng_lock);
  if (!rng_ready) rc = rng_seed();
  if (rc == 0) rc = rng_check_fork();
  while (rc == 0 && len > 0) {
    size_t n = len < MBEDTLS_CTR_DRBG_MAX_REQUEST ? len : MBEDTLS_CTR_DRBG_MAX_REQUEST;
    if (mbedtls_ctr_drbg_random(&rng_drbg, p, n) != 0) rc = -1;
    p += n;
    len -= n;
  }
  pthread_mutex_unlock(&rng_lock);
  return rc;
}

int cr_pbkdf2_sha256(const char *pass, size_t passlen, const unsigned char *salt, size_t saltlen,
                     unsigned iterations, unsigned char out[32]) {
  mbedtls_md_context_t md;
  mbedtls_md_init(&md);
  int rc = mbedtls_md_setup(&md, mbedtls_md_info_from_type(MBEDTLS_MD_SHA256), 1);
  if (rc == 0)
    rc = mbedtls_pkcs5_pbkdf2_hmac(&md, (const unsigned char *)pass, passlen, salt, saltlen, iterations, 32, out);
  mbedtls_md_free(&md);
  return rc == 0 ? 0 : -1;
}

int cr_aes256gcm_encrypt(const unsigned char key[32], const unsigned char nonce[12], const void *aad,
                         size_t aadlen, const void *plain, size_t len, unsigned char *cipher,
                         unsigned char tag[16]) {
  mbedtls_gcm_context gcm;
  mbedtls_gcm_init(&gcm);
  int rc = mbedtls_gcm_setkey(&gcm, MBEDTLS_CIPHER_ID_AES, key, 256);
  if (rc == 0)
    rc = mbedtls_gcm_crypt_and_tag(&gcm, MBEDTLS_GCM_ENCRYPT, len, nonce, 12, aad, aadlen, plain, cipher, 16, tag);
  mbedtls_gcm_free(&gcm);
  return rc == 0 ? 0 : -1;
}

int cr_aes256gcm_decrypt(const unsigned char key[32], const unsigned char nonce[12], const void *aad,
                         size_t aadlen, const unsigned char *cipher, size_t len, const unsigned char tag[16],
                         void *plain) {
  mbedtls_gcm_context gcm;
  mbedtls_gcm_init(&gcm);
  int rc = mbedtls_gcm_setkey(&gcm, MBEDTLS_CIPHER_ID_AES, key, 256);
  if (rc == 0) rc = mbedtls_gcm_auth_decrypt(&gcm, len, nonce, 12, aad, aadlen, tag, 16, cipher, plain);
  mbedtls_gcm_free(&gcm);
  if (rc != 0) {
    mbedtls_platform_zeroize(plain, len);
    return -1;
  }
  return 0;
}
