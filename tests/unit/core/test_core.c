/* Unit tests for lib/core: the chunked byte queue, log level parsing, the
 * slab and the timer heap. */
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "core/addr.h"
#include "core/base64.h"
#include "core/bits.h"
#include "core/clock.h"
#include "core/hash.h"
#include "core/lazy.h"
#include "core/bufq.h"
#include "core/log.h"
#include "core/slab.h"
#include "core/timers.h"
#include "core/utf8.h"

START_TEST(bits_across_words)
{
	uint64_t b[3] = {0};
	size_t on[] = {0, 63, 64, 127, 130};
	for (size_t k = 0; k < 5; k++)
		mtd_bit_set(b, on[k]);
	ck_assert_uint_eq(b[0], 1ull | 1ull << 63);
	ck_assert_uint_eq(b[1], 1ull | 1ull << 63);
	ck_assert_uint_eq(b[2], 1ull << 2);
	for (size_t i = 0; i < 192; i++)
		ck_assert(mtd_bit_get(b, i) == (i == 0 || i == 63 || i == 64 || i == 127 || i == 130));
	mtd_bit_clear(b, 63);
	mtd_bit_clear(b, 65); /* not set: nothing */
	ck_assert_uint_eq(b[0], 1);
	ck_assert_uint_eq(b[1], 1ull | 1ull << 63);
	/* Bounded by n bits: outside, nothing is read or written. */
	uint64_t two[3] = {0, 0, 0x5a};
	ck_assert(mtd_bit_set_in(two, 128, 127));
	ck_assert(!mtd_bit_set_in(two, 128, 128));
	ck_assert(!mtd_bit_set_in(two, 128, 130));
	ck_assert_uint_eq(two[2], 0x5a);
	ck_assert(mtd_bit_get_in(two, 128, 127));
	ck_assert(!mtd_bit_get_in(two + 0, 100, 127));
	ck_assert(!mtd_bit_get_in(NULL, 0, 0));
}
END_TEST

START_TEST(bufq_fifo_across_chunks)
{
	struct mtd_bufq q = {0};
	enum { TOTAL = 3 * MTD_BUFQ_CHUNK + 123 };
	uint8_t *in = malloc(TOTAL), *out = malloc(TOTAL);
	for (size_t i = 0; i < TOTAL; i++)
		in[i] = (uint8_t)(i * 7 + 3);
	/* Appends of odd sizes, reads of other odd sizes. */
	size_t put = 0, got = 0;
	while (put < TOTAL) {
		size_t n = put % 5000 + 1;
		if (n > TOTAL - put)
			n = TOTAL - put;
		ck_assert_int_eq(mtd_bufq_append(&q, in + put, n), 0);
		put += n;
		got += mtd_bufq_read(&q, out + got, 777);
		ck_assert_uint_eq(q.len, put - got);
	}
	got += mtd_bufq_read(&q, out + got, TOTAL);
	ck_assert_uint_eq(got, TOTAL);
	ck_assert_uint_eq(q.len, 0);
	ck_assert_ptr_null(q.head);
	ck_assert(memcmp(in, out, TOTAL) == 0);
	ck_assert_uint_eq(mtd_bufq_read(&q, out, 10), 0);
	free(in);
	free(out);
}
END_TEST

START_TEST(bufq_recycles_full_chunks_up_to_its_bound)
{
	mtd_bufq_release_kept();
	struct mtd_bufq q = {0};
	static uint8_t in[MTD_BUFQ_CHUNK * 3], out[sizeof(in)];
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(i * 13 + 1);
	/* Twice through: the second time the chunks come from the kept list
	 * and must carry the new bytes, not the old. */
	for (int round = 0; round < 2; round++) {
		for (size_t put = 0; put < sizeof(in); put += 4096)
			ck_assert_int_eq(mtd_bufq_append(&q, in + put, 4096), 0);
		ck_assert_uint_eq(mtd_bufq_read(&q, out, sizeof(out)), sizeof(in));
		ck_assert_mem_eq(in, out, sizeof(in));
		/* 256, 512, ... 8 KiB then full 16 KiB chunks: only those are
		 * kept, none under ASan. */
		ck_assert_uint_le(mtd_bufq_kept(MTD_BUFQ_CHUNK), MTD_BUFQ_KEEP);
		if (MTD_BUFQ_KEEP > 0)
			ck_assert_uint_gt(mtd_bufq_kept(MTD_BUFQ_CHUNK), 0);
		for (size_t i = 0; i < sizeof(in); i++)
			in[i] ^= 0x5a;
	}
	/* Never more than the bound, however many go at once. */
	for (int i = 0; i < 2 * MTD_BUFQ_KEEP + 8; i++)
		ck_assert_int_eq(mtd_bufq_append(&q, in, MTD_BUFQ_CHUNK), 0);
	mtd_bufq_clear(&q);
	ck_assert_uint_le(mtd_bufq_kept(MTD_BUFQ_CHUNK), MTD_BUFQ_KEEP);
	mtd_bufq_release_kept();
	ck_assert_uint_eq(mtd_bufq_kept(MTD_BUFQ_CHUNK), 0);
}
END_TEST

