/* catchat bench: the whole training step (forward, backward, optimizer) timed
 * after warm-up, median of many; per-phase device time from CUDA events; and
 * the CPU reference on the same batch for the speedup. The fixture is the
 * first training batch of the config's data (random tokens if it cannot be
 * read): real text, never zeros. */
#include <math.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/bench.h"
#include "catchat/data.h"
#include "catchat/device.h"
#include "catchat/executor.h"
#include "catchat/gpu_gru.h"
#include "catchat/gpu_plan.h"
#include "catchat/kernels.h"
#include "catchat/optim.h"
#include "catchat/rng.h"
#include "catchat/util.h"
#include <cuda_runtime_api.h>

static void fixture(const cc_config *cfg, int *x, int *y)
{
    const int B = cfg->batch_size, T = cfg->seq_len;
    cc_tokens tok;
    cc_loader ld;
    if (cc_tokens_load_as(&tok, cfg->train, cfg->vocab_size, cfg->data_format) == 0) {
        if (cc_loader_init(&ld, &tok, B, T, 1, cfg->seed) == 0) {
            const int sound = cc_loader_batch(&ld, 0, x, y) == 0; /* else said, and random ids below */
            cc_loader_free(&ld);
            cc_tokens_free(&tok);
            if (sound) return;
        }
        cc_tokens_free(&tok);
    }
    fprintf(stderr, "catchat: bench: using random tokens\n");
    cc_rng r;
    cc_rng_seed(&r, cfg->seed);
    for (int i = 0; i < B * T; i++) {
        x[i] = (int)cc_rng_below(&r, (uint64_t)cfg->vocab_size);
        y[i] = (int)cc_rng_below(&r, (uint64_t)cfg->vocab_size);
    }
}

/* Median ms of `n` full steps, fewer where they pass budget_ms (0: no
 * budget; the first step always runs); optimizer ms (mean) into *opt_ms,
 * the steps run into *ran. */
static double time_steps(cc_executor *ex, const cc_config *cfg, const int *x, const int *y, int n, double budget_ms,
                         double *opt_ms, int *ran)
{
    cc_scaler sc;
    cc_scaler_init(&sc, cfg);
    cc_opt_counts oc = { 0, 0 };
    cc_step_report rep;
    double *t = cc_malloc(sizeof(double) * (n ? n : 1)), opt = 0, spent = 0;
    int i = 0;
    while (i < n && !(budget_ms > 0 && i > 0 && spent > budget_ms)) {
        const double t0 = cc_now_ms();
        ex->ops->forward_backward(ex, x, y, sc.scale); /* returns after the device finished */
        const double t1 = cc_now_ms();
        cc_optimizer_step(ex, cfg, &sc, &oc, NULL, i, &rep);  /* synchronises on the norm */
        const double t2 = cc_now_ms();
        t[i++] = t2 - t0;
        spent += t2 - t0;
        opt += t2 - t1;
    }
    const double med = cc_median(t, i);
    free(t);
    *opt_ms = i ? opt / i : 0;
    if (ran) *ran = i;
    return med;
}

/* --cpu-steps left to bench (cpu_steps < 0). Beside a GPU the CPU step only
 * gives the speedup: one. Without a GPU it is what is measured: the median
 * of three, so one slow step (the first touches every page of the model)
 * does not set the figure; where steps take long (a GPU-sized config on the
 * CPU, 85 s a step on 2 cores) no step starts after a minute. */
#define CPU_STEPS_ALONE 3
#define CPU_BUDGET_MS 60e3
#define CPU_NOTE_S 5.0 /* CPU steps expected to take longer than this are said before they run */

/* The attention kernel the plan chose and why, in words. */
static void attention_said(char *buf, size_t len, const gpu_step_plan *p, const cc_config *cfg)
{
    const int hd = cfg->d_model / cfg->n_heads, W = cfg->ctx_window;
    const char *why = strcmp(cfg->gpu_attention, "auto") ? "[gpu] attention"
                      : p->attn_tc == ATTN_TC_BANDED    ? "head size 64, 128 or 256 and a window up to 129"
                      : p->attn_tc == ATTN_TC_TILED     ? "outside the band kernel's head sizes 64, 128, 256 and windows up to 129"
                      : hd > 256                        ? "head size over the tensor-core kernels' 256"
                                                        : "the tensor-core kernels' shared memory is over this GPU's";
    snprintf(buf, len, "%s (head size %d, window %d: %s)", attention_kernel_name(p->attn_tc), hd, W, why);
}

