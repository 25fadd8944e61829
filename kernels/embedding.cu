// Token embedding: gather forward; scatter-add backward. The backward walks,
// for each token id, the positions where it occurs (a CSR list the host
// builds from the batch it already holds: cc_embedding_csr, at the end) in a
// fixed order, without atomics, so every run gives the same bits.
#include "catchat/kernels.h"
#include "common.cuh"

__global__ void embedding_forward_kernel(float *out, const int *x, const float *table, int M, int D)
{
    const int m = blockIdx.x;
    const float *row = table + (size_t)x[m] * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) out[(size_t)m * D + i] = row[i];
}

// One block per token id. A frequent id (a byte-level space: thousands of
// positions) would keep one thread per column walking its whole list, so the
// block splits the list over EMB_LANES lanes as well: lane l sums positions
// l, l+lanes, ... (in order), then the lanes' sums are added in lane order.
// The order is fixed by the batch, so every run gives the same bits.
#define EMB_THREADS 1024
#define EMB_INFLIGHT 8

template <typename V4, int W>
__global__ void __launch_bounds__(EMB_THREADS)
    embedding_backward_kernel(float *dtable, const float *dout, const int *offsets, const int *positions, int D)
{
    extern __shared__ float lane_sums[]; // [lanes][D]
    const int v = blockIdx.x, p0 = offsets[v], p1 = offsets[v + 1];
    if (p0 == p1) return;
    const int nq = D / W, lanes = nq >= EMB_THREADS ? 1 : EMB_THREADS / nq;
    const int lane = threadIdx.x / nq, q0 = threadIdx.x % nq;
    if (lane < lanes)
        for (int q = q0; q < nq; q += EMB_THREADS) {
            V4 acc = {};
            float *a = (float *)&acc;
            int p = p0 + lane;
            for (; p + (EMB_INFLIGHT - 1) * lanes < p1; p += EMB_INFLIGHT * lanes) {
                V4 vals[EMB_INFLIGHT];
#pragma unroll
                for (int k = 0; k < EMB_INFLIGHT; k++)
                    vals[k] = *(const V4 *)(dout + (size_t)__ldg(&positions[p + k * lanes]) * D + q * W);
#pragma unroll
                for (int k = 0; k < EMB_INFLIGHT; k++)
#pragma unroll
                    for (int e = 0; e < W; e++) a[e] += ((const float *)&vals[k])[e];
            }
            for (; p < p1; p += lanes) {
                const V4 val = *(const V4 *)(dout + (size_t)positions[p] * D + q * W);
#pragma unroll
                for (int e = 0; e < W; e++) a[e] += ((const float *)&val)[e];
            }
#pragma unroll
            for (int e = 0; e < W; e++) lane_sums[(size_t)lane * D + q * W + e] = a[e];
        }
    __syncthreads();
    float *row = dtable + (size_t)v * D;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        float acc = 0.f;
        for (int l = 0; l < lanes; l++) acc += lane_sums[(size_t)l * D + i];
        row[i] += acc;
    }
}

extern "C" void launch_embedding_forward(float *out, const int *x, const float *table, int M, int D, cudaStream_t s)
{
    embedding_forward_kernel<<<M, 128, 0, s>>>(out, x, table, M, D);
    LAUNCH_CHECK();
}

// Recompute's u^l again on rows of a row window: the embedding row (or out's
// own value, with table NULL) plus each of the adds in turn, so the sums
// round as the forward's residual adds did (u^{j+1} = u^j + h^j).
__global__ void embedding_sum_rows_kernel(float *out, const int *x, const float *table, emb_adds adds, int nadds,
                                          int D, row_window rw)
{
    const size_t row = window_row(rw, blockIdx.x);
    const float *t = table ? table + (size_t)x[row] * D : NULL;
    for (int i = threadIdx.x; i < D; i += blockDim.x) {
        const size_t at = row * D + i;
        float v = t ? t[i] : out[at];
        for (int k = 0; k < nadds; k++) v += adds.p[k][at];
        out[at] = v;
    }
}

extern "C" void launch_embedding_sum_rows(float *out, const int *x, const float *table, const float *const *adds,
                                          int nadds, int M, int D, row_window rw, cudaStream_t s)
{
    int done = 0;
    do { // EMB_MAX_ADDS a launch; later launches start from out
        emb_adds a = {};
        const int n = nadds - done < EMB_MAX_ADDS ? nadds - done : EMB_MAX_ADDS;
        for (int k = 0; k < n; k++) a.p[k] = adds[done + k];
        embedding_sum_rows_kernel<<<M, 128, 0, s>>>(out, x, done ? NULL : table, a, n, D, rw);
        LAUNCH_CHECK();
        done += n;
    } while (done < nadds);
}

extern "C" void launch_embedding_backward(float *dtable, const float *dout, const int *offsets, const int *positions,
                                          int V, int D, cudaStream_t s)
{
    // 16-byte loads where rows allow them (D a multiple of 4: dout rows stay aligned)
    const int W = D % 4 == 0 ? 4 : 1, nq = D / W, lanes = nq >= EMB_THREADS ? 1 : EMB_THREADS / nq;
    const size_t smem = sizeof(float) * lanes * D;
    if (W == 4) {
        cudaFuncSetAttribute(embedding_backward_kernel<float4, 4>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        embedding_backward_kernel<float4, 4><<<V, EMB_THREADS, smem, s>>>(dtable, dout, offsets, positions, D);
    } else {
        cudaFuncSetAttribute(embedding_backward_kernel<float1, 1>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        embedding_backward_kernel<float1, 1><<<V, EMB_THREADS, smem, s>>>(dtable, dout, offsets, positions, D);
    }
    LAUNCH_CHECK();
}

// The CSR list the backward walks, from the batch's token ids on the host:
// counting sort, so positions stay in increasing order within an id.
extern "C" void cc_embedding_csr(const int *x, int M, int V, int *offsets, int *positions)
{
    for (int v = 0; v <= V; v++) offsets[v] = 0;
    for (int m = 0; m < M; m++) offsets[x[m] + 1]++;
    for (int v = 0; v < V; v++) offsets[v + 1] += offsets[v];
    // fill in position order, using offsets[v] as a cursor, then shift back
    for (int m = 0; m < M; m++) positions[offsets[x[m]]++] = m;
    for (int v = V; v > 0; v--) offsets[v] = offsets[v - 1];
    offsets[0] = 0;
}