/* A queue's first chunk (a unary call's whole message) is recycled too,
 * up to its own bound, and a kept one carries the new bytes. */
START_TEST(bufq_recycles_first_chunks_up_to_their_bound)
{
	mtd_bufq_release_kept();
	enum { N = 2 * MTD_BUFQ_KEEP_FIRST + 8 };
	static struct mtd_bufq q[N];
	uint8_t msg[100], out[sizeof(msg)];
	for (int round = 0; round < 2; round++) {
		for (size_t i = 0; i < N; i++) {
			memset(msg, (int)(i * 7 + (size_t)round), sizeof(msg));
			ck_assert_int_eq(mtd_bufq_append(&q[i], msg, sizeof(msg)), 0);
			ck_assert_uint_eq(q[i].head->cap, MTD_BUFQ_FIRST_CHUNK);
		}
		for (size_t i = 0; i < N; i++) {
			memset(msg, (int)(i * 7 + (size_t)round), sizeof(msg));
			ck_assert_uint_eq(mtd_bufq_read(&q[i], out, sizeof(out)), sizeof(msg));
			ck_assert_mem_eq(out, msg, sizeof(msg));
		}
		/* Never more than the bound, however many go at once; none
		 * under ASan. */
		ck_assert_uint_eq(mtd_bufq_kept(MTD_BUFQ_FIRST_CHUNK), MTD_BUFQ_KEEP_FIRST);
		ck_assert_uint_eq(mtd_bufq_kept(MTD_BUFQ_CHUNK), 0);
	}
	ck_assert_uint_eq(mtd_bufq_kept(512), 0); /* no other size is kept */
	mtd_bufq_release_kept();
	ck_assert_uint_eq(mtd_bufq_kept(MTD_BUFQ_FIRST_CHUNK), 0);
}
END_TEST

START_TEST(bufq_copy_at_and_drop)
{
	struct mtd_bufq q = {0};
	uint8_t in[70000], out[70000];
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(i * 7 + 3);
	/* Uneven appends so reads cross chunk boundaries. */
	for (size_t put = 0; put < sizeof(in);) {
		size_t n = put % 3 ? 1500 : 333;
		if (n > sizeof(in) - put)
			n = sizeof(in) - put;
		ck_assert_int_eq(mtd_bufq_append(&q, in + put, n), 0);
		put += n;
	}
	/* Replay from any offset, any number of times: nothing is dropped. */
	static const size_t offs[] = {0, 1, 1023, 1024, 5000, 69999, 70000, 80000};
	for (size_t i = 0; i < sizeof(offs) / sizeof(offs[0]); i++) {
		size_t want = offs[i] < sizeof(in) ? sizeof(in) - offs[i] : 0;
		size_t got = 0;
		while (got < want) {
			size_t k = mtd_bufq_copy_at(&q, offs[i] + got, out + got, 4099);
			ck_assert_uint_gt(k, 0);
			got += k;
		}
		ck_assert_uint_eq(mtd_bufq_copy_at(&q, offs[i] + got, out, 10), 0);
		ck_assert_mem_eq(out, in + offs[i], want);
		ck_assert_uint_eq(q.len, sizeof(in));
	}
	/* Drop a prefix; offsets now count from the new head. */
	ck_assert_uint_eq(mtd_bufq_drop(&q, 3000), 3000);
	ck_assert_uint_eq(q.len, sizeof(in) - 3000);
	ck_assert_uint_eq(mtd_bufq_copy_at(&q, 0, out, 10), 10);
	ck_assert_mem_eq(out, in + 3000, 10);
	ck_assert_uint_eq(mtd_bufq_drop(&q, 1u << 20), sizeof(in) - 3000);
	ck_assert_uint_eq(q.len, 0);
	ck_assert_ptr_null(q.head);
	ck_assert_ptr_null(q.tail);
	ck_assert_int_eq(mtd_bufq_append(&q, in, 5), 0);
	ck_assert_uint_eq(mtd_bufq_read(&q, out, 10), 5);
	mtd_bufq_clear(&q);
}
END_TEST

