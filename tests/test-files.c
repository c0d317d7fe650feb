/* SPDX-License-Identifier: MIT */
/* test-files.c — classes 2, 3, 4 and 6 of the hardening issue at the library's level: special files as inputs never
** block, the atomic writer (planted links, temporaries of killed writers, long names), and messages that keep their
** reason and escape what came from a file. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common.h"

static char dir[256];

static void setup(void) {
  snprintf(dir, sizeof dir, "%s/strata-files-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
  cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void) { tc_remove_dir(dir); }

TestSuite(files, .init = setup, .fini = teardown, .timeout = 60);

static void write_text(const char *path, const char *text) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f, "%s: %s", path, strerror(errno));
  fputs(text, f);
  fclose(f);
}

static char *slurp(const char *path) {
  static char buf[65536];
  FILE *f = fopen(path, "rb");
  if (!f)
    return NULL;
  size_t n = fread(buf, 1, sizeof buf - 1, f);
  buf[n] = '\0';
  fclose(f);
  return buf;
}

/* A file of `n` bytes of text. */
static void corpus(const char *path, int n) {
  FILE *f = fopen(path, "wb");
  cr_assert_not_null(f);
  for (int i = 0; i < n; i++)
    fputc("the cat sat on the mat. "[i % 24], f);
  fclose(f);
}

static void expect_fifo_refused(int rc, const char *what) {
  cr_assert_eq(rc, STRATA_ERR_IO, "%s: %s (%s)", what, strata_err_name(rc), strata_last_error());
  cr_assert(strstr(strata_last_error(), "FIFO"), "%s: %s", what, strata_last_error());
}

/* Class 2 (hangs on special files): every input by name is refused at once when it is a FIFO with no writer;
** before, each of these opened the path first and blocked forever (the suite's timeout catches a hang). */
Test(files, fifo_inputs_are_refused_without_blocking) {
  char fifo[300];
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  strata_dataset_t ds = NULL;
  expect_fifo_refused(strata_dataset_text(fifo, 0.1, &ds), "strata_dataset_text");
  strata_model_t m = NULL;
  expect_fifo_refused(strata_model_from_file(fifo, &m), "strata_model_from_file");
  expect_fifo_refused(strata_model_load(fifo, &m), "strata_model_load (a path)");
  char cwd[1024];
  cr_assert_not_null(getcwd(cwd, sizeof cwd));
  cr_assert_eq(chdir(dir), 0);
  int rc = strata_model_load("fifo", &m); /* a bare name: a preset, or a file of that name */
  cr_assert_eq(chdir(cwd), 0);
  expect_fifo_refused(rc, "strata_model_load (a bare name)");
  strata_safetensors_t st = NULL;
  expect_fifo_refused(strata_safetensors_read(fifo, &st), "strata_safetensors_read");
  strata_topology_t t = NULL;
  expect_fifo_refused(strata_topology_load(fifo, &t), "strata_topology_load");
  setenv("STRATA_TOPOLOGY_XML", fifo, 1);
  expect_fifo_refused(strata_topology_load(NULL, &t), "STRATA_TOPOLOGY_XML");
  unsetenv("STRATA_TOPOLOGY_XML");
  /* a directory and a character device are refused the same way */
  cr_assert_eq(strata_dataset_text(dir, 0.1, &ds), STRATA_ERR_IO);
  cr_assert(strstr(strata_last_error(), "directory"), "%s", strata_last_error());
  cr_assert_eq(strata_safetensors_read("/dev/zero", &st), STRATA_ERR_IO);
  cr_assert(strstr(strata_last_error(), "character device"), "%s", strata_last_error());
}

