/*
 * libcurl, loaded at its first use: the transport (transport.c, tpmsg.c)
 * calls libcurl through the table `cu`, which cu_load fills from
 * dlopen(LUMA_LIBCURL). A process that never makes an HTTP request (the
 * command's --version, check, a program without models or luma.http) never
 * maps libcurl and the thirty-odd libraries it needs, which was most of the
 * command's start. Its headers are still needed to build.
 */
#ifndef LUMA_BASE_LIBCURL_H
#define LUMA_BASE_LIBCURL_H

#include <stddef.h>

#include <curl/curl.h>

/* the file dlopen loads: libcurl's soname on Debian and most systems */
#ifndef LUMA_LIBCURL
#define LUMA_LIBCURL "libcurl.so.4"
#endif

/* The libcurl functions the transport uses, by their names less `curl_`. */
typedef struct cu_api {
  CURLcode (*global_init)(long flags);
  CURL *(*easy_init)(void);
  CURLcode (*easy_setopt)(CURL *curl, CURLoption option, ...);
  CURLcode (*easy_getinfo)(CURL *curl, CURLINFO info, ...);
  CURLcode (*easy_pause)(CURL *curl, int bitmask);
  void (*easy_cleanup)(CURL *curl);
  const char *(*easy_strerror)(CURLcode code);
  CURLM *(*multi_init)(void);
  CURLMcode (*multi_add_handle)(CURLM *multi, CURL *curl);
  CURLMcode (*multi_remove_handle)(CURLM *multi, CURL *curl);
  CURLMcode (*multi_setopt)(CURLM *multi, CURLMoption option, ...);
  CURLMcode (*multi_socket_action)(CURLM *multi, curl_socket_t s, int ev_bitmask, int *running);
  CURLMsg *(*multi_info_read)(CURLM *multi, int *queued);
  CURLMcode (*multi_cleanup)(CURLM *multi);
  const char *(*multi_strerror)(CURLMcode code);
  struct curl_slist *(*slist_append)(struct curl_slist *list, const char *line);
  void (*slist_free_all)(struct curl_slist *list);
} cu_api;

/* Filled by the first cu_load that succeeds; read-only after it. */
extern cu_api cu;

/* Loads libcurl and runs curl_global_init, once per process (any thread,
   at once too). 0 when cu is ready; -1 with what was missing in err, the
   same at every later call. */
int cu_load(char *err, size_t errlen);

#endif