/* Spans hold their chunks: the bytes stay readable after the queue
 * dropped them, and a full chunk is kept for reuse (or freed) only when
 * its last span lets go. Under AddressSanitizer a span that did not hold
 * its chunk is a use after free here. */
START_TEST(bufq_spans_outlive_the_queue)
{
	mtd_bufq_release_kept();
	struct mtd_bufq q = {0};
	static uint8_t in[3 * MTD_BUFQ_CHUNK];
	for (size_t i = 0; i < sizeof(in); i++)
		in[i] = (uint8_t)(i * 13 + 5);
	for (size_t put = 0; put < sizeof(in); put += 5000)
		ck_assert_int_eq(mtd_bufq_append(&q, in + put, sizeof(in) - put < 5000 ? sizeof(in) - put : 5000), 0);
	/* A span per chunk crossed, from an offset inside the first. */
	struct mtd_bufq_span sp[8];
	size_t covered = 0, off = 1000, want = sizeof(in) - 1000;
	size_t k = mtd_bufq_ref_at(&q, off, want, sp, 8, &covered);
	ck_assert_uint_eq(covered, want);
	ck_assert_uint_gt(k, 1);
	/* At most max spans: the bytes covered say how far they reach. */
	struct mtd_bufq_span one;
	size_t c1 = 0;
	ck_assert_uint_eq(mtd_bufq_ref_at(&q, off, want, &one, 1, &c1), 1);
	ck_assert_uint_eq(c1, one.n);
	ck_assert_uint_lt(c1, want);
	ck_assert_mem_eq(one.p, in + off, c1);
	/* The queue lets go of everything; the spans still read right. */
	unsigned kept = mtd_bufq_kept(MTD_BUFQ_CHUNK);
	mtd_bufq_clear(&q);
	ck_assert_uint_eq(mtd_bufq_kept(MTD_BUFQ_CHUNK), kept); /* every full chunk is held */
	size_t at = off;
	for (size_t i = 0; i < k; i++) {
		ck_assert_mem_eq(sp[i].p, in + at, sp[i].n);
		at += sp[i].n;
	}
	ck_assert_uint_eq(at, off + want);
	mtd_bufq_unref(one.chunk);
	for (size_t i = 0; i < k; i++)
		mtd_bufq_unref(sp[i].chunk);
#if MTD_BUFQ_KEEP > 0
	/* The full chunks came back for reuse with their last span. */
	ck_assert_uint_gt(mtd_bufq_kept(MTD_BUFQ_CHUNK), kept);
#endif
	mtd_bufq_release_kept();
}
END_TEST

START_TEST(bufq_big_append_and_clear)
{
	struct mtd_bufq q = {0};
	size_t big = 5 * MTD_BUFQ_CHUNK;
	uint8_t *p = calloc(1, big);
	ck_assert_int_eq(mtd_bufq_append(&q, (const uint8_t *)"ab", 2), 0);
	ck_assert_int_eq(mtd_bufq_append(&q, p, big), 0);
	ck_assert_uint_eq(q.len, big + 2);
	ck_assert_int_eq(mtd_bufq_append(&q, p, 0), 0);
	ck_assert_uint_eq(q.len, big + 2);
	mtd_bufq_clear(&q);
	ck_assert_uint_eq(q.len, 0);
	ck_assert_ptr_null(q.head);
	ck_assert_ptr_null(q.tail);
	free(p);
}
END_TEST

START_TEST(log_levels)
{
	enum mtd_log_level l = MTD_LOG_ERROR;
	ck_assert_int_eq(mtd_log_parse_level("debug", &l), 0);
	ck_assert_int_eq(l, MTD_LOG_DEBUG);
	ck_assert_int_eq(mtd_log_parse_level("warn", &l), 0);
	ck_assert_int_eq(l, MTD_LOG_WARN);
	ck_assert_int_eq(mtd_log_parse_level("verbose", &l), -EINVAL);
	ck_assert_int_eq(l, MTD_LOG_WARN);
}
END_TEST

