/* SPDX-License-Identifier: MIT */
/* p2p.c — point-to-point between ranks: messages in pieces, through pooled host staging or in place, bounded as
** every call of the cluster. */
#include "config.h"

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <strata/cluster.h>

#include "device/registry.h"
#include "core/core.h"
#include "comm/cluster.h"

/* The first word of a point-to-point header ("strata01"), so that a message that is not one says so. */
#define P2P_MAGIC 0x3130617461727473ull
#define P2P_HEADER_WORDS 3
#define P2P_HEADER_BYTES (P2P_HEADER_WORDS * sizeof(uint64_t))
/* Pieces of a message in flight at once when MPI reads or writes device memory directly. */
#define DIRECT_WINDOW 8
/* A message of several chunks moves in at least this many pieces (of at least 64K). */
#define MIN_PIECES 4

/* The byte offset of `mem` in its buffer: its offset counts elements of its own type. */
static size_t mem_byte_off(strata_mem_t mem) { return mem.off * strata_dtype_size(mem.dtype); }

/* ------------------------------------------------------------ staging */

/* Host memory of at least `bytes` for transfers of device `dev`: a kept buffer of that
** device and size, else a new one (pinned by the device's backend where it can). */
int strata__staging_take(struct strata_cluster *c, int dev, size_t bytes, struct strata__staging *out) {
  pthread_mutex_lock(&c->pool_lock);
  for (int i = 0; i < STAGING_POOL; i++)
    if (c->pool[i].mem.p && c->pool[i].dev == dev && c->pool[i].mem.bytes == bytes) {
      *out = c->pool[i].mem;
      memset(&c->pool[i].mem, 0, sizeof c->pool[i].mem);
      pthread_mutex_unlock(&c->pool_lock);
      return 0;
    }
  pthread_mutex_unlock(&c->pool_lock);
  return strata__host_memory_new(dev, bytes, out);
}

/* Keep `mem` for the next transfer while the pool holds at most STAGING_KEEP_BYTES in
** STAGING_POOL buffers (the oldest kept go first), else free it. */
void strata__staging_give(struct strata_cluster *c, int dev, struct strata__staging *mem) {
  if (!mem->p)
    return;
  if (mem->bytes > STAGING_KEEP_BYTES) {
    strata__host_memory_free(mem);
    return;
  }
  struct strata__staging evict[STAGING_POOL];
  int nevict = 0;
  pthread_mutex_lock(&c->pool_lock);
  size_t kept = 0;
  int used = 0;
  for (int i = 0; i < STAGING_POOL; i++)
    if (c->pool[i].mem.p) {
      c->pool[used++] = c->pool[i];   /* compact, oldest first */
      kept += c->pool[i].mem.bytes;
    }
  for (int i = used; i < STAGING_POOL; i++)
    memset(&c->pool[i].mem, 0, sizeof c->pool[i].mem);
  while (used > 0 && (used == STAGING_POOL || kept + mem->bytes > STAGING_KEEP_BYTES)) {
    evict[nevict++] = c->pool[0].mem;
    kept -= c->pool[0].mem.bytes;
    memmove(&c->pool[0], &c->pool[1], sizeof c->pool[0] * (size_t)(STAGING_POOL - 1));
    memset(&c->pool[STAGING_POOL - 1].mem, 0, sizeof c->pool[0].mem);
    used--;
  }
  c->pool[used].dev = dev;
  c->pool[used].mem = *mem;
  memset(mem, 0, sizeof *mem);
  pthread_mutex_unlock(&c->pool_lock);
  for (int i = 0; i < nevict; i++)
    strata__host_memory_free(&evict[i]);
}

/* ------------------------------------------------------ point-to-point */

/*
** A transfer between ranks that failed part-way leaves its peer waiting for
** the rest: the cluster is broken (if the failure was local, this says so),
** and the program should strata_cluster_abort. Returns rc.
*/
#ifdef STRATA_HAVE_MPI
int strata__transfer_failed(struct strata_cluster *c, int rc, const char *what) {
  if (c->broken)
    return rc;
  char why[700];
  strata__strlcpy(why, strata_last_error(), sizeof why);
  return strata__breakdown(c, rc, "%s: rank %d failed: %s", what, c->rank, why);
}
#endif