/* Class 3 (good data overwritten): the trace went through the predictable temporary name TRACE.tmp-PID with
** fopen("w"), so a link planted there redirected it onto any file; now it is never written through. */
Test(files, trace_is_never_written_through_a_planted_link) {
  setenv("STRATA_BACKENDS", "host", 1);
  setenv("STRATA_HOST_DEVICES", "2", 1);
  char text[300], trace[300], planted[320], victim[300];
  snprintf(text, sizeof text, "%s/corpus.txt", dir);
  snprintf(trace, sizeof trace, "%s/trace.json", dir);
  snprintf(victim, sizeof victim, "%s/victim.txt", dir);
  snprintf(planted, sizeof planted, "%s.tmp-%ld", trace, (long)getpid());
  corpus(text, 4000);
  write_text(victim, "precious data\n");
  cr_assert_eq(symlink(victim, planted), 0);
  strata_dataset_t ds;
  OK(strata_dataset_text(text, 0.2, &ds));
  struct strata_model_config c = {.kind = STRATA_MODEL_GPT, .vocab = 256, .context = 8, .d_model = 16, .layers = 2,
                                  .heads = 2, .d_ff = 32};
  strata_model_t m;
  OK(strata_model_from_config(&c, &m));
  struct strata_train_options o;
  strata_train_options_default(&o);
  o.batch = 2;
  o.steps = 2;
  o.device = tc_find_device("host", 0);
  struct strata_pipeline_options pp;
  memset(&pp, 0, sizeof pp);
  const int devs[2] = {tc_find_device("host", 0), tc_find_device("host", 1)};
  pp.devices = 2;
  pp.device = devs;
  pp.microbatches = 2;
  pp.trace = trace;
  strata_trainer_t tr;
  OK(strata_trainer_new_pipeline(m, ds, &o, &pp, &tr));
  OK(strata_trainer_step(tr, NULL));
  OK(strata_trainer_step(tr, NULL));
  cr_assert_str_eq(slurp(victim), "precious data\n", "the trace was written through the planted link");
  struct stat sb;
  cr_assert_eq(lstat(trace, &sb), 0);
  cr_assert(S_ISREG(sb.st_mode), "the trace must be a regular file, not the planted link");
  cr_assert(strncmp(slurp(trace), "{\"displayTimeUnit\"", 18) == 0);
  strata_trainer_free(tr);
  strata_model_free(m);
  strata_dataset_free(ds);
}

/* The documented temporary name: NAME (cut to 120 bytes) ".tmp-" FNV-1a-32(NAME) "-" PID "-" 8 characters. */
static void temp_name(char *buf, size_t n, const char *base, long pid, const char *tag) {
  uint32_t h = 2166136261u;
  for (const char *p = base; *p; p++)
    h = (h ^ (unsigned char)*p) * 16777619u;
  size_t keep = strlen(base) > 120 ? 120 : strlen(base);
  snprintf(buf, n, "%s/%.*s.tmp-%08x-%ld-%s", dir, (int)keep, base, (unsigned)h, pid, tag);
}

static int exists(const char *path) {
  struct stat sb;
  return lstat(path, &sb) == 0;
}

/* How many entries of the scratch directory hold ".tmp-". */
static int temporaries(void) {
  DIR *d = opendir(dir);
  int n = 0;
  struct dirent *de;
  while (d && (de = readdir(d)) != NULL)
    n += strstr(de->d_name, ".tmp-") != NULL;
  if (d)
    closedir(d);
  return n;
}

static const float ones[4] = {1, 1, 1, 1};

/* Class 3: a run killed while saving leaves its temporary file; the next save to the same path removes it (its
** writer is gone) and keeps one whose writer still runs. */
Test(files, temporaries_of_a_killed_writer_are_removed_by_the_next_save) {
  pid_t child = fork();
  cr_assert_geq(child, 0);
  if (child == 0)
    _exit(0);
  cr_assert_eq(waitpid(child, NULL, 0), child); /* a pid that no process has now */
  char path[300], dead[600], live[600];
  snprintf(path, sizeof path, "%s/ckpt.st", dir);
  temp_name(dead, sizeof dead, "ckpt.st", (long)child, "abcd1234");
  temp_name(live, sizeof live, "ckpt.st", (long)getppid(), "efgh5678");
  write_text(dead, "half a checkpoint");
  write_text(live, "another writer, still running");
  struct strata_st_tensor t = {.name = "w", .ndim = 1, .shape = {4}, .data = ones};
  OK(strata_safetensors_write(path, &t, 1, NULL, 0));
  cr_assert(!exists(dead), "the killed writer's temporary %s is still there", dead);
  cr_assert(exists(live), "a running writer's temporary was removed");
  cr_assert_eq(temporaries(), 1, "only the running writer's temporary may remain");
  strata_safetensors_t st;
  OK(strata_safetensors_read(path, &st));
  strata_safetensors_free(st);
}