/* One line per interval; the next one says how many went without. */
START_TEST(log_gate_one_line_per_interval)
{
	const int64_t s = 1000000000;
	struct mtd_log_gate g = {0};
	uint64_t held = 99;
	ck_assert(mtd_log_gate_pass(&g, 5 * s, s, &held)); /* the first always */
	ck_assert_uint_eq(held, 0);
	ck_assert(!mtd_log_gate_pass(&g, 5 * s + 1, s, &held));
	ck_assert(!mtd_log_gate_pass(&g, 6 * s - 1, s, &held));
	ck_assert_uint_eq(held, 0); /* untouched while held back */
	ck_assert(mtd_log_gate_pass(&g, 6 * s, s, &held));
	ck_assert_uint_eq(held, 2);
	ck_assert(mtd_log_gate_pass(&g, 20 * s, s, &held)); /* quiet since: nothing held */
	ck_assert_uint_eq(held, 0);
	/* A clock that starts at 0 still closes the gate behind its line. */
	struct mtd_log_gate z = {0};
	ck_assert(mtd_log_gate_pass(&z, 0, 10 * s, &held));
	ck_assert(!mtd_log_gate_pass(&z, 5 * s, 10 * s, &held));
	ck_assert(mtd_log_gate_pass(&z, 10 * s + 1, 10 * s, &held));
	ck_assert_uint_eq(held, 1);
}
END_TEST

/* A peer's text cannot end a text log line or forge another: control
 * characters and bytes that are not UTF-8 are escaped, UTF-8 stays. */
START_TEST(log_text_escapes_what_could_break_a_line)
{
	char out[64];
	ck_assert_uint_eq(mtd_log_escape_text(out, sizeof(out), "c1: bad\n2026 error forged"), 26);
	ck_assert_str_eq(out, "c1: bad\\n2026 error forged");
	mtd_log_escape_text(out, sizeof(out), "a\rb\tc\x1b[31md\x7f");
	ck_assert_str_eq(out, "a\\rb\\tc\\x1b[31md\\x7f");
	mtd_log_escape_text(out, sizeof(out), "zone \xc3\xa9t\xc3\xa9 \x9f\xc3");
	ck_assert_str_eq(out, "zone \xc3\xa9t\xc3\xa9 \\x9f\\xc3");
	/* C1 controls are control characters too: NEL (U+0085) ends a line
	 * for Unicode line breaking, CSI (U+009B) is a terminal's ESC [. */
	mtd_log_escape_text(out, sizeof(out), "a\xc2\x85" "b\xc2\x9b" "2J\xc2\xa0");
	ck_assert_str_eq(out, "a\\xc2\\x85b\\xc2\\x9b2J\xc2\xa0");
	ck_assert_uint_eq(mtd_log_escape_text(out, 9, "\xc2\x85"), 0); /* whole or not at all */
	ck_assert_uint_eq(mtd_log_escape_text(out, 10, "\xc2\x85"), 8);
	/* Cut at cap, never inside an escape, always terminated. */
	ck_assert_uint_eq(mtd_log_escape_text(out, 8, "\n\n\n\n\n"), 4);
	ck_assert_str_eq(out, "\\n\\n");
	ck_assert_uint_eq(mtd_log_escape_text(out, 1, "abc"), 0);
	ck_assert_str_eq(out, "");
	/* A peer's backslash is escaped too: its "\n" is not a newline's. */
	mtd_log_escape_text(out, sizeof(out), "a\\nb\n");
	ck_assert_str_eq(out, "a\\\\nb\\n");
}
END_TEST

/* What reaches stderr: one line per call, in both formats. */
static void logged(bool json, const char *arg, char *got, size_t cap)
{
	fflush(stderr);
	int saved = dup(2);
	FILE *f = tmpfile();
	ck_assert_ptr_nonnull(f);
	dup2(fileno(f), 2);
	atomic_store(&mtd_log_json, json);
	mtd_log(MTD_LOG_ERROR, "name %s end", arg);
	fflush(stderr);
	atomic_store(&mtd_log_json, false);
	dup2(saved, 2);
	close(saved);
	rewind(f);
	size_t n = fread(got, 1, cap - 1, f);
	got[n] = '\0';
	fclose(f);
}

START_TEST(log_line_is_one_line_whatever_the_arguments)
{
	char got[2048];
	logged(false, "x\n2026-01-01T00:00:00.000Z error forged", got, sizeof(got));
	ck_assert_ptr_eq(strchr(got, '\n'), got + strlen(got) - 1);
	ck_assert_ptr_nonnull(strstr(got, " error name x\\n2026-01-01T00:00:00.000Z error forged end\n"));
	logged(true, "\"q\" \xc3\xa9 \x9f\n", got, sizeof(got));
	ck_assert_ptr_eq(strchr(got, '\n'), got + strlen(got) - 1);
	ck_assert_ptr_nonnull(strstr(got, "\"msg\":\"name \\\"q\\\" \xc3\xa9 \\u009f\\u000a end\"}\n"));
	logged(true, "\xc2\x85\xc2\x9b", got, sizeof(got));
	ck_assert_ptr_nonnull(strstr(got, "\"msg\":\"name \\u0085\\u009b end\"}\n"));
}
END_TEST