/* Arguments of a send or receive, checked; *bytes_off the byte offset of mem. */
static int check_p2p(struct strata_cluster *c, const char *fn, int peer, int tag, strata_queue_t q, strata_mem_t mem,
                     size_t bytes, size_t *byte_off) {
  if (!c || !q || !mem.buf)
    return strata__error(STRATA_ERR_INVALID, "%s: NULL argument", fn);
  if (peer < 0 || peer >= c->size || peer == c->rank)
    return strata__error(STRATA_ERR_RANGE, "%s: peer %d is not another rank (this is rank %d of %d)", fn, peer,
                         c->rank, c->size);
  if (tag < 0 || tag > CLUSTER_TAG_MAX)
    return strata__error(STRATA_ERR_RANGE, "%s: tag %d outside 0 .. %d", fn, tag, CLUSTER_TAG_MAX);
  if (strata_buffer_device(mem.buf) != strata_queue_device(q))
    return strata__error(STRATA_ERR_DEVICE_MISMATCH, "%s: the buffer is on device %d, the queue on device %d", fn,
                         strata_buffer_device(mem.buf), strata_queue_device(q));
  size_t size = strata_buffer_size(mem.buf), esize = strata_dtype_size(mem.dtype);
  if (!esize)
    return strata__error(STRATA_ERR_INVALID, "%s: the memory has unknown element type %d", fn, mem.dtype);
  if (mem.off > size / esize || bytes > size - mem.off * esize)
    return strata__error(STRATA_ERR_RANGE, "%s: %zu bytes at element %zu (%s) run past the buffer's %zu bytes", fn,
                         bytes, mem.off, strata_dtype_name(mem.dtype), size);
  *byte_off = mem_byte_off(mem);
  return strata__check_broken(c);
}

#ifdef STRATA_HAVE_MPI
/*
** The pieces a message of `bytes` moves in: STRATA_STAGING_CHUNK (default
** 4M, read when the cluster starts), but at least 4 pieces of 64K or
** more, so that copying one piece between the device and host memory
** overlaps MPI moving the previous one also for messages of a few chunks. Both sides compute it (the sender
** announces it, and a rank whose STRATA_STAGING_CHUNK differs is refused).
**
** A message of one piece (up to 64K) travels alone; one of several
** pieces, or of no more bytes than a header, follows a header
** {P2P_MAGIC, bytes, piece size} on the same tag. The receiver looks at
** each message before it takes it (strata__probe_message), so a size that differs
** between the sides fails the receive with STRATA_ERR_SHAPE and nothing
** is written.
*/
static int p2p_chunk(const struct strata_cluster *cl, size_t bytes, size_t *chunk) {
  if (!cl->chunk_cap)
    return strata__error(STRATA_ERR_PARSE, "STRATA_STAGING_CHUNK='%s' is not a size between 1 byte and 1G",
                         cl->chunk_env);
  size_t c = bytes / MIN_PIECES;
  if (c < (64u << 10))
    c = 64u << 10;
  if (c > cl->chunk_cap)
    c = cl->chunk_cap;
  if (c > bytes)
    c = bytes ? bytes : 1;
  *chunk = c;
  return 0;
}
#endif

#ifdef STRATA_HAVE_MPI
/*
** The address of device memory `mem` when its device's memory is the host's
** own (the backend's host_pointer: the host's virtual devices), else NULL.
** MPI then reads and writes it in place, once the buffer's queue is
** finished, instead of copying it through staging memory.
*/
char *strata__host_address(strata_mem_t mem) {
  const struct strata__device *d = mem.buf->dev;
  const struct strata__backend *be = d->slot->be;
  char *p = be->host_pointer ? be->host_pointer(d->slot->ctx, d->local, mem.buf->h) : NULL;
  return p ? p + mem_byte_off(mem) : NULL;
}

