/* A per-thread cache of freed small blocks, by power-of-two size class.
 *
 * A call costs dozens of small allocations that die with it (nghttp2's
 * header buffers, stream and frame items; our call object). Recycling them
 * from a thread-local free list instead of going through malloc's arenas
 * takes most of that cost away (measured with callgrind, see
 * bench/proxy/README.md). Blocks carry a 16-byte header naming their class,
 * because nghttp2's free hook is not told the size. Not thread-safe: one
 * slab per worker, used only by that worker's thread. */
#ifndef MTD_SLAB_H
#define MTD_SLAB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* 32 B .. 2 KiB payload. Larger blocks are malloc's, of their own size:
 * the ones nghttp2 makes per session (the session 2.9 KiB, its stream map
 * 4 KiB, its frame buffer 16 KiB) live as long as the connection, and a
 * power-of-two class cost an idle connection 1.2 KiB more.
 * A call's blocks are far smaller (its largest, the call, 496 B), but for
 * a header block of more than 2 KiB of fields. */
#define MTD_SLAB_CLASSES 7
/* Bytes of free blocks kept per class (so at most 7 x 256 KiB per worker),
 * and never more than 1024 blocks of one class. Under AddressSanitizer
 * nothing is kept, so every block goes back to malloc and use-after-free
 * stays detectable; a slab with `passthrough` set (a worker's, when
 * MTD_SLAB_ENV is "0": how maitred runs under valgrind memcheck) keeps
 * nothing either, in any build. */
#if defined(__SANITIZE_ADDRESS__)
#define MTD_SLAB_KEEP_BYTES 0
#else
#define MTD_SLAB_KEEP_BYTES (256 * 1024)
#endif
#define MTD_SLAB_KEEP_MAX 1024
/* The environment variable a worker reads once when it is created: "0"
 * makes its slab a passthrough to malloc/free. */
#define MTD_SLAB_ENV "MAITRED_SLAB"

struct mtd_slab {
	void *free[MTD_SLAB_CLASSES];
	uint32_t n_free[MTD_SLAB_CLASSES];
	bool passthrough; /* keep no freed block: every free goes to free() */
};

void *mtd_slab_malloc(struct mtd_slab *s, size_t size);
void *mtd_slab_calloc(struct mtd_slab *s, size_t n, size_t size);
void *mtd_slab_realloc(struct mtd_slab *s, void *p, size_t size);
void mtd_slab_free(struct mtd_slab *s, void *p);
/* Return every cached block to malloc. */
void mtd_slab_drain(struct mtd_slab *s);
/* Whether the environment asks for passthrough slabs (MTD_SLAB_ENV=0).
 * Reads the environment: call it at setup, never per block. */
bool mtd_slab_env_passthrough(void);

#endif
