/* Recompute's `work` laid out by liveness (work_layout_gpu.h), as ggml-alloc
 * lays out a graph's tensors, over the very declarations the scheduler
 * orders the step by.
 *
 * The pass describes the executor of the plan: its state wired by the
 * executor's own binding (gpu_state_init, gpu_bind_buffers) over addresses of their own in a
 * range nothing is allocated in, each tensor of `work` apart from every
 * other. The step's programs (training with and without a gradient,
 * evaluation) are the executor's (program_gpu.c, scheduler_gpu.c: they
 * name units by role, no stream, and the operations return before they
 * launch anything), so no device is asked. Each access that falls in `work` names its tensor.
 * Within a tensor the pass follows each lane's rows apart (the lanes'
 * operations touch only their own rows of the window buffers): a value is
 * born where an operation defines those rows (ACC_DEFINE: written whole
 * before any read) and lives to its last access before the next define,
 * in program order; any other access is a use. Two tensors interfere when
 * a value of one is live at an operation where a value of the other is, in
 * any program, and only tensors that do not interfere share bytes. The
 * scheduler then orders the accesses of tensors that share bytes as it
 * orders any others that overlap, so a layout can make the step wait but
 * never read another tensor's bytes. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/gpu_crossentropy.h"
#include "catchat/util.h"
#include "gpu/gpu_impl.h"
#include "gpu/step_gpu.h"
#include "gpu/work_layout_gpu.h"

/* ---- the tensors ---- */