/* Append the decimal digits of v at p; returns the end. */
static char *put_decimal(char *p, uint64_t v) {
  char d[24];
  int n = 0;
  do
    d[n++] = (char)('0' + v % 10);
  while ((v /= 10) != 0);
  while (n > 0)
    *p++ = d[--n];
  return p;
}

/*
** `out` (at least 160 bytes) = "send of N bytes to rank P (tag T)" or its
** receive's kind, what every message of the transfer starts with. Written
** by hand: snprintf costs a fifth of a microsecond, a few percent of a
** 64 KiB message between two processes.
*/
static void p2p_what(char *out, const char *verb, size_t bytes, const char *to, int peer, int tag) {
  char *p = out;
  size_t n = strlen(verb);
  memcpy(p, verb, n);
  p = put_decimal(p + n, bytes);
  n = strlen(to);
  memcpy(p, to, n);
  p = put_decimal(p + n, (uint64_t)peer);
  memcpy(p, " (tag ", 6);
  p = put_decimal(p + 6, (uint64_t)tag);
  *p++ = ')';
  *p = '\0';
}

/* 1 when a message of `bytes` in pieces of `chunk` goes without a header (see p2p_chunk). */
static int p2p_alone(size_t bytes, size_t chunk) { return bytes > P2P_HEADER_BYTES && bytes <= chunk; }

/* The size of piece i of a message of `bytes` in pieces of `chunk`. */
static size_t piece_bytes(size_t bytes, size_t chunk, size_t i) {
  size_t off = i * chunk;
  return bytes - off < chunk ? bytes - off : chunk;
}

/*
** The pieces of a send straight from host memory `p`, DIRECT_WINDOW in
** flight. On failure MPI may still read `p` (the cluster is broken then).
*/
static int send_direct(struct strata_cluster *c, int peer, int tag, const char *p, size_t bytes, size_t chunk,
                       const char *what) {
  MPI_Request r[DIRECT_WINDOW];
  int peers[DIRECT_WINDOW];
  for (int k = 0; k < DIRECT_WINDOW; k++) {
    r[k] = MPI_REQUEST_NULL;
    peers[k] = peer;
  }
  size_t nchunks = (bytes + chunk - 1) / chunk;
  int rc = 0;
  for (size_t i = 0; !rc && i < nchunks; i++) {
    int k = (int)(i % DIRECT_WINDOW);
    if (r[k] != MPI_REQUEST_NULL && (rc = strata__wait_requests(c, &r[k], &peer, 1, NULL, what)))
      break;
    rc = strata__isend(c, c->p2p, p + i * chunk, (int)piece_bytes(bytes, chunk, i), MPI_BYTE, peer, tag, &r[k], what);
  }
  if (!rc)
    rc = strata__wait_requests(c, r, peers, DIRECT_WINDOW, NULL, what);
  return rc;
}

/*
** The pieces of a send from device memory through two host staging
** buffers: piece i is copied out while piece i - 1 is on its way. On
** failure the staging stays with MPI (the cluster is broken then).
*/
static int send_staged(struct strata_cluster *c, int peer, int tag, strata_queue_t q, strata_mem_t mem, size_t bytes,
                       size_t chunk, const char *what) {
  MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  int peers[2] = {peer, peer};
  struct strata__staging st[2];
  memset(st, 0, sizeof st);
  int dev = strata_queue_device(q);
  int rc = strata__staging_take(c, dev, chunk, &st[0]);
  if (!rc)
    rc = strata__staging_take(c, dev, chunk, &st[1]);
  if (rc) {
    strata__staging_give(c, dev, &st[0]);
    return rc;
  }
  size_t nchunks = (bytes + chunk - 1) / chunk;
  for (size_t i = 0; !rc && i < nchunks; i++) {
    int b = (int)(i & 1);
    size_t n = piece_bytes(bytes, chunk, i);
    if (r[b] != MPI_REQUEST_NULL && (rc = strata__wait_requests(c, &r[b], &peer, 1, NULL, what)))
      break;
    /* overlaps the other piece's send */
    rc = strata_buffer_download(q, mem.buf, mem_byte_off(mem) + i * chunk, st[b].p, n);
    if (!rc)
      rc = strata__isend(c, c->p2p, st[b].p, (int)n, MPI_BYTE, peer, tag, &r[b], what);
  }
  if (!rc)
    rc = strata__wait_requests(c, r, peers, 2, NULL, what);
  if (rc)
    return rc;
  strata__staging_give(c, dev, &st[0]);
  strata__staging_give(c, dev, &st[1]);
  return 0;
}
#endif /* STRATA_HAVE_MPI */

