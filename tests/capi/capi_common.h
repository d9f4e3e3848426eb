/* What the C ABI tests share: CHECK macros that count failures across threads, a free
 * loopback port, and the blobs CSV they train on. C11. */
#ifndef SHOAL_TESTS_CAPI_COMMON_H_
#define SHOAL_TESTS_CAPI_COMMON_H_

#include <netinet/in.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "../../examples/c/logreg.h"
#include "shoal/shoal.h"

static atomic_int g_failures = 0; /* CHECKs run on several threads */
static const char* g_dir;
static char g_csv[512];
static char g_csv_spec[600]; /* "csv:" g_csv */

#define CHECK(cond)                                                                                       \
  do {                                                                                                    \
    if (!(cond)) {                                                                                        \
      fprintf(stderr, "%s:%d: CHECK failed: %s (shoal_last_error: \"%s\")\n", __FILE__, __LINE__, #cond, \
              shoal_last_error());                                                                        \
      ++g_failures;                                                                                       \
    }                                                                                                     \
  } while (0)
#define CHECK_STATUS(expr, want)                                                                              \
  do {                                                                                                        \
    const int got_ = (int)(expr);                                                                             \
    if (got_ != (int)(want)) {                                                                                \
      fprintf(stderr, "%s:%d: %s returned %s, expected %s (shoal_last_error: \"%s\")\n", __FILE__, __LINE__, \
              #expr, shoal_status_name(got_), shoal_status_name(want), shoal_last_error());                  \
      ++g_failures;                                                                                           \
    }                                                                                                         \
  } while (0)
/* A failed call left a message naming what was wrong. */
#define CHECK_ERROR_MENTIONS(text) CHECK(strstr(shoal_last_error(), (text)) != NULL)

static void sleep_ms(int ms) {
  struct timespec t = {ms / 1000, (long)(ms % 1000) * 1000000L};
  nanosleep(&t, NULL);
}

static inline int free_port(void) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a;
  memset(&a, 0, sizeof a);
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (fd < 0 || bind(fd, (struct sockaddr*)&a, sizeof a) != 0 || getsockname(fd, (struct sockaddr*)&a, &len) != 0) {
    perror("free_port");
    exit(2);
  }
  close(fd);
  return ntohs(a.sin_port);
}

/* Well-separated Gaussian blobs: 4 classes, 8 features, header line, label last. */
static void write_blobs_csv(const char* path) {
  FILE* f = fopen(path, "w");
  if (!f) {
    perror(path);
    exit(2);
  }
  fprintf(f, "f0,f1,f2,f3,f4,f5,f6,f7,label\n");
  uint64_t s = 12345;
  for (int i = 0; i < 400; ++i) {
    const int label = i % 4;
    for (int j = 0; j < 8; ++j) {
      double u = 0.0; /* Irwin-Hall: sum of 12 uniforms - 6 ~ N(0, 1) */
      for (int r = 0; r < 12; ++r) u += (double)(logreg_rand(&s) >> 11) / 9007199254740992.0;
      fprintf(f, "%.5f,", (j % 4 == label ? 2.0 : -1.0) + 0.6 * (u - 6.0));
    }
    fprintf(f, "%d\n", label);
  }
  fclose(f);
}

/* The work directory WORK_DIR (created) and the blobs CSV in it (g_csv, g_csv_spec). */
static void setup_work_dir(const char* dir) {
  g_dir = dir;
  mkdir(g_dir, 0755);
  snprintf(g_csv, sizeof g_csv, "%s/blobs.csv", g_dir);
  write_blobs_csv(g_csv);
  snprintf(g_csv_spec, sizeof g_csv_spec, "csv:%s", g_csv);
}

/* The test's verdict as its exit code. */
static int finish_test(const char* name) {
  if (g_failures) {
    fprintf(stderr, "%s: %d check(s) failed\n", name, g_failures);
    return 1;
  }
  printf("%s: all checks passed\n", name);
  return 0;
}

#endif /* SHOAL_TESTS_CAPI_COMMON_H_ */