/* Class 3: the writer never follows a link at its temporary name; the target is replaced by rename, whole. A
** kill -9 in the middle of writing (a child killed while it saves a large file) leaves the old file intact. */
Test(files, a_writer_killed_mid_save_leaves_the_old_file_whole) {
  char path[300];
  snprintf(path, sizeof path, "%s/big.st", dir);
  struct strata_st_tensor small = {.name = "w", .ndim = 1, .shape = {4}, .data = ones};
  OK(strata_safetensors_write(path, &small, 1, NULL, 0));
  size_t n = 64u << 20; /* 256 MiB of floats: long enough to be killed in the middle */
  int killed = 0;
  for (int attempt = 0; attempt < 3 && !killed; attempt++) {
    pid_t pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
      float *big = calloc(n, sizeof *big);
      struct strata_st_tensor t = {.name = "w", .ndim = 1, .shape = {(int64_t)n}, .data = big};
      _exit(big && strata_safetensors_write(path, &t, 1, NULL, 0) == STRATA_OK ? 0 : 1);
    }
    /* wait for its temporary file to appear, then kill it */
    for (int i = 0; i < 2000 && temporaries() == 0; i++)
      usleep(1000);
    killed = temporaries() > 0 && kill(pid, SIGKILL) == 0;
    int ws = 0;
    waitpid(pid, &ws, 0);
    killed = killed && WIFSIGNALED(ws);
  }
  if (!killed)
    cr_skip_test("the writer finished before it could be killed");
  strata_safetensors_t st;
  OK(strata_safetensors_read(path, &st));
  int64_t shape[STRATA_ST_MAX_DIMS];
  OK(strata_safetensors_get(st, "w", NULL, shape, NULL));
  cr_assert_eq(shape[0], 4, "the old checkpoint must be intact after the kill");
  strata_safetensors_free(st);
  cr_assert_geq(temporaries(), 1, "the killed writer's temporary is expected until the next save");
  OK(strata_safetensors_write(path, &small, 1, NULL, 0));
  cr_assert_eq(temporaries(), 0, "the next save must remove the killed writer's temporary");
}

/* Class 4 at the tools' level: strata_file_write, which strata-bench calibrate --out and strata-plan --out write
** with (they opened the target with fopen "w" before, so a write that failed left it empty). A write that fails
** part-way (here at the process's file size limit, which holds for root too) keeps the old file whole and leaves no
** temporary; one that succeeds replaces it whole and keeps its mode. */
Test(files, a_failed_file_write_keeps_the_old_file) {
  char path[300], missing[320];
  snprintf(path, sizeof path, "%s/calibration.json", dir);
  snprintf(missing, sizeof missing, "%s/no-such-dir/calibration.json", dir);
  write_text(path, "{\"old\": 1}\n");
  cr_assert_eq(chmod(path, 0640), 0);
  pid_t pid = fork();
  cr_assert_geq(pid, 0);
  if (pid == 0) {
    static char big[65536];
    memset(big, 'x', sizeof big);
    signal(SIGXFSZ, SIG_IGN);
    struct rlimit rl = {.rlim_cur = 4096, .rlim_max = 4096};
    if (setrlimit(RLIMIT_FSIZE, &rl) != 0)
      _exit(3);
    int rc = strata_file_write(path, big, sizeof big);
    _exit(rc == STRATA_ERR_IO && strstr(strata_last_error(), strerror(EFBIG)) ? 0 : 1);
  }
  int ws = 0;
  cr_assert_eq(waitpid(pid, &ws, 0), pid);
  cr_assert(WIFEXITED(ws) && WEXITSTATUS(ws) == 0, "the write past the size limit must fail with EFBIG (status %d)",
            ws);
  cr_assert_str_eq(slurp(path), "{\"old\": 1}\n", "the old file must be whole after the failed write");
  cr_assert_eq(temporaries(), 0, "the failed write must remove its temporary");
  OK(strata_file_write(path, "{\"new\": 2}\n", 11));
  cr_assert_str_eq(slurp(path), "{\"new\": 2}\n");
  struct stat sb;
  cr_assert_eq(stat(path, &sb), 0);
  cr_assert_eq(sb.st_mode & 0777, 0640, "a file replaced keeps its mode (0%o)", (unsigned)(sb.st_mode & 0777));
  cr_assert_eq(strata_file_check(missing), STRATA_ERR_IO);
  cr_assert(strstr(strata_last_error(), "no-such-dir"), "%s", strata_last_error());
  cr_assert_eq(strata_file_check(dir), STRATA_ERR_IO);
  cr_assert(strstr(strata_last_error(), "is a directory"), "%s", strata_last_error());
  OK(strata_file_check(path));
  cr_assert_str_eq(slurp(path), "{\"new\": 2}\n", "a check must not touch the file");
  cr_assert_eq(temporaries(), 0);
}

