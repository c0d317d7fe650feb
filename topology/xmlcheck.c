/* SPDX-License-Identifier: MIT */
/* xmlcheck.c — a small well-formedness and matrix-size check of an hwloc XML file, so that bad input gets a precise one-line error before hwloc sees it. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "file.h"
#include "internal.h"
#include "util.h"

/* Deeper nesting than this is not a topology hwloc wrote. */
#define XC_MAX_DEPTH 512
/* Larger than any real dump by two orders of magnitude. */
#define XC_MAX_BYTES (256u << 20)

struct xc_elem {
  char name[32];
  int line;
};

/* The distance matrix being read, when inside <distances2> or <distances2hetero>. */
struct xc_matrix {
  int active;
  int v1;                        /* hwloc 1.x <distances> with <latency/> children */
  char name[64];
  long nbobjs;
  long nindexes;
  long nvalues;
  int line;
};

struct xc {
  const char *path;
  const char *buf;
  size_t len;
  size_t pos;
  int line;
  struct xc_elem stack[XC_MAX_DEPTH];
  int depth;
  int seen_root;
  struct xc_matrix m;
};

static int xc_fail(struct xc *x, int line, const char *what) {
  return strata__error(STRATA_ERR_PARSE, "%s: line %d: %s", x->path, line, what);
}

static int xc_truncated(struct xc *x) {
  if (x->depth > 0)
    return strata__error(STRATA_ERR_PARSE, "%s: truncated XML: the file ends inside <%s> opened at line %d",
                         x->path, x->stack[x->depth - 1].name, x->stack[x->depth - 1].line);
  return strata__error(STRATA_ERR_PARSE, "%s: truncated XML: the file ends inside a tag at line %d", x->path,
                       x->line);
}

/* Advance to `needle`, counting lines; returns 0 when the file ends first. */
static int xc_skip_past(struct xc *x, const char *needle) {
  size_t n = strlen(needle);
  while (x->pos + n <= x->len) {
    if (memcmp(x->buf + x->pos, needle, n) == 0) {
      x->pos += n;
      return 1;
    }
    if (x->buf[x->pos] == '\n')
      x->line++;
    x->pos++;
  }
  x->pos = x->len;
  return 0;
}

/* Count whitespace-separated tokens of text[0..n). */
static long xc_tokens(const char *text, size_t n) {
  long count = 0;
  int in = 0;
  for (size_t i = 0; i < n; i++) {
    int space = isspace((unsigned char)text[i]);
    if (!space && !in)
      count++;
    in = !space;
  }
  return count;
}

/* Text between tags: counted when it is the body of a matrix's index or value list. */
static void xc_text(struct xc *x, const char *text, size_t n) {
  if (!x->m.active || x->m.v1 || x->depth < 1)
    return;
  const char *cur = x->stack[x->depth - 1].name;
  if (strcmp(cur, "indexes") == 0)
    x->m.nindexes += xc_tokens(text, n);
  else if (strcmp(cur, "u64values") == 0 || strcmp(cur, "values") == 0)
    x->m.nvalues += xc_tokens(text, n);
}

/* Check the matrix just closed. */
static int xc_matrix_end(struct xc *x) {
  struct xc_matrix *m = &x->m;
  m->active = 0;
  if (m->nbobjs <= 0 || m->nbobjs > 1000000)
    return strata__error(STRATA_ERR_PARSE, "%s: line %d: distance matrix \"%s\" has an invalid object count",
                         x->path, m->line, m->name);
  long want = m->nbobjs * m->nbobjs;
  if (m->v1) {
    if (m->nvalues != want)
      return strata__error(STRATA_ERR_PARSE,
                           "%s: line %d: distance matrix \"%s\" declares %ld objects but holds %ld values (expected %ld)",
                           x->path, m->line, m->name, m->nbobjs, m->nvalues, want);
    return STRATA_OK;
  }
  if (m->nindexes != m->nbobjs || m->nvalues != want)
    return strata__error(STRATA_ERR_PARSE,
                         "%s: line %d: distance matrix \"%s\" declares %ld objects but lists %ld indexes and %ld values "
                         "(expected %ld and %ld)",
                         x->path, m->line, m->name, m->nbobjs, m->nindexes, m->nvalues, m->nbobjs, want);
  return STRATA_OK;
}

