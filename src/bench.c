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

int cc_bench(const cc_config *cfg, const cc_bench_opts *o, FILE *out)
{
    const int B = cfg->batch_size, T = cfg->seq_len, L = cfg->n_layers;
    const double tokens = (double)B * T;
    int *x = cc_malloc(sizeof(int) * B * T), *y = cc_malloc(sizeof(int) * B * T);
    fixture(cfg, x, y);
    double gpu_ms = 0, opt_ms = 0, ph[PH_COUNT] = { 0 }, mem_mb = 0;
    int lanes = 0, wave_chunk = 0;
    char wave_why[128] = "", refused[192] = ""; /* refused: a persistent launch the runtime refused, why */
    gpu_step_plan plan; /* what the executor was created from: recompute, bytes by group */
    memset(&plan, 0, sizeof(plan));
    const int gpus = strcmp(cfg->device, "cpu") != 0 ? cc_gpu_count() : 0;
    if (gpus < 0) { /* the driver fails: cc_gpu_count said why; a CPU-only bench would hide it */
        free(x);
        free(y);
        return -1;
    }
    int have_gpu = gpus > 0;
    if (have_gpu) {
        size_t free0 = 0, free1 = 0, total = 0;
        cudaMemGetInfo(&free0, &total);
        cc_executor *ex = cc_gpu_executor_create_planned(cfg, B, T, o->plan);
        if (!ex) {
            free(x);
            free(y);
            return -1;
        }
        double dummy;
        time_steps(ex, cfg, x, y, o->warmup, 0, &dummy, NULL);
        cudaMemGetInfo(&free1, &total);
        mem_mb = (double)(free0 - free1) / 1048576.0; /* everything the executor holds */
        gpu_ms = time_steps(ex, cfg, x, y, o->steps, 0, &opt_ms, NULL);
        /* the breakdown comes from separate steps: the same operations timed
         * one after another on one stream, while the timed steps overlap them */
        lanes = cc_gpu_lanes(ex);
        plan = *cc_gpu_plan(ex);
        snprintf(wave_why, sizeof(wave_why), "%s", cc_gpu_wavefront(ex, &wave_chunk));
        if (cc_gpu_refusal(ex)) snprintf(refused, sizeof(refused), "%s", cc_gpu_refusal(ex));
        cc_gpu_profile_enable(ex, 1);
        cc_gpu_profile_take(ex, ph); /* clear */
        time_steps(ex, cfg, x, y, o->steps, 0, &dummy, NULL);
        cc_gpu_profile_take(ex, ph);
        for (int i = 0; i < PH_COUNT; i++) ph[i] /= o->steps;
        ex->ops->destroy(ex);
    }
    double cpu_ms = 0;
    const int cpu_asked = o->cpu_steps >= 0 ? o->cpu_steps : have_gpu ? 1 : CPU_STEPS_ALONE;
    int cpu_ran = 0;
    if (cpu_asked > 0) {
        cc_executor *ex = cc_cpu_executor_create(cfg, B, T);
        if (!ex) { /* said: the config does not fit host memory */
            free(x);
            free(y);
            return -1;
        }
        /* a CPU step of a GPU-sized config takes a minute: said before, not after a silence */
        const double each_s = cc_cpu_step_estimate_s(cfg);
        if (each_s * cpu_asked >= CPU_NOTE_S) {
            char each[32];
            if (each_s < 60) snprintf(each, sizeof(each), "%.0f s", each_s);
            else cc_format_duration(each, sizeof(each), each_s);
            fprintf(stderr, "catchat bench: timing the CPU reference: %d step%s of about %s%s (--cpu-steps 0 "
                    "skips it)\n", cpu_asked, cpu_asked == 1 ? "" : "s", each, cpu_asked == 1 ? "" : " each");
        }
        double dummy;
        cpu_ms = time_steps(ex, cfg, x, y, cpu_asked, o->cpu_steps < 0 ? CPU_BUDGET_MS : 0, &dummy, &cpu_ran);
        ex->ops->destroy(ex);
    }
    /* the profiled steps run each lane's recurrences one after another: a lane's, a timestep and a layer */
    const int nl = lanes > 0 ? lanes : 1;
    const double rec_f = ph[PH_REC_FWD] * 1e3 / ((double)T * L * nl), rec_b = ph[PH_BPTT] * 1e3 / ((double)T * L * nl);
    const gpu_gru_path path = gpu_gru_path_named(cfg->gpu_recurrence);
    gpu_caps caps;
    if (have_gpu && gpu_caps_for_config(&caps, cfg) != 0) have_gpu = 0;
    const char *rec_impl = !have_gpu  ? "none"
                           : refused[0] ? gpu_gru_impl_name(GRU_IMPL_PER_STEP)
                                        : gpu_gru_impl_name(gpu_gru_impl_for(&caps, path, B, T, cfg->d_model));
    const int rec_wide = have_gpu && gpu_gru_wide_for(&caps, path, B, T, cfg->d_model); /* forward clusters of 16 sequences */
    char rec_why[320] = "";
    if (have_gpu && refused[0]) snprintf(rec_why, sizeof(rec_why), "%s", refused);
    else if (have_gpu) gpu_gru_impl_why(&caps, path, B, T, cfg->d_model, rec_why, sizeof(rec_why));
    char attn[256] = "";
    if (have_gpu) attention_said(attn, sizeof(attn), &plan, cfg);
    if (o->json) {
        /* What was not measured is null, never a zero that reads as a measurement. */
        json_t *j = json_pack("{s:i,s:i,s:i,s:i,s:i,s:i,s:s,s:b}", "B", B, "T", T, "D", cfg->d_model, "L", L, "W",
                              cfg->ctx_window, "V", cfg->vocab_size, "device", cfg->device, "gpu_measured", have_gpu);
        json_object_set_new(j, "gpu_ms", have_gpu ? json_real(gpu_ms) : json_null());
        json_object_set_new(j, "tok_per_s", have_gpu ? json_real(tokens / (gpu_ms * 1e-3)) : json_null());
        json_object_set_new(j, "lanes", have_gpu ? json_integer(lanes) : json_null());
        json_object_set_new(j, "rec_impl", have_gpu ? json_string(rec_impl) : json_null());
        json_object_set_new(j, "wavefront_chunk", have_gpu ? json_integer(wave_chunk) : json_null());
        json_object_set_new(j, "wavefront", have_gpu ? json_string(wave_why) : json_null());
        json_object_set_new(j, "rec_why", have_gpu ? json_string(rec_why) : json_null());
        json_object_set_new(j, "attention", have_gpu ? json_string(attn) : json_null());
        json_object_set_new(j, "classifier_rows", have_gpu ? json_integer(plan.ce_rows) : json_null());
        json_object_set_new(j, "logits_ldv", have_gpu ? json_integer(plan.ce_ldv) : json_null());
        json_object_set_new(j, "gpu_profile", json_string(cfg->gpu_profile));
        json_object_set_new(j, "rec_fwd_wide", have_gpu ? json_integer(rec_wide) : json_null());
        json_object_set_new(j, "rec_fwd_us_per_step_layer", have_gpu ? json_real(rec_f) : json_null());
        json_object_set_new(j, "bptt_us_per_step_layer", have_gpu ? json_real(rec_b) : json_null());
        json_object_set_new(j, "optimizer_ms", have_gpu ? json_real(opt_ms) : json_null());
        /* the per-phase times and the recurrences' µs a step come from steps on the serial schedule */
        json_object_set_new(j, "breakdown_schedule", have_gpu ? json_string("serial") : json_null());
        json_object_set_new(j, "mem_mb", have_gpu ? json_real(mem_mb) : json_null());
        json_object_set_new(j, "bytes_per_token", have_gpu ? json_real(mem_mb * 1048576.0 / tokens) : json_null());
        json_object_set_new(j, "recompute", have_gpu ? json_boolean(plan.recompute) : json_null());
        json_object_set_new(j, "recompute_why", have_gpu ? json_string(plan.recompute_why) : json_null());
        json_object_set_new(j, "plan_bytes", have_gpu ? json_integer((json_int_t)plan.device_bytes) : json_null());
        json_object_set_new(j, "plan_bytes_per_seq", have_gpu ? json_integer((json_int_t)plan.bytes_per_seq) : json_null());
        json_object_set_new(j, "memory_budget", have_gpu && plan.memory_budget ? json_integer((json_int_t)plan.memory_budget)
                                                                                : json_null());
        json_t *groups = json_object();
        for (int i = 0; i < GPU_MEM_GROUPS; i++)
            json_object_set_new(groups, gpu_mem_group_names[i], json_integer((json_int_t)plan.group_bytes[i]));
        json_object_set_new(j, "plan_bytes_by_group", have_gpu ? groups : json_null());
        if (!have_gpu) json_decref(groups);
        json_object_set_new(j, "cpu_ms", cpu_ms > 0 ? json_real(cpu_ms) : json_null());
        json_object_set_new(j, "cpu_steps", json_integer(cpu_ran));
        json_object_set_new(j, "speedup_vs_cpu", have_gpu && cpu_ms > 0 ? json_real(cpu_ms / gpu_ms) : json_null());
        char *text = json_dumps(j, JSON_PRESERVE_ORDER | JSON_COMPACT | JSON_REAL_PRECISION(8));
        fprintf(out, "%s\n", text);
        free(text);
        json_decref(j);
    } else {
        fprintf(out, "catchat bench: D=%d L=%d H=%d W=%d T=%d B=%d V=%d\n", cfg->d_model, L, cfg->n_heads,
                cfg->ctx_window, T, B, cfg->vocab_size);
        if (have_gpu) {
            fprintf(out, "GPU: %s (sm_%d%d), run as %s: %d SMs, %d KB shared memory a block, clusters %s\n", caps.name,
                    caps.cc_major, caps.cc_minor, strcmp(cfg->gpu_profile, "native") ? cfg->gpu_profile : "itself",
                    caps.sm_count, caps.smem_per_block_optin / 1024, caps.cluster_launch ? "on" : "off");
            fprintf(out, "GPU step: %.3f ms median of %d (after %d warm-up) | %.0f tokens/s | %d lane%s | wavefront %s\n",
                    gpu_ms, o->steps, o->warmup, tokens / (gpu_ms * 1e-3), lanes, lanes == 1 ? "" : "s", wave_why);
            fprintf(out, "breakdown (device time per step, CUDA events, %d more steps on the serial schedule: their "
                    "operations one after another on one stream%s):\n", o->steps,
                    lanes > 1 || wave_chunk ? ", where the timed steps overlap them" : "");
            for (int i = 0; i < PH_COUNT; i++) fprintf(out, "  %-36s %8.3f ms\n", CC_PHASE_NAMES[i], ph[i]);
            fprintf(out, "attention: %s\n", attn);
            fprintf(out, "classifier: %d rows a chunk (logits [%d, %d] FP16, V padded to %d), %d chunk%s a lane's step\n",
                    plan.ce_rows, plan.ce_rows, plan.ce_ldv, plan.ce_ldv, (B / lanes * T + plan.ce_rows - 1) / plan.ce_rows,
                    (B / lanes * T + plan.ce_rows - 1) / plan.ce_rows == 1 ? "" : "s");
            fprintf(out, "  %-36s %8.3f ms (host-timed, includes the norm read-back)\n", "optimizer step", opt_ms);
            fprintf(out, "device memory: %.0f MiB held (%.0f bytes per token of the batch), %.0f MiB planned; "
                         "recompute %s\n", mem_mb, mem_mb * 1048576.0 / tokens, plan.device_bytes / 1048576.0,
                    plan.recompute_why);
            for (int i = 0; i < GPU_MEM_GROUPS; i++)
                fprintf(out, "  %-36s %8.0f MiB %8.0f bytes per token\n", gpu_mem_group_names[i],
                        plan.group_bytes[i] / 1048576.0, plan.group_bytes[i] / tokens);
            fprintf(out, "recurrence (%s kernels%s): %.2f us forward + %.2f us BPTT = %.2f us per timestep per layer\n",
                    rec_impl, rec_wide ? ", forward 16 sequences a cluster" : "", rec_f, rec_b, rec_f + rec_b);
            fprintf(out, "  why: %s\n", rec_why);
        } else {
            fprintf(out, "GPU: not measured (%s)\n", strcmp(cfg->device, "cpu") == 0 ? "[run] device = cpu in this config; --set device=gpu to measure it" : "no CUDA device visible");
        }
        if (cpu_ms > 0) {
            if (cpu_ran > 1)
                fprintf(out, "CPU reference: %.1f ms per step (median of %d steps, same batch)", cpu_ms, cpu_ran);
            else
                fprintf(out, "CPU reference: %.1f ms per step (1 step, same batch)", cpu_ms);
            fprintf(out, " | %.0f tokens/s", tokens / (cpu_ms * 1e-3));
            if (gpu_ms > 0) fprintf(out, " | GPU speedup %.1fx", cpu_ms / gpu_ms);
            fputc('\n', out);
        }
    }
    free(x);
    free(y);
    return have_gpu || cpu_ms > 0 ? 0 : CC_BENCH_NOTHING_MEASURED;
}