START_TEST(slab_classes_reuse_and_realloc)
{
	struct mtd_slab s = {0};
	uint8_t *a = mtd_slab_malloc(&s, 20);
	ck_assert_ptr_nonnull(a);
	memset(a, 0xab, 20);
	mtd_slab_free(&s, a);
	uint8_t *b = mtd_slab_malloc(&s, 30); /* same 32-byte class */
#if !defined(__SANITIZE_ADDRESS__)
	ck_assert_ptr_eq(a, b); /* recycled */
	ck_assert_uint_eq(s.n_free[0], 0);
#endif
	/* Class boundaries: 32 and 1 share a class, 33 does not; 8192 is the
	 * last class, 8193 is "large" (never cached). */
	void *x = mtd_slab_malloc(&s, 32);
	mtd_slab_free(&s, x);
	void *y = mtd_slab_malloc(&s, 33);
	ck_assert_uint_eq(s.n_free[0], MTD_SLAB_KEEP_BYTES ? 1 : 0);
	ck_assert_uint_eq(s.n_free[1], 0);
	mtd_slab_free(&s, y);
	ck_assert_uint_eq(s.n_free[1], MTD_SLAB_KEEP_BYTES ? 1 : 0);
	void *l = mtd_slab_malloc(&s, 2049); /* above the largest class: malloc's */
	mtd_slab_free(&s, l);
	for (unsigned c = 0; c < MTD_SLAB_CLASSES - 1; c++)
		if (c > 1)
			ck_assert_uint_eq(s.n_free[c], 0);
	ck_assert_uint_eq(s.n_free[MTD_SLAB_CLASSES - 1], 0);
	/* Growing keeps the contents, across classes and into "large". */
	for (int i = 0; i < 30; i++)
		b[i] = (uint8_t)i;
	b = mtd_slab_realloc(&s, b, 3000);
	ck_assert_ptr_nonnull(b);
	for (int i = 0; i < 30; i++)
		ck_assert_uint_eq(b[i], (uint8_t)i);
	b = mtd_slab_realloc(&s, b, 100000);
	ck_assert_ptr_nonnull(b);
	ck_assert_uint_eq(b[29], 29);
	b = mtd_slab_realloc(&s, b, 64); /* large -> small keeps the head */
	ck_assert_uint_eq(b[29], 29);
	uint32_t *z = mtd_slab_calloc(&s, 10, sizeof(uint32_t));
	for (int i = 0; i < 10; i++)
		ck_assert_uint_eq(z[i], 0);
	ck_assert_ptr_null(mtd_slab_calloc(&s, SIZE_MAX / 2, 4)); /* overflow */
	mtd_slab_free(&s, z);
	mtd_slab_free(&s, b);
	mtd_slab_free(&s, NULL);
	/* The cache is bounded: freeing many 2 KiB blocks keeps few. */
	void *many[200];
	for (int i = 0; i < 200; i++)
		many[i] = mtd_slab_malloc(&s, 2000);
	for (int i = 0; i < 200; i++)
		mtd_slab_free(&s, many[i]);
	ck_assert_uint_le(s.n_free[MTD_SLAB_CLASSES - 1], MTD_SLAB_KEEP_BYTES / 2048);
	mtd_slab_drain(&s);
	for (unsigned c = 0; c < MTD_SLAB_CLASSES; c++) {
		ck_assert_ptr_null(s.free[c]);
		ck_assert_uint_eq(s.n_free[c], 0);
	}
}
END_TEST

/* MAITRED_SLAB=0 (how maitred runs under valgrind): no freed block is kept,
 * in any build, so memcheck sees every use after free and every leak. */
START_TEST(slab_passthrough_keeps_nothing)
{
	setenv(MTD_SLAB_ENV, "0", 1);
	ck_assert(mtd_slab_env_passthrough());
	setenv(MTD_SLAB_ENV, "1", 1);
	ck_assert(!mtd_slab_env_passthrough());
	unsetenv(MTD_SLAB_ENV);
	ck_assert(!mtd_slab_env_passthrough());

	struct mtd_slab s = {.passthrough = true};
	for (size_t size = 1; size <= 8192; size *= 2) {
		void *p = mtd_slab_malloc(&s, size);
		ck_assert_ptr_nonnull(p);
		mtd_slab_free(&s, p);
	}
	void *r = mtd_slab_realloc(&s, mtd_slab_malloc(&s, 20), 3000);
	ck_assert_ptr_nonnull(r);
	mtd_slab_free(&s, r);
	for (unsigned c = 0; c < MTD_SLAB_CLASSES; c++) {
		ck_assert_ptr_null(s.free[c]);
		ck_assert_uint_eq(s.n_free[c], 0);
	}
}
END_TEST