/* Class 4 (work lost at the end): a file name that fits (250 bytes) once got a temporary name that did not
** (NAME.tmp-XXXXXX, 261 bytes), so the save after the training failed; temporary names are bounded now. */
Test(files, a_name_that_fits_gets_a_temporary_name_that_fits) {
  char base[251], path[600];
  memset(base, 'c', 250);
  base[250] = '\0';
  snprintf(path, sizeof path, "%s/%s", dir, base);
  OK(strata_file_check(path));
  struct strata_st_tensor t = {.name = "w", .ndim = 1, .shape = {4}, .data = ones};
  OK(strata_safetensors_write(path, &t, 1, NULL, 0));
  OK(strata_safetensors_write(path, &t, 1, NULL, 0));
  cr_assert(exists(path));
  cr_assert_eq(temporaries(), 0);
  /* and the checks name what cannot be written */
  char nodir[400];
  snprintf(nodir, sizeof nodir, "%s/no-such-dir/x.st", dir);
  cr_assert_eq(strata_file_check(nodir), STRATA_ERR_IO);
  cr_assert(strstr(strata_last_error(), "No such file"), "%s", strata_last_error());
  cr_assert_eq(strata_file_check(dir), STRATA_ERR_IO);
  cr_assert(strstr(strata_last_error(), "directory"), "%s", strata_last_error());
  /* the deprecated name is the same check, for one more release */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  OK(strata_safetensors_check_path(path));
  cr_assert_eq(strata_safetensors_check_path(nodir), STRATA_ERR_IO);
#pragma GCC diagnostic pop
}

/* Issue 37, item 1: a special file named as an output is refused before anything is written, by the writer itself
** and by the checks the tools make first; it is still there, the same kind, and no temporary is left. */
static void expect_special_refused(const char *path, const char *kind) {
  static const char text[] = "{\"x\": 1}\n";
  struct stat before, after;
  cr_assert_eq(stat(path, &before), 0);
  int rc = strata_file_write(path, text, sizeof text - 1);
  cr_assert_eq(rc, STRATA_ERR_IO, "strata_file_write %s: %s (%s)", path, strata_err_name(rc), strata_last_error());
  cr_assert(strstr(strata_last_error(), kind) && strstr(strata_last_error(), "not a regular file"), "%s",
            strata_last_error());
  cr_assert_eq(strata_file_check(path), STRATA_ERR_IO, "strata_file_check %s", path);
  const struct strata_file_use use[] = {{.path = path, .what = "--out", .output = 1}};
  cr_assert_eq(strata_file_preflight(use, 1), STRATA_ERR_IO);
  cr_assert(strncmp(strata_last_error(), "--out: ", 7) == 0 && strstr(strata_last_error(), kind), "%s",
            strata_last_error());
  cr_assert_eq(stat(path, &after), 0);
  cr_assert_eq((int)(after.st_mode & S_IFMT), (int)(before.st_mode & S_IFMT), "%s changed kind", path);
  cr_assert_eq(after.st_ino, before.st_ino, "%s was replaced", path);
  cr_assert_eq(temporaries(), 0, "a refused write must leave no temporary");
}

