/* The preflight (preflight.h): the ladder's checks on the kernel paths one
 * run takes, at its shape class, before its first GPU step.
 *
 * What is checked, in order (each a ladder case, at the ladder's tolerances):
 *   gru_forward   the recurrence the run's lanes take, at a lane's batch and
 *                 width (the persistent split depends on both), 3-5 steps;
 *                 also the whole batch in one lane where that takes other
 *                 kernels (rec_cases)
 *   gru_backward  the same recurrences' BPTT, clamp binding, S = 128
 *   attention     the run's heads and window, over more positions than the
 *                 window (the band's edge and several query blocks)
 *   model         a full step of the run's config cut to 2 layers, a short
 *                 sequence and a small batch, in 2 lanes where the run has
 *                 lanes, on the same recurrence implementation: embedding,
 *                 the norms in every form, the classifier and the loss
 *   grad_reduce, adamw   the ladder's stages as they are (shape-free kernels)
 * The CPU twin dominates the cost: about a second at the default config
 * (docs/gpus.md has the measurement). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/device.h"
#include "catchat/dist.h"
#include "catchat/gpu_plan.h"
#include "catchat/kernels.h"
#include "catchat/preflight.h"
#include "catchat/util.h"
#include "catchat/version.h"
#include "ladder/ladder.h"

#define PREFLIGHT_SEED 20261201ULL
/* less headroom than this over the executor's own estimate (for the CUDA
 * graph, cuBLAS's handles, NCCL) gets a note, not a refusal */

/* The ladder's stages the preflight runs, at the run's own shapes and
 * kernels: their names and titles are the ladder's (ladder.c), so a check
 * is named the same in both. */
enum { PF_GRU_FORWARD, PF_GRU_BACKWARD, PF_ATTENTION, PF_MODEL, PF_GRAD_REDUCE, PF_ADAMW, PF_COUNT };
static const ladder_stage *const CHECKS[PF_COUNT] = {
    &ladder_stage_gru_forward, &ladder_stage_gru_backward, &ladder_stage_attention,
    &ladder_stage_model,       &ladder_stage_grad_reduce,  &ladder_stage_adamw,
};

const char *cc_preflight_check_names(void)
{
    static char names[256];
    if (!names[0])
        for (int k = 0; k < PF_COUNT; k++) {
            const size_t len = strlen(names);
            snprintf(names + len, sizeof(names) - len, "%s%s", k ? "|" : "", CHECKS[k]->name);
        }
    return names;
}

static int imin(int a, int b) { return a < b ? a : b; }

/* The recurrence cases: a lane's, and the whole batch in one lane where
 * that takes other kernels (evaluation, --check-finite and bench's phase
 * timing run the step in one lane): another implementation, another
 * persistent split, or the forward's wide clusters that a lane's share of
 * the batch does not take. The per-step loop's kernels do not depend on the
 * batch, so it runs at 8 sequences at most. */
typedef struct {
    gpu_gru_impl impl;
    int B;
    const char *what;
    const gpu_caps *caps; /* the SMs its kernels choose by */
    int chunk;            /* > 0: also in windows of this many steps (the wavefront's launches) */
} rec_case;

/* Under the wavefront a lane's layers run in windows on their share of the
 * SMs (wave_caps); the steps that run layer after layer (evaluation,
 * --check-finite, bench's phase timing) take the lane's whole share, so a
 * persistent split there is checked too. */
static int rec_cases(const gpu_step_plan *p, int B, rec_case out[3])
{
    int n = 0;
    const int wave = p->wave_chunk > 0;
    const gpu_caps *lane_caps = wave ? &p->wave_caps : &p->rec_caps;
    out[n++] = (rec_case){ p->impl, p->impl == GRU_IMPL_PER_STEP ? imin(p->lane_B, 8) : p->lane_B,
                           wave ? ", in windows" : "", lane_caps, wave ? 2 : 0 };
    if (wave && p->wave_caps.sm_count != p->rec_caps.sm_count)
        out[n++] = (rec_case){ p->impl, p->lane_B, ", layer after layer", &p->rec_caps, 0 };
    const int wide_only_whole = p->wide && p->lane_B % 16 != 0 && B % 16 == 0;
    if (B != p->lane_B && (p->eval_impl != p->impl || p->eval_impl == GRU_IMPL_PERSISTENT || wide_only_whole))
        out[n++] = (rec_case){ p->eval_impl, p->eval_impl == GRU_IMPL_PER_STEP ? imin(B, 8) : B, ", whole batch",
                               &p->rec_caps, 0 };
    return n;
}

