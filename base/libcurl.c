/* libcurl, loaded at its first use: see libcurl.h. */
#include "libcurl.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

cu_api cu;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static char load_error[512];   /* empty once loaded */

/* one symbol into *slot; 0, or -1 with the reason in load_error */
static int symbol(void *lib, const char *name, void **slot) {
  *slot = dlsym(lib, name);
  if (*slot) return 0;
  snprintf(load_error, sizeof load_error,
           "%s has no %s: libcurl 7.68 or later is needed for luma.http and the requests to models",
           LUMA_LIBCURL, name);
  return -1;
}

static void load(void) {
  /* never closed: the transport's thread and handles may outlive any caller */
  void *lib = dlopen(LUMA_LIBCURL, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(load_error, sizeof load_error,
             "luma.http and the requests to models need libcurl, and it cannot be loaded: %s "
             "(on Debian: apt-get install libcurl4)", dlerror());
    return;
  }
  cu_api api;
#define BIND(field) if (symbol(lib, "curl_" #field, (void **)&api.field) != 0) return
  BIND(global_init);
  BIND(easy_init);
  BIND(easy_setopt);
  BIND(easy_getinfo);
  BIND(easy_pause);
  BIND(easy_cleanup);
  BIND(easy_strerror);
  BIND(multi_init);
  BIND(multi_add_handle);
  BIND(multi_remove_handle);
  BIND(multi_setopt);
  BIND(multi_socket_action);
  BIND(multi_info_read);
  BIND(multi_cleanup);
  BIND(multi_strerror);
  BIND(slist_append);
  BIND(slist_free_all);
#undef BIND
  /* curl_global_init is not thread-safe: it runs here, once */
  CURLcode rc = api.global_init(CURL_GLOBAL_DEFAULT);
  if (rc != CURLE_OK) {
    snprintf(load_error, sizeof load_error, "libcurl cannot start: %s", api.easy_strerror(rc));
    return;
  }
  cu = api;
  load_error[0] = '\0';
}

int cu_load(char *err, size_t errlen) {
  if (pthread_once(&load_once, load) == 0 && !load_error[0]) return 0;
  if (errlen) snprintf(err, errlen, "%s", load_error[0] ? load_error : "libcurl cannot be loaded");
  return -1;
}