/* The heap against a plain array: random arms, moves, disarms and pops;
 * every pop is the earliest armed timer, and slots stay consistent. */
START_TEST(timers_heap_order)
{
	enum { N = 300 };
	static struct mtd_timer t[N];
	struct mtd_timers h = {0};
	memset(t, 0, sizeof(t));
	uint32_t rng = 12345;
	for (int round = 0; round < 20000; round++) {
		rng = rng * 1103515245u + 12345u;
		int i = (int)((rng >> 8) % N);
		int op = (int)((rng >> 20) % 4);
		if (op <= 1) {
			ck_assert_int_eq(mtd_timers_add(&h, &t[i], (int64_t)((rng >> 4) % 1000)), 0);
		} else if (op == 2) {
			mtd_timers_del(&h, &t[i]);
			ck_assert(!mtd_timer_armed(&t[i]));
		} else {
			int64_t now = (int64_t)((rng >> 12) % 1000);
			int64_t min = INT64_MAX;
			for (int k = 0; k < N; k++)
				if (mtd_timer_armed(&t[k]) && t[k].at_ns < min)
					min = t[k].at_ns;
			ck_assert_int_eq(mtd_timers_next(&h), min);
			struct mtd_timer *p = mtd_timers_pop_due(&h, now);
			if (min <= now) {
				ck_assert_ptr_nonnull(p);
				ck_assert_int_eq(p->at_ns, min);
				ck_assert(!mtd_timer_armed(p));
			} else {
				ck_assert_ptr_null(p);
			}
		}
		/* One assertion per round, not per timer: each of Check's marks a
		 * point through a pipe, and 3 million of them took 264 s under
		 * valgrind (the CI stage). */
		uint32_t armed = 0;
		bool slots_ok = true;
		for (int k = 0; k < N; k++)
			if (mtd_timer_armed(&t[k])) {
				armed++;
				slots_ok &= h.heap[t[k].slot - 1] == &t[k];
			}
		ck_assert_msg(slots_ok, "a timer's slot does not point back to it (round %d)", round);
		ck_assert_uint_eq(armed, h.n);
	}
	/* Draining pops in order. */
	int64_t last = INT64_MIN;
	struct mtd_timer *p;
	while ((p = mtd_timers_pop_due(&h, INT64_MAX))) {
		ck_assert_int_ge(p->at_ns, last);
		last = p->at_ns;
	}
	ck_assert_uint_eq(h.n, 0);
	mtd_timers_add(&h, &t[0], 5);
	mtd_timers_free(&h);
	ck_assert(!mtd_timer_armed(&t[0]));
}
END_TEST

/* One monotonic moment shown twice reads the same wall time (the admin's
 * pages and /history compare them), and it is the wall clock's reading of
 * that moment within the slack. Read apart, each conversion rounded the
 * two clocks its own way and could differ by a ms. */
START_TEST(wall_of_mono_is_one_value_for_every_reader)
{
	int64_t moment = mtd_mono_ms() - 1234;
	int64_t first = mtd_wall_of_mono_ms(moment);
	for (int i = 0; i < 20000; i++)
		ck_assert_int_eq(mtd_wall_of_mono_ms(moment), first);
	int64_t direct = mtd_wall_ms() - (mtd_mono_ms() - moment);
	ck_assert_int_le(first - direct, MTD_WALL_OFFSET_SLACK_MS + 1);
	ck_assert_int_le(direct - first, MTD_WALL_OFFSET_SLACK_MS + 1);
}
END_TEST

/* An address as text: IPv4 plain, IPv6 bracketed and in its one numeric
 * spelling, so that two spellings of one address are one key. */
START_TEST(addr_text_one_spelling)
{
	struct sockaddr_storage ss;
	char buf[MTD_ADDR_TEXT_SIZE];
	memset(&ss, 0, sizeof(ss));
	struct sockaddr_in *s4 = (struct sockaddr_in *)&ss;
	s4->sin_family = AF_INET;
	s4->sin_port = htons(8080);
	inet_pton(AF_INET, "127.0.0.1", &s4->sin_addr);
	ck_assert_str_eq(mtd_addr_text((const struct sockaddr *)&ss, buf, sizeof(buf)), "127.0.0.1:8080");
	memset(&ss, 0, sizeof(ss));
	struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)&ss;
	s6->sin6_family = AF_INET6;
	s6->sin6_port = htons(443);
	inet_pton(AF_INET6, "0:0:0:0:0:0:0:1", &s6->sin6_addr);
	ck_assert_str_eq(mtd_addr_text((const struct sockaddr *)&ss, buf, sizeof(buf)), "[::1]:443");
	/* Too small a buffer: cut, terminated. */
	ck_assert_str_eq(mtd_addr_text((const struct sockaddr *)&ss, buf, 4), "[::");
}
END_TEST

