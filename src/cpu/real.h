/* Precision switch of the CPU reference: the sources in src/cpu/ are compiled
 * once with float (training, ladder reference) and once with double
 * (-DCC_REAL_DOUBLE, the finite-difference gradient check). */
#ifndef CATCHAT_CPU_REAL_H
#define CATCHAT_CPU_REAL_H

#include <math.h>
#include "catchat/cpu_ref.h"

#ifdef CC_REAL_DOUBLE
typedef double real;
#define CC_FN(name) name##_f64
#define R_EXP exp
#define R_LOG log
#define R_TANH tanh
#define R_SQRT sqrt
#else
typedef float real;
#define CC_FN(name) name
#define R_EXP expf
#define R_LOG logf
#define R_TANH tanhf
#define R_SQRT sqrtf
#endif

static inline real r_sigmoid(real x) { return (real)1 / ((real)1 + R_EXP(-x)); }

#endif