/* The path that takes exactly `impl` at a case's shape. */
static gpu_gru_path path_of(gpu_gru_impl impl)
{
    return impl == GRU_IMPL_PERSISTENT ? GPU_GRU_PERSISTENT : impl == GRU_IMPL_PER_STEP ? GPU_GRU_PER_STEP : GPU_GRU_AUTO;
}

/* What the run takes, for the cache key and the messages: everything that
 * chooses a kernel or a shape a check runs at. */
static void describe_path(char *buf, size_t len, const gpu_step_plan *p, const cc_config *cfg, int B, int T)
{
    char lane[512], eval[400] = "";
    gpu_step_plan_describe(p, cfg, T, lane, sizeof(lane));
    if (p->eval_impl == GRU_IMPL_PERSISTENT && B != p->lane_B) {
        char why[320];
        gpu_gru_impl_why(&p->rec_caps, p->path, B, T, cfg->d_model, why, sizeof(why));
        snprintf(eval, sizeof(eval), "; whole batch: persistent (%s)", why);
    } else if (p->eval_impl != p->impl) {
        snprintf(eval, sizeof(eval), "; whole batch: %s", gpu_gru_impl_name(p->eval_impl));
    }
    snprintf(buf, len, "D=%d L=%d H=%d W=%d V=%d B=%d T=%d; %s%s; attention on %s; ctx guard %s; CUDA graph %s; "
             "as %s: %d SMs, %d KB shared a block, clusters %s",
             cfg->d_model, cfg->n_layers, cfg->n_heads, cfg->ctx_window, cfg->vocab_size, B, T, lane, eval,
             attention_kernel_name(p->attn_tc), cfg->ctx_grad_clamp > 0 ? "on" : "off", cfg->cuda_graph,
             cfg->gpu_profile, p->caps.sm_count, p->caps.smem_per_block_optin / 1024,
             p->caps.cluster_launch ? "on" : "off");
}

/* A kernel that faults, or a launcher that cannot start, ends the process
 * (cudaCheck, the launchers' exits) with its own line; this adds which
 * check it was in and what to do. */
static const char *current_check, *current_command;

static void note_exit_inside_check(void)
{
    if (current_check)
        fprintf(stderr, "catchat: preflight: the %s check stopped the process (the line above says why): this GPU, "
                        "driver or build cannot run this config's path, so 'catchat %s' does not start; see "
                        "docs/gpus.md, \"When the preflight refuses a run\"\n", current_check, current_command);
}

/* Runs the checks; returns the index of the first that failed (its row in
 * *failed), or -1 when all passed. */
