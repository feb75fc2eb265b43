/* Hot keys on the hash ring (`hot_keys {threshold_per_second, spread}`):
 * the per-key call rate, estimated without a per-key table.
 *
 * A count-min sketch of HOT_ROWS rows x MTD_LB__HOT_SLOTS counters, each
 * counter one 64-bit word (epoch second : 16 | this second : 24 | last
 * second : 24), indexed by independent bits of the key's hash. Counting a
 * call is one CAS per row; the rate of a slot is
 *     last x (1 - elapsed fraction of this second) + this
 * (a sliding one-second window), and the key's rate is the least over its
 * rows, so another key sharing a slot can only raise an estimate when it
 * shares the slot in every row (for one hot key and 4,096 slots a row, a
 * cold key is misjudged with probability 2^-24). A lost CAS race (three
 * tries) drops that one count: estimates err low under contention, by at
 * most a few calls a second per racing worker. Lock-free, no allocation
 * after init. */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "lb/lb-impl.h"

#define HOT_ROWS  2
#define FIELD_MAX 0xffffffu
/* A now at most this many seconds behind its slot's is a late pick, not a
 * slot idle for 18 h (the 16-bit epoch's wrap): a turn lasts less. An
 * empty slot (epoch 0 from the start) is never ahead: it starts at now. */
#define BEHIND_MAX_S 8u

static inline uint64_t pack(uint64_t epoch, uint64_t cur, uint64_t last)
{
	return (epoch & 0xffffu) << 48 | (cur & FIELD_MAX) << 24 | (last & FIELD_MAX);
}

int mtd_lb__hot_init(struct mtd_lb__hot *h, const struct mtd_lb_hot_keys *cfg)
{
	*h = (struct mtd_lb__hot){.threshold = cfg->threshold_per_second, .spread = cfg->spread};
	if (cfg->spread < 2)
		return 0; /* off */
	h->slot = calloc(HOT_ROWS * MTD_LB__HOT_SLOTS, sizeof(*h->slot));
	if (h->slot == NULL)
		return -ENOMEM;
	for (size_t j = 0; j < HOT_ROWS * MTD_LB__HOT_SLOTS; j++)
		atomic_init(&h->slot[j], 0);
	return 0;
}

void mtd_lb__hot_free(struct mtd_lb__hot *h)
{
	free(h->slot);
	h->slot = NULL;
}

/* Count one call in slot s at second e; returns the slot's rate. */
static double count(_Atomic uint64_t *s, uint64_t e, double frac)
{
	uint64_t v = atomic_load_explicit(s, memory_order_relaxed), next = 0, cur, last;
	double f = frac;

	for (int tries = 0; tries < 3; tries++) {
		uint64_t ve = v >> 48, at = e;

		f = frac;
		cur = v >> 24 & FIELD_MAX;
		last = v & FIELD_MAX;
		if (ve == (e & 0xffffu)) {
			cur = cur < FIELD_MAX ? cur + 1 : cur;
		} else if (((ve - e) & 0xffffu) <= BEHIND_MAX_S && (cur | last) != 0) {
			/* A now behind the slot's second: a worker's turn clock,
			 * read before another worker's pick moved the slot on (a
			 * pick's now_ns is its turn's, sidecar/turn.h), a turn
			 * that lasted seconds, or a thread that read the clock
			 * before a faster one. Counted in the slot's second:
			 * moving the slot back would drop what it counted. */
			at = ve;
			f = 0.0;
			cur = cur < FIELD_MAX ? cur + 1 : cur;
		} else if (ve == ((e - 1) & 0xffffu)) {
			last = cur;
			cur = 1;
		} else {
			last = 0;
			cur = 1;
		}
		next = pack(at, cur, last);
		if (atomic_compare_exchange_weak_explicit(s, &v, next, memory_order_relaxed, memory_order_relaxed))
			break;
	}
	return (double)(next >> 24 & FIELD_MAX) + (double)(next & FIELD_MAX) * (1.0 - f);
}

bool mtd_lb__hot_observe(struct mtd_lb__hot *h, uint64_t key_hash, int64_t now_ms)
{
	uint64_t e = (uint64_t)(now_ms / 1000);
	double frac = (double)(now_ms % 1000) / 1000.0, rate = 1e300;
	/* Row r takes 12 bits of a remix of the hash (the ring already
	 * consumed the top bits of key_hash for the key's place). */
	uint64_t mix = key_hash * 0x9e3779b97f4a7c15ULL;

	if (h->slot == NULL || now_ms < 0)
		return false;
	for (int r = 0; r < HOT_ROWS; r++) {
		size_t j = (size_t)(mix >> (64 - 12 * (r + 1)) & (MTD_LB__HOT_SLOTS - 1));
		double x = count(&h->slot[(size_t)r * MTD_LB__HOT_SLOTS + j], e, frac);

		if (x < rate)
			rate = x;
	}
	return rate > (double)h->threshold;
}
