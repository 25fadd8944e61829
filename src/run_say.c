/* `catchat train`: what a run says about itself beside the progress line
 * (progress.c): before the first step, what trains on what and a long CPU
 * run's length; at the end, the summary and how to go on. Only rank 0 says
 * these (the callers see to it). */
#include <string.h>
#include "run_ctx.h"
#include "catchat/run_dir.h"
#include "catchat/util.h"

/* A config sized for a GPU (the default: minutes a step on a CPU) planned on
 * the CPU reference is said before the first step, with its length and the
 * config made for a CPU, instead of a silent day-long run. */
#define CPU_RUN_NOTE_S 300.0
/* configs/cpu.ini's step is about 2e9 multiply-adds: five times that is a model sized for a GPU */
#define CPU_SIZED_STEP_MACS 1e10
void run_say_cpu_duration(const cc_config *cfg, const cc_train_opts *o, long step)
{
    long steps = cfg->max_steps - step;
    if (o->stop_after > 0 && o->stop_after < steps) steps = o->stop_after;
    if (steps <= 0) return;
    /* a long run of a model sized for a CPU is the user's plan, said by the progress line's ETA */
    if (cc_step_macs(cfg) < CPU_SIZED_STEP_MACS) return;
    const double per_step = cc_cpu_step_estimate_s(cfg);
    if (per_step * steps < CPU_RUN_NOTE_S) return;
    char each[32], all[32];
    if (per_step < 60) snprintf(each, sizeof(each), "%.1f s", per_step);
    else cc_format_duration(each, sizeof(each), per_step);
    cc_format_duration(all, sizeof(all), per_step * steps);
    fprintf(stderr, "catchat: note: on the CPU reference a step of this config takes about %s, %ld steps about %s: "
                    "configs/cpu.ini is a model sized for a CPU (or train this one on a GPU)\n", each, steps, all);
}

void run_say_start(const run_ctx *r, const cc_config *cfg, const cc_train_opts *o, const cc_run_state *st,
                   const char *resumed_how)
{
    const cc_executor *ex = r->ex;
    if (!r->prog.quiet) {
        printf("catchat train: %s, %zu parameters, %zu train / %zu val tokens\n", ex->name, ex->lay.total,
               r->train_tok.n, r->val_tok.n);
        if (r->dist.active)
            printf("world size %d (NCCL, %s bootstrap)\n", r->dist.world, r->dist.used_mpi ? "MPI" : "env");
        printf("config (the keys that differ from the defaults; all are in each checkpoint):\n");
        cc_config_print_changed(cfg, stdout); /* the other keys are the defaults: `catchat help config` */
        if (strcmp(ex->name, "gpu") == 0) {
            const gpu_step_plan *p = cc_gpu_plan(ex);
            char plan[900];
            gpu_step_plan_describe(p, cfg, cfg->seq_len, plan, sizeof(plan));
            printf("GPU step: %s\nGPU memory: %.2f GiB planned; recompute %s\n", plan, p->device_bytes / 1073741824.0,
                   p->recompute_why);
        } else if (strcmp(cfg->gpu_recompute, "auto") != 0 || cfg->gpu_memory_limit) {
            printf("[gpu] recompute and memory_limit plan the GPU step: the CPU reference keeps every activation\n");
        }
        fflush(stdout);
    }
    /* --quiet too: where a run goes on from, and a re-planned schedule, are not progress */
    if (r->lead && o->resume) {
        printf("resumed from %s at step %ld%s\n", o->resume, st->step, resumed_how);
        fflush(stdout);
    }
}

void run_say_summary(const cc_config *cfg, const cc_train_opts *o, const cc_run_state *st,
                     const cc_train_result *res, int early, double seconds)
{
    char took[32];
    cc_format_duration(took, sizeof(took), seconds);
    /* --steps N ends a run short of max_steps: not "done", and how to go on */
    const int short_of_max = !early && st->step < cfg->max_steps;
    /* a short first line, then a line each (an 80-column terminal: the paths on lines of their own) */
    printf("catchat train: %s after step %ld (%ld step%s in %s)\n",
           early ? "stopped early" : short_of_max ? "paused (--steps)" : "done", st->step, res->steps_run,
           res->steps_run == 1 ? "" : "s", took);
    printf("  last loss %.4f", res->last_loss);
    if (st->best_step > 0) printf("; best eval loss %.4f at step %ld", st->best_eval, st->best_step);
    printf("\n  checkpoint       %s/%s\n", cfg->out_dir, CC_CHECKPOINT_NAME);
    if (st->best_step > 0) printf("  best checkpoint  %s/%s\n", cfg->out_dir, CC_CHECKPOINT_BEST_NAME);
    if (short_of_max)
        printf("catchat train: max_steps %ld not reached; go on with:\n  %s train --resume %s/%s\n",
               cfg->max_steps, o->prog ? o->prog : "catchat", cfg->out_dir, CC_CHECKPOINT_NAME);
    fflush(stdout);
}