STRATA_API int strata_cluster_send(strata_cluster_t c, int peer, int tag, strata_queue_t q, strata_mem_t mem,
                                   size_t bytes) {
  size_t boff = 0;
  TRY(check_p2p(c, "strata_cluster_send", peer, tag, q, mem, bytes, &boff));
#ifdef STRATA_HAVE_MPI
  size_t chunk = 0;
  TRY(p2p_chunk(c, bytes, &chunk));
  char what[160];
  p2p_what(what, "send of ", bytes, " bytes to rank ", peer, tag);
  /* On the heap: after a failure MPI may still read it (the cluster is broken then, and it stays). */
  uint64_t *header = NULL;
  MPI_Request hr = MPI_REQUEST_NULL;
  if (!p2p_alone(bytes, chunk)) {
    if (!(header = malloc(P2P_HEADER_BYTES)))
      return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory", what);
    header[0] = P2P_MAGIC;
    header[1] = bytes;
    header[2] = chunk;
    TRY(strata__isend(c, c->p2p, header, P2P_HEADER_WORDS, MPI_UINT64_T, peer, tag, &hr, what));
  }
  char *direct = bytes ? strata__host_address(mem) : NULL;
  int rc = 0;
  if (direct) {
    rc = strata_queue_finish(q);   /* the queue's earlier work has written the buffer */
    if (!rc)
      rc = send_direct(c, peer, tag, direct, bytes, chunk, what);
  } else if (bytes) {
    rc = send_staged(c, peer, tag, q, mem, bytes, chunk, what);
  }
  if (!rc)
    rc = strata__wait_requests(c, &hr, &peer, 1, NULL, what);
  if (rc)
    return strata__transfer_failed(c, rc, what);   /* the header stays: MPI may still read it */
  free(header);
  return 0;
#else
  return strata__error(STRATA_ERR_INTERNAL, "strata_cluster_send: no other rank without MPI");
#endif
}

#ifdef STRATA_HAVE_MPI
/* Piece i of a receive arrived whole (status s), or the sides disagree on the message. */
static int check_piece(struct strata_cluster *c, MPI_Status *s, size_t i, size_t n, int peer, const char *what) {
  int got = 0;
  MPI_Get_count(s, MPI_BYTE, &got);
  if ((size_t)got != n)
    return strata__breakdown(c, STRATA_ERR_SHAPE, "%s: chunk %zu from rank %d has %d bytes, %zu expected", what, i,
                             peer, got, n);
  return 0;
}