static int run_checks(const cc_config *cfg, const gpu_step_plan *p, const cc_config *mini, int B, int T, const char *plant,
                      stage *failed)
{
    cc_rng r;
    cc_rng_seed(&r, PREFLIGHT_SEED);
    gpu_gru_state gru = { .refused = "" }; /* the checks' own: the run's executor keeps another */
    const ladder_ctx cx = { &r, gpu_matmul_create(), NULL, &p->caps, cfg->gpu_profile, &gru };
    ladder_ctx cx_rec = cx; /* its caps: each case's share of the SMs, as the run's recurrences take it */
    const int D = cfg->d_model, T_rec = D <= 512 ? 5 : 3;
    rec_case rc[3];
    const int nrc = rec_cases(p, B, rc);
    int first = -1;
    for (int k = 0; k < PF_COUNT; k++) {
        stage st;
        memset(&st, 0, sizeof(st));
        st.num = k + 1;
        st.name = CHECKS[k]->name;
        st.title = CHECKS[k]->title;
        st.plant = plant && strcmp(plant, CHECKS[k]->name) == 0;
        current_check = CHECKS[k]->name;
        switch (k) {
        case PF_GRU_FORWARD:
        case PF_GRU_BACKWARD:
            for (int i = 0; i < nrc; i++) {
                char name[96];
                snprintf(name, sizeof(name), "%s D=%d B=%d T=%d%s", gpu_gru_impl_name(rc[i].impl), D, rc[i].B, T_rec,
                         rc[i].what);
                const gpu_gru_path path = path_of(rc[i].impl);
                char what[128];
                snprintf(what, sizeof(what), "takes the run's recurrence (%s)", name);
                cx_rec.caps = rc[i].caps;
                /* a persistent launch the runtime refused (its line is printed) takes the per-step
                 * loop from then on in these checks: that is the path to check now (the run's
                 * executor keeps a state of its own: its first, eager step meets the same refusal
                 * and falls back to this loop, with its own line) */
                const gpu_gru_impl now = gpu_gru_impl_with(cx_rec.caps, cx.gru, path, rc[i].B, T_rec, D);
                check_plan(&st, what, now == rc[i].impl || (rc[i].impl == GRU_IMPL_PERSISTENT &&
                                                            now == GRU_IMPL_PER_STEP && cx.gru->refused[0]));
                /* under the wavefront, in windows too (of 2 steps: 2, 2, 1 at T_rec = 5; 2, 1 at 3) */
                const int chunk = rc[i].chunk;
                if (k == PF_GRU_FORWARD) gru_forward_check(&cx_rec, &st, path, rc[i].B, T_rec, D, p->wide, chunk, name);
                else gru_backward_check(&cx_rec, &st, path, rc[i].B, T_rec, D, chunk, name);
            }
            break;
        case PF_ATTENTION:
            attention_check(&cx, &st, 1, D, cfg->n_heads, imin(T, cfg->ctx_window + 37), cfg->ctx_window, p->attn_tc);
            break;
        case PF_MODEL: /* the planner's miniature of the run (cc_preflight checked that it plans the same kind) */
            full_step_check(&cx, &st, mini, "", mini->gpu_lanes, 0);
            break;
        case PF_GRAD_REDUCE: CHECKS[k]->run(&cx, &st); break;
        case PF_ADAMW: CHECKS[k]->run(&cx, &st); break;
        }
        cudaCheck(cudaDeviceSynchronize());
        current_check = NULL;
        if ((st.fail || st.skip) && first < 0) {
            first = k;
            *failed = st;
        }
    }
    gpu_matmul_destroy(cx.gemm); /* each check freed its own kernel scratch */
    return first;
}

/* The settings a refusal may suggest instead, by the checks a failure of
 * which they may avoid (the recurrence's and the attention's other kernels;
 * a full step may fail in either, or in its schedule: the layers one after
 * another, without recompute). Only those whose own checks pass are said. */
static const struct {
    const char *key, *value;
    int rec, att, step; /* may avoid a failure of the recurrence's checks, the attention's, the full step's */
} REMEDIES[] = {
    { "recurrence", "persistent", 1, 0, 1 }, { "recurrence", "per-step", 1, 0, 1 },
    { "attention", "fp32", 0, 1, 1 },        { "wavefront", "off", 0, 0, 1 },
    { "recompute", "off", 0, 0, 1 },
};

/* The miniature of the run planned as p (gpu_plan_miniature) and its plan
 * on the same GPU and budget; -1 with a line saying it is catchat's own
 * error where that plan is not the run's kind (the check would pass
 * another program than the run's). */
static int plan_miniature(cc_config *mini, gpu_step_plan *mp, const gpu_step_plan *p, const cc_config *cfg, int T,
                          int say)
{
    gpu_plan_miniature(mini, p, cfg, T);
    const int quiet = cc_error_quiet;
    cc_error_quiet = !say;
    int rc = gpu_plan_make(mp, &p->caps, mini, mini->batch_size, mini->seq_len, p->memory_budget, NULL);
    const gpu_schedule_kind run = gpu_plan_kind(p, T), small = gpu_plan_kind(mp, mini->seq_len);
    if (rc == 0 && !gpu_schedule_kind_same(&run, &small)) {
        char a[240], b[240];
        gpu_schedule_kind_describe(&run, a, sizeof(a));
        gpu_schedule_kind_describe(&small, b, sizeof(b));
        rc = cc_error("preflight: catchat's own error, not this GPU's: the full-step check's miniature of this config "
                      "plans %s, where the run plans %s, so the check cannot run the run's program; please report it "
                      "with the output of 'catchat --version' and this config (docs/gpus.md, \"When the preflight "
                      "refuses a run\")", b, a);
    }
    cc_error_quiet = quiet;
    return rc;
}