int work_tensors(const gpu_step_plan *p, const cc_dims *d, int B, int T, gpu_work_part *out)
{
    const size_t D = (size_t)d->D, WD = (size_t)B * p->rc_window * D, TD = (size_t)p->top_seqs * T * D;
    const size_t MD = (size_t)B * T * D;
    const int sets = p->rc_sets > 1 ? p->rc_sets : 1, two = p->rc_window < T, tc = p->attn_tc;
    int n = 0;
#define PART(id, set, bytes, name)                                                                    \
    do {                                                                                              \
        if ((bytes) != 0) out[n++] = (gpu_work_part){ (name), 0, (bytes), GPU_WORK_##id, (set) };            \
    } while (0)
    for (int s = 0; s < sets; s++) {
        /* the window buffers both passes use: the normalised input, gx (the gates over it) and ghn */
        PART(WIN_A16_0, s, 2 * WD, "a16[0]");
        PART(WIN_GATES_0, s, 4 * 3 * WD, "gates[0]");
        PART(WIN_GHN_0, s, 4 * WD, "ghn[0]");
        PART(WIN_A16_1, s, two ? 2 * WD : 0, "a16[1]");
        PART(WIN_GATES_1, s, two ? 4 * 3 * WD : 0, "gates[1]");
        PART(WIN_GHN_1, s, two ? 4 * WD : 0, "ghn[1]");
        /* the backward's: FP16 h_{t-1}, the gate gradients, the input gradient (one: it lives in one op) */
        PART(WIN_HP16_0, s, 2 * WD, "hp16[0]");
        PART(WIN_DGX16_0, s, 2 * 3 * WD, "dgx16[0]");
        PART(WIN_DGH16_0, s, 2 * 3 * WD, "dgh16[0]");
        PART(WIN_DTMP_0, s, 4 * WD, "dtmp[0]");
        PART(WIN_HP16_1, s, two ? 2 * WD : 0, "hp16[1]");
        PART(WIN_DGX16_1, s, two ? 2 * 3 * WD : 0, "dgx16[1]");
        PART(WIN_DGH16_1, s, two ? 2 * 3 * WD : 0, "dgh16[1]");
    }
    /* the forward's FP16 h_{t-1} for all T, a block a set */
    PART(HPREV16, 0, 2 * MD * (size_t)sets, "hprev16");
    /* the context stream's and the classifier's, for a part of top_seqs sequences */
    PART(S16, 0, 2 * TD, "s16");
    PART(QKV16, 0, tc ? 2 * 3 * TD : 0, "qkv16");
    PART(O16, 0, 2 * TD, "o16");
    PART(DC16, 0, 2 * TD, "dc16");
    PART(DTMP, 0, 4 * TD, "dtmp");
    PART(C, 0, 4 * TD, "c");
    PART(DO16, 0, tc ? 2 * TD : 0, "do16");
    PART(D16, 0, 2 * 3 * TD, "d16");
#undef PART
    return n;
}

/* ---- the step described ---- */

/* The executor's state for plan p, wired by gpu_state_init and gpu_bind_buffers as the executor
 * wires its own, over addresses in a range no allocation takes (never
 * dereferenced): every buffer, and every tensor of `work` (parts), apart
 * from every other, 256 bytes between. The step's programs declared on it
 * are the executor's (program_emit, schedule_declare: they name no stream
 * and ask no device), and each access names the buffer it falls in. */
typedef struct {
    cc_executor ex;
    gpu_impl g;
    uintptr_t next;    /* the next free address */
    size_t work_apart; /* `work` with its tensors apart */
    uintptr_t *base;   /* each tensor's address, in order */
    int n;
} described;

static uintptr_t apart(uintptr_t *next, size_t bytes)
{
    const uintptr_t at = *next;
    *next += ((bytes + 255) & ~(uintptr_t)255) + 256;
    return at;
}

static void *place_apart(void *ctx, const gpu_plan_buffer *b)
{
    described *dd = ctx;
    const size_t bytes = b->id == GPU_BUF_WORK ? dd->work_apart : b->bytes;
    return bytes ? (void *)apart(&dd->next, bytes) : NULL;
}

static described *describe(const gpu_step_plan *p, const cc_config *cfg, int B, int T, const gpu_work_part *parts, int n)
{
    described *dd = cc_calloc(1, sizeof(*dd));
    gpu_work_part *sep = cc_malloc(sizeof(gpu_work_part) * (size_t)(n > 0 ? n : 1));
    uintptr_t off = 0;
    for (int k = 0; k < n; k++) {
        sep[k] = parts[k];
        sep[k].offset = apart(&off, parts[k].bytes);
    }
    dd->work_apart = off;
    dd->next = (uintptr_t)1 << 32;
    gpu_state_init(&dd->ex, &dd->g, cfg, B, T, p);
    gpu_bind_buffers(&dd->g, &dd->ex.lay.dims, dd->ex.lay.total, B, T, sep, n, place_apart, dd);
    dd->base = cc_calloc((size_t)(n > 0 ? n : 1), sizeof(uintptr_t));
    dd->n = n;
    for (int k = 0; k < n; k++) dd->base[k] = (uintptr_t)dd->g.work + sep[k].offset;
    free(sep);
    return dd;
}

static void described_free(described *dd)
{
    free(dd->base);
    free(dd);
}

/* ---- liveness ---- */

/* A value of a tensor's rows: its operations in program order [first,
 * last], by stream slot its first and last (-1: none there), its phases. */
typedef struct {
    int first, last, phase_lo, phase_hi, defined;
    int *lo, *hi; /* [slots] */
} value;

typedef struct {
    value *v;
    int n, cap;
} value_list;


static value *value_new(value_list *l, int slots)
{
    GROW(l->v, l->cap, l->n + 1);
    value *v = &l->v[l->n++];
    memset(v, 0, sizeof(*v));
    v->lo = cc_malloc(sizeof(int) * (size_t)slots);
    v->hi = cc_malloc(sizeof(int) * (size_t)slots);
    for (int s = 0; s < slots; s++) v->lo[s] = v->hi[s] = -1;
    v->first = -1;
    return v;
}

static void value_touch(value *v, int i, int slot, int phase)
{
    if (v->first < 0) {
        v->first = i;
        v->phase_lo = phase;
    }
    v->last = i;
    v->phase_hi = phase;
    if (v->lo[slot] < 0) v->lo[slot] = i;
    v->hi[slot] = i;
}

/* The bytes access x spans, as addresses. */
static void access_span(const step_access *x, uintptr_t *lo, uintptr_t *hi)
{
    const char *a, *b;
    step_access_span(x, &a, &b);
    *lo = (uintptr_t)a;
    *hi = (uintptr_t)b;
}

/* The tensor holding address a (the bases ascend), -1 if none. */
static int tensor_at(const described *pp, const gpu_work_part *parts, uintptr_t a)
{
    int lo = 0, hi = pp->n - 1, found = -1;
    while (lo <= hi) {
        const int mid = (lo + hi) / 2;
        if (pp->base[mid] <= a) {
            found = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    return found >= 0 && a < pp->base[found] + parts[found].bytes ? found : -1;
}

/* The values of every tensor in program prog (declared), the tensor's rows
 * followed in `lanes` blocks (a lane's rows of the window buffers). */
static void program_values(const step_program *prog, const described *pp, const gpu_work_part *parts, int lanes,
                           value_list *values)
{
    const int n = pp->n, S = prog->nslots;
    /* open_value[k·lanes + lane]: the index of the rows' open value in tensor k's list, or -1 */
    int *open_value = cc_malloc(sizeof(int) * (size_t)n * lanes);
    for (int k = 0; k < n * lanes; k++) open_value[k] = -1;
    for (int pass = 0; pass < 2 * prog->n; pass++) {
        /* each operation twice: its uses first, then its defines (a define kills the value the op itself read) */
        const int i = pass / 2, defines = pass % 2;
        const step_op *o = &prog->ops[i];
        const int slot = prog->unit[o->unit].slot, phase = o->phase;
        for (int a = o->acc0; a < o->acc0 + o->nacc; a++) {
            const step_access *x = &prog->acc[a];
            uintptr_t lo, hi;
            access_span(x, &lo, &hi);
            const int k = tensor_at(pp, parts, lo);
            if (k < 0) continue;
            const size_t rows = parts[k].bytes / (size_t)lanes; /* a lane's block of the tensor */
            const size_t r0 = lo - pp->base[k], r1 = hi - pp->base[k];
            const int whole_runs = x->n == 1 || x->hi - x->lo == x->stride; /* the runs leave no gap */
            for (int ln = 0; ln < lanes; ln++) {
                const size_t b0 = (size_t)ln * rows, b1 = b0 + rows;
                if (r1 <= b0 || b1 <= r0) continue;
                const int kills = x->write == ACC_DEFINE && whole_runs && r0 <= b0 && b1 <= r1;
                if (kills != defines) continue;
                int *rs = &open_value[(size_t)k * lanes + ln];
                if (kills || *rs < 0) {
                    value *v = value_new(&values[k], S);
                    v->defined = kills;
                    *rs = values[k].n - 1;
                }
                value_touch(&values[k].v[*rs], i, slot, phase);
            }
        }
    }
    free(open_value);
}

/* Whether every operation of value a comes before every one of value b
 * by the program's own waits and stream order (vc: schedule_waits), so
 * that b's bytes may be a's at no wait more. */
static int ordered_before(const value *a, const value *b, const step_program *prog, const int *vc)
{
    const int S = prog->nslots;
    if (b->defined) { /* b's other operations read what its define wrote: they follow it */
        const int y = b->first;
        for (int sa = 0; sa < S; sa++) {
            const int x = a->hi[sa];
            if (x >= 0 && (x >= y || vc[(size_t)y * S + sa] < x)) return 0; /* y does not follow x */
        }
        return 1;
    }
    for (int sa = 0; sa < S; sa++) {
        if (a->hi[sa] < 0) continue;
        for (int sb = 0; sb < S; sb++) {
            if (b->lo[sb] < 0) continue;
            const int x = a->hi[sa], y = b->lo[sb];
            if (x >= y || vc[(size_t)y * S + sa] < x) return 0; /* y does not follow x */
        }
    }
    return 1;
}

/* How two values may share bytes: one's operations all come before the
 * other's in program order (the scheduler then orders the bytes' accesses),
 * and the program's own waits order them already (SHARE_FREE: no wait is
 * added), or they lie in phases one after another (forward, context
 * stream, backward), where a wait at the phase's end is the price
 * (SHARE_AT_PHASE); else SHARE_NEVER. */
enum { SHARE_NEVER, SHARE_AT_PHASE, SHARE_FREE };

static int values_share(const value *a, const value *b, const step_program *prog, const int *vc, int best)
{
    if (b->last < a->first) {
        const value *t = a;
        a = b;
        b = t;
    }
    if (a->last >= b->first) return SHARE_NEVER;
    const int phases = a->phase_hi < b->phase_lo;
    if (phases && best < SHARE_FREE) return SHARE_AT_PHASE; /* the pair can do no better: skip the clocks */
    if (ordered_before(a, b, prog, vc)) return SHARE_FREE;
    return phases ? SHARE_AT_PHASE : SHARE_NEVER;
}

static void values_clear(value_list *l)
{
    for (int j = 0; j < l->n; j++) {
        free(l->v[j].lo);
        free(l->v[j].hi);
    }
    l->n = 0;
}

/* ---- the programs ---- */

/* A program of the step whose accesses the layout must keep apart. */
typedef struct {
    int lanes, with_grad, eval, refused;
    const char *name;
} step_kind;

/* The programs plan p can run: the training step with and without a
 * gradient in its lanes and the evaluation in one, and where a persistent
 * launch may be refused (MPS, a partition: gru.c), the training step after
 * that refusal, layer after layer on the per-step loop, whose rebuilds run
 * ahead of their windows in every layer. Returns how many (at most 4). */
static int step_kinds(const gpu_step_plan *p, step_kind *out)
{
    int n = 0;
    out[n++] = (step_kind){ p->lanes, 1, 0, 0, "training step" };
    out[n++] = (step_kind){ p->lanes, 0, 0, 0, "step without gradient" };
    out[n++] = (step_kind){ 1, 0, 1, 0, "evaluation" };
    if (p->impl == GRU_IMPL_PERSISTENT || p->eval_impl == GRU_IMPL_PERSISTENT)
        out[n++] = (step_kind){ p->lanes, 1, 0, 1, "training step after a refused launch" };
    return n;
}

/* Program k of the step, emitted and declared on the description. */
static void declare_program(step_program *prog, described *pp, const step_kind *k)
{
    pp->g.gru.refused[0] = (char)(k->refused ? 'x' : 0);
    gpu_set_lanes(&pp->ex, k->lanes);
    program_emit(prog, &pp->ex, k->lanes, k->with_grad, k->eval);
    schedule_declare(prog, &pp->ex);
    pp->g.gru.refused[0] = 0;
}

/* ---- the layout ---- */

typedef struct {
    size_t lo, hi;
} byte_span;

static int by_lo(const void *a, const void *b)
{
    const byte_span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* The lowest 256-byte offset for tensor k where it meets no placed tensor
 * whose sharing with it is below `need` (apart: each pair's SHARE_*). */
static size_t lowest_fit(const gpu_work_part *parts, int n, int k, const int *placed, const unsigned char *apart,
                         int need, byte_span *taken)
{
    int nt = 0;
    for (int j = 0; j < n; j++)
        if (placed[j] && apart[(size_t)k * n + j] < need)
            taken[nt++] = (byte_span){ parts[j].offset, parts[j].offset + parts[j].bytes };
    qsort(taken, (size_t)nt, sizeof(byte_span), by_lo);
    size_t at = 0;
    for (int t = 0; t < nt; t++) {
        if (taken[t].lo >= at + parts[k].bytes) break;
        if (taken[t].hi > at) at = (taken[t].hi + 255) & ~(size_t)255;
    }
    return at;
}

/* First fit, largest first: each tensor at the lowest 256-byte offset
 * where it shares bytes only with tensors it shares with at no wait, if
 * that keeps within the bytes placed so far; else where it shares with
 * tensors of earlier or later phases too. */
static size_t place(gpu_work_part *parts, int n, const unsigned char *apart)
{
    int *order = cc_malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
    int *placed = cc_calloc((size_t)(n > 0 ? n : 1), sizeof(int));
    byte_span *taken = cc_malloc(sizeof(byte_span) * (size_t)(n > 0 ? n : 1));
    for (int k = 0; k < n; k++) { /* largest first, in table order among equals (insertion: n is small) */
        int j = k;
        while (j > 0 && parts[order[j - 1]].bytes < parts[k].bytes) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = k;
    }
    size_t total = 0;
    for (int q = 0; q < n; q++) {
        const int k = order[q];
        size_t at = lowest_fit(parts, n, k, placed, apart, SHARE_FREE, taken);
        if (at + parts[k].bytes > total) at = lowest_fit(parts, n, k, placed, apart, SHARE_AT_PHASE, taken);
        parts[k].offset = at;
        placed[k] = 1;
        if (at + parts[k].bytes > total) total = at + parts[k].bytes;
    }
    free(order);
    free(placed);
    free(taken);
    return total;
}

size_t work_layout_make(const gpu_step_plan *p, const cc_config *cfg, int B, int T, gpu_work_part *parts, int *np)
{
    const cc_dims d = cc_dims_from_config(cfg);
    const int n = work_tensors(p, &d, B, T, parts);
    *np = n;
    if (!n) return 0;
    described *pp = describe(p, cfg, B, T, parts, n);
    /* each pair's SHARE_*: the least over every pair of their values in every program */
    unsigned char *apart = cc_malloc((size_t)n * n);
    memset(apart, SHARE_FREE, (size_t)n * n);
    value_list *values = cc_calloc((size_t)n, sizeof(value_list));
    step_kind kinds[4];
    const int nk = step_kinds(p, kinds);
    for (int q = 0; q < nk; q++) {
        step_program prog;
        declare_program(&prog, pp, &kinds[q]);
        int *vc = schedule_waits(&prog);
        program_values(&prog, pp, parts, kinds[q].lanes, values);
        for (int a = 0; a < n; a++)
            for (int b = a + 1; b < n; b++)
                for (int i = 0; i < values[a].n && apart[(size_t)a * n + b] != SHARE_NEVER; i++)
                    for (int j = 0; j < values[b].n; j++) {
                        const int s = values_share(&values[a].v[i], &values[b].v[j], &prog, vc, apart[(size_t)a * n + b]);
                        if (s < apart[(size_t)a * n + b]) apart[(size_t)a * n + b] = apart[(size_t)b * n + a] = (unsigned char)s;
                        if (s == SHARE_NEVER) break;
                    }
        for (int k = 0; k < n; k++) values_clear(&values[k]);
        free(vc);
        program_free_host(&prog);
    }
    const size_t total = place(parts, n, apart);
    for (int k = 0; k < n; k++) free(values[k].v);
    free(values);
    free(apart);
    described_free(pp);
    return total;
}

/* ---- the check ---- */

/* Which tensor's value each byte range of `work` holds: sorted, disjoint
 * ranges, owner -1 where none was written yet. */
typedef struct {
    uintptr_t lo, hi;
    int owner;
} owned;

typedef struct {
    owned *r;
    int n;
} owner_map;

/* Ranges [lo, hi) to owner k (splitting those it cuts). */
static void owners_set(owner_map *m, uintptr_t lo, uintptr_t hi, int k)
{
    owned *out = cc_malloc(sizeof(owned) * (size_t)(m->n + 3));
    int n = 0, put = 0;
    for (int i = 0; i < m->n; i++) {
        const owned o = m->r[i];
        if (o.hi <= lo || hi <= o.lo) {
            if (!put && o.lo >= hi) {
                out[n++] = (owned){ lo, hi, k };
                put = 1;
            }
            out[n++] = o;
            continue;
        }
        if (o.lo < lo) out[n++] = (owned){ o.lo, lo, o.owner };
        if (!put) {
            out[n++] = (owned){ lo, hi, k };
            put = 1;
        }
        if (hi < o.hi) out[n++] = (owned){ hi, o.hi, o.owner };
    }
    if (!put) out[n++] = (owned){ lo, hi, k };
    free(m->r);
    m->r = out;
    m->n = n;
}

/* Another tensor's value in [lo, hi), or -1. */
static int owners_other(const owner_map *m, uintptr_t lo, uintptr_t hi, int k)
{
    for (int i = 0; i < m->n; i++)
        if (m->r[i].lo < hi && lo < m->r[i].hi && m->r[i].owner >= 0 && m->r[i].owner != k) return m->r[i].owner;
    return -1;
}

/* Whether op o also defines the bytes of tensor k that access x reads
 * (the attention reads the keys its own GEMM wrote: a read of its own
 * define, not of what the bytes held before the op). */
static int defines_first(const step_program *prog, const step_op *o, const step_access *x, const described *pp,
                         const gpu_work_part *parts, int k)
{
    uintptr_t lo, hi, ylo, yhi;
    access_span(x, &lo, &hi);
    for (int a = o->acc0; a < o->acc0 + o->nacc; a++) {
        const step_access *y = &prog->acc[a];
        if (y == x || y->write != ACC_DEFINE) continue;
        access_span(y, &ylo, &yhi);
        if (tensor_at(pp, parts, ylo) == k && ylo <= lo && hi <= yhi) return 1;
    }
    return 0;
}

/* The plan's `work` (gpu_plan.h), from the offsets its layout recorded. */
int gpu_plan_work(const gpu_step_plan *p, const cc_dims *d, int T, gpu_work_part *out, size_t *total)
{
    *total = 0;
    if (!p->recompute) return 0;
    const int n = work_tensors(p, d, p->lane_B * p->lanes, T, out);
    for (int i = 0; i < n; i++) out[i].offset = p->work_at[out[i].id][out[i].set];
    *total = p->work_bytes;
    return n;
}

int gpu_plan_work_check(const gpu_step_plan *p, const cc_config *cfg, char *why, size_t len)
{
    if (!p->recompute) return 1;
    const cc_dims d = cc_dims_from_config(cfg);
    const int T = cfg->seq_len, B = p->lane_B * p->lanes;
    gpu_work_part parts[GPU_WORK_MAX];
    size_t total = 0;
    const int n = gpu_plan_work(p, &d, T, parts, &total);
    /* each tensor apart in the description, to name the tensor of each access; the bytes it meets are the plan's */
    described *pp = describe(p, cfg, B, T, parts, n);
    int ok = 1;
    step_kind kinds[4];
    const int nk = step_kinds(p, kinds);
    for (int q = 0; ok && q < nk; q++) {
        step_program prog;
        declare_program(&prog, pp, &kinds[q]);
        owner_map m = { NULL, 0 };
        for (int i = 0; ok && i < prog.n; i++) {
            const step_op *o = &prog.ops[i];
            for (int pass = 0; ok && pass < 2; pass++) /* an op's reads of what it holds, then its writes */
                for (int a = o->acc0; ok && a < o->acc0 + o->nacc; a++) {
                    const step_access *x = &prog.acc[a];
                    uintptr_t lo, hi;
                    access_span(x, &lo, &hi);
                    const int k = tensor_at(pp, parts, lo);
                    if (k < 0) continue;
                    /* the access's bytes in the plan's work */
                    const uintptr_t rlo = parts[k].offset + (lo - pp->base[k]);
                    const uintptr_t rhi = parts[k].offset + (hi - pp->base[k]);
                    if (rhi > total) {
                        snprintf(why, len, "%s: %s (set %d) ends past work's %zu bytes", kinds[q].name,
                                 parts[k].name, parts[k].set, total);
                        ok = 0;
                    } else if (pass == 0 && x->write != ACC_DEFINE && !defines_first(&prog, o, x, pp, parts, k)) {
                        const int other = owners_other(&m, rlo, rhi, k);
                        if (other >= 0) {
                            snprintf(why, len, "%s, operation %d: %s (set %d) reads bytes %s (set %d) wrote", kinds[q].name,
                                     i, parts[k].name, parts[k].set, parts[other].name, parts[other].set);
                            ok = 0;
                        }
                    } else if (pass == 1 && x->write != ACC_READ) {
                        owners_set(&m, rlo, rhi, k);
                    }
                }
        }
        free(m.r);
        program_free_host(&prog);
    }
    described_free(pp);
    return ok;
}
