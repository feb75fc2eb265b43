/* exp, log and pow for the balancers, so that maitred does not load libm.
 *
 * The balancers need three libm functions (decay factors e^(-dt/tau),
 * Envoy's slow-start curve f^(1/aggression) and least-request's
 * load^bias), and loading libm.so.6 costs about 500 KiB of resident
 * pages whatever is called: the dynamic loader runs libm's CPU dispatch
 * resolvers, spread across its text, at start (bench/proxy/README.md,
 * "Where the memory goes"). These are short, branch-light versions:
 * range reduction by powers of two, then a series. Accurate to a few
 * units in the last place over the whole double range (tests/unit/core
 * compares them with libm), far beyond what a weight or a latency
 * estimate needs. NaN in gives NaN out. */
#ifndef MTD_FMATH_H
#define MTD_FMATH_H

/* e^x. +inf past about 709.78, 0 below about -745.13. */
double mtd_math_exp(double x);
/* The natural logarithm: -inf at 0, NaN below 0, +inf at +inf. */
double mtd_math_log(double x);
/* x^y for x >= 0 (what the callers have): e^(y log x); 0^y is 0 for
 * y > 0 and 1 for y == 0. NaN for x < 0. */
double mtd_math_pow(double x, double y);

/* The larger of a and b; if one is NaN, the other (C99 fmax). */
static inline double mtd_math_fmax(double a, double b)
{
	return a > b || b != b ? a : b;
}

#endif