/*
** Parse one start or end tag at x->pos (just after '<'). Attributes are
** checked for quoting; nbobjs and name are kept when the tag opens a matrix.
*/
static int xc_tag(struct xc *x) {
  int line = x->line;
  int closing = 0;
  if (x->pos < x->len && x->buf[x->pos] == '/') {
    closing = 1;
    x->pos++;
  }
  size_t start = x->pos;
  while (x->pos < x->len && (isalnum((unsigned char)x->buf[x->pos]) || strchr("_-.:", x->buf[x->pos])))
    x->pos++;
  if (x->pos >= x->len)
    return xc_truncated(x);
  size_t nlen = x->pos - start;
  if (nlen == 0)
    return xc_fail(x, line, "malformed XML: a tag without a name");
  char name[32];
  snprintf(name, sizeof name, "%.*s", (int)(nlen < sizeof name ? nlen : sizeof name - 1), x->buf + start);

  int is_matrix = !closing && (strcmp(name, "distances2") == 0 || strcmp(name, "distances2hetero") == 0 ||
                               strcmp(name, "distances") == 0);
  if (is_matrix) {
    memset(&x->m, 0, sizeof x->m);
    x->m.active = 1;
    x->m.v1 = strcmp(name, "distances") == 0;
    x->m.line = line;
    x->m.nbobjs = -1;
    strcpy(x->m.name, x->m.v1 ? "distances" : "(unnamed)");
  }
  if (!closing && x->m.active && x->m.v1 && strcmp(name, "latency") == 0)
    x->m.nvalues++;

  /* attributes */
  for (;;) {
    while (x->pos < x->len && isspace((unsigned char)x->buf[x->pos])) {
      if (x->buf[x->pos] == '\n')
        x->line++;
      x->pos++;
    }
    if (x->pos >= x->len)
      return xc_truncated(x);
    char c = x->buf[x->pos];
    if (c == '>' || (c == '/' && !closing)) {
      int empty = c == '/';
      x->pos += empty ? 1 : 0;
      if (x->pos >= x->len)
        return xc_truncated(x);
      if (x->buf[x->pos] != '>')
        return xc_fail(x, x->line, "malformed XML: '/' not followed by '>'");
      x->pos++;
      if (closing) {
        if (x->depth == 0)
          return xc_fail(x, line, "malformed XML: a closing tag with nothing open");
        if (strcmp(x->stack[x->depth - 1].name, name) != 0) {
          char msg[160];
          snprintf(msg, sizeof msg, "malformed XML: </%s> closes <%s> opened at line %d", name,
                   x->stack[x->depth - 1].name, x->stack[x->depth - 1].line);
          return xc_fail(x, line, msg);
        }
        x->depth--;
        if (x->m.active && (strcmp(name, "distances2") == 0 || strcmp(name, "distances2hetero") == 0 ||
                            strcmp(name, "distances") == 0))
          return xc_matrix_end(x);
        return STRATA_OK;
      }
      if (x->depth == 0) {
        if (x->seen_root)
          return xc_fail(x, line, "malformed XML: content after the root element");
        if (strcmp(name, "topology") != 0)
          return xc_fail(x, line, "not an hwloc topology: the root element is not <topology>");
        x->seen_root = 1;
      }
      if (empty) {
        if (is_matrix)
          return xc_matrix_end(x);
        return STRATA_OK;
      }
      if (x->depth >= XC_MAX_DEPTH)
        return xc_fail(x, line, "malformed XML: elements nested too deeply");
      strcpy(x->stack[x->depth].name, name);
      x->stack[x->depth].line = line;
      x->depth++;
      return STRATA_OK;
    }
    if (closing)
      return xc_fail(x, line, "malformed XML: attributes in a closing tag");
    size_t astart = x->pos;
    while (x->pos < x->len && (isalnum((unsigned char)x->buf[x->pos]) || strchr("_-.:", x->buf[x->pos])))
      x->pos++;
    size_t alen = x->pos - astart;
    if (x->pos >= x->len)
      return xc_truncated(x);
    if (alen == 0 || x->buf[x->pos] != '=')
      return xc_fail(x, x->line, "malformed XML: expected name=\"value\" in a tag");
    x->pos++;
    if (x->pos >= x->len)
      return xc_truncated(x);
    char q = x->buf[x->pos];
    if (q != '"' && q != '\'')
      return xc_fail(x, x->line, "malformed XML: an attribute value without quotes");
    x->pos++;
    size_t vstart = x->pos;
    while (x->pos < x->len && x->buf[x->pos] != q) {
      if (x->buf[x->pos] == '\n')
        x->line++;
      if (x->buf[x->pos] == '<')
        return xc_fail(x, x->line, "malformed XML: '<' inside an attribute value");
      x->pos++;
    }
    if (x->pos >= x->len)
      return xc_truncated(x);
    size_t vlen = x->pos - vstart;
    x->pos++;
    if (is_matrix) {
      const char *a = x->buf + astart;
      const char *v = x->buf + vstart;
      if (alen == 6 && memcmp(a, "nbobjs", 6) == 0) {
        char num[24];
        snprintf(num, sizeof num, "%.*s", (int)(vlen < sizeof num ? vlen : sizeof num - 1), v);
        char *end = NULL;
        long n = strtol(num, &end, 10);
        x->m.nbobjs = (end && *end == '\0' && end != num) ? n : -1;
      } else if (alen == 4 && memcmp(a, "name", 4) == 0) {
        snprintf(x->m.name, sizeof x->m.name, "%.*s", (int)(vlen < sizeof x->m.name ? vlen : sizeof x->m.name - 1), v);
      }
    }
  }
}