/*
** Take the next message from `peer` with `tag` (strata__probe_message), which
** should be `want` bytes: the message alone (*m is then its handle) or the
** header of several pieces (`header`, checked against bytes and chunk).
** A message of another size is not received: STRATA_ERR_SHAPE, naming the
** sender's size (a header's, when a header came instead of a piece).
*/
static int take_first(struct strata_cluster *c, int peer, int tag, size_t bytes, size_t chunk, uint64_t *header,
                      MPI_Message *m, const char *what) {
  size_t got = 0;
  size_t want = header ? P2P_HEADER_BYTES : bytes;
  TRY(strata__probe_message(c, peer, tag, m, &got, what));
  uint64_t h[P2P_HEADER_WORDS] = {0, 0, 0};
  if (!header && got == P2P_HEADER_BYTES) {
    /* a header where one piece alone was expected: it says how much the sender sends */
    MPI_Request r = MPI_REQUEST_NULL;
    uint64_t *hp = malloc(P2P_HEADER_BYTES);   /* on the heap: after a failure MPI may still write it */
    TRY(hp ? 0 : strata__error(STRATA_ERR_NOMEM, "%s: out of host memory", what));
    TRY(strata__imrecv(c, hp, (int)got, m, &r, what));
    TRY(strata__wait_requests(c, &r, &peer, 1, NULL, what));
    memcpy(h, hp, sizeof h);
    free(hp);
    if (h[0] == P2P_MAGIC)
      got = (size_t)h[1];
  }
  if (got != want || (!header && h[0] == P2P_MAGIC))
    return strata__breakdown(c, STRATA_ERR_SHAPE, "%s: rank %d sends %zu bytes with that tag; rank %d expects %zu",
                             what, peer, got, c->rank, bytes);
  if (!header)
    return 0;
  MPI_Request r = MPI_REQUEST_NULL;
  TRY(strata__imrecv(c, header, (int)got, m, &r, what));
  TRY(strata__wait_requests(c, &r, &peer, 1, NULL, what));
  if (header[0] != P2P_MAGIC)
    return strata__breakdown(c, STRATA_ERR_SHAPE,
                             "%s: rank %d sends %zu bytes alone with that tag; rank %d expects %zu", what, peer, got,
                             c->rank, bytes);
  if (header[1] != bytes)
    return strata__breakdown(c, STRATA_ERR_SHAPE, "%s: rank %d sends %llu bytes with that tag; rank %d expects %zu",
                             what, peer, (unsigned long long)header[1], c->rank, bytes);
  if (header[2] != chunk)
    return strata__breakdown(c, STRATA_ERR_SHAPE,
                             "%s: rank %d moves it in pieces of %llu bytes, rank %d in %zu (STRATA_STAGING_CHUNK differs)",
                             what, peer, (unsigned long long)header[2], c->rank, chunk);
  return 0;
}

/* Piece i's receive into p: the message `m` that take_first matched (piece 0 alone), else a posted one. */
static int recv_piece(struct strata_cluster *c, int peer, int tag, void *p, size_t n, MPI_Message *m, MPI_Request *r,
                      const char *what) {
  if (*m != MPI_MESSAGE_NULL)
    return strata__imrecv(c, p, (int)n, m, r, what);
  return strata__irecv(c, c->p2p, p, (int)n, MPI_BYTE, peer, tag, r, what);
}

/*
** The pieces of a receive straight into host memory `p`, DIRECT_WINDOW
** posted at once once the first message said the sides agree (header NULL:
** one piece alone). On failure MPI may still write into `p`.
*/
static int recv_direct(struct strata_cluster *c, int peer, int tag, char *p, size_t bytes, size_t chunk,
                       uint64_t *header, const char *what) {
  MPI_Request r[DIRECT_WINDOW];
  MPI_Message m = MPI_MESSAGE_NULL;
  for (int k = 0; k < DIRECT_WINDOW; k++)
    r[k] = MPI_REQUEST_NULL;
  size_t nchunks = (bytes + chunk - 1) / chunk;
  int rc = take_first(c, peer, tag, bytes, chunk, header, &m, what);
  for (size_t i = 0; !rc && i < DIRECT_WINDOW && i < nchunks; i++)
    rc = recv_piece(c, peer, tag, p + i * chunk, piece_bytes(bytes, chunk, i), &m, &r[i], what);
  for (size_t i = 0; !rc && i < nchunks; i++) {
    int k = (int)(i % DIRECT_WINDOW);
    MPI_Status s;
    rc = strata__wait_requests(c, &r[k], &peer, 1, &s, what);
    if (!rc)
      rc = check_piece(c, &s, i, piece_bytes(bytes, chunk, i), peer, what);
    if (!rc && i + DIRECT_WINDOW < nchunks)
      rc = strata__irecv(c, c->p2p, p + (i + DIRECT_WINDOW) * chunk, (int)piece_bytes(bytes, chunk, i + DIRECT_WINDOW),
                         MPI_BYTE, peer, tag, &r[k], what);
  }
  return rc;
}

