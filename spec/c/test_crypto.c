/*
 * base/crypto: known-answer vectors from the standards (FIPS 180-2, RFC 4231,
 * RFC 4648, RFC 7914's PBKDF2-HMAC-SHA256 rows, the GCM specification), then
 * tamper detection, and the random generator across calls, threads and fork.
 */
#define _DEFAULT_SOURCE

#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include "crypto.h"
#include "ctest.h"

static size_t unhex(const char *hex, unsigned char *out) {
  size_t n = strlen(hex) / 2;
  for (size_t i = 0; i < n; i++) {
    unsigned v;
    sscanf(hex + 2 * i, "%2x", &v);
    out[i] = (unsigned char)v;
  }
  return n;
}

static void tohex(const unsigned char *in, size_t len, char *out) {
  for (size_t i = 0; i < len; i++) sprintf(out + 2 * i, "%02x", in[i]);
  out[2 * len] = '\0';
}

typedef struct sha_case {
  const char *in, *want;
} sha_case;

static const sha_case sha_cases[] = {
  { "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855" },
  { "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad" },
  { "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
    "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1" },
};

static void test_sha256(void) {
  for (size_t i = 0; i < sizeof sha_cases / sizeof *sha_cases; i++) {
    char hex[65], hex2[65];
    unsigned char d[32];
    cr_sha256_hex(sha_cases[i].in, strlen(sha_cases[i].in), hex);
    CT_EQ_STR(sha_cases[i].want, hex);
    cr_sha256(sha_cases[i].in, strlen(sha_cases[i].in), d);
    tohex(d, 32, hex2);
    CT_EQ_STR(sha_cases[i].want, hex2);
  }
}

static void test_hmac(void) {
  unsigned char mac[32], key[131];
  char hex[65];
  /* RFC 4231 test case 2: a key shorter than the block */
  cr_hmac_sha256("Jefe", 4, "what do ya want for nothing?", 28, mac);
  tohex(mac, 32, hex);
  CT_EQ_STR("5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843", hex);
  /* test case 6: a key longer than the block is hashed first */
  memset(key, 0xaa, sizeof key);
  const char *msg = "Test Using Larger Than Block-Size Key - Hash Key First";
  cr_hmac_sha256(key, sizeof key, msg, strlen(msg), mac);
  tohex(mac, 32, hex);
  CT_EQ_STR("60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54", hex);
}

static const sha_case b64_cases[] = {
  { "", "" }, { "f", "Zg==" }, { "fo", "Zm8=" }, { "foo", "Zm9v" },
  { "foob", "Zm9vYg==" }, { "fooba", "Zm9vYmE=" }, { "foobar", "Zm9vYmFy" },
};

static const char *const b64_invalid[] = {
  "Zg", "Zg=", "Zm9vY", "Zm9v\n", "Zm9v\r\n", " Zm9v", "Zm 9v", "Zm9v ",
  "Zh==",       /* stray bits after the last byte */
  "Zm9=",       /* the same with one '=' */
  "====", "Z===", "Zm=v", "=m9v", "Zm9v====", "Zg==Zg==",
  "Zm9-", "Zm9_",  /* the URL-safe alphabet is another encoding */
  "Zm9v\x80\x80\x80\x80",
};

