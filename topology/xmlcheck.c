/* SPDX-License-Identifier: MIT */
/* xmlcheck.c — read an hwloc XML file, refuse with a one-line reason what hwloc 2.9 cannot load safely, and hand hwloc one canonical UTF-8 rendering of the rest. */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "core/file.h"
#include "internal.h"
#include "core/core.h"

/* Deeper nesting than this is not a topology hwloc wrote. */
#define XC_MAX_DEPTH 512
/* Larger than any real dump by two orders of magnitude. */
#define XC_MAX_BYTES (256u << 20)
/* hwloc writes at most a dozen attributes on one element. */
#define XC_MAX_ATTRS 64

/* A growable output buffer; `nomem` sticks once an allocation failed. */
struct xc_buf {
  char *p;
  size_t len, cap;
  int nomem;
};

static void xb_put(struct xc_buf *b, const char *s, size_t n) {
  if (b->nomem)
    return;
  if (b->len + n + 1 > b->cap) {
    size_t ncap = b->cap ? b->cap : 65536;
    while (b->len + n + 1 > ncap)
      ncap *= 2;
    char *np = ncap <= (size_t)XC_MAX_BYTES * 8 ? realloc(b->p, ncap) : NULL;
    if (!np) {
      b->nomem = 1;
      return;
    }
    b->p = np;
    b->cap = ncap;
  }
  memcpy(b->p + b->len, s, n);
  b->len += n;
  b->p[b->len] = '\0';
}

static void xb_puts(struct xc_buf *b, const char *s) {
  xb_put(b, s, strlen(s));
}

static void xb_putc(struct xc_buf *b, char c) {
  xb_put(b, &c, 1);
}

/* Append code point `cp` as UTF-8. */
static void xb_put_utf8(struct xc_buf *b, unsigned long cp) {
  char u[4];
  if (cp < 0x80) {
    xb_putc(b, (char)cp);
  } else if (cp < 0x800) {
    u[0] = (char)(0xc0 | (cp >> 6));
    u[1] = (char)(0x80 | (cp & 0x3f));
    xb_put(b, u, 2);
  } else if (cp < 0x10000) {
    u[0] = (char)(0xe0 | (cp >> 12));
    u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
    u[2] = (char)(0x80 | (cp & 0x3f));
    xb_put(b, u, 3);
  } else {
    u[0] = (char)(0xf0 | (cp >> 18));
    u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
    u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
    u[3] = (char)(0x80 | (cp & 0x3f));
    xb_put(b, u, 4);
  }
}

/* One attribute of the tag being read: its name in the input, its decoded value in `vals`. */
struct xc_attr {
  const char *name;
  size_t nlen;
  size_t voff, vlen;
};

struct xc_elem {
  char name[32];
  int line;
  int numa_or_root;              /* an <object> that may hold <page_type> */
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
  const char *buf;               /* the file as UTF-8 */
  size_t len;
  size_t pos;
  int line;
  struct xc_elem stack[XC_MAX_DEPTH];
  int depth;
  int seen_root;
  int root_closed;
  int version_major;             /* 1 for a file without version (hwloc 1.x), else its major */
  int skip;                      /* depth of a <userdata> being dropped, 0 otherwise */
  struct xc_matrix m;
  struct xc_buf out;             /* the canonical rendering handed to hwloc */
  struct xc_buf vals;            /* decoded attribute values of the current tag */
  struct xc_attr attrs[XC_MAX_ATTRS];
  int nattrs;
};

/* Copy `src` into dst[n] for a message: control characters as \xNN, so that a message stays one line
** and no escape sequence from a file reaches a terminal; cut at `max` bytes of input. */
static const char *xc_quote(char *dst, size_t n, const char *src, size_t max) {
  size_t o = 0;
  for (size_t i = 0; src[i] && i < max && o + 5 < n; i++) {
    unsigned char c = (unsigned char)src[i];
    if (c < 0x20 || c == 0x7f)
      o += (size_t)snprintf(dst + o, n - o, "\\x%02x", c);
    else
      dst[o++] = (char)c;
  }
  dst[o] = '\0';
  return dst;
}

/* A character of an element or attribute name (strchr alone would also match the NUL byte). */
static int xc_namechar(char c) {
  return c != '\0' && (isalnum((unsigned char)c) || strchr("_-.:", c) != NULL);
}

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