/* The settings of REMEDIES that may avoid check k's failure, that change
 * the run's plan, that fit its memory budget and whose own checks all pass
 * here, in buf ("--set recurrence=per-step, or ..."; empty where none
 * does). A planted wrong result (--plant-wrong-result) is the run's path's
 * alone: a remedy's checks run unplanted, so the refusal shows what it
 * would suggest. */
static void checked_remedies(char *buf, size_t len, int k, const cc_config *cfg, const gpu_step_plan *p, int B, int T)
{
    buf[0] = 0;
    const int rec = k == PF_GRU_FORWARD || k == PF_GRU_BACKWARD, att = k == PF_ATTENTION, step = k == PF_MODEL;
    const gpu_schedule_kind was = gpu_plan_kind(p, T);
    for (size_t i = 0; i < sizeof(REMEDIES) / sizeof(REMEDIES[0]); i++) {
        if (!((rec && REMEDIES[i].rec) || (att && REMEDIES[i].att) || (step && REMEDIES[i].step))) continue;
        cc_config c = *cfg;
        char set[96];
        snprintf(set, sizeof(set), "%s=%s", REMEDIES[i].key, REMEDIES[i].value);
        const int quiet = cc_error_quiet;
        cc_error_quiet = 1;
        gpu_step_plan q, mq;
        cc_config mini;
        const int planned = cc_config_set_arg(&c, set) == 0 &&
                            gpu_plan_make(&q, &p->caps, &c, B, T, p->memory_budget, NULL) == 0 &&
                            plan_miniature(&mini, &mq, &q, &c, T, 0) == 0;
        cc_error_quiet = quiet;
        const gpu_schedule_kind now = planned ? gpu_plan_kind(&q, T) : was;
        if (!planned || gpu_schedule_kind_same(&now, &was)) continue; /* no other path: nothing to suggest */
        if (p->memory_budget && q.device_bytes + GPU_MEMORY_MARGIN > p->memory_budget) continue; /* would not fit */
        stage bad;
        if (run_checks(&c, &q, &mini, B, T, NULL, &bad) >= 0) continue;
        const size_t n = strlen(buf);
        snprintf(buf + n, len - n, "%s--set %s", n ? ", or " : "", set);
    }
    if (buf[0]) {
        const size_t n = strlen(buf);
        snprintf(buf + n, len - n, " passes these checks here; ");
    }
}

/* The config's device memory against what is free, or what [gpu]
 * memory_limit allows where that is less: -1 (said, with what fits) when it
 * cannot fit. */