static void test_base64(void) {
  char out[64];
  unsigned char dec[64];
  size_t n;
  for (size_t i = 0; i < sizeof b64_cases / sizeof *b64_cases; i++) {
    const sha_case *c = &b64_cases[i];
    size_t len = cr_base64_encode((const unsigned char *)c->in, strlen(c->in), out, sizeof out);
    CT_CHECK(len == strlen(c->want), "encode \"%s\": length %zu", c->in, len);
    CT_EQ_STR(c->want, out);
    CT_CHECK(cr_base64_decode(c->want, strlen(c->want), dec, sizeof dec, &n) == 0, "decode \"%s\"", c->want);
    CT_CHECK(n == strlen(c->in) && memcmp(dec, c->in, n) == 0, "decode \"%s\" gives \"%.*s\"", c->want,
             (int)n, (const char *)dec);
  }
  for (size_t i = 0; i < sizeof b64_invalid / sizeof *b64_invalid; i++)
    CT_CHECK(cr_base64_decode(b64_invalid[i], strlen(b64_invalid[i]), dec, sizeof dec, &n) == -1,
             "\"%s\" is not canonical base64", b64_invalid[i]);

  /* too small: the encoder needs room for the NUL, the decoder for the bytes */
  CT_CHECK(cr_base64_encode((const unsigned char *)"f", 1, out, 4) == 0, "4 bytes hold no \"Zg==\" and NUL");
  CT_EQ_STR("", out);
  CT_CHECK(cr_base64_encode((const unsigned char *)"f", 1, out, 5) == 4, "5 bytes do");
  CT_CHECK(cr_base64_decode("Zm9v", 4, dec, 2, &n) == -2, "3 bytes do not fit in 2");

  unsigned char all[256], back[256];
  char text[345];
  for (int i = 0; i < 256; i++) all[i] = (unsigned char)i;
  size_t len = cr_base64_encode(all, sizeof all, text, sizeof text);
  CT_CHECK(len == 344, "256 bytes encode to 344 characters, got %zu", len);
  CT_CHECK(cr_base64_decode(text, len, back, sizeof back, &n) == 0 && n == 256 && memcmp(all, back, 256) == 0,
           "every byte value round-trips");
}

typedef struct kdf_case {
  const char *pass, *salt;
  unsigned iterations;
  const char *want;
} kdf_case;

static const kdf_case kdf_cases[] = {
  { "password", "salt", 1, "120fb6cffcf8b32c43e7225256c4f837a86548c92ccc35480805987cb70be17b" },
  { "password", "salt", 2, "ae4d0c95af6b46d32d0adff928f06dd02a303f8ef3c251dfd6e2d85a95474c43" },
  { "password", "salt", 4096, "c5e478d59288c841aa530db6845c4c8d962893a001ce4e11a4963873aa98134a" },
  { "passwordPASSWORDpassword", "saltSALTsaltSALTsaltSALTsaltSALTsalt", 4096,
    "348c89dbcbd32b2f32d814b8116e84cf2b17347ebc1800181c4e2a1fb8dd53e1" },
};

static void test_pbkdf2(void) {
  for (size_t i = 0; i < sizeof kdf_cases / sizeof *kdf_cases; i++) {
    const kdf_case *c = &kdf_cases[i];
    unsigned char key[32];
    char hex[65];
    int rc = cr_pbkdf2_sha256(c->pass, strlen(c->pass), (const unsigned char *)c->salt, strlen(c->salt),
                              c->iterations, key);
    CT_CHECK(rc == 0, "pbkdf2 %s/%s/%u", c->pass, c->salt, c->iterations);
    tohex(key, 32, hex);
    CT_EQ_STR(c->want, hex);
  }
}

typedef struct gcm_case {
  const char *key, *nonce, *aad, *plain, *cipher, *tag;
} gcm_case;

/* Test cases 13, 14 and 16 of "The Galois/Counter Mode of Operation" (McGrew, Viega) */
static const gcm_case gcm_cases[] = {
  { "0000000000000000000000000000000000000000000000000000000000000000", "000000000000000000000000", "", "", "",
    "530f8afbc74536b9a963b4f1c4cb738b" },
  { "0000000000000000000000000000000000000000000000000000000000000000", "000000000000000000000000", "",
    "00000000000000000000000000000000", "cea7403d4d606b6e074ec5d3baf39d18", "d0d1c8a799996bf0265b98b5d48ab919" },
  { "feffe9928665731c6d6a8f9467308308feffe9928665731c6d6a8f9467308308", "cafebabefacedbaddecaf888",
    "feedfacedeadbeeffeedfacedeadbeefabaddad2",
    "d9313225f88406e5a55909c5aff5269a86a7a9531534f7da2e4c303d8a318a721c3c0c95956809532fcf0e2449a6b525b16aedf5aa0de657ba637b39",
    "522dc1f099567d07f47f37a32a84427d643a8cdcbfe5c0c97598a2bd2555d1aa8cb08e48590dbb3da7b08b1056828838c5f61e6393ba7a0abcc9f662",
    "76fc6ece0f4e1768cddf8853bb2d551b" },
};

