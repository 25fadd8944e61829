// Tensor-core fragments for mma.sync m16n8k16 (FP16 in, FP32 accumulate),
// shared by the kernels that keep their operands in registers.
// Fragment layout (PTX ISA, lane = 4·g + c):
//   A 16×16: {row g, cols 2c,2c+1}, {row g+8, same}, {row g, cols 2c+8,2c+9}, {row g+8, same}
//   B 16×8:  {rows 2c,2c+1, col g}, {rows 2c+8,2c+9, col g}
//   C 16×8:  row g cols 2c,2c+1 (c[0], c[1]); row g+8 (c[2], c[3])
#pragma once
#include <cuda_fp16.h>
#include <stdint.h>

__device__ __forceinline__ void mma16816(float c[4], const uint4 &a, uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack2(__half lo, __half hi)
{
    __half2 v = __halves2half2(lo, hi);
    return *(uint32_t *)&v;
}

__device__ __forceinline__ uint32_t pack2f(float lo, float hi)
{
    __half2 v = __floats2half2_rn(lo, hi);
    return *(uint32_t *)&v;
}

// Four 8×8 FP16 matrices from shared memory; lane i gives the address of row
// i%8 of matrix i/8 (16-byte aligned) and receives row g, cols 2c,2c+1 of each
// (with .trans: rows 2c,2c+1 of col g).
__device__ __forceinline__ void ldsm_x4(uint32_t r[4], const __half *p)
{
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

__device__ __forceinline__ void ldsm_x4_trans(uint32_t r[4], const __half *p)
{
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

// The A fragment of a 16×16 tile from accumulator-layout values (the C of
// its two n-tiles): how P and dS feed the next product without leaving the
// registers.
__device__ __forceinline__ uint4 tile_afrag(const float v[2][4])
{
    return make_uint4(pack2f(v[0][0], v[0][1]), pack2f(v[0][2], v[0][3]), pack2f(v[1][0], v[1][1]),
                      pack2f(v[1][2], v[1][3]));
}

// Max and sum over the four lanes (lane & 3) that hold one accumulator row.
__device__ __forceinline__ float quad_max(float v)
{
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 1));
    return fmaxf(v, __shfl_xor_sync(0xffffffffu, v, 2));
}

__device__ __forceinline__ float quad_sum(float v)
{
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    return v + __shfl_xor_sync(0xffffffffu, v, 2);
}

// 16 bytes global → shared without registers (sm_80 on); !valid writes zeros.
__device__ __forceinline__ void cp_async16(void *dst, const void *src, bool valid)
{
    const unsigned d = (unsigned)__cvta_generic_to_shared(dst);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(valid ? 16 : 0));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N> __device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory"); }