Test(files, an_output_never_replaces_a_fifo) {
  char fifo[300], link[300], regular[300], to_regular[300];
  snprintf(fifo, sizeof fifo, "%s/fifo", dir);
  snprintf(link, sizeof link, "%s/link-to-fifo", dir);
  snprintf(regular, sizeof regular, "%s/regular.json", dir);
  snprintf(to_regular, sizeof to_regular, "%s/link-to-regular", dir);
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  expect_special_refused(fifo, "a FIFO");
  cr_assert_eq(symlink("fifo", link), 0); /* a link is followed: to a FIFO, refused */
  expect_special_refused(link, "a FIFO");
  /* a link to a regular file is replaced as before */
  write_text(regular, "old\n");
  cr_assert_eq(symlink("regular.json", to_regular), 0);
  OK(strata_file_check(to_regular));
  OK(strata_file_write(to_regular, "new\n", 4));
  cr_assert_str_eq(slurp(to_regular), "new\n");
  /* the inputs a tool reads by name refuse a FIFO too, never waiting for a writer */
  int format = -1;
  expect_fifo_refused(strata_token_format_detect(fifo, &format), "strata_token_format_detect");
  strata_machine_t mc = NULL;
  expect_fifo_refused(strata_machine_load_calibration(fifo, NULL, &mc), "strata_machine_load_calibration");
  cr_assert_null(mc);
}

/* The same for a character device, made in the scratch directory (never the system's /dev): only root may. */
Test(files, an_output_never_replaces_a_character_device) {
  if (geteuid() != 0)
    cr_skip_test("mknod of a character device needs root; this runs as uid %d", (int)geteuid());
  char node[300];
  snprintf(node, sizeof node, "%s/null", dir);
  if (mknod(node, S_IFCHR | 0600, makedev(1, 3)) != 0)
    cr_skip_test("mknod %s: %s (a container without CAP_MKNOD)", node, strerror(errno));
  expect_special_refused(node, "a character device");
}

/* Issue 37, item 2: strata_file_same compares files by device and inode (links, other spellings), and outputs not
** written yet by their directory and name; strata_file_preflight refuses an output that is an input or another
** output, naming both. */
Test(files, an_output_is_never_an_input_of_the_same_run) {
  char in[300], dot[320], hard[300], soft[300], out[300], other[300], up[600];
  snprintf(in, sizeof in, "%s/calibration.json", dir);
  snprintf(dot, sizeof dot, "%s/./calibration.json", dir);
  snprintf(hard, sizeof hard, "%s/hard.json", dir);
  snprintf(soft, sizeof soft, "%s/soft.json", dir);
  snprintf(out, sizeof out, "%s/layout.json", dir);
  snprintf(other, sizeof other, "%s/other.json", dir);
  const char *leaf = strrchr(dir, '/') + 1;
  snprintf(up, sizeof up, "%s/../%s/layout.json", dir, leaf); /* out, not there yet, spelt another way */
  write_text(in, "{}\n");
  cr_assert_eq(link(in, hard), 0);
  cr_assert_eq(symlink("calibration.json", soft), 0);
  cr_assert(strata_file_same(in, in));
  cr_assert(strata_file_same(in, dot));
  cr_assert(strata_file_same(in, hard), "a hard link is the same file");
  cr_assert(strata_file_same(soft, in), "a symbolic link is the same file");
  cr_assert(strata_file_same(out, up), "two spellings of a file not written yet are one");
  cr_assert(!strata_file_same(in, out));
  cr_assert(!strata_file_same(out, other));
  cr_assert(!strata_file_same(in, NULL) && !strata_file_same(NULL, in) && !strata_file_same("", in));
  const char *outputs[] = {in, dot, hard, soft};
  for (size_t i = 0; i < sizeof outputs / sizeof *outputs; i++) {
    const struct strata_file_use use[] = {{.path = in, .what = "--calibration"},
                                          {.path = outputs[i], .what = "--out", .output = 1}};
    cr_assert_eq(strata_file_preflight(use, 2), STRATA_ERR_INVALID, "%s", outputs[i]);
    cr_assert(strstr(strata_last_error(), "--out '") && strstr(strata_last_error(), "is the --calibration file"),
              "%s", strata_last_error());
  }
  cr_assert_str_eq(slurp(in), "{}\n", "a check never writes");
  const struct strata_file_use two[] = {{.path = out, .what = "--out", .output = 1},
                                        {.path = up, .what = "--trace", .output = 1}};
  cr_assert_eq(strata_file_preflight(two, 2), STRATA_ERR_INVALID);
  cr_assert(strstr(strata_last_error(), "--trace '") && strstr(strata_last_error(), "is the --out file; one output"),
            "%s", strata_last_error());
  /* an input that is not there is no file to lose (a preset's name); an output may replace the input it names */
  const struct strata_file_use fine[] = {{.path = "gpt2", .what = "--model"},
                                         {.path = in, .what = "--resume"},
                                         {.path = NULL, .what = "--trace", .output = 1},
                                         {.path = soft, .what = "--save", .output = 1, .replaces = "--resume"},
                                         {.path = out, .what = "--out", .output = 1}};
  OK(strata_file_preflight(fine, 5));
  cr_assert(!exists(out), "a check creates no output");
  cr_assert_eq(temporaries(), 0);
  cr_assert_eq(strata_file_preflight(NULL, 1), STRATA_ERR_INVALID);
  OK(strata_file_preflight(NULL, 0));
}

