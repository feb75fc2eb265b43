/* Types of the fault policy (lib/fault/): which endpoint instead, and what
 * if all fail. Pure data and pure logic: no I/O, no clock reads, no
 * allocation anywhere in lib/fault/ (the caller passes the time and the
 * random state). Prototypes live in fault.h.
 *
 * The modes are the classic cluster fault-tolerance modes (failfast,
 * failsafe, failover, failback, as Dubbo names them), and the layers are
 * load balancing = "which one", fault tolerance = "which one instead",
 * degradation = "what if all fail". */
#ifndef MTD_FAULT_T_H
#define MTD_FAULT_T_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* fault.mode; the names are the user-facing contract (config.proto). */
enum mtd_fault_mode {
	MTD_FAULT_FAILFAST = 0, /* one attempt, its failure goes back */
	MTD_FAULT_FAILOVER,     /* replay elsewhere before any response header */
	MTD_FAULT_FAILSAFE,     /* a failure becomes OK + empty message */
	MTD_FAULT_FAILBACK,     /* OK at once, re-sent in the background */
	MTD_FAULT_FORKING,      /* several attempts, first success wins */
	MTD_FAULT_BROADCAST,    /* every endpoint, OK only if all are */
};

/* A fixed answer when every attempt failed (fault.fallback). */
struct mtd_fault_fallback {
	bool set;
	int status;        /* gRPC status code */
	char *message;     /* grpc-message, NULL = none */
	uint8_t *response; /* status OK: the one response message (may be empty) */
	size_t response_len;
};

/* Validated fault block of a service or method, defaults applied by the
 * config layer (lib/config/build_fault.c). Immutable. */
struct mtd_fault_policy {
	enum mtd_fault_mode mode;   /* default FAILFAST */
	uint32_t retries;           /* FAILOVER: attempts after the first (default 2) */
	uint32_t retry_on;          /* bit per gRPC status that fails an attempt;
	                                default UNAVAILABLE */
	int64_t per_try_timeout_ms; /* 0 = none */
	int64_t backoff_base_ms;    /* default 25 */
	int64_t backoff_max_ms;     /* default 250 */
	uint32_t forks;             /* FORKING: attempts at once (default 2) */
	int64_t hedge_delay_ms;     /* FORKING: 0 = all at once, MTD_FAULT_HEDGE_AUTO */
	uint32_t replay_buffer;     /* request bytes kept per call (default 256 KiB) */
	uint32_t failback_queue;    /* FAILBACK: re-sends waiting per worker (default 100) */
	uint32_t failback_retries;  /* FAILBACK: re-sends of one call (default 3) */
	struct mtd_fault_fallback fallback;
};

#define MTD_FAULT_HEDGE_AUTO  (-1)
#define MTD_FAULT_RETRIES_MAX 10u

/* hedge_delay: AUTO (latency.c). The delay is the method's observed p95
 * latency (to the first response message of an attempt that was not a
 * hedge, or the time it went unanswered before a hedge beat it), in
 * whole ms rounded up, at least FLOOR and at most MAX; until MIN_SAMPLES
 * answers were seen it is INITIAL. */
#define MTD_FAULT_HEDGE_AUTO_QUANTILE   0.95
#define MTD_FAULT_HEDGE_AUTO_INITIAL_MS 50
#define MTD_FAULT_HEDGE_AUTO_FLOOR_MS   1
#define MTD_FAULT_HEDGE_AUTO_MAX_MS     60000
#define MTD_FAULT_LAT_MIN_SAMPLES       32u

/* A latency histogram in us: log-linear buckets, MTD_FAULT_LAT_SUB per
 * power of two (width 1/SUB = 12.5 %), from 1 us to 2^(BUCKETS/SUB + 2) us
 * (about 67 s; above, the last bucket). Halved when WINDOW samples are
 * counted. Zero-initialised is empty. One writer, no atomics: it belongs
 * to one worker. 1 KiB. */
#define MTD_FAULT_LAT_SUB     8u
#define MTD_FAULT_LAT_BUCKETS 192u
#define MTD_FAULT_LAT_WINDOW  2048u

struct mtd_fault_lat {
	uint32_t count[MTD_FAULT_LAT_BUCKETS];
	uint32_t total; /* sum of count[] */
	uint64_t seen;  /* samples ever added */
};

/* retry_budget of a service (linkerd's retry budget). ratio 0 and
 * min_per_second 0 together = no retries beyond transparent ones. */
struct mtd_fault_budget_cfg {
	bool set;                /* false: retries are not budgeted */
	double ratio;            /* retries <= ratio x calls ... */
	uint32_t min_per_second; /* ... + min_per_second x window */
};

