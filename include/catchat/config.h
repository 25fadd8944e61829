/* The run configuration: every key of docs/config.md, typed, range-checked and
 * with a default. The key table in src/config_keys.c is the single source of
 * truth for names, types, ranges, defaults and help text. */
#ifndef CATCHAT_CONFIG_H
#define CATCHAT_CONFIG_H

#include <stdint.h>
#include <stdio.h>
#include "catchat/util.h"

/* Room for one path key's origin text (cc_config.from). */
#define CC_ORIGIN_MAX 320

typedef struct cc_config {
    /* [model] */
    int vocab_size, d_model, n_layers, n_heads, ctx_window, seq_len;
    double rms_eps, rms_floor, inv_rms_max;
    /* [train] */
    int batch_size;
    int grad_accum;         /* micro-batches of batch_size per optimizer step */
    long max_steps, warmup_steps, eval_interval, eval_batches, checkpoint_interval;
    long max_skipped_steps; /* consecutive skipped steps that stop the run (0 = never) */
    int keep_last;          /* periodic checkpoints kept besides the current one */
    int patience;           /* evals of rising eval loss (train loss falling) that mean overfitting */
    int early_stop;         /* 1: stop the run there */
    double lr, lr_min, weight_decay, beta1, beta2, adam_eps, max_grad_norm;
    double grad_h_clamp, ctx_grad_clamp;
    char lr_schedule[12];   /* cosine, linear, constant, wsd */
    double decay_fraction;  /* wsd: the share of the steps after warmup spent decaying */
    uint64_t seed;
    /* [precision] */
    int loss_scale_dynamic; /* 1: GradScaler-style; 0: static loss_scale */
    double loss_scale, init_scale;
    long scale_growth_interval;
    /* [data] */
    char train[CC_PATH_MAX], val[CC_PATH_MAX];
    char data_format[8]; /* auto, text, shard */
    /* [run] */
    char device[8]; /* auto, cpu, gpu */
    int threads;    /* CPU threads for the reference executor, 0 = all cores */
    char out_dir[CC_PATH_MAX];
    /* [gpu]: how the GPU executor runs a step (no effect on the numbers) */
    char gpu_recurrence[16]; /* auto, persistent, per-step */
    char gpu_attention[8];   /* auto (tensor cores where the head size takes them), fp32 */
    int gpu_lanes;           /* 0 = chosen */
    char gpu_wavefront[8];   /* auto, off */
    char gpu_schedule[8];    /* auto, serial: every operation of the step on one stream in program order */
    char gpu_recompute[8];   /* auto, off, on: activations rebuilt in the backward */
    uint64_t gpu_memory_limit; /* bytes the step is planned for, 0 = the device's own memory */
    int gpu_wavefront_chunk; /* timesteps a wavefront chunk, 0 = chosen */
    int gpu_classifier_rows; /* rows of a classifier chunk, 0 = chosen */
    char cuda_graph[8];      /* auto, on, off */
    int lane_trace;
    int gpu_smem_per_block;  /* KB a block may use, 0 = the GPU's */
    char gpu_clusters[8];    /* auto, off */
    char gpu_profile[8];     /* native, sm80, sm86, sm89, sm90, sm100, sm120 */
    int gpu_sm_count;        /* SMs the recurrence may use, 0 = the GPU's */
    double collective_timeout; /* s: a collective waited on this long (and 10x the median step) is a hung rank */
    char allreduce_overlap[8]; /* on, off: the context stream's gradients reduced over ranks during the BPTT */

    /* Not keys: where each path key's value came from, as the error that
     * cannot open it says it ("[data] train = y.txt in configs/a.ini:3,
     * resolved against configs, the config's folder"; "" = the built-in
     * default). Set by cc_config_set and the loaders; read through
     * cc_config_path_origin. Last, so that code comparing the keys of two
     * configs can stop at offsetof(cc_config, from). */
    struct {
        char train[CC_ORIGIN_MAX], val[CC_ORIGIN_MAX], out_dir[CC_ORIGIN_MAX];
    } from;
    /* Not a key: testing aid (the ladder's recompute cases): recompute's
     * layers in this many windows where it divides T (0: the plan's choice).
     * It reaches the GPU executor's plan with the config, so it is that
     * executor's alone (gpu_step_plan_for: gpu_plan_opts). */
    int rc_windows_forced;
    /* Not a key: testing aid (the preflight's miniature, the ladder's model
     * stage): under the wavefront a lane has at most this many pairs of
     * streams, so that a few layers share them as more than
     * GPU_WAVE_STREAMS layers do (0: GPU_WAVE_STREAMS; gpu_plan.h). The
     * planner reads it from the config (gpu_plan_make), so every plan made
     * from a miniature's config shares as the run does. */
    int wave_streams_forced;
} cc_config;