static int check_memory(const cc_config *cfg, const gpu_step_plan *p, int B, const char *gpu)
{
    size_t free_b = 0, total_b = 0;
    if (cudaMemGetInfo(&free_b, &total_b) != cudaSuccess) {
        cudaGetLastError();
        return 0; /* nothing to compare with: the allocations will say */
    }
    char has[400];
    snprintf(has, sizeof(has), "%s has %.1f GiB free of %.1f", gpu, free_b / 1073741824.0, total_b / 1073741824.0);
    if (cfg->gpu_memory_limit > 0 && cfg->gpu_memory_limit < free_b) {
        free_b = (size_t)cfg->gpu_memory_limit;
        snprintf(has, sizeof(has), "[gpu] memory_limit allows %.1f GiB", free_b / 1073741824.0);
    }
    const size_t need = p->device_bytes;
    if (need + GPU_MEMORY_MARGIN <= free_b) return 0;
    if (need <= free_b) {
        fprintf(stderr, "catchat: note: batch_size %d x seq_len %d needs about %.1f GiB of device memory, within "
                        "%d MiB of what it may take (%s): the run may still run out\n", B, cfg->seq_len,
                need / 1073741824.0, (int)(GPU_MEMORY_MARGIN >> 20), has);
        return 0;
    }
    /* a smaller batch: the buffers that grow with it shrink; accumulation adds the step's gradient buffer */
    const size_t fixed = p->device_bytes - p->bytes_per_seq * (size_t)B + (cfg->grad_accum > 1 ? 0 : p->accum_bytes);
    char fit[240] = "no batch fits: lower seq_len or d_model";
    for (int k = 2; k <= B; k++)
        if (B % k == 0 && (cfg->gpu_lanes == 0 || (B / k) % cfg->gpu_lanes == 0) &&
            fixed + p->bytes_per_seq * (size_t)(B / k) <= free_b) {
            snprintf(fit, sizeof(fit), "batch_size = %d fits (with grad_accum = %d the step keeps its %d sequences)",
                     B / k, k * cfg->grad_accum, B * cfg->grad_accum);
            break;
        }
    if (!p->recompute) { /* [gpu] recompute = off: rebuilding the activations may fit the whole batch */
        cc_config on = *cfg;
        snprintf(on.gpu_recompute, sizeof(on.gpu_recompute), "on");
        gpu_step_plan q;
        const int quiet = cc_error_quiet;
        cc_error_quiet = 1;
        if (gpu_plan_make(&q, &p->caps, &on, B, cfg->seq_len, p->memory_budget, NULL) == 0 && q.device_bytes <= free_b) {
            const size_t n = strlen(fit);
            snprintf(fit + n, sizeof(fit) - n, "; or --set recompute=on (about %.1f GiB)", q.device_bytes / 1073741824.0);
        }
        cc_error_quiet = quiet;
    }
    return cc_error("preflight: batch_size %d x seq_len %d needs about %.1f GiB of device memory, and %s; %s "
                    "(this plan: recompute %s)", B, cfg->seq_len, need / 1073741824.0, has, fit,
                    p->recompute ? "on" : "off");
}