static void test_gcm_vectors(void) {
  for (size_t i = 0; i < sizeof gcm_cases / sizeof *gcm_cases; i++) {
    const gcm_case *c = &gcm_cases[i];
    unsigned char key[32], nonce[12], aad[64], plain[64], cipher[64], tag[16], back[64];
    char hex[129];
    unhex(c->key, key);
    unhex(c->nonce, nonce);
    size_t aadlen = unhex(c->aad, aad), len = unhex(c->plain, plain);
    CT_CHECK(cr_aes256gcm_encrypt(key, nonce, aad, aadlen, plain, len, cipher, tag) == 0, "GCM case %zu", i);
    tohex(cipher, len, hex);
    CT_EQ_STR(c->cipher, hex);
    tohex(tag, 16, hex);
    CT_EQ_STR(c->tag, hex);
    CT_CHECK(cr_aes256gcm_decrypt(key, nonce, aad, aadlen, cipher, len, tag, back) == 0 &&
             memcmp(back, plain, len) == 0, "GCM case %zu decrypts", i);
  }
}

/* Every single-bit change of ciphertext, tag or AAD must fail authentication. */
static void test_gcm_tamper(void) {
  const gcm_case *c = &gcm_cases[2];
  unsigned char key[32], nonce[12], aad[64], plain[64], cipher[64], tag[16], out[64];
  unhex(c->key, key);
  unhex(c->nonce, nonce);
  size_t aadlen = unhex(c->aad, aad), len = unhex(c->plain, plain);
  cr_aes256gcm_encrypt(key, nonce, aad, aadlen, plain, len, cipher, tag);
  int cipher_ok = 0, tag_ok = 0, aad_ok = 0, nonce_ok = 0, zeroed = 1;
  for (size_t bit = 0; bit < len * 8; bit++) {
    cipher[bit / 8] ^= (unsigned char)(1u << bit % 8);
    memset(out, 0x55, sizeof out);
    cipher_ok += cr_aes256gcm_decrypt(key, nonce, aad, aadlen, cipher, len, tag, out) == 0;
    for (size_t k = 0; k < len; k++) zeroed &= out[k] == 0;
    cipher[bit / 8] ^= (unsigned char)(1u << bit % 8);
  }
  for (size_t bit = 0; bit < 128; bit++) {
    tag[bit / 8] ^= (unsigned char)(1u << bit % 8);
    tag_ok += cr_aes256gcm_decrypt(key, nonce, aad, aadlen, cipher, len, tag, out) == 0;
    tag[bit / 8] ^= (unsigned char)(1u << bit % 8);
  }
  for (size_t bit = 0; bit < aadlen * 8; bit++) {
    aad[bit / 8] ^= (unsigned char)(1u << bit % 8);
    aad_ok += cr_aes256gcm_decrypt(key, nonce, aad, aadlen, cipher, len, tag, out) == 0;
    aad[bit / 8] ^= (unsigned char)(1u << bit % 8);
  }
  for (size_t bit = 0; bit < 96; bit++) {
    nonce[bit / 8] ^= (unsigned char)(1u << bit % 8);
    nonce_ok += cr_aes256gcm_decrypt(key, nonce, aad, aadlen, cipher, len, tag, out) == 0;
    nonce[bit / 8] ^= (unsigned char)(1u << bit % 8);
  }
  CT_CHECK(cipher_ok == 0, "%d ciphertext bit flips were accepted", cipher_ok);
  CT_CHECK(tag_ok == 0, "%d tag bit flips were accepted", tag_ok);
  CT_CHECK(aad_ok == 0, "%d AAD bit flips were accepted", aad_ok);
  CT_CHECK(nonce_ok == 0, "%d nonce bit flips were accepted", nonce_ok);
  CT_CHECK(zeroed, "a failed decryption leaves no plaintext behind");
  CT_CHECK(cr_aes256gcm_decrypt(key, nonce, aad, aadlen - 1, cipher, len, tag, out) == -1, "shorter AAD");
  CT_CHECK(cr_aes256gcm_decrypt(key, nonce, aad, aadlen, cipher, len - 1, tag, out) == -1, "truncated ciphertext");
  key[31] ^= 1;
  CT_CHECK(cr_aes256gcm_decrypt(key, nonce, aad, aadlen, cipher, len, tag, out) == -1, "another key");
  key[31] ^= 1;
  /* in place, as the header allows */
  memcpy(out, plain, len);
  cr_aes256gcm_encrypt(key, nonce, aad, aadlen, out, len, out, tag);
  CT_CHECK(memcmp(out, cipher, len) == 0, "encrypting in place gives the same ciphertext");
  CT_CHECK(cr_aes256gcm_decrypt(key, nonce, aad, aadlen, out, len, tag, out) == 0 && memcmp(out, plain, len) == 0,
           "decrypting in place");
}

