/* SPDX-License-Identifier: MIT */
/* log.c — logging through a replaceable callback, off unless STRATA_LOG or a handler asks for it. */
#include "config.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static strata_log_fn log_fn;
static void *log_userdata;
static int log_level = -1;         /* -1: off */
static char log_subsystems[256];   /* comma-separated; "" means all */

static const char *const level_names[] = {"error", "warn", "info", "debug"};

static void log_stderr(int level, const char *subsystem, const char *message, void *userdata) {
  (void)userdata;
  fprintf(stderr, "strata[%s] %s: %s\n", subsystem, level_names[level], message);
}

/* Read STRATA_LOG once: a level word and/or subsystem names, comma-separated. */
static void log_read_env(void) {
  const char *env = getenv("STRATA_LOG");
  if (!env || !*env)
    return;
  char buf[256];
  strata__strlcpy(buf, env, sizeof buf);
  int level = STRATA_LOG_INFO;
  char *save = NULL;
  for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int is_level = 0;
    for (int i = 0; i < 4; i++)
      if (strcmp(tok, level_names[i]) == 0) {
        level = i;
        is_level = 1;
      }
    if (!is_level && strlen(log_subsystems) + strlen(tok) + 2 < sizeof log_subsystems) {
      if (log_subsystems[0])
        strcat(log_subsystems, ",");
      strcat(log_subsystems, tok);
    }
  }
  log_level = level;
  log_fn = log_stderr;
}

static int subsystem_enabled(const char *subsystem) {
  if (!log_subsystems[0])
    return 1;
  size_t n = strlen(subsystem);
  for (const char *p = log_subsystems; *p;) {
    const char *end = strchr(p, ',');
    size_t len = end ? (size_t)(end - p) : strlen(p);
    if (len == n && strncmp(p, subsystem, n) == 0)
      return 1;
    if (!end)
      break;
    p = end + 1;
  }
  return 0;
}

STRATA_API void strata_log_set_handler(strata_log_fn fn, int max_level, void *userdata) {
  pthread_once(&log_once, log_read_env);
  pthread_mutex_lock(&log_lock);
  if (fn) {
    log_fn = fn;
    log_level = max_level;
    log_userdata = userdata;
  } else {
    log_fn = NULL;
    log_level = -1;
    log_userdata = NULL;
    log_subsystems[0] = '\0';
    log_read_env();
  }
  pthread_mutex_unlock(&log_lock);
}

void strata__vlog(int level, const char *subsystem, const char *fmt, va_list ap) {
  pthread_once(&log_once, log_read_env);
  if (level > log_level || level < 0 || !log_fn || !subsystem_enabled(subsystem))
    return;
  char msg[1024];
  vsnprintf(msg, sizeof msg, fmt, ap);
  pthread_mutex_lock(&log_lock);
  if (log_fn)
    log_fn(level, subsystem, msg, log_userdata);
  pthread_mutex_unlock(&log_lock);
}

void strata__log(int level, const char *subsystem, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  strata__vlog(level, subsystem, fmt, ap);
  va_end(ap);
}