/* Elements whose text body hwloc reads; text anywhere else is dropped. */
static int xc_has_content(const char *name) {
  return strcmp(name, "indexes") == 0 || strcmp(name, "u64values") == 0 || strcmp(name, "userdata") == 0;
}

/* Text between tags: kept for the elements that have a body, counted for matrices. */
static void xc_text(struct xc *x, const char *text, size_t n) {
  if (x->depth < 1)
    return;
  const char *cur = x->stack[x->depth - 1].name;
  if (!xc_has_content(cur) || x->skip)
    return;
  xb_put(&x->out, text, n);
  if (!x->m.active || x->m.v1)
    return;
  if (strcmp(cur, "indexes") == 0)
    x->m.nindexes += xc_tokens(text, n);
  else if (strcmp(cur, "u64values") == 0)
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
** Which element may hold which: what hwloc 2.9 writes and reads. hwloc
** refuses an element it does not know under an object, and leaks the
** object it was building (found by fuzzing): so any other is refused here.
*/
static const struct {
  const char *parent, *children;
} xc_children[] = {
    {"topology", " object distances2 distances2hetero support memattr cpukind "},
    {"object", " object page_type info distances userdata "},
    {"distances", " latency "},
    {"distances2", " indexes u64values "},
    {"distances2hetero", " indexes u64values "},
    {"memattr", " memattr_value "},
    {"cpukind", " info "},
};

/*
** The attributes each element may carry, where hwloc 2.9 fails on any
** other: a failure inside an object's info, page_type or v1 distances
** leaks that object. NULL: hwloc ignores what it does not know.
*/
static const struct {
  const char *element, *attrs;
} xc_attrs[] = {
    {"info", " name value "},
    {"page_type", " size count "},
    {"distances", " nbobjs relative_depth latency_base "},
    {"latency", " value "},
    {"indexes", " length "},
    {"u64values", " length "},
    {"userdata", " name length encoding "},
    {"memattr", " name flags "},
    {"memattr_value", " target_obj_gp_index target_obj_type value initiator_cpuset initiator_obj_gp_index "
                      "initiator_obj_type "},
    {"cpukind", " cpuset forced_efficiency "},
};

/* Is attribute `attr` (n bytes) allowed on <element>? */
static int xc_attr_ok(const char *element, const char *attr, size_t n) {
  char key[72];
  if (n > 64)
    return 0;
  snprintf(key, sizeof key, " %.*s ", (int)n, attr);
  for (size_t i = 0; i < sizeof xc_attrs / sizeof *xc_attrs; i++)
    if (strcmp(xc_attrs[i].element, element) == 0)
      return strstr(xc_attrs[i].attrs, key) != NULL;
  return 1;
}

/* Is <child> allowed inside <parent>? */
static int xc_child_ok(const char *parent, const char *child) {
  char key[40];
  snprintf(key, sizeof key, " %s ", child);
  for (size_t i = 0; i < sizeof xc_children / sizeof *xc_children; i++)
    if (strcmp(xc_children[i].parent, parent) == 0)
      return strstr(xc_children[i].children, key) != NULL;
  return 0; /* info, page_type, latency, indexes, u64values, userdata, support, memattr_value: no children */
}

/* The decoded value of attribute `name` of the current tag, or NULL. */
static const char *xc_attr(struct xc *x, const char *name) {
  size_t n = strlen(name);
  for (int i = 0; i < x->nattrs; i++)
    if (x->attrs[i].nlen == n && memcmp(x->attrs[i].name, name, n) == 0)
      return x->vals.p + x->attrs[i].voff;
  return NULL;
}

/*
** Decode the attribute value text[0..n) (entities, invalid UTF-8) into
** x->vals, NUL-terminated. Control characters and unknown entities are
** refused; bytes that are not UTF-8 become '?', since libxml2 would refuse
** the whole file for them and the minimal parser keep them raw.
*/
static int xc_decode_value(struct xc *x, int line, const char *text, size_t n) {
  for (size_t i = 0; i < n;) {
    unsigned char c = (unsigned char)text[i];
    if (c == '&') {
      const char *semi = memchr(text + i, ';', n - i < 12 ? n - i : 12);
      if (!semi)
        return xc_fail(x, line, "malformed XML: '&' without an entity name in an attribute value");
      size_t elen = (size_t)(semi - (text + i)) + 1;
      const char *e = text + i;
      unsigned long cp = 0;
      if (elen == 4 && memcmp(e, "&lt;", 4) == 0)
        cp = '<';
      else if (elen == 4 && memcmp(e, "&gt;", 4) == 0)
        cp = '>';
      else if (elen == 5 && memcmp(e, "&amp;", 5) == 0)
        cp = '&';
      else if (elen == 6 && memcmp(e, "&quot;", 6) == 0)
        cp = '"';
      else if (elen == 6 && memcmp(e, "&apos;", 6) == 0)
        cp = '\'';
      else if (elen >= 4 && e[1] == '#') {
        int hex = e[2] == 'x';
        const char *d = e + 2 + hex;
        if (d == semi)
          return xc_fail(x, line, "malformed XML: an empty character reference");
        for (; d < semi; d++) {
          int v = isdigit((unsigned char)*d) ? *d - '0'
                  : (hex && isxdigit((unsigned char)*d)) ? tolower((unsigned char)*d) - 'a' + 10
                                                          : -1;
          if (v < 0)
            return xc_fail(x, line, "malformed XML: a bad character reference in an attribute value");
          cp = cp * (hex ? 16 : 10) + (unsigned long)v;
          if (cp > 0x10ffff)
            return xc_fail(x, line, "malformed XML: a character reference beyond Unicode");
        }
        if (cp == 0 || (cp >= 0xd800 && cp <= 0xdfff))
          return xc_fail(x, line, "malformed XML: a character reference to an invalid character");
      } else {
        return xc_fail(x, line, "malformed XML: an unknown entity in an attribute value");
      }
      if (cp < 0x20 && cp != '\t' && cp != '\n' && cp != '\r')
        return xc_fail(x, line, "a control character in an attribute value");
      xb_put_utf8(&x->vals, cp);
      i += elen;
      continue;
    }
    if (c < 0x20 && c != '\t' && c != '\n' && c != '\r')
      return xc_fail(x, line, "a control character in an attribute value");
    if (c < 0x80) {
      xb_putc(&x->vals, (char)c);
      i++;
      continue;
    }
    /* a UTF-8 sequence: lead byte, length, continuation bytes, no overlong forms or surrogates */
    size_t need = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    int ok = need > 0 && i + need <= n;
    unsigned long cp = need == 4 ? c & 0x07u : need == 3 ? c & 0x0fu : c & 0x1fu;
    for (size_t k = 1; ok && k < need; k++) {
      unsigned char cc = (unsigned char)text[i + k];
      ok = (cc & 0xc0) == 0x80;
      cp = (cp << 6) | (cc & 0x3fu);
    }
    if (ok)
      ok = !(need == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) && !(need == 4 && (cp < 0x10000 || cp > 0x10ffff));
    if (ok) {
      xb_put(&x->vals, text + i, need);
      i += need;
    } else {
      xb_putc(&x->vals, '?');
      i++;
    }
  }
  xb_putc(&x->vals, '\0');
  return STRATA_OK;
}

/* Write value v as a double-quoted attribute value the minimal hwloc parser reads back unchanged. */
static void xc_emit_value(struct xc_buf *b, const char *v) {
  xb_putc(b, '"');
  for (; *v; v++) {
    switch (*v) {
    case '&': xb_puts(b, "&amp;"); break;
    case '<': xb_puts(b, "&lt;"); break;
    case '>': xb_puts(b, "&gt;"); break;
    case '"': xb_puts(b, "&quot;"); break;
    case '\n': xb_puts(b, "&#10;"); break;
    case '\r': xb_puts(b, "&#13;"); break;
    case '\t': xb_puts(b, "&#9;"); break;
    default: xb_putc(b, *v); break;
    }
  }
  xb_putc(b, '"');
}

/* The version of the hwloc this library runs with, as "2.9". */
static const char *xc_hwloc_version(void) {
  static char v[16];
  /* hwloc_get_api_version() names the API (2.8 for 2.9); the headers name the release */
  snprintf(v, sizeof v, "%d.%d", HWLOC_VERSION_MAJOR, HWLOC_VERSION_MINOR);
  return v;
}

/*
** A CPU or NUMA set as hwloc writes it: "0xf...f" (an infinite set) or
** hex words of at most 32 bits, most significant first, comma-separated,
** the first one given ("0x0000ffff,0xffffffff,,,0x0"), optionally after
** "0xf...f,". hwloc_bitmap_sscanf asserts on other text (found by
** fuzz-topology-xml: ",x00000001" aborts the process).
*/
static int xc_bitmap_ok(const char *v) {
  if (strncmp(v, "0xf...f", 7) == 0) {
    v += 7;
    if (!*v)
      return 1;
    if (*v++ != ',')
      return 0;
  }
  for (int first = 1;; first = 0) {
    if (*v == ',' || !*v) {
      if (first)
        return 0; /* the first word is never empty */
    } else {
      if (v[0] != '0' || v[1] != 'x')
        return 0;
      v += 2;
      int digits = 0;
      while (isxdigit((unsigned char)*v) && digits < 9) {
        v++;
        digits++;
      }
      if (digits < 1 || digits > 8)
        return 0;
    }
    if (!*v)
      return 1;
    if (*v++ != ',')
      return 0;
  }
}

/* <topology version="M.m">: hwloc 2.x reads 1.x files (no version) and 2.x ones, refuses 3.x. */
static int xc_check_root(struct xc *x, int line) {
  const char *v = xc_attr(x, "version");
  x->version_major = 1;
  if (!v)
    return STRATA_OK;
  unsigned major = 0, minor = 0;
  int used = 0;
  if (sscanf(v, "%3u.%3u%n", &major, &minor, &used) != 2 || v[used] != '\0' || !isdigit((unsigned char)v[0])) {
    char msg[256];
    char q[160];
    snprintf(msg, sizeof msg, "<topology version=\"%s\">: not an hwloc XML version (expected e.g. 2.0)",
             xc_quote(q, sizeof q, v, 32));
    return xc_fail(x, line, msg);
  }
  if (major > 2) {
    return strata__error(STRATA_ERR_PARSE, "%s: XML version %u.%u: written by a newer hwloc than this one (%s)",
                         x->path, major, minor, xc_hwloc_version());
  }
  if (major < 1) {
    char msg[96];
    snprintf(msg, sizeof msg, "XML version %u.%u is not one hwloc ever wrote", major, minor);
    return xc_fail(x, line, msg);
  }
  x->version_major = (int)major;
  return STRATA_OK;
}

/*
** <object type=...>: hwloc 2.9 dereferences the complete sets of every
** normal object (Machine, Package, Core, PU, caches, groups) and of memory
** objects (NUMANode, MemCache) without checking them: a file that lacks
** one makes it crash. So those four sets are required, and the type must
** be one hwloc parses (the same parser classifies it here).
*/
static int xc_check_object(struct xc *x, int line) {
  if (x->nattrs == 0 || x->attrs[0].nlen != 4 || memcmp(x->attrs[0].name, "type", 4) != 0)
    return xc_fail(x, line, "<object> without a type as its first attribute");
  const char *type = x->vals.p + x->attrs[0].voff;
  hwloc_obj_type_t t;
  int needs_sets;
  if (hwloc_type_sscanf(type, &t, NULL, 0) == 0)
    needs_sets = hwloc_obj_type_is_normal(t) || hwloc_obj_type_is_memory(t);
  else if (strcasecmp(type, "Cache") == 0 || strcasecmp(type, "System") == 0 || strcasecmp(type, "Tile") == 0 ||
           strcasecmp(type, "Module") == 0)
    needs_sets = 1; /* hwloc 1.x names that 2.x still imports */
  else {
    char msg[256], q[192];
    snprintf(msg, sizeof msg, "unknown object type \"%s\"", xc_quote(q, sizeof q, type, 40));
    return xc_fail(x, line, msg);
  }
  if (!needs_sets)
    return STRATA_OK;
  static const char *const sets[] = {"cpuset", "complete_cpuset", "nodeset", "complete_nodeset"};
  for (size_t i = 0; i < sizeof sets / sizeof *sets; i++)
    if (!xc_attr(x, sets[i])) {
      char msg[320], q[192];
      snprintf(msg, sizeof msg, "%s object without %s (hwloc cannot load it safely)", xc_quote(q, sizeof q, type, 40),
               sets[i]);
      return xc_fail(x, line, msg);
    }
  return STRATA_OK;
}

/*
** Parse one start or end tag at x->pos (just after '<') and write it in
** canonical form to x->out. Attributes are decoded, checked for quoting
** and duplicates; the root, objects and matrices are checked as above.
*/
static int xc_tag(struct xc *x) {
  int line = x->line, rc;
  int closing = 0;
  if (x->pos < x->len && x->buf[x->pos] == '/') {
    closing = 1;
    x->pos++;
  }
  size_t start = x->pos;
  while (x->pos < x->len && xc_namechar(x->buf[x->pos]))
    x->pos++;
  if (x->pos >= x->len)
    return xc_truncated(x);
  size_t nlen = x->pos - start;
  if (nlen == 0)
    return xc_fail(x, line, "malformed XML: a tag without a name");
  if (nlen >= sizeof x->stack[0].name)
    return xc_fail(x, line, "malformed XML: a tag name too long for hwloc XML");
  char name[32];
  memcpy(name, x->buf + start, nlen);
  name[nlen] = '\0';
  if (x->root_closed)
    return xc_fail(x, line, "malformed XML: content after the root element");

  int is_matrix = !closing && (strcmp(name, "distances2") == 0 || strcmp(name, "distances2hetero") == 0 ||
                               strcmp(name, "distances") == 0);
  if (!closing && x->m.active && x->m.v1 && strcmp(name, "latency") == 0)
    x->m.nvalues++;

  x->nattrs = 0;
  x->vals.len = 0;
  for (;;) {
    int space = 0;
    while (x->pos < x->len && isspace((unsigned char)x->buf[x->pos])) {
      if (x->buf[x->pos] == '\n')
        x->line++;
      x->pos++;
      space = 1;
    }
    if (x->pos >= x->len)
      return xc_truncated(x);
    char c = x->buf[x->pos];
    if (c == '>' || (c == '/' && !closing))
      break;
    if (closing)
      return xc_fail(x, line, "malformed XML: attributes in a closing tag");
    if (!space)
      return xc_fail(x, x->line, "malformed XML: attributes must be separated by white space");
    size_t astart = x->pos;
    while (x->pos < x->len && xc_namechar(x->buf[x->pos]))
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
    int vline = x->line;
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
    for (int i = 0; i < x->nattrs; i++)
      if (x->attrs[i].nlen == alen && memcmp(x->attrs[i].name, x->buf + astart, alen) == 0)
        return xc_fail(x, vline, "malformed XML: an attribute given twice in one tag");
    if (x->nattrs >= XC_MAX_ATTRS)
      return xc_fail(x, vline, "malformed XML: too many attributes in one tag");
    struct xc_attr *a = &x->attrs[x->nattrs++];
    a->name = x->buf + astart;
    a->nlen = alen;
    a->voff = x->vals.len;
    if ((rc = xc_decode_value(x, vline, x->buf + vstart, vlen)) != STRATA_OK)
      return rc;
    a->vlen = x->vals.len - a->voff - 1;
  }
  if (x->vals.nomem)
    return strata__error(STRATA_ERR_NOMEM, "%s: out of memory", x->path);

  int empty = x->buf[x->pos] == '/';
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
    if (x->skip && x->depth == x->skip) {
      x->skip = 0;
      x->depth--;
      return STRATA_OK;
    }
    x->depth--;
    xb_puts(&x->out, "</");
    xb_puts(&x->out, name);
    xb_puts(&x->out, x->depth == 0 ? ">\n" : ">");
    if (x->depth == 0)
      x->root_closed = 1;
    if (x->m.active && (strcmp(name, "distances2") == 0 || strcmp(name, "distances2hetero") == 0 ||
                        strcmp(name, "distances") == 0))
      return xc_matrix_end(x);
    return STRATA_OK;
  }

  if (x->depth == 0) {
    if (strcmp(name, "topology") != 0)
      return xc_fail(x, line, "not an hwloc topology: the root element is not <topology>");
    x->seen_root = 1;
    if ((rc = xc_check_root(x, line)) != STRATA_OK)
      return rc;
  } else if (!xc_child_ok(x->stack[x->depth - 1].name, name)) {
    char msg[160];
    snprintf(msg, sizeof msg, "<%s> inside <%s> is not part of hwloc XML", name, x->stack[x->depth - 1].name);
    return xc_fail(x, line, msg);
  }
  int numa_or_root = 0;
  for (int i = 0; i < x->nattrs; i++)
    if (!xc_attr_ok(name, x->attrs[i].name, x->attrs[i].nlen)) {
      char msg[160];
      snprintf(msg, sizeof msg, "<%s> with an attribute hwloc does not read (%.*s)", name,
               (int)(x->attrs[i].nlen < 40 ? x->attrs[i].nlen : 40), x->attrs[i].name);
      return xc_fail(x, line, msg);
    }
  static const char *const bitmaps[] = {"cpuset", "complete_cpuset", "allowed_cpuset", "nodeset",
                                        "complete_nodeset", "allowed_nodeset", "initiator_cpuset"};
  for (size_t i = 0; i < sizeof bitmaps / sizeof *bitmaps; i++) {
    const char *v = xc_attr(x, bitmaps[i]);
    if (v && !xc_bitmap_ok(v)) {
      char msg[256], q[160];
      snprintf(msg, sizeof msg, "%s=\"%s\" is not a set as hwloc writes it (e.g. 0x0000000f)", bitmaps[i],
               xc_quote(q, sizeof q, v, 40));
      return xc_fail(x, line, msg);
    }
  }
  if ((strcmp(name, "indexes") == 0 || strcmp(name, "u64values") == 0) && !xc_attr(x, "length"))
    return xc_fail(x, line, "a distance list without its length attribute");
  if (strcmp(name, "object") == 0) {
    if ((rc = xc_check_object(x, line)) != STRATA_OK)
      return rc;
    /* what a page_type below may belong to: a NUMA node, or the root object */
    const char *type = x->vals.p + x->attrs[0].voff;
    hwloc_obj_type_t t;
    numa_or_root = x->depth == 1 || (hwloc_type_sscanf(type, &t, NULL, 0) == 0 && t == HWLOC_OBJ_NUMANODE);
  }
  if (strcmp(name, "page_type") == 0 && !x->stack[x->depth - 1].numa_or_root)
    return xc_fail(x, line, "<page_type> outside a NUMA node or the root object");
  if (is_matrix) {
    memset(&x->m, 0, sizeof x->m);
    x->m.active = 1;
    x->m.v1 = strcmp(name, "distances") == 0;
    x->m.line = line;
    x->m.nbobjs = -1;
    strcpy(x->m.name, x->m.v1 ? "distances" : "(unnamed)");
    const char *nb = xc_attr(x, "nbobjs"), *mname = xc_attr(x, "name");
    if (nb) {
      char *end = NULL;
      errno = 0;
      long n = strtol(nb, &end, 10);
      x->m.nbobjs = (end != nb && *end == '\0' && errno == 0 && isdigit((unsigned char)nb[0])) ? n : -1;
    }
    if (mname)
      xc_quote(x->m.name, sizeof x->m.name, mname, sizeof x->m.name);
  }

  if (strcmp(name, "userdata") == 0) {
    /* an application's own data, which hwloc only keeps for a callback strata does not set: dropped, so
    ** that its content (whose length hwloc checks, failing inside the object) never reaches hwloc */
    if (empty)
      return STRATA_OK;
    if (x->depth >= XC_MAX_DEPTH)
      return xc_fail(x, line, "malformed XML: elements nested too deeply");
    strcpy(x->stack[x->depth].name, name);
    x->stack[x->depth].line = line;
    x->stack[x->depth].numa_or_root = 0;
    x->depth++;
    x->skip = x->depth;
    return STRATA_OK;
  }
  xb_putc(&x->out, '<');
  xb_puts(&x->out, name);
  for (int i = 0; i < x->nattrs; i++) {
    xb_putc(&x->out, ' ');
    xb_put(&x->out, x->attrs[i].name, x->attrs[i].nlen);
    xb_putc(&x->out, '=');
    xc_emit_value(&x->out, x->vals.p + x->attrs[i].voff);
  }
  if (empty) {
    xb_puts(&x->out, "/>");
    if (x->depth == 0)
      x->root_closed = 1;
    if (is_matrix)
      return xc_matrix_end(x);
    return STRATA_OK;
  }
  xb_putc(&x->out, '>');
  if (x->depth >= XC_MAX_DEPTH)
    return xc_fail(x, line, "malformed XML: elements nested too deeply");
  strcpy(x->stack[x->depth].name, name);
  x->stack[x->depth].line = line;
  x->stack[x->depth].numa_or_root = numa_or_root;
  x->depth++;
  return STRATA_OK;
}

