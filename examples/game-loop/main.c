/*
 * A 60 Hz game loop that uses luma through libluma (core/luma.h) without
 * ever blocking a frame: it starts a tool that takes half a second of
 * handler time, quick calls, an agent method and (with --ask) a question to
 * the agent's model, and polls them once per frame while the frames tick.
 *
 *   cc main.c -I../../core -L../../build -lluma -o game-loop
 *   ./game-loop [PROGRAM] [FRAMES] [--ask]
 *
 * It prints each result on the frame it arrives, then the worst frame time
 * (the frame's own work, without the wait for the next tick). Exit status 1
 * when a call failed or did not finish.
 */
#define _POSIX_C_SOURCE 200809L

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "luma.h"

static long long now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (long long)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void sleep_until(long long us) {
  long long left = us - now_us();
  if (left <= 0) return;
  struct timespec ts = { (time_t)(left / 1000000), (long)(left % 1000000) * 1000L };
  nanosleep(&ts, NULL);
}

/* What the game waits for: a call and what it is. */
typedef struct job {
  const char *what;
  luma_call *call;
  int reported;
} job;

static int failures;

/* Prints a job's result on the frame it arrives. */
static void report(job *j, int frame) {
  if (!j->call || j->reported || !luma_ready(j->call)) return;
  const char *json;
  luma_error err;
  j->reported = 1;
  if (luma_result(j->call, &json, NULL, &err) == LUMA_OK) {
    printf("frame %d: %s -> %s\n", frame, j->what, json);
  } else {
    printf("frame %d: %s failed: %s %s\n", frame, j->what, err.code, err.message);
    failures++;
  }
}

static luma_call *start_or_say(luma_call *c, const char *what, const luma_error *err) {
  if (!c) {
    printf("cannot start %s: %s %s\n", what, err->code, err->message);
    failures++;
  }
  return c;
}

int main(int argc, char **argv) {
  const char *path = argc > 1 ? argv[1] : "game.luma";
  int frames = argc > 2 ? atoi(argv[2]) : 90;
  int ask = argc > 3 && strcmp(argv[3], "--ask") == 0;

  luma_error err;
  /* the defaults: one pool thread per CPU, each module's max_concurrency 1,
     starts not inline (a handler never runs in the frame) */
  luma_runtime *rt = luma_new(NULL, &err);
  if (!rt) { fprintf(stderr, "luma_new: %s\n", err.message); return 1; }
  luma_program *p = luma_load(rt, path, NULL, NULL, &err);
  if (!p) { fprintf(stderr, "%s: %s\n", err.code, err.message); luma_destroy(rt); return 1; }

  job jobs[6] = {
    { "think (500 ms)", NULL, 0 }, { "roll", NULL, 0 }, { "roll", NULL, 0 },
    { "Helper.two_dice", NULL, 0 }, { "ask", NULL, 0 }, { NULL, NULL, 0 },
  };
  const long long tick = 1000000 / 60;
  long long worst = 0, next = now_us();
  for (int frame = 1; frame <= frames; frame++) {
    long long start = now_us();
    if (frame == 1) jobs[0].call = start_or_say(luma_start(p, "think", "{\"ms\": 500}", &err), "think", &err);
    if (frame == 5) jobs[1].call = start_or_say(luma_start(p, "roll", "{\"seed\": 4}", &err), "roll", &err);
    if (frame == 10) jobs[2].call = start_or_say(luma_start(p, "roll", "{\"seed\": 7}", &err), "roll", &err);
    if (frame == 15)
      jobs[3].call = start_or_say(luma_start_method(p, "Helper", "two_dice", "{\"seed\": 1}", &err), "a method", &err);
    if (frame == 2 && ask)
      jobs[4].call = start_or_say(luma_start_ask(p, "Helper", "Pick a number from 1 to 100.", "Pick", &err), "ask", &err);
    luma_poll(rt, NULL);
    for (job *j = jobs; j->what; j++) report(j, frame);
    long long took = now_us() - start;
    if (took > worst) worst = took;
    next += tick;
    sleep_until(next);
  }
  for (job *j = jobs; j->what; j++) {
    if (j->call && !j->reported) {
      printf("%s did not finish in %d frames\n", j->what, frames);
      failures++;
    }
    luma_call_free(j->call);
  }
  printf("worst frame: %.2f ms\n", worst / 1000.0);
  luma_destroy(rt);
  return failures ? 1 : 0;
}
