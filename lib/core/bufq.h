/* A byte queue of chained chunks: what one direction of a call holds between
 * the HTTP/2 session that received the bytes and the one that sends them.
 * Single-threaded (a call lives on one worker). */
#ifndef MTD_BUFQ_H
#define MTD_BUFQ_H

#include <stddef.h>
#include <stdint.h>

struct mtd_bufq_chunk {
	struct mtd_bufq_chunk *next;
	size_t start, end; /* readable bytes are data[start, end) */
	size_t cap;
	/* Holders: the queue while the chunk is in it, plus each span taken
	 * with mtd_bufq_ref_at. A chunk is freed (or kept for reuse) when the
	 * last one lets go. Bytes once appended are never rewritten, so a
	 * span stays valid after the queue dropped them. */
	uint32_t refs;
	uint8_t data[];
};

/* Bytes of a chunk held past the queue (a writer that sends them from
 * where they are instead of copying them). */
struct mtd_bufq_span {
	struct mtd_bufq_chunk *chunk;
	const uint8_t *p;
	size_t n;
};

struct mtd_bufq {
	struct mtd_bufq_chunk *head, *tail;
	size_t len; /* readable bytes in all chunks */
};

/* Chunk payload sizes: the first chunk of a queue holds MTD_BUFQ_FIRST_CHUNK,
 * each next one twice its predecessor up to MTD_BUFQ_CHUNK; an append bigger
 * than that gets a chunk of its own size. */
#define MTD_BUFQ_FIRST_CHUNK 256 /* a unary gRPC message is often < 100 bytes */
#define MTD_BUFQ_CHUNK       16384

/* Chunks of exactly MTD_BUFQ_CHUNK bytes are recycled: a dropped one goes
 * to a per-thread list (at most MTD_BUFQ_KEEP of them; nothing under
 * AddressSanitizer, nor when MTD_SLAB_ENV is "0", as the slab) and the
 * next append on that thread takes it back. A stream moves its window
 * through the queue every turn or two: freed, those bytes went back to the
 * kernel (malloc trims its arena's top past 128 KiB) and came back as page
 * faults, about a third of maitred's CPU per MiB (bench/proxy/README.md,
 * "Bulk throughput"). MTD_BUFQ_KEEP chunks are 1 MiB: the default stream
 * window, what one streaming call holds at most. A queue's first chunks
 * (MTD_BUFQ_FIRST_CHUNK) are recycled the same way, up to
 * MTD_BUFQ_KEEP_FIRST (about 74 KiB): a unary call takes one in each
 * direction on each hop, and gave them back to malloc at its end, past
 * glibc's per-thread cache of seven when a turn ends many calls. */
#if defined(__SANITIZE_ADDRESS__)
#define MTD_BUFQ_KEEP       0
#define MTD_BUFQ_KEEP_FIRST 0
#else
#define MTD_BUFQ_KEEP       64
#define MTD_BUFQ_KEEP_FIRST 256
#endif

/* Chunks of payload cap (MTD_BUFQ_FIRST_CHUNK or MTD_BUFQ_CHUNK) kept for
 * reuse on the calling thread (for tests and figures); 0 for any other. */
unsigned mtd_bufq_kept(size_t cap);

/* Free the calling thread's kept chunks (a worker that stops). */
void mtd_bufq_release_kept(void);

/* Append a copy of p[0..n). Returns 0 or -ENOMEM (nothing appended). */
int mtd_bufq_append(struct mtd_bufq *q, const uint8_t *p, size_t n);

/* Copy up to n bytes to out and drop them. Returns the count copied. */
size_t mtd_bufq_read(struct mtd_bufq *q, uint8_t *out, size_t n);

/* Copy up to n bytes starting off bytes past the head to out, dropping
 * nothing (a reader that replays what it keeps). Returns the count. */
size_t mtd_bufq_copy_at(const struct mtd_bufq *q, size_t off, uint8_t *out, size_t n);

/* Spans over up to n bytes starting off bytes past the head, at most max
 * of them (one per chunk crossed), each holding its chunk (released with
 * mtd_bufq_unref). Returns the spans filled; *covered, the bytes they
 * hold. */
size_t mtd_bufq_ref_at(const struct mtd_bufq *q, size_t off, size_t n, struct mtd_bufq_span *out, size_t max,
                       size_t *covered);

/* Let go of a span's chunk. */
void mtd_bufq_unref(struct mtd_bufq_chunk *c);

/* Drop up to n bytes from the head. Returns the count dropped. */
size_t mtd_bufq_drop(struct mtd_bufq *q, size_t n);

/* Drop everything. */
void mtd_bufq_clear(struct mtd_bufq *q);

#endif