/* The budget's sliding window: MTD_FAULT_BUDGET_SLOTS one-second slots. */
#define MTD_FAULT_BUDGET_SLOTS 10

struct mtd_fault_budget_slot {
	_Atomic int64_t second; /* which second the counts belong to */
	_Atomic uint32_t calls, retries;
};

/* Shared by every worker (atomics, lock-free); owned by the runtime's
 * service object. Zero-initialised is an empty window. */
struct mtd_fault_budget {
	struct mtd_fault_budget_slot slot[MTD_FAULT_BUDGET_SLOTS];
	_Atomic uint64_t exhausted; /* retries refused by the budget, ever */
	_Atomic uint64_t spent;     /* retries granted, ever */
};

/* What one attempt ended with, as the policy needs to know it. */
enum mtd_fault_failure {
	MTD_FAULT_OK = 0,  /* an answer that is not a failure (any status not in retry_on) */
	MTD_FAULT_REFUSED, /* RST_STREAM REFUSED_STREAM, or above GOAWAY's last-stream-id:
	                          never reached the app (RFC 9113 §8.7) */
	MTD_FAULT_CONNECT, /* connect / TLS failure: nothing was sent */
	MTD_FAULT_RESET,   /* the upstream reset the stream or the connection was lost */
	MTD_FAULT_STATUS,  /* a status in retry_on */
	MTD_FAULT_TIMEOUT, /* per_try_timeout expired */
};

struct mtd_fault_outcome {
	enum mtd_fault_failure failure;
	int status;          /* MTD_FAULT_STATUS: the gRPC status */
	bool has_pushback;   /* grpc-retry-pushback-ms came with it */
	int64_t pushback_ms; /* >= 0, or -1: "do not retry" (gRPC A6) */
};

/* Where the call stands when an attempt failed. */
struct mtd_fault_call {
	uint32_t retries_done;    /* policy retries already started (not transparent ones) */
	bool committed;           /* response headers relayed, or the request outgrew the buffer */
	bool answered;            /* response headers relayed (implies committed) */
	bool endpoint_left;       /* an endpoint not tried yet (or retriable) is eligible */
	bool refused_here_before; /* the endpoint that refused already refused this call */
	bool others_live;         /* BROADCAST: another attempt of the call is still going on */
	int64_t now_ns;
	int64_t deadline_ns; /* 0 = none */
};

enum mtd_fault_action {
	MTD_FAULT_RELAY = 0, /* not a failure: pass the answer through */
	MTD_FAULT_RETRY,     /* start another attempt after delay_ns */
	MTD_FAULT_FAIL,      /* end the call with the failure (FAILFAST's answer) */
	MTD_FAULT_SAFE_OK,   /* FAILSAFE: OK + empty message */
	MTD_FAULT_FALLBACK,  /* the configured fallback answer */
	MTD_FAULT_WAIT,      /* BROADCAST: the other attempts go on; the call ends with them */
};

struct mtd_fault_decision {
	enum mtd_fault_action action;
	bool transparent;      /* a retry that costs neither retries nor budget */
	bool budget_exhausted; /* a retry was wanted but the budget said no */
	bool pushback_stop;    /* the server said "do not retry" */
	int64_t delay_ns;      /* MTD_FAULT_RETRY: wait this long first */
};

/* States of one attempt (an upstream stream of a call). One owner: every
 * transition goes through mtd_fault_attempt_step() (attempt.c draws the
 * diagram). */
enum mtd_attempt_state {
	MTD_ATTEMPT_BACKOFF = 0, /* waiting for its start time (backoff, hedge delay) */
	MTD_ATTEMPT_PENDING,     /* endpoint picked, waiting in a pool for a stream */
	MTD_ATTEMPT_OPEN,        /* stream open, request bytes going out */
	MTD_ATTEMPT_ANSWERING,   /* response headers in: relaying (the call committed to it) */
	MTD_ATTEMPT_DONE,        /* answered (trailers) */
	MTD_ATTEMPT_FAILED,      /* failed: the policy decides what the call does next */
	MTD_ATTEMPT_CANCELLED,   /* the call no longer needs it (lost a race, client left) */
	MTD_ATTEMPT_N_STATES
};

enum mtd_attempt_event {
	MTD_AEV_START = 0, /* BACKOFF -> PENDING: start time reached, endpoint picked */
	MTD_AEV_STREAM,    /* PENDING -> OPEN: got a stream */
	MTD_AEV_HEADERS,   /* OPEN -> ANSWERING: response headers relayed */
	MTD_AEV_TRAILERS,  /* OPEN/ANSWERING -> DONE */
	MTD_AEV_FAIL,      /* any live state -> FAILED */
	MTD_AEV_CANCEL,    /* any live state -> CANCELLED */
	MTD_AEV_N_EVENTS
};

#endif
