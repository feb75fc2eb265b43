/* The retry budget (linkerd's): retries and hedges stay under a ratio of the
 * calls plus a floor per second, over a sliding window, so retries never
 * multiply an outage. Lock-free: slots are claimed by compare-and-swap on
 * their second stamp; a racing worker may count into a slot another one is
 * resetting, which costs at most a few counts, never a lock. */
#include "config.h"

#include "fault/fault.h"

static struct mtd_fault_budget_slot *slot_for(struct mtd_fault_budget *b, int64_t now_s)
{
	struct mtd_fault_budget_slot *s = &b->slot[(uint64_t)now_s % MTD_FAULT_BUDGET_SLOTS];
	int64_t seen = atomic_load_explicit(&s->second, memory_order_acquire);
	if (seen != now_s && atomic_compare_exchange_strong_explicit(&s->second, &seen, now_s, memory_order_acq_rel,
	                                                             memory_order_acquire)) {
		/* This worker turned the slot over to a new second: clear it. */
		atomic_store_explicit(&s->calls, 0, memory_order_relaxed);
		atomic_store_explicit(&s->retries, 0, memory_order_relaxed);
	}
	return s;
}

void mtd_fault_budget_call(struct mtd_fault_budget *b, int64_t now_s)
{
	atomic_fetch_add_explicit(&slot_for(b, now_s)->calls, 1, memory_order_relaxed);
}

bool mtd_fault_budget_take(struct mtd_fault_budget *b, const struct mtd_fault_budget_cfg *cfg, int64_t now_s)
{
	if (!cfg || !cfg->set) {
		atomic_fetch_add_explicit(&b->spent, 1, memory_order_relaxed);
		return true;
	}
	struct mtd_fault_budget_slot *cur = slot_for(b, now_s);
	uint64_t calls = 0, retries = 0;
	for (int i = 0; i < MTD_FAULT_BUDGET_SLOTS; i++) {
		struct mtd_fault_budget_slot *s = &b->slot[i];
		int64_t sec = atomic_load_explicit(&s->second, memory_order_acquire);
		/* Only slots of the last SLOTS seconds count (older ones are stale
		 * until a call turns them over). */
		if (sec > now_s || now_s - sec >= MTD_FAULT_BUDGET_SLOTS)
			continue;
		calls += atomic_load_explicit(&s->calls, memory_order_relaxed);
		retries += atomic_load_explicit(&s->retries, memory_order_relaxed);
	}
	double allowed = cfg->ratio * (double)calls + (double)cfg->min_per_second * MTD_FAULT_BUDGET_SLOTS;
	if ((double)(retries + 1) > allowed + 1e-9) {
		atomic_fetch_add_explicit(&b->exhausted, 1, memory_order_relaxed);
		return false;
	}
	atomic_fetch_add_explicit(&cur->retries, 1, memory_order_relaxed);
	atomic_fetch_add_explicit(&b->spent, 1, memory_order_relaxed);
	return true;
}