static int xc_run(struct xc *x) {
  int rc;
  while (x->pos < x->len) {
    const char *lt = memchr(x->buf + x->pos, '<', x->len - x->pos);
    size_t upto = lt ? (size_t)(lt - x->buf) : x->len;
    xc_text(x, x->buf + x->pos, upto - x->pos);
    for (size_t i = x->pos; i < upto; i++) {
      if (x->buf[i] == '\n')
        x->line++;
      else if (x->buf[i] == '\0')
        return xc_fail(x, x->line, "not a text file (NUL byte)");
      else if (x->depth == 0 && !isspace((unsigned char)x->buf[i]))
        return xc_fail(x, x->line, x->seen_root ? "malformed XML: text after the root element"
                                                : "not XML: text before the first tag");
    }
    x->pos = upto;
    if (!lt)
      break;
    x->pos++;
    int line = x->line;
    if (x->pos + 3 <= x->len && memcmp(x->buf + x->pos, "!--", 3) == 0) {
      if (!xc_skip_past(x, "-->"))
        return xc_fail(x, line, "truncated XML: a comment is not closed");
    } else if (x->pos < x->len && x->buf[x->pos] == '?') {
      if (!xc_skip_past(x, "?>"))
        return xc_fail(x, line, "truncated XML: a declaration is not closed");
    } else if (x->pos < x->len && x->buf[x->pos] == '!') {
      if (!xc_skip_past(x, ">"))
        return xc_fail(x, line, "truncated XML: a declaration is not closed");
    } else if ((rc = xc_tag(x)) != STRATA_OK) {
      return rc;
    }
  }
  if (!x->seen_root)
    return strata__error(STRATA_ERR_PARSE, "%s: not an hwloc topology: no <topology> element", x->path);
  if (x->depth > 0)
    return xc_truncated(x);
  return STRATA_OK;
}

/*
** Read the whole file and check it. Reports a missing or unreadable file
** as STRATA_ERR_IO, everything else as STRATA_ERR_PARSE; the message
** always begins with the path.
*/
int strata__topo_xml_check(const char *path) {
  FILE *f = NULL;
  int orc = strata__fopen_input(path, STRATA_ERR_IO, &f); /* never blocks on a FIFO */
  if (orc)
    return orc;
  char *buf = NULL;
  size_t len = 0, cap = 0;
  int rc = STRATA_OK;
  for (;;) {
    if (len == cap) {
      if (cap >= XC_MAX_BYTES) {
        rc = strata__error(STRATA_ERR_PARSE, "%s: too large for an hwloc topology (over %u MiB)", path,
                           XC_MAX_BYTES >> 20);
        break;
      }
      size_t ncap = cap ? cap * 2 : 65536;
      char *nbuf = realloc(buf, ncap);
      if (!nbuf) {
        rc = strata__error(STRATA_ERR_NOMEM, "%s: out of memory reading the file", path);
        break;
      }
      buf = nbuf;
      cap = ncap;
    }
    size_t n = fread(buf + len, 1, cap - len, f);
    len += n;
    if (n == 0) {
      if (ferror(f))
        rc = strata__error(STRATA_ERR_IO, "%s: read error: %s", path, strerror(errno));
      break;
    }
  }
  fclose(f);
  if (rc == STRATA_OK && len == 0)
    rc = strata__error(STRATA_ERR_PARSE, "%s: empty file, not an hwloc topology", path);
  if (rc == STRATA_OK) {
    struct xc *x = calloc(1, sizeof *x);
    if (!x) {
      rc = strata__error(STRATA_ERR_NOMEM, "%s: out of memory", path);
    } else {
      x->path = path;
      x->buf = buf;
      x->len = len;
      x->line = 1;
      rc = xc_run(x);
      free(x);
    }
  }
  free(buf);
  return rc;
}