/* Class 6 (messages): a path over 1,000 bytes kept no reason (the last-error buffer was cut); now the reason is
** always there, for long and for too-long paths. */
Test(files, a_long_path_keeps_its_reason) {
  static char path[9000];
  static const size_t lens[] = {1500, 5000, 8500};
  for (size_t k = 0; k < sizeof lens / sizeof *lens; k++) {
    size_t len = lens[k];
    int at = snprintf(path, sizeof path, "%s/no-such-dir", dir);
    while ((size_t)at < len)
      at += snprintf(path + at, sizeof path - (size_t)at, "/%.200s", "segment-of-a-long-path-segment-of-a-long-path");
    strata_dataset_t ds;
    cr_assert_eq(strata_dataset_text(path, 0.1, &ds), STRATA_ERR_IO);
    const char *e = strata_last_error();
    const char *reason = len < 4096 ? "No such file or directory" : "File name too long";
    size_t el = strlen(e), rl = strlen(reason);
    cr_assert(el >= rl && strcmp(e + el - rl, reason) == 0, "a %zu-byte path lost its reason: ...%s", len,
              el > 80 ? e + el - 80 : e);
  }
}

static void assert_no_controls(const char *s, const char *what) {
  for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
    cr_assert(*p >= 0x20 && *p != 0x7f, "%s holds control byte 0x%02x: %s", what, *p, s);
    cr_assert(!(p[0] == 0xc2 && p[1] >= 0x80 && p[1] < 0xa0), "%s holds a C1 control: %s", what, s);
  }
}

/* Class 6: text from a file (a model's name, a value in an error) is escaped, so a model file cannot drive the
** user's terminal; printable UTF-8 stays as it is. */
Test(files, control_characters_from_files_are_escaped) {
  char path[300];
  snprintf(path, sizeof path, "%s/evil.json", dir);
  write_text(path, "{\"kind\": \"gpt\", \"name\": \"evil\\u001b]0;pwned\\u0007\\u009b31m caf\\u00e9\", \"vocab\": 256, "
                   "\"context\": 8, \"d_model\": 16, \"layers\": 1, \"heads\": 2, \"d_ff\": 32}\n");
  strata_model_t m;
  OK(strata_model_from_file(path, &m));
  const char *name = strata_model_config(m)->name;
  assert_no_controls(name, "the model's name");
  cr_assert(strstr(name, "evil\\x1b]0;pwned\\x07\\u009b31m caf\xc3\xa9"), "name: %s", name);
  strata_model_free(m);
  write_text(path, "{\"kind\": \"\\u001b[2J\\u001b[31mgpt\", \"vocab\": 256}\n");
  cr_assert_eq(strata_model_from_file(path, &m), STRATA_ERR_PARSE);
  assert_no_controls(strata_last_error(), "the error message");
  cr_assert(strstr(strata_last_error(), "\\x1b[2J"), "%s", strata_last_error());
  /* a path with a newline and an escape prints on one line too */
  char odd[300];
  snprintf(odd, sizeof odd, "%s/no\nsuch\x1b[1mfile", dir);
  strata_dataset_t ds;
  cr_assert_eq(strata_dataset_text(odd, 0.1, &ds), STRATA_ERR_IO);
  assert_no_controls(strata_last_error(), "the error message");
}
