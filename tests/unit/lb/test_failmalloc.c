/* Fail-malloc: every allocation of every strategy's init() is made to fail
 * in turn; picker_new must then return NULL having freed everything it
 * took (nghttp2's failmalloc idea). Built with -Wl,--wrap for the
 * allocator functions lib/lb calls, which count live blocks. */
#include "config.h"

#include "lb-test.h"

static Suite *failmalloc_suite(void);

void *__real_malloc(size_t size);
void *__real_calloc(size_t n, size_t size);
void *__real_aligned_alloc(size_t align, size_t size);
void __real_free(void *p);
void *__wrap_malloc(size_t size);
void *__wrap_calloc(size_t n, size_t size);
void *__wrap_aligned_alloc(size_t align, size_t size);
void __wrap_free(void *p);

static long fail_countdown = -1; /* -1: never fail */
static long live;

static bool should_fail(void)
{
	if (fail_countdown < 0)
		return false;
	return fail_countdown-- == 0;
}

void *__wrap_malloc(size_t size)
{
	void *p = should_fail() ? NULL : __real_malloc(size);

	live += p != NULL;
	return p;
}

void *__wrap_calloc(size_t n, size_t size)
{
	void *p = should_fail() ? NULL : __real_calloc(n, size);

	live += p != NULL;
	return p;
}

void *__wrap_aligned_alloc(size_t align, size_t size)
{
	void *p = should_fail() ? NULL : __real_aligned_alloc(align, size);

	live += p != NULL;
	return p;
}

void __wrap_free(void *p)
{
	live -= p != NULL;
	__real_free(p);
}

START_TEST(every_allocation_fails_cleanly)
{
	size_t nops;
	const struct mtd_lb_ops *const *all = mtd_lb_all(&nops);
	const struct mtd_lb_ops *ops = all[_i];
	int32_t w[6] = {100, 200, 0, 100, 300, 100};
	struct t_set s;
	struct mtd_lb_config cfg;
	long k, before;

	t_set_init(&s, 6, w);
	s.eps[1].start_ms = 999000;
	mtd_lb_config_defaults(&cfg, ops);
	cfg.n_workers = 3;
	cfg.table_size = 251;
	cfg.warmup.duration_ms = 60000;
	for (k = 0; k < 1000; k++) {
		struct mtd_lb_picker *p;

		before = live;
		fail_countdown = k;
		p = mtd_lb_picker_new(&cfg, s.eps, s.n, NULL);
		fail_countdown = -1;
		if (p != NULL) {
			struct mtd_lb_pick_ctx ctx = t_ctx(&s);
			int i = mtd_lb_pick(p, &ctx);
			long after;

			mtd_lb_picker_free(p);
			after = live; /* before any Check call: Check allocates */
			ck_assert_int_ge(i, 0);
			ck_assert_int_eq(after, before);
			break;
		}
		ck_assert_msg(live == before,
		              "%s: %ld blocks leaked when "
		              "allocation %ld failed",
		              ops->name, live - before, k);
	}
	/* At least the picker itself was allocated and made to fail. */
	ck_assert_int_ge(k, 1);
	ck_assert_int_lt(k, 1000);
}
END_TEST

static Suite *failmalloc_suite(void)
{
	Suite *s = suite_create("lb_failmalloc");
	TCase *tc = tcase_create("core");
	size_t n;

	mtd_lb_all(&n);
	tcase_add_loop_test(tc, every_allocation_fails_cleanly, 0, (int)n);
	suite_add_tcase(s, tc);
	return s;
}

T_RUN(failmalloc_suite)