int cc_preflight(const cc_config *cfg, int B, int T, cc_dist *dist, const cc_preflight_opts *o)
{
    const int gpus = strcmp(cfg->device, "cpu") == 0 ? 0 : cc_gpu_count();
    if (gpus < 0) return cc_dist_all_passed(dist, 1, "the preflight"); /* a failing driver: its line is printed */
    if (gpus == 0) { /* no GPU step: nothing to check */
        if (!o->plant || strcmp(cfg->device, "gpu") == 0) return 0; /* device = gpu: the executor says there is none */
        return cc_error("--plant-wrong-result: 'catchat %s' runs on the CPU here: it has no GPU step to check",
                        o->command);
    }
    const char *mode = o->mode ? o->mode : "auto";
    gpu_step_plan own; /* the caller's plan (the one its executor is made from), or one made here */
    if (!o->plan && gpu_step_plan_for(&own, cfg, B, T) != 0) return cc_dist_all_passed(dist, 1, "the preflight");
    const gpu_step_plan p = o->plan ? *o->plan : own;
    char gpu[320], driver[128], build[160], path[1400], key[2400];
    snprintf(gpu, sizeof(gpu), "%s (sm_%d%d)", p.caps.name, p.caps.cc_major, p.caps.cc_minor);
    if (p.path == GPU_GRU_PERSISTENT && p.impl != GRU_IMPL_PERSISTENT && !o->quiet)
        fprintf(stderr, "catchat: note: [gpu] recurrence = persistent: no persistent split fits %s at d_model %d "
                        "and %d sequences a lane; the per-step loop runs instead\n", gpu, cfg->d_model, p.lane_B);
    if (strcmp(mode, "never") == 0) {
        fprintf(stderr, "catchat: WARNING: --preflight never: the GPU kernels of this %s are NOT checked against the "
                        "CPU reference on %s, nor its device memory; if a kernel is wrong on this GPU, driver or "
                        "build, the %s goes on quietly on wrong numbers\n", o->command, gpu, o->command);
        return cc_dist_all_passed(dist, 0, "the preflight");
    }
    if (check_memory(cfg, &p, B, gpu) != 0) return cc_dist_all_passed(dist, 1, "the preflight");
    describe_path(path, sizeof(path), &p, cfg, B, T);
    cc_driver_version(driver, sizeof(driver));
    char id[96];
    cc_build_id(id, sizeof(id));
    int runtime = 0;
    if (cudaRuntimeGetVersion(&runtime) != cudaSuccess) runtime = 0;
    const size_t lt = gpu_matmul_library_version(); /* shared libraries: the build id does not cover them */
    snprintf(build, sizeof(build), "%s for %s, CUDA runtime %d, cuBLASLt %zu", id, CATCHAT_CUDA_ARCHS, runtime, lt);
    const cc_preflight_id pid = { gpu, driver, cc_version(), build, path };
    cc_preflight_key(key, sizeof(key), &pid);
    if (strcmp(mode, "auto") == 0 && !o->plant && cc_preflight_cache_has(o->cache_dir, key)) {
        if (!o->quiet)
            printf("catchat %s: preflight passed before on this GPU, driver, build and kernel path (%s/%s): not "
                   "run again\n", o->command, o->cache_dir, CC_PREFLIGHT_CACHE_FILE);
        return cc_dist_all_passed(dist, 0, "the preflight");
    }
    static int exit_note_registered;
    if (!exit_note_registered) exit_note_registered = atexit(note_exit_inside_check) == 0;
    current_command = o->command;
    const double t0 = cc_now_ms();
    stage bad;
    cc_config mini;
    gpu_step_plan mini_plan;
    if (plan_miniature(&mini, &mini_plan, &p, cfg, T, 1) != 0) return cc_dist_all_passed(dist, 1, "the preflight");
    const int k = run_checks(cfg, &p, &mini, B, T, o->plant, &bad);
    const double secs = (cc_now_ms() - t0) / 1000;
    if (k >= 0 && bad.plan_off) { /* no number was wrong: a check ran another path than the run's */
        cc_error("preflight: catchat's own error, not this GPU's: the %s check (%s) did not run the path this run "
                 "takes (%s; this config: %s), so it checked nothing of this run; please report it with the output "
                 "of 'catchat --version' and this config (docs/gpus.md, \"When the preflight refuses a run\")",
                 CHECKS[k]->name, CHECKS[k]->title, bad.note, path);
        return cc_dist_all_passed(dist, 1, "the preflight");
    }
    if (k >= 0) {
        char other[400];
        checked_remedies(other, sizeof(other), k, cfg, &p, B, T);
        char detail[256];
        if (bad.skip && !bad.fail) snprintf(detail, sizeof(detail), "could not run: %s", bad.why);
        else if (bad.note[0]) snprintf(detail, sizeof(detail), "%s", bad.note);
        else snprintf(detail, sizeof(detail), "%s: relative error %.2e over the tolerance %.0e", bad.worst,
                      bad.worst_rel, bad.worst_tol);
        const int unrun = bad.skip && !bad.fail;
        cc_error("preflight: %s (%s) on %s %s: %s (this config: %s). 'catchat %s' would go on %s, so it stops "
                 "here: %srun on the CPU with --set device=cpu, or skip the check at "
                 "your own risk with --preflight never. Please report it with the output of 'catchat --version' and "
                 "'catchat ladder' (docs/gpus.md, \"When the preflight refuses a run\")",
                 CHECKS[k]->name, CHECKS[k]->title, gpu, unrun ? "cannot be checked" : "gives wrong results", detail,
                 path, o->command, unrun ? "unchecked" : "with wrong numbers", other);
        return cc_dist_all_passed(dist, 1, "the preflight");
    }
    if (!o->plant && cc_preflight_cache_add(o->cache_dir, key) != 0)
        fprintf(stderr, "catchat: note: the preflight will run again next time\n");
    if (!o->quiet)
        printf("catchat %s: preflight: the %d kernel checks of this config passed on %s in %.1f s%s%s%s\n",
               o->command, PF_COUNT, gpu, secs, o->cache_dir && !o->plant ? " (remembered in " : "",
               o->cache_dir && !o->plant ? o->cache_dir : "", o->cache_dir && !o->plant ? "/" CC_PREFLIGHT_CACHE_FILE ")" : "");
    return cc_dist_all_passed(dist, 0, "the preflight");
}
