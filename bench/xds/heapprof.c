/* A heap profile by caller, for bench/xds/memory.py (HEAPPROF=1): an
 * LD_PRELOAD that counts the live malloc chunks (malloc_usable_size + 8,
 * glibc's header) by the address that called malloc, calloc, realloc,
 * strdup's malloc and the like. Whenever the file $HEAPPROF_OUT.req
 * appears (polled every 100 ms by a thread of its own), it is removed and
 * the live chunks by caller are written to $HEAPPROF_OUT.N (N = 0, 1...)
 * as "chunks bytes address object" lines, where address is relative to
 * the object (the binary, or a library) for addr2line.
 *
 * A measurement aid, not part of maitred: one lock around a table of
 * every live pointer, so the process runs slower; it counts chunks, not
 * touched pages.
 *
 *   cc -O2 -shared -fPIC -o heapprof.so heapprof.c -ldl -lpthread
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define SLOTS (1u << 23) /* live pointers: 8 M */
#define CALLERS (1u << 16)

struct slot {
	void *p;      /* NULL: empty; TOMB: removed */
	void *caller;
};

static struct slot *table;
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static void *(*real_malloc)(size_t);
static void *(*real_calloc)(size_t, size_t);
static void *(*real_realloc)(void *, size_t);
static void (*real_free)(void *);
static void *(*real_memalign)(size_t, size_t);
static int (*real_posix_memalign)(void **, size_t, size_t);
static __thread int inside;
#define TOMB ((void *)1)

/* dlsym's own calloc before the real one is known. */
static char boot[4096];
static size_t boot_used;

static uint32_t hash(const void *p)
{
	uint64_t x = (uint64_t)(uintptr_t)p;
	x ^= x >> 33;
	x *= 0xff51afd7ed558ccdULL;
	x ^= x >> 33;
	return (uint32_t)x;
}

static void init(void)
{
	if (real_malloc)
		return;
	real_calloc = dlsym(RTLD_NEXT, "calloc");
	real_malloc = dlsym(RTLD_NEXT, "malloc");
	real_realloc = dlsym(RTLD_NEXT, "realloc");
	real_free = dlsym(RTLD_NEXT, "free");
	real_memalign = dlsym(RTLD_NEXT, "memalign");
	real_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
}

static void track(void *p, void *caller)
{
	if (!p || inside || !table)
		return;
	pthread_mutex_lock(&lock);
	for (uint32_t i = hash(p) & (SLOTS - 1);; i = (i + 1) & (SLOTS - 1))
		if (table[i].p == NULL || table[i].p == TOMB) {
			table[i].p = p;
			table[i].caller = caller;
			break;
		}
	pthread_mutex_unlock(&lock);
}

static void untrack(void *p)
{
	if (!p || !table)
		return;
	pthread_mutex_lock(&lock);
	for (uint32_t i = hash(p) & (SLOTS - 1); table[i].p != NULL; i = (i + 1) & (SLOTS - 1))
		if (table[i].p == p) {
			table[i].p = TOMB;
			break;
		}
	pthread_mutex_unlock(&lock);
}

struct agg {
	void *caller;
	uint64_t n, bytes;
};

static int by_bytes(const void *a, const void *b)
{
	const struct agg *x = a, *y = b;
	return x->bytes < y->bytes ? 1 : x->bytes > y->bytes ? -1 : 0;
}

static void dump(const char *path)
{
	struct agg *a = real_calloc(CALLERS, sizeof(*a));
	FILE *f;

	if (!a)
		return;
	pthread_mutex_lock(&lock);
	for (uint32_t i = 0; i < SLOTS; i++) {
		void *p = table[i].p;
		if (p == NULL || p == TOMB)
			continue;
		uint32_t h = hash(table[i].caller) & (CALLERS - 1);
		while (a[h].caller && a[h].caller != table[i].caller)
			h = (h + 1) & (CALLERS - 1);
		a[h].caller = table[i].caller;
		a[h].n++;
		a[h].bytes += malloc_usable_size(p) + 8;
	}
	pthread_mutex_unlock(&lock);
	qsort(a, CALLERS, sizeof(*a), by_bytes);
	inside = 1;
	f = fopen(path, "w");
	for (uint32_t i = 0; f && i < CALLERS && a[i].caller; i++) {
		Dl_info d;
		uintptr_t off = (uintptr_t)a[i].caller;
		const char *obj = "?";
		if (dladdr(a[i].caller, &d) && d.dli_fname) {
			obj = d.dli_fname;
			off -= (uintptr_t)d.dli_fbase;
		}
		fprintf(f, "%llu %llu 0x%llx %s\n", (unsigned long long)a[i].n, (unsigned long long)a[i].bytes,
		        (unsigned long long)off, obj);
	}
	if (f)
		fclose(f);
	inside = 0;
	real_free(a);
}

static void *poll_thread(void *arg)
{
	const char *out = arg;
	char req[4096], path[4096];
	unsigned n = 0;

	inside = 1; /* its own allocations are not counted */
	snprintf(req, sizeof(req), "%s.req", out);
	for (;;) {
		usleep(100000);
		if (access(req, F_OK) != 0)
			continue;
		snprintf(path, sizeof(path), "%s.%u.tmp", out, n);
		inside = 0;
		dump(path);
		inside = 1;
		char done[4096];
		snprintf(done, sizeof(done), "%s.%u", out, n++);
		rename(path, done);
		unlink(req);
	}
	return NULL;
}

__attribute__((constructor)) static void start(void)
{
	const char *out = getenv("HEAPPROF_OUT");
	pthread_t t;

	init();
	if (!out)
		return;
	inside = 1;
	table = real_calloc(SLOTS, sizeof(*table));
	pthread_create(&t, NULL, poll_thread, (void *)out);
	inside = 0;
}

void *malloc(size_t n)
{
	init();
	void *p = real_malloc(n);
	track(p, __builtin_return_address(0));
	return p;
}

void *calloc(size_t k, size_t n)
{
	if (!real_calloc) {
		/* dlsym's own, before init() knows the real one. */
		size_t sz = (k * n + 15) & ~(size_t)15;
		void *p = boot + boot_used;
		boot_used += sz;
		return boot_used <= sizeof(boot) ? p : NULL;
	}
	void *p = real_calloc(k, n);
	track(p, __builtin_return_address(0));
	return p;
}

void *realloc(void *old, size_t n)
{
	init();
	untrack(old);
	void *p = real_realloc(old, n);
	track(p ? p : NULL, __builtin_return_address(0));
	if (!p && old && n)
		track(old, __builtin_return_address(0)); /* still live */
	return p;
}

void free(void *p)
{
	if ((char *)p >= boot && (char *)p < boot + sizeof(boot))
		return;
	init();
	untrack(p);
	real_free(p);
}

void *memalign(size_t al, size_t n)
{
	init();
	void *p = real_memalign(al, n);
	track(p, __builtin_return_address(0));
	return p;
}

int posix_memalign(void **out, size_t al, size_t n)
{
	init();
	int rc = real_posix_memalign(out, al, n);
	if (rc == 0)
		track(*out, __builtin_return_address(0));
	return rc;
}

void *aligned_alloc(size_t al, size_t n)
{
	return memalign(al, n);
}