/* What one bench measured, for the report: the GPU's figures are
 * meaningful where have_gpu, the CPU's where cpu_ms > 0. */
typedef struct {
    int have_gpu;
    double gpu_ms, opt_ms, ph[PH_COUNT], mem_mb; /* ph: per phase, ms a step (the serial schedule's) */
    int lanes, wave_chunk;
    char wave_why[128], refused[192]; /* refused: a persistent launch the runtime refused, why */
    gpu_step_plan plan; /* what the executor was created from: recompute, bytes by group */
    gpu_caps caps;
    const char *rec_impl;
    int rec_wide;         /* forward clusters of 16 sequences */
    double rec_f, rec_b;  /* the recurrences' µs a timestep and a layer: forward, BPTT */
    char rec_why[320], attn[256];
    double cpu_ms;
    int cpu_ran;
} bench_figures;

/* The GPU step: warm-up, the memory it holds, the timed steps, then the
 * plan's facts and the per-phase breakdown. -1 when the executor cannot be
 * made (said). */
static int bench_gpu(const cc_config *cfg, const cc_bench_opts *o, const int *x, const int *y, bench_figures *f)
{
    size_t free0 = 0, free1 = 0, total = 0;
    cudaMemGetInfo(&free0, &total);
    cc_executor *ex = cc_gpu_executor_create_planned(cfg, cfg->batch_size, cfg->seq_len, o->plan);
    if (!ex) return -1;
    double dummy;
    time_steps(ex, cfg, x, y, o->warmup, 0, &dummy, NULL);
    cudaMemGetInfo(&free1, &total);
    f->mem_mb = (double)(free0 - free1) / 1048576.0; /* everything the executor holds */
    f->gpu_ms = time_steps(ex, cfg, x, y, o->steps, 0, &f->opt_ms, NULL);
    /* the breakdown comes from separate steps: the same operations timed
     * one after another on one stream, while the timed steps overlap them */
    f->lanes = cc_gpu_lanes(ex);
    f->plan = *cc_gpu_plan(ex);
    snprintf(f->wave_why, sizeof(f->wave_why), "%s", cc_gpu_wavefront(ex, &f->wave_chunk));
    if (cc_gpu_refusal(ex)) snprintf(f->refused, sizeof(f->refused), "%s", cc_gpu_refusal(ex));
    cc_gpu_profile_enable(ex, 1);
    cc_gpu_profile_take(ex, f->ph); /* clear */
    time_steps(ex, cfg, x, y, o->steps, 0, &dummy, NULL);
    cc_gpu_profile_take(ex, f->ph);
    for (int i = 0; i < PH_COUNT; i++) f->ph[i] /= o->steps;
    ex->ops->destroy(ex);
    return 0;
}

/* The CPU reference on the same batch: `asked` steps (within a budget where
 * --cpu-steps was not given). -1 when the config does not fit host memory (said). */
static int bench_cpu(const cc_config *cfg, const cc_bench_opts *o, const int *x, const int *y, int asked,
                     bench_figures *f)
{
    cc_executor *ex = cc_cpu_executor_create(cfg, cfg->batch_size, cfg->seq_len);
    if (!ex) return -1;
    /* a CPU step of a GPU-sized config takes a minute: said before, not after a silence */
    const double each_s = cc_cpu_step_estimate_s(cfg);
    if (each_s * asked >= CPU_NOTE_S) {
        char each[32];
        if (each_s < 60) snprintf(each, sizeof(each), "%.0f s", each_s);
        else cc_format_duration(each, sizeof(each), each_s);
        fprintf(stderr, "catchat bench: timing the CPU reference: %d step%s of about %s%s (--cpu-steps 0 "
                "skips it)\n", asked, asked == 1 ? "" : "s", each, asked == 1 ? "" : " each");
    }
    double dummy;
    f->cpu_ms = time_steps(ex, cfg, x, y, asked, o->cpu_steps < 0 ? CPU_BUDGET_MS : 0, &dummy, &f->cpu_ran);
    ex->ops->destroy(ex);
    return 0;
}