/* Fill every key with its default. */
void cc_config_defaults(cc_config *c);
/* The defaults with docs/model.md's "tiny (tests)" model: D=64, L=2, H=4, W=16,
 * T=32, batch 4 (the shape of configs/tiny.ini, without reading it). */
void cc_config_tiny(cc_config *c);

/* Read an INI file over the current values. 0 on success; on failure one line
 * naming the file, line and key has been printed. A relative path value
 * ([data] train, val, each entry of their lists and globs, [run] out_dir) is
 * taken from the config file's folder: it is joined to the folder the file's
 * path names, each leading "../" of the value taking one folder off it
 * ("configs/a.ini" with "../data/x.txt" gives "data/x.txt"). */
int cc_config_load(cc_config *c, const char *path);
/* The same without the checks that span keys (cc_config_validate): for a
 * caller that applies more keys (--set) and validates the result once. */
int cc_config_load_unchecked(cc_config *c, const char *path);
/* The same for INI text in memory; `origin` names it in errors. Its relative
 * paths stay relative to the current folder (the text has no folder). */
int cc_config_load_string(cc_config *c, const char *text, const char *origin);

/* Apply one "key=value" or "section.key=value" override (from --set). */
int cc_config_set_arg(cc_config *c, const char *assignment);

/* Set one key by section and name from text; `origin` names where the text
 * came from in error messages ("configs/x.ini:12", "--set"). */
int cc_config_set(cc_config *c, const char *section, const char *key, const char *value,
                  const char *origin);

/* Checks that span several keys (n_heads divides d_model, ...). */
int cc_config_validate(const cc_config *c, const char *origin);
/* Settings that are allowed but likely a slip, one "catchat: note:" line
 * each on stderr: [run] threads above this machine's cores (unless the run
 * is on the GPU) and, for a training run, warmup_steps reaching max_steps.
 * Returns how many. */
int cc_config_notes(const cc_config *c, int training);

/* Where the value of path key [section] key came from and what a relative one
 * was resolved against, as one phrase for an error ("--set train=x.txt,
 * resolved against the current folder /home/u"); "" for a key that is not a
 * path. */
void cc_config_path_origin(const cc_config *c, const char *section, const char *key, char *out, size_t cap);

/* An integer as config values and options take it: decimal digits, or a
 * number written with a fraction or an exponent whose value is an exact
 * integer ("1e12", "2.0e3"; not "1.5"). 0, -1 for text that is not an
 * integer, -2 for an integer beyond the range of long long. */
int cc_parse_integer(const char *text, long long *out);

/* The resolved config as INI text, and as a JSON object string (malloc'd).
 * In the JSON a path that is not valid UTF-8 (JSON strings must be) is an
 * object {"hex": "<its bytes in hex>"}, which cc_config_from_json reads back
 * byte for byte. */
void cc_config_print(const cc_config *c, FILE *f);
/* The same INI form holding only the keys whose values differ from the
 * built-in defaults, under their section headers; "(all defaults)" when
 * none does. */
void cc_config_print_changed(const cc_config *c, FILE *f);
char *cc_config_to_json(const cc_config *c);
/* Apply a JSON object {section: {key: value}} as produced by cc_config_to_json. */
int cc_config_from_json(cc_config *c, const char *json, const char *origin);

/* The keys of `section` whose values differ between a and b, written as
 * "key a-value (stored b-value), ..." into out; returns how many differ. */
int cc_config_section_diff(const cc_config *a, const cc_config *b, const char *section, char *out, size_t cap);
/* Copy every key of `section` from src to dst. */
void cc_config_copy_section(cc_config *dst, const cc_config *src, const char *section);

/* Walk the key table (for docs and --help): returns 0 past the end. */
int cc_config_key_info(int index, const char **section, const char **key,
                       const char **default_text, const char **help);

#endif