START_TEST(base64_both_alphabets_padding_optional_strict_otherwise)
{
	uint8_t out[16];
	const char *ok[][2] = {{"", ""}, {"TQ==", "M"}, {"TQ", "M"}, {"TWE=", "Ma"}, {"TWFu", "Man"}};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
		ssize_t n = mtd_base64_decode((const uint8_t *)ok[i][0], strlen(ok[i][0]), out, sizeof(out));
		ck_assert_int_eq(n, (ssize_t)strlen(ok[i][1]));
		ck_assert(memcmp(out, ok[i][1], (size_t)n) == 0);
	}
	/* 0xfb 0xff: "+/8" standard, "-_8" URL-safe. */
	ck_assert_int_eq(mtd_base64_decode((const uint8_t *)"+/8=", 4, out, sizeof(out)), 2);
	ck_assert_uint_eq(out[0], 0xfb);
	ck_assert_int_eq(mtd_base64_decode((const uint8_t *)"-_8", 3, out, sizeof(out)), 2);
	ck_assert_uint_eq(out[1], 0xff);
	const char *bad[] = {"T", "TQ===", "T=Q=", "TR==", "TQ Q", "TQ\n", "*A=="};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_int_eq(mtd_base64_decode((const uint8_t *)bad[i], strlen(bad[i]), out, sizeof(out)), -EINVAL);
	/* Never past cap. */
	ck_assert_int_eq(mtd_base64_decode((const uint8_t *)"TWFu", 4, out, 2), -EINVAL);
}
END_TEST

START_TEST(utf8_rfc3629_only)
{
	/* Valid: ASCII, 2, 3 and 4 bytes, the edges U+0080, U+07FF, U+0800,
	 * U+D7FF, U+E000, U+FFFF, U+10000, U+10FFFF. */
	static const char *ok[] = {"", "a", "\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xc2\x80",
	                           "\xdf\xbf", "\xe0\xa0\x80", "\xed\x9f\xbf", "\xee\x80\x80", "\xef\xbf\xbf",
	                           "\xf0\x90\x80\x80", "\xf4\x8f\xbf\xbf"};
	/* Invalid: a stray continuation, C0/C1 overlongs, E0/F0 overlongs, a
	 * surrogate, above U+10FFFF, F5+, cut short, a bad continuation. */
	static const char *bad[] = {"\x80", "\xbf", "\xc0\x80", "\xc1\xbf", "\xe0\x9f\xbf", "\xf0\x8f\xbf\xbf",
	                            "\xed\xa0\x80", "\xed\xbf\xbf", "\xf4\x90\x80\x80", "\xf5\x80\x80\x80", "\xff",
	                            "\xc3", "\xe2\x82", "\xf0\x9f\x98", "\xc3\x28", "\xe2\x28\xac", "eu-1\x9f"};
	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		ck_assert_msg(mtd_utf8_valid(ok[i], strlen(ok[i])), "ok[%zu]", i);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		ck_assert_msg(!mtd_utf8_valid(bad[i], strlen(bad[i])), "bad[%zu]", i);
	/* The length of one sequence, bounded by what is left. */
	ck_assert_uint_eq(mtd_utf8_seq((const unsigned char *)"\xf0\x9f\x98\x80", 4), 4);
	ck_assert_uint_eq(mtd_utf8_seq((const unsigned char *)"\xf0\x9f\x98\x80", 3), 0);
	ck_assert_uint_eq(mtd_utf8_seq((const unsigned char *)"\xe2\x82\xac!", 4), 3);
}
END_TEST

/* mtd_utf8_copy: each byte outside a valid sequence as '?', a sequence cut
 * at the end too, the length kept; in place as well. */
START_TEST(utf8_copy_repairs_in_place)
{
	char out[16], in_place[] = "a\xc3\xa9\xff\xe2\x82\xac\xf0\x9f\x98";
	const char *src = "a\xc3\xa9\xff\xe2\x82\xac\xf0\x9f\x98";

	mtd_utf8_copy(out, src, strlen(src));
	ck_assert_mem_eq(out, "a\xc3\xa9?\xe2\x82\xac???", 10);
	mtd_utf8_copy(in_place, in_place, strlen(in_place));
	ck_assert_str_eq(in_place, "a\xc3\xa9?\xe2\x82\xac???");
}
END_TEST

