/* matmul (GEMM): cuBLASLt's FP16 tensor-core GEMM against an FP64 CPU loop,
 * every transpose case, a shape off the tile (67x131x45), beta = 0 with a
 * bias and beta = 1 accumulating; NaN guards around the operands catch
 * out-of-bounds reads, guard rows around C out-of-bounds writes. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/safetensors.h"
#include "catchat/util.h"
#include "ladder/ladder.h"

static void run_matmul(const ladder_ctx *cx, stage *st)
{
    cc_rng *r = cx->rng;
    gpu_matmul_ctx *gm = cx->gemm;
    const int M = 67, N = 131, K = 45;
    snprintf(st->shape, sizeof(st->shape), "%dx%dx%d, 4 transposes, beta=1, bias, NaN guards", M, N, K);
    for (int ta = 0; ta < 2; ta++)
        for (int tb = 0; tb < 2; tb++) {
            float *A = rand_vec(r, (size_t)M * K, 1, 1), *B = rand_vec(r, (size_t)K * N, 1, 1);
            float *C0 = rand_vec(r, (size_t)M * N, 1, 0), *bias = rand_vec(r, N, 1, 0);
            const int beta1 = ta ^ tb; /* two cases accumulate, two overwrite with bias */
            /* NaN guards around A and B catch out-of-bounds tile reads; guard rows
             * around C catch out-of-bounds writes. */
            const size_t guard = 256;
            uint16_t *dA = dev_f16_guarded(A, (size_t)M * K, guard), *dB = dev_f16_guarded(B, (size_t)K * N, guard);
            float *host_c = cc_malloc(4 * ((size_t)M * N + 2 * guard));
            for (size_t i = 0; i < (size_t)M * N + 2 * guard; i++) host_c[i] = 12345.f;
            if (beta1) memcpy(host_c + guard, C0, 4 * (size_t)M * N);
            float *dCg = dev_f32(host_c, (size_t)M * N + 2 * guard);
            float *dbias = dev_f32(bias, N);
            if (!beta1) cudaCheck(cudaMemset(dCg + guard, 0xff, 4 * (size_t)M * N));
            gpu_matmul(gm, dCg + guard, N, dA, ta ? M : K, ta, dB, tb ? K : N, tb, M, N, K, 1.f, beta1 ? 1.f : 0.f,
                    beta1 ? NULL : dbias, 0);
            float *got = get_f32(dCg, (size_t)M * N + 2 * guard);
            float *ref = cc_malloc(4 * (size_t)M * N);
            for (int m = 0; m < M; m++)
                for (int n = 0; n < N; n++) {
                    double acc = beta1 ? C0[(size_t)m * N + n] : bias[n];
                    for (int k = 0; k < K; k++) {
                        const double a = ta ? A[(size_t)k * M + m] : A[(size_t)m * K + k];
                        const double b = tb ? B[(size_t)n * K + k] : B[(size_t)k * N + n];
                        acc += a * b;
                    }
                    ref[(size_t)m * N + n] = (float)acc;
                }
            char what[32];
            snprintf(what, sizeof(what), "C (tA=%d tB=%d)", ta, tb);
            /* FP16 operands exact on both sides; FP32 vs FP64 accumulation of 45 terms */
            check(st, what, got + guard, ref, (size_t)M * N, 1e-5, 0);
            int guards_ok = 1;
            for (size_t i = 0; i < guard; i++)
                guards_ok &= got[i] == 12345.f && got[guard + (size_t)M * N + i] == 12345.f;
            check_flag(st, "guard rows around C", guards_ok);
            FREE_ALL(A, B, C0, bias, host_c, got, ref);
            DFREE_ALL(dA - guard, dB - guard, dCg, dbias);
        }
}

const ladder_stage ladder_stage_matmul = { "matmul", "GEMM", run_matmul };
