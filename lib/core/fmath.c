#include "config.h"

#include <stdint.h>
#include <string.h>

#include "core/fmath.h"

/* ln 2 in two parts, the first with only 32 significant bits, so that
 * k * LN2_HI is exact for every exponent k a double can have (|k| < 2^11;
 * the Cody-Waite reduction). */
#define LN2_HI 6.93147180369123816490e-01
#define LN2_LO 1.90821492927058770002e-10
#define LOG2E  1.44269504088896338700e+00
#define SQRT2  1.41421356237309504880e+00
/* Past these e^x is not a finite double / rounds to 0. */
#define EXP_MAX 709.782712893383973096
#define EXP_MIN -745.133219101941108420

static double from_bits(uint64_t b)
{
	double d;
	memcpy(&d, &b, sizeof(d));
	return d;
}

static uint64_t to_bits(double d)
{
	uint64_t b;
	memcpy(&b, &d, sizeof(b));
	return b;
}

/* y * 2^k, in steps that keep each factor a normal double (k is within
 * [-1080, 1030] here, so at most two steps). */
static double scale2(double y, int k)
{
	while (k > 1023) {
		y *= 0x1p1023;
		k -= 1023;
	}
	while (k < -1022) {
		y *= 0x1p-1022;
		k += 1022;
	}
	return y * from_bits((uint64_t)(k + 1023) << 52);
}

double mtd_math_exp(double x)
{
	if (x != x)
		return x;
	if (x > EXP_MAX)
		return __builtin_inf();
	if (x < EXP_MIN)
		return 0.0;
	/* x = k ln2 + r with |r| <= ln2 / 2, so e^x = 2^k e^r. */
	double kd = x * LOG2E;
	int k = (int)(kd < 0 ? kd - 0.5 : kd + 0.5);
	double r = (x - k * LN2_HI) - k * LN2_LO;
	/* e^r by its Taylor series to r^13 (Horner, from the top): the rest
	 * is below 1e-17 of it. */
	static const double inv_fact[] = {1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0,
	                                  1.0 / 3628800.0,    1.0 / 362880.0,    1.0 / 40320.0,
	                                  1.0 / 5040.0,       1.0 / 720.0,       1.0 / 120.0,
	                                  1.0 / 24.0,         1.0 / 6.0,         0.5,
	                                  1.0,                1.0};
	double p = 0.0;
	for (unsigned i = 0; i < sizeof(inv_fact) / sizeof(inv_fact[0]); i++)
		p = p * r + inv_fact[i];
	return scale2(p, k);
}

double mtd_math_log(double x)
{
	if (x != x)
		return x;
	if (x < 0)
		return __builtin_nan("");
	if (x == 0)
		return -__builtin_inf();
	if (x == __builtin_inf())
		return x;
	/* x = m 2^e with m in [sqrt(2)/2, sqrt(2)). */
	int e = 0;
	uint64_t b = to_bits(x);
	if (b >> 52 == 0) { /* subnormal: make it normal first */
		b = to_bits(x * 0x1p54);
		e = -54;
	}
	e += (int)(b >> 52) - 1023;
	double m = from_bits((b & 0x000fffffffffffffull) | 0x3ff0000000000000ull);
	if (m > SQRT2) {
		m *= 0.5;
		e++;
	}
	/* log m = 2 atanh(s) = 2 (s + s^3/3 + s^5/5 + ...), s = (m-1)/(m+1),
	 * |s| <= 0.1716; m - 1 is exact (Sterbenz). To s^23: the rest is below
	 * 1e-18 of it. */
	double s = (m - 1.0) / (m + 1.0), s2 = s * s;
	static const double inv_odd[] = {1.0 / 23, 1.0 / 21, 1.0 / 19, 1.0 / 17, 1.0 / 15, 1.0 / 13,
	                                 1.0 / 11, 1.0 / 9,  1.0 / 7,  1.0 / 5,  1.0 / 3};
	double p = 0.0;
	for (unsigned i = 0; i < sizeof(inv_odd) / sizeof(inv_odd[0]); i++)
		p = p * s2 + inv_odd[i];
	double lm = 2.0 * s + 2.0 * s * s2 * p;
	return e * LN2_HI + (lm + e * LN2_LO);
}

double mtd_math_pow(double x, double y)
{
	if (x != x || y != y)
		return x + y;
	if (x < 0)
		return __builtin_nan("");
	if (y == 0 || x == 1)
		return 1.0;
	if (x == 0)
		return y > 0 ? 0.0 : __builtin_inf();
	return mtd_math_exp(y * mtd_math_log(x));
}