/* The recurrence's µs a timestep and a layer, and which kernels the plan ran
 * for the recurrence and the attention, with why (have_gpu drops to 0 where
 * the device's facts cannot be read). */
static void bench_paths(const cc_config *cfg, bench_figures *f)
{
    const int B = cfg->batch_size, T = cfg->seq_len, L = cfg->n_layers;
    /* the profiled steps run each lane's recurrences one after another: a lane's, a timestep and a layer */
    const int nl = f->lanes > 0 ? f->lanes : 1;
    f->rec_f = f->ph[PH_REC_FWD] * 1e3 / ((double)T * L * nl);
    f->rec_b = f->ph[PH_BPTT] * 1e3 / ((double)T * L * nl);
    const gpu_gru_path path = gpu_gru_path_named(cfg->gpu_recurrence);
    if (f->have_gpu && gpu_caps_for_config(&f->caps, cfg) != 0) f->have_gpu = 0;
    const int have_gpu = f->have_gpu;
    f->rec_impl = !have_gpu     ? "none"
                  : f->refused[0] ? gpu_gru_impl_name(GRU_IMPL_PER_STEP)
                                  : gpu_gru_impl_name(gpu_gru_impl_for(&f->caps, path, B, T, cfg->d_model));
    f->rec_wide = have_gpu && gpu_gru_wide_for(&f->caps, path, B, T, cfg->d_model);
    if (have_gpu && f->refused[0]) snprintf(f->rec_why, sizeof(f->rec_why), "%s", f->refused);
    else if (have_gpu) gpu_gru_impl_why(&f->caps, path, B, T, cfg->d_model, f->rec_why, sizeof(f->rec_why));
    if (have_gpu) attention_said(f->attn, sizeof(f->attn), &f->plan, cfg);
}

/* --json: one object. What was not measured is null, never a zero that reads as a measurement. */
static void bench_print_json(FILE *out, const cc_config *cfg, const bench_figures *f)
{
    const int B = cfg->batch_size, T = cfg->seq_len, have_gpu = f->have_gpu;
    const double tokens = (double)B * T, gpu_ms = f->gpu_ms, mem_mb = f->mem_mb, cpu_ms = f->cpu_ms;
    const gpu_step_plan *plan = &f->plan;
    json_t *j = json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:b}", "B", B, "T", T, "D", cfg->d_model, "L", cfg->n_layers,
                          "W", cfg->ctx_window, "V", cfg->vocab_size, "device", cfg->device, "gpu_measured", have_gpu);
    json_object_set_new(j, "gpu_ms", have_gpu ? json_real(gpu_ms) : json_null());
    json_object_set_new(j, "tok_per_s", have_gpu ? json_real(tokens / (gpu_ms * 1e-3)) : json_null());
    json_object_set_new(j, "lanes", have_gpu ? json_integer(f->lanes) : json_null());
    json_object_set_new(j, "rec_impl", have_gpu ? json_string(f->rec_impl) : json_null());
    json_object_set_new(j, "wavefront_chunk", have_gpu ? json_integer(f->wave_chunk) : json_null());
    json_object_set_new(j, "wavefront", have_gpu ? json_string(f->wave_why) : json_null());
    json_object_set_new(j, "rec_why", have_gpu ? json_string(f->rec_why) : json_null());
    json_object_set_new(j, "attention", have_gpu ? json_string(f->attn) : json_null());
    json_object_set_new(j, "classifier_rows", have_gpu ? json_integer(plan->ce_rows) : json_null());
    json_object_set_new(j, "logits_ldv", have_gpu ? json_integer(plan->ce_ldv) : json_null());
    json_object_set_new(j, "gpu_profile", json_string(cfg->gpu_profile));
    json_object_set_new(j, "rec_fwd_wide", have_gpu ? json_integer(f->rec_wide) : json_null());
    json_object_set_new(j, "rec_fwd_us_per_step_layer", have_gpu ? json_real(f->rec_f) : json_null());
    json_object_set_new(j, "bptt_us_per_step_layer", have_gpu ? json_real(f->rec_b) : json_null());
    json_object_set_new(j, "optimizer_ms", have_gpu ? json_real(f->opt_ms) : json_null());
    /* the per-phase times and the recurrences' µs a step come from steps on the serial schedule */
    json_object_set_new(j, "breakdown_schedule", have_gpu ? json_string("serial") : json_null());
    json_object_set_new(j, "mem_mb", have_gpu ? json_real(mem_mb) : json_null());
    json_object_set_new(j, "bytes_per_token", have_gpu ? json_real(mem_mb * 1048576.0 / tokens) : json_null());
    json_object_set_new(j, "recompute", have_gpu ? json_boolean(plan->recompute) : json_null());
    json_object_set_new(j, "recompute_why", have_gpu ? json_string(plan->recompute_why) : json_null());
    json_object_set_new(j, "plan_bytes", have_gpu ? json_integer((json_int_t)plan->device_bytes) : json_null());
    json_object_set_new(j, "plan_bytes_per_seq", have_gpu ? json_integer((json_int_t)plan->bytes_per_seq) : json_null());
    json_object_set_new(j, "memory_budget", have_gpu && plan->memory_budget ? json_integer((json_int_t)plan->memory_budget)
                                                                             : json_null());
    json_t *groups = json_object();
    for (int i = 0; i < GPU_MEM_GROUPS; i++)
        json_object_set_new(groups, gpu_mem_group_names[i], json_integer((json_int_t)plan->group_bytes[i]));
    json_object_set_new(j, "plan_bytes_by_group", have_gpu ? groups : json_null());
    if (!have_gpu) json_decref(groups);
    json_object_set_new(j, "cpu_ms", cpu_ms > 0 ? json_real(cpu_ms) : json_null());
    json_object_set_new(j, "cpu_steps", json_integer(f->cpu_ran));
    json_object_set_new(j, "speedup_vs_cpu", have_gpu && cpu_ms > 0 ? json_real(cpu_ms / gpu_ms) : json_null());
    char *text = json_dumps(j, JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_REAL_PRECISION(8));
    fprintf(out, "%s\n", text);
    free(text);
    json_decref(j);
}

