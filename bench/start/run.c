/*
 * The CPU time of starting the command: `luma-lua --version`, run RUNS
 * times, each child's user + system time from wait4's rusage (the child
 * alone: the dynamic loader, libc's and Lua's start, luma's embedded modules,
 * the exit); the median, against the target. The same for /bin/true: the
 * floor of a process's start on this machine (fork, exec, exit), which a
 * loaded machine raises for every command alike. Built and run by `make bench`:
 *   build/bench_start build/luma-lua [ARG...]      (default ARG: --version)
 */
#define _DEFAULT_SOURCE

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define RUNS 20
#define TARGET_MS 5.0

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

static double seconds(struct timeval tv) { return tv.tv_sec + tv.tv_usec / 1e6; }

/* one run's user + system ms; < 0 when it could not run or failed */
static double once(char **argv) {
  pid_t pid = fork();
  if (pid < 0) return -1;
  if (pid == 0) {
    int null = open("/dev/null", O_WRONLY);
    if (null >= 0) dup2(null, 1);
    execv(argv[0], argv);
    _exit(127);
  }
  int status;
  struct rusage ru;
  if (wait4(pid, &status, 0, &ru) != pid) return -1;
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
  return (seconds(ru.ru_utime) + seconds(ru.ru_stime)) * 1000;
}

/* the median of RUNS runs after one warm-up (the files in the page cache);
   < 0 when a run failed */
static double median_ms(char **cmd, double *min, double *max) {
  double ms[RUNS];
  if (once(cmd) < 0) return -1;
  for (int i = 0; i < RUNS; i++)
    if ((ms[i] = once(cmd)) < 0) return -1;
  qsort(ms, RUNS, sizeof ms[0], cmp);
  *min = ms[0];
  *max = ms[RUNS - 1];
  return (ms[RUNS / 2 - 1] + ms[RUNS / 2]) / 2;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: %s COMMAND [ARG...]\n", argv[0]);
    return 2;
  }
  static char version_arg[] = "--version", true_path[] = "/bin/true";
  char *dflt[] = { argv[1], version_arg, NULL };
  char **cmd = argc > 2 ? argv + 1 : dflt;
  char *floor_cmd[] = { true_path, NULL };
  double min, max, fmin, fmax;
  double median = median_ms(cmd, &min, &max);
  double floor = median_ms(floor_cmd, &fmin, &fmax);
  if (median < 0 || floor < 0) {
    fprintf(stderr, "bench/start: %s failed\n", median < 0 ? cmd[0] : floor_cmd[0]);
    return 1;
  }
  printf("command start (%s", cmd[0]);
  for (char **a = cmd + 1; *a; a++) printf(" %s", *a);
  printf("): %.2f ms CPU, user + system, median of %d (min %.2f, max %.2f); target <= %.0f ms\n",
         median, RUNS, min, max, TARGET_MS);
  printf("  the floor, /bin/true: %.2f ms (min %.2f, max %.2f); the command over it: %.2f ms\n",
         floor, fmin, fmax, median - floor);
  return 0;
}