START_TEST(fnv1a_published_vectors)
{
	/* FNV-1a 64's published test vectors: the offset basis must be the
	 * real one (a digit short, as two copies had it, is still a hash but
	 * not this one). */
	ck_assert_uint_eq(mtd_fnv1a(MTD_FNV1A_START, "", 0), 0xcbf29ce484222325ull);
	ck_assert_uint_eq(mtd_fnv1a(MTD_FNV1A_START, "a", 1), 0xaf63dc4c8601ec8cull);
	ck_assert_uint_eq(mtd_fnv1a(MTD_FNV1A_START, "foobar", 6), 0x85944171f73967e8ull);
	ck_assert_uint_eq(mtd_fnv1a_str(MTD_FNV1A_START, "foobar"), 0x85944171f73967e8ull);
	/* Continued: two parts hash as their concatenation. */
	ck_assert_uint_eq(mtd_fnv1a_str(mtd_fnv1a_str(MTD_FNV1A_START, "foo"), "bar"), 0x85944171f73967e8ull);
}
END_TEST

/* lazy.h: a slot costs nothing until the first get; every thread that
 * races to the first get gets the one block installed (the losers' own
 * copies freed: ASan would see them leak). */
struct lazy_block {
	_Atomic uint64_t n;
	uint64_t pad[7];
};
static struct lazy_block *_Atomic lazy_slot;
static struct lazy_block *lazy_seen[8];

static void *lazy_racer(void *arg)
{
	struct lazy_block *b = mtd_lazy_get(&lazy_slot);

	atomic_fetch_add(&b->n, 1);
	lazy_seen[(uintptr_t)arg] = b;
	return NULL;
}

START_TEST(lazy_block_installed_once_by_the_first_writer)
{
	pthread_t t[8];

	ck_assert_ptr_null(mtd_lazy_peek(&lazy_slot));
	for (uintptr_t i = 0; i < 8; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, lazy_racer, (void *)i), 0);
	for (size_t i = 0; i < 8; i++)
		pthread_join(t[i], NULL);
	struct lazy_block *b = mtd_lazy_peek(&lazy_slot);
	ck_assert_ptr_nonnull(b);
	for (size_t i = 0; i < 8; i++)
		ck_assert_ptr_eq(lazy_seen[i], b);
	ck_assert_uint_eq(atomic_load(&b->n), 8); /* every write in the one block */
	ck_assert_uint_eq(b->pad[6], 0);           /* zeroed */
	ck_assert_ptr_eq(mtd_lazy_get(&lazy_slot), b);
	mtd_lazy_free(&lazy_slot);
	ck_assert_ptr_null(mtd_lazy_peek(&lazy_slot));
}
END_TEST

int main(void)
{
	Suite *s = suite_create("core");
	TCase *tc = tcase_create("core");
	tcase_add_test(tc, bits_across_words);
	tcase_add_test(tc, lazy_block_installed_once_by_the_first_writer);
	tcase_add_test(tc, base64_both_alphabets_padding_optional_strict_otherwise);
	tcase_add_test(tc, bufq_fifo_across_chunks);
	tcase_add_test(tc, bufq_big_append_and_clear);
	tcase_add_test(tc, bufq_copy_at_and_drop);
	tcase_add_test(tc, bufq_spans_outlive_the_queue);
	tcase_add_test(tc, bufq_recycles_full_chunks_up_to_its_bound);
	tcase_add_test(tc, bufq_recycles_first_chunks_up_to_their_bound);
	tcase_add_test(tc, log_levels);
	tcase_add_test(tc, log_gate_one_line_per_interval);
	tcase_add_test(tc, log_text_escapes_what_could_break_a_line);
	tcase_add_test(tc, log_line_is_one_line_whatever_the_arguments);
	tcase_add_test(tc, slab_classes_reuse_and_realloc);
	tcase_add_test(tc, slab_passthrough_keeps_nothing);
	tcase_add_test(tc, timers_heap_order);
	tcase_add_test(tc, wall_of_mono_is_one_value_for_every_reader);
	tcase_add_test(tc, addr_text_one_spelling);
	tcase_add_test(tc, utf8_rfc3629_only);
	tcase_add_test(tc, utf8_copy_repairs_in_place);
	tcase_add_test(tc, fnv1a_published_vectors);
	suite_add_tcase(s, tc);
	SRunner *sr = srunner_create(s);
	srunner_run_all(sr, CK_NORMAL);
	int failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