/* The GPU's lines of the text report: the device, the step, its breakdown, memory and recurrence. */
static void bench_print_gpu(FILE *out, const cc_config *cfg, const cc_bench_opts *o, const bench_figures *f)
{
    const int B = cfg->batch_size, T = cfg->seq_len, lanes = f->lanes;
    const double tokens = (double)B * T, gpu_ms = f->gpu_ms, mem_mb = f->mem_mb;
    const gpu_caps *caps = &f->caps;
    const gpu_step_plan *plan = &f->plan;
    fprintf(out, "GPU: %s (sm_%d%d), run as %s: %d SMs, %d KB shared memory a block, clusters %s\n", caps->name,
            caps->cc_major, caps->cc_minor, strcmp(cfg->gpu_profile, "native") ? cfg->gpu_profile : "itself",
            caps->sm_count, caps->smem_per_block_optin / 1024, caps->cluster_launch ? "on" : "off");
    fprintf(out, "GPU step: %.3f ms median of %d (after %d warm-up) | %.0f tokens/s | %d lane%s | wavefront %s\n",
            gpu_ms, o->steps, o->warmup, tokens / (gpu_ms * 1e-3), lanes, lanes == 1 ? "" : "s", f->wave_why);
    fprintf(out, "breakdown (device time per step, CUDA events, %d more steps on the serial schedule: their "
            "operations one after another on one stream%s):\n", o->steps,
            lanes > 1 || f->wave_chunk ? ", where the timed steps overlap them" : "");
    for (int i = 0; i < PH_COUNT; i++) fprintf(out, "  %-36s %8.3f ms\n", CC_PHASE_NAMES[i], f->ph[i]);
    fprintf(out, "attention: %s\n", f->attn);
    fprintf(out, "classifier: %d rows a chunk (logits [%d, %d] FP16, V padded to %d), %d chunk%s a lane's step\n",
            plan->ce_rows, plan->ce_rows, plan->ce_ldv, plan->ce_ldv, (B / lanes * T + plan->ce_rows - 1) / plan->ce_rows,
            (B / lanes * T + plan->ce_rows - 1) / plan->ce_rows == 1 ? "" : "s");
    fprintf(out, "  %-36s %8.3f ms (host-timed, includes the norm read-back)\n", "optimizer step", f->opt_ms);
    fprintf(out, "device memory: %.0f MiB held (%.0f bytes per token of the batch), %.0f MiB planned; "
                 "recompute %s\n", mem_mb, mem_mb * 1048576.0 / tokens, plan->device_bytes / 1048576.0,
            plan->recompute_why);
    for (int i = 0; i < GPU_MEM_GROUPS; i++)
        fprintf(out, "  %-36s %8.0f MiB %8.0f bytes per token\n", gpu_mem_group_names[i],
                plan->group_bytes[i] / 1048576.0, plan->group_bytes[i] / tokens);
    fprintf(out, "recurrence (%s kernels%s): %.2f us forward + %.2f us BPTT = %.2f us per timestep per layer\n",
            f->rec_impl, f->rec_wide ? ", forward 16 sequences a cluster" : "", f->rec_f, f->rec_b, f->rec_f + f->rec_b);
    fprintf(out, "  why: %s\n", f->rec_why);
}