static void *random_thread(void *arg) {
  unsigned char *buf = arg;
  for (int i = 0; i < 50; i++)
    if (cr_random(buf, 32) != 0) return arg;
  return NULL;
}

static void test_random(void) {
  unsigned char a[32], b[32], big[5000];
  CT_CHECK(cr_random(a, sizeof a) == 0 && cr_random(b, sizeof b) == 0, "cr_random succeeds");
  CT_CHECK(memcmp(a, b, sizeof a) != 0, "two calls give different bytes");
  memset(big, 0, sizeof big);
  CT_CHECK(cr_random(big, sizeof big) == 0, "more than one DRBG request at once");
  int zeros = 0;
  for (size_t i = sizeof big - 64; i < sizeof big; i++) zeros += big[i] == 0;
  CT_CHECK(zeros < 8, "the tail of a long request is filled too (%d zero bytes of 64)", zeros);
  CT_CHECK(cr_random(a, 0) == 0, "zero bytes");

  /* after fork, parent and child draw from the same state unless the child reseeds */
  int fd[2];
  CT_CHECK(pipe(fd) == 0, "pipe");
  pid_t pid = fork();
  if (pid == 0) {
    unsigned char c[32];
    int rc = cr_random(c, sizeof c);
    ssize_t w = write(fd[1], c, sizeof c);
    _exit(rc == 0 && w == (ssize_t)sizeof c ? 0 : 1);
  }
  unsigned char p[32], c[32];
  CT_CHECK(cr_random(p, sizeof p) == 0, "parent after fork");
  close(fd[1]);
  ssize_t got = read(fd[0], c, sizeof c);
  close(fd[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  CT_CHECK(got == (ssize_t)sizeof c && WIFEXITED(status) && WEXITSTATUS(status) == 0, "the child drew 32 bytes");
  CT_CHECK(memcmp(p, c, sizeof p) != 0, "parent and child get different bytes after fork");

  pthread_t t[4];
  unsigned char bufs[4][32];
  int failed = 0;
  for (int i = 0; i < 4; i++) pthread_create(&t[i], NULL, random_thread, bufs[i]);
  for (int i = 0; i < 4; i++) {
    void *r;
    pthread_join(t[i], &r);
    failed += r != NULL;
  }
  CT_CHECK(failed == 0, "cr_random from four threads at once");
  CT_CHECK(memcmp(bufs[0], bufs[1], 32) != 0 && memcmp(bufs[2], bufs[3], 32) != 0, "threads get different bytes");
}

int main(void) {
  test_sha256();
  test_hmac();
  test_base64();
  test_pbkdf2();
  test_gcm_vectors();
  test_gcm_tamper();
  test_random();
  return ct_finish("crypto");
}
