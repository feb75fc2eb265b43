/* The balancer interface. See lb-t.h for the types and the call sequence. */
#ifndef MTD_LB_H
#define MTD_LB_H

#include "lb/lb-t.h"

/* Strategy registry: NULL when no strategy has that name. */
const struct mtd_lb_ops *mtd_lb_find(const char *name);

/* Build a picker over eps[0..n) (n >= 1; eps must outlive the picker).
 * prev: the picker this one replaces (same service), or NULL. Returns NULL
 * on allocation failure or invalid options. Control thread. */
struct mtd_lb_picker *mtd_lb_picker_new(const struct mtd_lb_config *cfg,
                                        const struct mtd_lb_endpoint *eps,
                                        size_t n,
                                        const struct mtd_lb_picker *prev);
void mtd_lb_picker_free(struct mtd_lb_picker *p);

/* Index of the chosen endpoint, or -1 if every endpoint is excluded.
 * Lock-free; any worker thread. */
int mtd_lb_pick(struct mtd_lb_picker *p, const struct mtd_lb_pick_ctx *ctx);

/* Call accounting, any thread. begin: when the call is sent to eps[idx];
 * end: when it completes, with its outcome. Both update eps[idx].stats and
 * end also forwards the outcome to the strategy's report hook. */
void mtd_lb_call_begin(struct mtd_lb_picker *p, size_t idx);
void mtd_lb_call_end(struct mtd_lb_picker *p, size_t idx,
                     const struct mtd_lb_result *res, int64_t now_ns);

/* Background work for time-driven strategies; control thread. */
void mtd_lb_tick(struct mtd_lb_picker *p, int64_t now_ms, int64_t now_ns);

/* A fast PRNG (xorshift/wyrand class) for picks; state is per worker. */
uint64_t mtd_lb_rand(uint64_t *state);

#endif