/* The text report: the shape, the GPU's lines (or why it was not measured), the CPU reference's line. */
static void bench_print_text(FILE *out, const cc_config *cfg, const cc_bench_opts *o, const bench_figures *f)
{
    const double tokens = (double)cfg->batch_size * cfg->seq_len, cpu_ms = f->cpu_ms;
    fprintf(out, "catchat bench: D=%d L=%d H=%d W=%d T=%d B=%d V=%d\n", cfg->d_model, cfg->n_layers, cfg->n_heads,
            cfg->ctx_window, cfg->seq_len, cfg->batch_size, cfg->vocab_size);
    if (f->have_gpu) bench_print_gpu(out, cfg, o, f);
    else
        fprintf(out, "GPU: not measured (%s)\n", strcmp(cfg->device, "cpu") == 0 ? "[run] device = cpu in this config; --set device=gpu to measure it" : "no CUDA device visible");
    if (cpu_ms > 0) {
        if (f->cpu_ran > 1)
            fprintf(out, "CPU reference: %.1f ms per step (median of %d steps, same batch)", cpu_ms, f->cpu_ran);
        else
            fprintf(out, "CPU reference: %.1f ms per step (1 step, same batch)", cpu_ms);
        fprintf(out, " | %.0f tokens/s", tokens / (cpu_ms * 1e-3));
        if (f->gpu_ms > 0) fprintf(out, " | GPU speedup %.1fx", cpu_ms / f->gpu_ms);
        fputc('\n', out);
    }
}

int cc_bench(const cc_config *cfg, const cc_bench_opts *o, FILE *out)
{
    const int B = cfg->batch_size, T = cfg->seq_len;
    int *x = cc_malloc(sizeof(int) * B * T), *y = cc_malloc(sizeof(int) * B * T);
    fixture(cfg, x, y);
    const int gpus = strcmp(cfg->device, "cpu") != 0 ? cc_gpu_count() : 0;
    if (gpus < 0) { /* the driver fails: cc_gpu_count said why; a CPU-only bench would hide it */
        free(x);
        free(y);
        return -1;
    }
    bench_figures *f = cc_calloc(1, sizeof(*f));
    f->have_gpu = gpus > 0;
    const int cpu_asked = o->cpu_steps >= 0 ? o->cpu_steps : f->have_gpu ? 1 : CPU_STEPS_ALONE;
    int rc = f->have_gpu ? bench_gpu(cfg, o, x, y, f) : 0;
    if (rc == 0 && cpu_asked > 0) rc = bench_cpu(cfg, o, x, y, cpu_asked, f);
    if (rc == 0) {
        bench_paths(cfg, f);
        if (o->json) bench_print_json(out, cfg, f);
        else bench_print_text(out, cfg, o, f);
        rc = f->have_gpu || f->cpu_ms > 0 ? 0 : CC_BENCH_NOTHING_MEASURED;
    }
    free(f);
    free(x);
    free(y);
    return rc;
}