/* <!DOCTYPE ...>: an internal subset could declare entities hwloc never writes; refused. */
static int xc_doctype(struct xc *x, int line) {
  while (x->pos < x->len && x->buf[x->pos] != '>') {
    if (x->buf[x->pos] == '[')
      return xc_fail(x, line, "a DOCTYPE with an internal subset is not an hwloc export");
    if (x->buf[x->pos] == '\n')
      x->line++;
    x->pos++;
  }
  if (x->pos >= x->len)
    return xc_fail(x, line, "truncated XML: a declaration is not closed");
  x->pos++;
  return STRATA_OK;
}

static int xc_run(struct xc *x) {
  int rc;
  /* hwloc's own parser reads a declaration line and then the root at the start of a line */
  xb_puts(&x->out, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  while (x->pos < x->len) {
    const char *lt = memchr(x->buf + x->pos, '<', x->len - x->pos);
    size_t upto = lt ? (size_t)(lt - x->buf) : x->len;
    for (size_t i = x->pos; i < upto; i++) {
      if (x->buf[i] == '\n')
        x->line++;
      else if (x->buf[i] == '\0')
        return xc_fail(x, x->line, "not a text file (NUL byte)");
      else if (x->depth == 0 && !isspace((unsigned char)x->buf[i]))
        return xc_fail(x, x->line, x->seen_root ? "malformed XML: text after the root element"
                                                : "not XML: text before the first tag");
    }
    xc_text(x, x->buf + x->pos, upto - x->pos);
    x->pos = upto;
    if (!lt)
      break;
    x->pos++;
    int line = x->line;
    if (x->pos + 3 <= x->len && memcmp(x->buf + x->pos, "!--", 3) == 0) {
      if (!xc_skip_past(x, "-->"))
        return xc_fail(x, line, "truncated XML: a comment is not closed");
    } else if (x->pos + 8 <= x->len && memcmp(x->buf + x->pos, "![CDATA[", 8) == 0) {
      return xc_fail(x, line, "a CDATA section is not part of hwloc XML");
    } else if (x->pos < x->len && x->buf[x->pos] == '?') {
      if (x->seen_root && x->depth > 0)
        return xc_fail(x, line, "a processing instruction inside the topology is not part of hwloc XML");
      if (!xc_skip_past(x, "?>"))
        return xc_fail(x, line, "truncated XML: a declaration is not closed");
    } else if (x->pos < x->len && x->buf[x->pos] == '!') {
      if (x->seen_root)
        return xc_fail(x, line, "malformed XML: a declaration after the root element began");
      if ((rc = xc_doctype(x, line)) != STRATA_OK)
        return rc;
    } else if ((rc = xc_tag(x)) != STRATA_OK) {
      return rc;
    }
    if (x->out.nomem)
      return strata__error(STRATA_ERR_NOMEM, "%s: out of memory", x->path);
  }
  if (!x->seen_root)
    return strata__error(STRATA_ERR_PARSE, "%s: not an hwloc topology: no <topology> element", x->path);
  if (x->depth > 0)
    return xc_truncated(x);
  return STRATA_OK;
}

/*
** The file's bytes as UTF-8 in *out: a UTF-8 byte-order mark is dropped,
** UTF-16 (either byte order, with a mark or recognised by "<" as its first
** character) is converted. hwloc reads only 8-bit text.
*/
static int xc_to_utf8(const char *path, const unsigned char *b, size_t len, struct xc_buf *out) {
  int be;
  size_t i;
  if (len >= 3 && b[0] == 0xef && b[1] == 0xbb && b[2] == 0xbf) {
    xb_put(out, (const char *)b + 3, len - 3);
    return out->nomem ? strata__error(STRATA_ERR_NOMEM, "%s: out of memory", path) : STRATA_OK;
  }
  if (len >= 2 && ((b[0] == 0xff && b[1] == 0xfe) || (b[0] == 0xfe && b[1] == 0xff))) {
    be = b[0] == 0xfe;
    i = 2;
  } else if (len >= 2 && b[0] == '<' && b[1] == 0) {
    be = 0;
    i = 0;
  } else if (len >= 2 && b[0] == 0 && b[1] == '<') {
    be = 1;
    i = 0;
  } else {
    xb_put(out, (const char *)b, len);
    return out->nomem ? strata__error(STRATA_ERR_NOMEM, "%s: out of memory", path) : STRATA_OK;
  }
  if ((len - i) % 2)
    return strata__error(STRATA_ERR_PARSE, "%s: truncated UTF-16 text (an odd number of bytes)", path);
  int line = 1;
  for (; i < len; i += 2) {
    unsigned long u = be ? (unsigned long)(b[i] << 8 | b[i + 1]) : (unsigned long)(b[i + 1] << 8 | b[i]);
    if (u >= 0xd800 && u <= 0xdbff) {
      if (i + 3 >= len)
        return strata__error(STRATA_ERR_PARSE, "%s: line %d: invalid UTF-16 (a lone surrogate)", path, line);
      unsigned long l = be ? (unsigned long)(b[i + 2] << 8 | b[i + 3]) : (unsigned long)(b[i + 3] << 8 | b[i + 2]);
      if (l < 0xdc00 || l > 0xdfff)
        return strata__error(STRATA_ERR_PARSE, "%s: line %d: invalid UTF-16 (a lone surrogate)", path, line);
      u = 0x10000 + ((u - 0xd800) << 10) + (l - 0xdc00);
      i += 2;
    } else if (u >= 0xdc00 && u <= 0xdfff) {
      return strata__error(STRATA_ERR_PARSE, "%s: line %d: invalid UTF-16 (a lone surrogate)", path, line);
    } else if (u == 0xfeff && out->len == 0) {
      continue;
    }
    if (u == '\n')
      line++;
    xb_put_utf8(out, u);
  }
  return out->nomem ? strata__error(STRATA_ERR_NOMEM, "%s: out of memory", path) : STRATA_OK;
}

int strata__topo_xml_check_buffer(const char *name, const char *data, size_t size, char **xml, size_t *xml_len) {
  *xml = NULL;
  *xml_len = 0;
  if (size == 0)
    return strata__error(STRATA_ERR_PARSE, "%s: empty file, not an hwloc topology", name);
  if (size > XC_MAX_BYTES)
    return strata__error(STRATA_ERR_PARSE, "%s: too large for an hwloc topology (over %u MiB)", name,
                         XC_MAX_BYTES >> 20);
  struct xc *x = calloc(1, sizeof *x);
  if (!x)
    return strata__error(STRATA_ERR_NOMEM, "%s: out of memory", name);
  struct xc_buf text = {0};
  int rc = xc_to_utf8(name, (const unsigned char *)data, size, &text);
  if (rc == STRATA_OK) {
    x->path = name;
    x->buf = text.p ? text.p : "";
    x->len = text.len;
    x->line = 1;
    rc = xc_run(x);
  }
  if (rc == STRATA_OK && x->out.nomem)
    rc = strata__error(STRATA_ERR_NOMEM, "%s: out of memory", name);
  if (rc == STRATA_OK) {
    *xml = x->out.p;
    *xml_len = x->out.len;
    x->out.p = NULL;
  }
  free(x->out.p);
  free(x->vals.p);
  free(text.p);
  free(x);
  return rc;
}

/*
** Read the whole file and check it. Reports a missing or unreadable file
** as STRATA_ERR_IO, everything else as STRATA_ERR_PARSE; the message
** always begins with the path.
*/
int strata__topo_xml_read(const char *path, char **xml, size_t *xml_len) {
  *xml = NULL;
  *xml_len = 0;
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
  if (rc == STRATA_OK)
    rc = strata__topo_xml_check_buffer(path, buf, len, xml, xml_len);
  free(buf);
  return rc;
}