/*
** The pieces of a receive through two host staging buffers into device
** memory: piece i is copied in while piece i + 1 arrives (header NULL:
** one piece alone). On failure the staging and the header stay with MPI.
*/
static int recv_staged(struct strata_cluster *c, int peer, int tag, strata_queue_t q, strata_mem_t mem, size_t bytes,
                       size_t chunk, uint64_t *header, const char *what) {
  struct strata__staging st[2];
  memset(st, 0, sizeof st);
  int dev = strata_queue_device(q);
  int rc = 0;
  if (bytes) {
    rc = strata__staging_take(c, dev, chunk, &st[0]);
    if (!rc)
      rc = strata__staging_take(c, dev, chunk, &st[1]);
    if (rc) {
      strata__staging_give(c, dev, &st[0]);
      return rc;
    }
  }
  MPI_Request r[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  MPI_Message m = MPI_MESSAGE_NULL;
  size_t nchunks = bytes ? (bytes + chunk - 1) / chunk : 0;
  rc = take_first(c, peer, tag, bytes, chunk, header, &m, what);
  for (size_t i = 0; !rc && i < 2 && i < nchunks; i++)
    rc = recv_piece(c, peer, tag, st[i].p, piece_bytes(bytes, chunk, i), &m, &r[i], what);
  for (size_t i = 0; !rc && i < nchunks; i++) {
    int b = (int)(i & 1);
    size_t n = piece_bytes(bytes, chunk, i);
    MPI_Status s;
    rc = strata__wait_requests(c, &r[b], &peer, 1, &s, what);
    if (!rc)
      rc = check_piece(c, &s, i, n, peer, what);
    if (!rc)
      rc = strata_buffer_upload(q, mem.buf, mem_byte_off(mem) + i * chunk, st[b].p, n); /* the next arrives meanwhile */
    if (!rc && i + 2 < nchunks)
      rc = strata__irecv(c, c->p2p, st[b].p, (int)piece_bytes(bytes, chunk, i + 2), MPI_BYTE, peer, tag, &r[b], what);
  }
  if (rc)
    return rc;
  strata__staging_give(c, dev, &st[0]);
  strata__staging_give(c, dev, &st[1]);
  return 0;
}
#endif /* STRATA_HAVE_MPI */

STRATA_API int strata_cluster_recv(strata_cluster_t c, int peer, int tag, strata_queue_t q, strata_mem_t mem,
                                   size_t bytes) {
  size_t boff = 0;
  TRY(check_p2p(c, "strata_cluster_recv", peer, tag, q, mem, bytes, &boff));
#ifdef STRATA_HAVE_MPI
  char what[160];
  p2p_what(what, "receive of ", bytes, " bytes from rank ", peer, tag);
  size_t chunk = 0;
  TRY(p2p_chunk(c, bytes, &chunk));
  /* On the heap: after a failure MPI may still write it (the cluster is broken then, and it stays). */
  uint64_t *header = NULL;
  if (!p2p_alone(bytes, chunk) && !(header = calloc(P2P_HEADER_WORDS, sizeof *header)))
    return strata__error(STRATA_ERR_NOMEM, "%s: out of host memory", what);
  char *direct = bytes ? strata__host_address(mem) : NULL;
  int rc = 0;
  if (direct) {
    rc = strata_queue_finish(q);   /* the queue's earlier work is done with the buffer's old contents */
    if (!rc)
      rc = recv_direct(c, peer, tag, direct, bytes, chunk, header, what);
  } else {
    rc = recv_staged(c, peer, tag, q, mem, bytes, chunk, header, what);
  }
  if (rc)
    return strata__transfer_failed(c, rc, what);   /* the header and the memory stay: MPI may still write into them */
  free(header);
  return 0;
#else
  return strata__error(STRATA_ERR_INTERNAL, "strata_cluster_recv: no other rank without MPI");
#endif
}
