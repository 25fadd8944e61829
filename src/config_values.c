/* Numbers and byte sizes as config values write them: a real, an integer
 * (exact, also in the "1e12" form people write counts in) and a byte size
 * with a unit ("10G"). Apart from the key table because the options of the
 * CLI read integers the same way (cc_parse_integer), and the parsers are
 * easier to check on their own. */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config_impl.h"

int config_parse_real(const char *v, double *out)
{
    if (!*v) return -1;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (*end || errno == ERANGE || !isfinite(x)) return -1;
    *out = x;
    return 0;
}

/* An integer written with a fraction or an exponent ("1e12", "2.5e3",
 * "3.0"), taken exactly from its digits (a double would round past 2^53):
 * the digits d of the mantissa and the exponent e, with the point moved,
 * make d x 10^e; it is an integer when every digit the point leaves behind
 * is 0. 0, -1 not such an integer, -2 beyond long long. */
static int parse_scientific_integer(const char *v, long long *out)
{
    const char *p = v;
    const int negative = *p == '-';
    if (*p == '-' || *p == '+') p++;
    const char *digits = p;
    while (isdigit((unsigned char)*p)) p++;
    const char *int_end = p, *frac = p, *frac_end = p;
    if (*p == '.') {
        frac = ++p;
        while (isdigit((unsigned char)*p)) p++;
        frac_end = p;
    }
    if (int_end == digits && frac_end == frac) return -1; /* no digit at all */
    long exp10 = 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        const int exp_negative = *p == '-';
        if (*p == '-' || *p == '+') p++;
        if (!isdigit((unsigned char)*p)) return -1;
        for (; isdigit((unsigned char)*p); p++)
            if (exp10 < 100000) exp10 = exp10 * 10 + (*p - '0'); /* past that only 0 can be in range */
        if (exp_negative) exp10 = -exp10;
    }
    if (*p) return -1;
    /* the mantissa's digits in order, the point after the integer part */
    char mant[128];
    size_t n = 0;
    for (const char *q = digits; q < frac_end; q++) {
        if (*q == '.') continue;
        if (n == 0 && *q == '0') continue; /* leading zeros say nothing */
        if (n == sizeof(mant)) return -1;  /* not a number anyone writes for a count */
        mant[n++] = *q;
    }
    exp10 -= (long)(frac_end - frac);
    while (n && exp10 < 0 && mant[n - 1] == '0') n--, exp10++; /* trailing zeros after the point */
    if (n == 0) { /* zero, however written */
        *out = 0;
        return 0;
    }
    if (exp10 < 0) return -1; /* a digit other than 0 after the point */
    unsigned long long x = 0;
    const unsigned long long limit = negative ? (unsigned long long)LLONG_MAX + 1 : (unsigned long long)LLONG_MAX;
    for (size_t i = 0; i < n + (size_t)(exp10 > 40 ? 40 : exp10); i++) {
        const unsigned d = i < n ? (unsigned)(mant[i] - '0') : 0;
        if (x > (limit - d) / 10) return -2;
        x = x * 10 + d;
    }
    if (exp10 > 40) return -2; /* a non-zero mantissa times 10^41 or more */
    *out = negative ? (long long)(0 - x) : (long long)x;
    return 0;
}

int cc_parse_integer(const char *v, long long *out)
{
    if (!*v) return -1;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*end && errno != ERANGE) {
        *out = x;
        return 0;
    }
    if (!*end) return -2; /* digits only, past long long */
    return parse_scientific_integer(v, out);
}

/* A byte size: digits, optionally a '.' and more digits, then optionally a
 * unit K, M, G or T (any case, 1024-based) with 'B' or 'iB' after it if
 * wanted ("10G", "24GiB", "1.5g", "512MB", "123456789"); blanks around it
 * and before the unit are allowed. The fraction is taken exactly (no
 * double in between) and rounded to the nearest byte. */
bytes_status config_parse_bytes(const char *v, uint64_t *out)
{
    while (isspace((unsigned char)*v)) v++;
    const char *end = v + strlen(v);
    while (end > v && isspace((unsigned char)end[-1])) end--;
    const char *p = v;
    const int negative = p < end && *p == '-';
    if (negative) p++;
    const char *whole = p, *frac = NULL, *frac_end = NULL;
    while (p < end && isdigit((unsigned char)*p)) p++;
    const char *whole_end = p;
    if (whole_end == whole) return BYTES_SYNTAX;
    if (p < end && *p == '.') {
        frac = ++p;
        while (p < end && isdigit((unsigned char)*p)) p++;
        frac_end = p;
        if (frac_end == frac) return BYTES_SYNTAX;
    }
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    int shift = 0;
    static const char units[] = "KMGT";
    const char *u = p < end ? strchr(units, toupper((unsigned char)*p)) : NULL;
    if (u) {
        shift = 10 * (int)(u - units + 1);
        p++;
        if (p < end && tolower((unsigned char)*p) == 'i') {
            p++;
            if (p == end || tolower((unsigned char)*p) != 'b') return BYTES_SYNTAX;
        }
    }
    if (p < end && tolower((unsigned char)*p) == 'b') p++;
    if (p != end) return BYTES_SYNTAX;
    if (negative) return BYTES_NEGATIVE;
    uint64_t n = 0;
    for (const char *q = whole; q < whole_end; q++) {
        const unsigned d = (unsigned)(*q - '0');
        if (n > (UINT64_MAX - d) / 10) return BYTES_OVERFLOW;
        n = n * 10 + d;
    }
    if (n > UINT64_MAX >> shift) return BYTES_OVERFLOW;
    n <<= shift;
    if (frac) {
        /* 0.d1d2...dk times the unit, from the last digit: what carries past
         * the point is whole bytes, the digit left at d1 rounds them */
        const uint64_t unit = (uint64_t)1 << shift;
        uint64_t carry = 0, first = 0;
        for (const char *q = frac_end; q > frac; q--) {
            const uint64_t prod = (uint64_t)(q[-1] - '0') * unit + carry;
            first = prod % 10;
            carry = prod / 10;
        }
        carry += first >= 5;
        if (carry > UINT64_MAX - n) return BYTES_OVERFLOW;
        n += carry;
    }
    *out = n;
    return BYTES_OK;
}

/* A byte size in the shortest form config_parse_bytes reads back exactly: the
 * largest unit it is a whole number of ("10G", "1536M"), else bytes. */
void config_format_bytes(char *buf, size_t cap, uint64_t n)
{
    static const char units[] = "TGMK";
    for (int i = 0; n && i < 4; i++) {
        const int shift = 10 * (4 - i);
        if (n % ((uint64_t)1 << shift) == 0) {
            snprintf(buf, cap, "%llu%c", (unsigned long long)(n >> shift), units[i]);
            return;
        }
    }
    snprintf(buf, cap, "%llu", (unsigned long long)n);
}
