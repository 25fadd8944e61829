/* The config's keys (docs/config.md): one table lists every key with its
 * section, type, range, default and help, and the INI reader, --set,
 * printing, JSON and the docs all walk it, so that a key is added in one
 * row. Here too is how text becomes a key's value (the setters behind every
 * loader and --set) and the defaults, which are that same text applied. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/layout.h"
#include "config_impl.h"

const key_spec config_keys[] = {
    { "model", "vocab_size", K_INT, OFF(vocab_size), 2, 65536, "256", "token ids are 0..vocab_size-1 (256 = bytes)", NULL },
    { "model", "d_model", K_INT, OFF(d_model), 1, 16384, "512", "width of every stream", NULL },
    { "model", "n_layers", K_INT, OFF(n_layers), 1, CC_MAX_LAYERS, "3", "stacked GRU layers", NULL },
    { "model", "n_heads", K_INT, OFF(n_heads), 1, 1024, "8", "context-stream heads (must divide d_model)", NULL },
    { "model", "ctx_window", K_INT, OFF(ctx_window), 1, 1 << 20, "128", "positions each query reads, itself included", NULL },
    { "model", "seq_len", K_INT, OFF(seq_len), 1, 1 << 20, "512", "positions per training sequence", NULL },
    { "model", "rms_eps", K_REAL, OFF(rms_eps), 0, 1, "1e-6", "added to the mean square", NULL },
    { "model", "rms_floor", K_REAL, OFF(rms_floor), 0, 1, "1e-6", "mean square at or under it: identity", NULL },
    { "model", "inv_rms_max", K_REAL, OFF(inv_rms_max), 1e-30, 1e30, "1000", "cap on the inverse RMS", NULL },
    { "train", "batch_size", K_INT, OFF(batch_size), 1, 1 << 20, "64", "sequences per micro-batch (per GPU under NCCL)", NULL },
    { "train", "grad_accum", K_INT, OFF(grad_accum), 1, 1 << 16, "1", "micro-batches of batch_size per optimizer step: the step's gradient is that of all of them in one batch (the clip, the non-finite skip and the loss scale act on the sum; under NCCL one all-reduce per step)", NULL },
    { "train", "max_steps", K_LONG, OFF(max_steps), 1, 1e12, "1000", "optimizer steps (also the end of the schedule)", NULL },
    { "train", "lr", K_REAL, OFF(lr), 0, 10, "1e-3", "peak learning rate", NULL },
    { "train", "lr_min", K_REAL, OFF(lr_min), 0, 10, "1e-4", "learning rate at max_steps", NULL },
    { "train", "warmup_steps", K_LONG, OFF(warmup_steps), 0, 1e12, "100", "linear warmup steps", NULL },
    { "train", "lr_schedule", K_CHOICE, OFF(lr_schedule), 0, 0, "cosine", "after warmup: cosine or linear from lr to lr_min at max_steps, constant (lr), or wsd (warmup-stable-decay: lr, then linear to lr_min over the last decay_fraction of the steps)", "cosine|linear|constant|wsd" },
    { "train", "decay_fraction", K_REAL, OFF(decay_fraction), 1e-6, 1, "0.2", "wsd: the share of the steps after warmup spent decaying to lr_min", NULL },
    { "train", "weight_decay", K_REAL, OFF(weight_decay), 0, 10, "0.1", "AdamW decoupled decay (2-D tensors only)", NULL },
    { "train", "beta1", K_REAL, OFF(beta1), 0, 0.999999, "0.9", "AdamW first-moment decay", NULL },
    { "train", "beta2", K_REAL, OFF(beta2), 0, 0.99999999, "0.99", "AdamW second-moment decay", NULL },
    { "train", "adam_eps", K_REAL, OFF(adam_eps), 0, 1, "1e-8", "AdamW epsilon", NULL },
    { "train", "max_grad_norm", K_REAL, OFF(max_grad_norm), 0, 1e30, "1.0", "global-norm clip (0 = off)", NULL },
    { "train", "grad_h_clamp", K_REAL, OFF(grad_h_clamp), 0, 1e30, "1000", "unscaled clamp on the per-timestep hidden-state gradient (0 = off)", NULL },
    { "train", "ctx_grad_clamp", K_REAL, OFF(ctx_grad_clamp), 0, 1e30, "0", "unscaled L2 cap per token on the context-stream gradient (0 = off)", NULL },
    { "train", "seed", K_U64, OFF(seed), 0, 0, "1337", "seed of initialisation and data order", NULL },
    { "train", "eval_interval", K_LONG, OFF(eval_interval), 0, 1e12, "100", "steps between evaluations (0 = only at the end)", NULL },
    { "train", "eval_batches", K_LONG, OFF(eval_batches), 1, 1e9, "4", "validation batches per evaluation (of batch_size × grad_accum sequences)", NULL },
    { "train", "max_skipped_steps", K_LONG, OFF(max_skipped_steps), 0, 1e12, "50", "stop with an error after this many skipped steps in a row (0 = never)", NULL },
    { "train", "keep_last", K_INT, OFF(keep_last), 0, 100000, "0", "the N newest periodic checkpoints also kept as checkpoint_step<N>.safetensors (the newest is the one checkpoint.safetensors held at that step; 0 = none); checkpoint_best.safetensors (lowest eval loss) is always kept", NULL },
    { "train", "patience", K_INT, OFF(patience), 0, 100000, "3", "evals in a row whose eval loss rose while the train loss fell before the run warns of overfitting (0 = never)", NULL },
    { "train", "early_stop", K_INT, OFF(early_stop), 0, 1, "0", "1: stop the run (checkpoint written) when the overfitting warning fires", NULL },
    { "train", "checkpoint_interval", K_LONG, OFF(checkpoint_interval), 0, 1e12, "500", "steps between checkpoints (0 = only at the end)", NULL },
    { "precision", "loss_scale", K_SCALE, OFF(loss_scale), 1e-30, 1e30, "1.0", "static loss scale, or 'dynamic' (GradScaler-style)", NULL },
    { "precision", "init_scale", K_REAL, OFF(init_scale), 1e-30, 1e30, "65536", "first scale of the dynamic loss scale", NULL },
    { "precision", "scale_growth_interval", K_LONG, OFF(scale_growth_interval), 1, 1e12, "2000", "clean steps before the dynamic scale doubles", NULL },
    { "data", "train", K_PATH, OFF(train), 0, 0, "data/fortunes/train.txt", "training data: a text file or .bin shard, a glob of them (data/shards/train_*.bin, sorted) or a comma-separated list, read in that order as one dataset (no window spans two files)", NULL },
    { "data", "val", K_PATH, OFF(val), 0, 0, "data/fortunes/val.txt", "validation data: the same forms as train; no file may be in both", NULL },
    { "data", "format", K_CHOICE, OFF(data_format), 0, 0, "auto", "auto (the shard magic number decides; a .bin without it is refused), text or shard", "auto|text|shard" },
    { "run", "device", K_CHOICE, OFF(device), 0, 0, "auto", "auto, cpu or gpu", "auto|cpu|gpu" },
    { "run", "threads", K_INT, OFF(threads), 0, 4096, "0", "CPU threads of the CPU reference (0 = all cores)", NULL },
    { "run", "out_dir", K_PATH, OFF(out_dir), 0, 0, "runs/default", "telemetry, checkpoints and samples go here", NULL },
    { "gpu", "recurrence", K_CHOICE, OFF(gpu_recurrence), 0, 0, "auto", "GRU recurrence kernels: auto (the fastest this GPU and shape take), persistent or per-step (forced, for measuring; persistent splits K over CTAs where one copy of W_hh needs the whole GPU, e.g. D=2048, which auto leaves to per-step)", "auto|persistent|per-step" },
    { "gpu", "attention", K_CHOICE, OFF(gpu_attention), 0, 0, "auto", "context attention kernels: auto (tensor cores: the band kernel at head sizes 64, 128 and 256 with windows up to 129, the tiled one at any other head size up to 256 and any window; FP32 above), tiled (the tiled tensor-core kernel at every shape it runs) or fp32 (the FP32 kernels: the way around a tensor-core kernel the preflight refuses)", "auto|tiled|fp32" },
    { "gpu", "lanes", K_INT, OFF(gpu_lanes), 0, 8, "0", "lanes a step's batch splits into (0 = chosen: up to 4 where the recurrence stays on clusters, 2 under the wavefront or recompute); must divide batch_size (env CATCHAT_GPU_LANES)", NULL },
    { "gpu", "wavefront", K_CHOICE, OFF(gpu_wavefront), 0, 0, "auto", "the step's schedule: auto (the layers' recurrences in a wavefront over time chunks, where the recurrence kernels take it: layer l+1 works on a chunk while layer l is on the next, the BPTT the same top down) or off (one layer after another, for comparing)", "auto|off" },
    { "gpu", "schedule", K_CHOICE, OFF(gpu_schedule), 0, 0, "auto", "auto (each operation of the step on its stream, waiting for the earlier ones whose memory it shares) or serial (every operation on one stream in program order: the same numbers, slower; for finding a schedule bug)", "auto|serial" },
    { "gpu", "wavefront_chunk", K_INT, OFF(gpu_wavefront_chunk), 0, 1 << 20, "0", "timesteps a wavefront chunk (0 = chosen from T and the recurrence kernels; bench prints it); a value sets it, for measuring", NULL },
    { "gpu", "classifier_rows", K_INT, OFF(gpu_classifier_rows), 0, 1 << 24, "0", "rows the classifier runs at a time (its logits [rows, V] in FP16 are the only tensor of size V it holds; 0 = as many as fit 256 MiB over the lanes, or 60 MiB where the step would not fit otherwise under recompute = auto; bench prints it); fewer rows hold less and run slower at large V", NULL },
    { "gpu", "recompute", K_CHOICE, OFF(gpu_recompute), 0, 0, "auto", "activations: auto (rebuild them in the backward only where the step would not fit the device memory, or [gpu] memory_limit), off (keep every layer's activations: fastest) or on (keep each layer's h and rebuild the rest one layer and a window of steps at a time in the backward: least memory); bench and train's first lines say which ran; the CPU reference keeps every activation", "auto|off|on" },
    { "gpu", "memory_limit", K_BYTES, OFF(gpu_memory_limit), 64 << 20, 0, "0", "plan the step as if the GPU had this much memory (e.g. 10G for an RTX 3080, 24G for a 4090; 0 = the device's own): the preflight's fit check, its suggested batch and recompute = auto use it; sizes are powers of 1024 (10G = 10GiB)", NULL },
    { "gpu", "cuda_graph", K_CHOICE, OFF(cuda_graph), 0, 0, "auto", "replay the step as one CUDA graph: auto (where the recurrence's clusters all fit), on or off (env CATCHAT_CUDA_GRAPH=1/0)", "auto|on|off" },
    { "gpu", "profile", K_CHOICE, OFF(gpu_profile), 0, 0, "native", "run as another GPU family would, within this GPU: native, sm80 (A100: 163 KB a block, no clusters, 108 SMs), sm86 (RTX 3090: 99 KB, no clusters, 82 SMs), sm89 (RTX 4090: 99 KB, no clusters, 128 SMs), sm90 (H100/H200: 227 KB, clusters, 132 SMs), sm100 (B200: 227 KB, clusters, 148 SMs) or sm120 (RTX 5090: 99 KB, clusters, 170 SMs); SM counts above this GPU's are capped; the keys below override it", "native|sm80|sm86|sm89|sm90|sm100|sm120" },
    { "gpu", "sm_count", K_INT, OFF(gpu_sm_count), 0, 1 << 16, "0", "size the recurrence's grid for a GPU with this many SMs (0 = this GPU's or the profile's; more than this GPU has is capped)", NULL },
    { "gpu", "smem_per_block", K_INT, OFF(gpu_smem_per_block), 0, 1 << 20, "0", "run as a GPU whose blocks get at most this many KB of shared memory would (0 = this GPU's; 99 = an RTX 3090, 4090 or 5090)", NULL },
    { "gpu", "clusters", K_CHOICE, OFF(gpu_clusters), 0, 0, "auto", "thread-block clusters: auto (where the GPU has them) or off (run as a GPU before sm_90 would)", "auto|off" },
    { "gpu", "collective_timeout", K_REAL, OFF(collective_timeout), 0, 1e9, "60", "data parallelism: a collective that has waited this many seconds and 10x the median step (10x this before three step times are known) is taken for a rank that is alive but hung: the waiting ranks stop with one line naming the step and the collective (0 = never; raise it where a checkpoint write takes longer)", NULL },
    { "gpu", "allreduce_overlap", K_CHOICE, OFF(allreduce_overlap), 0, 0, "on", "data parallelism: on (the context stream's and classifier's gradients are all-reduced over ranks while the BPTT runs, in a one-lane step) or off (every gradient after the backward, for measuring what the overlap hides)", "on|off" },
    { "gpu", "lane_trace", K_INT, OFF(lane_trace), 0, 1, "0", "1: print after each step when each lane's layers ran their recurrence windows and its weight GEMMs ran, under every schedule (env CATCHAT_LANE_TRACE)", NULL },
};
const int config_nkeys = (int)(sizeof(config_keys) / sizeof(config_keys[0]));
_Static_assert(sizeof(config_keys) / sizeof(config_keys[0]) <= CONFIG_KEYS_MAX, "ini_state.seen holds CONFIG_KEYS_MAX keys");

const key_spec *config_find_key(const char *section, const char *key)
{
    for (int i = 0; i < config_nkeys; i++)
        if (strcmp(config_keys[i].key, key) == 0 && (!section || strcmp(config_keys[i].section, section) == 0))
            return &config_keys[i];
    return NULL;
}

int config_section_exists(const char *section)
{
    for (int i = 0; i < config_nkeys; i++)
        if (strcmp(config_keys[i].section, section) == 0) return 1;
    return 0;
}

/* Parse `v` into key `k`. On failure writes "[section] key: why" into msg. */
#define FAIL(...) (snprintf(msg, cap, __VA_ARGS__), -1)
int config_set_spec(cc_config *c, const key_spec *k, const char *v, char *msg, size_t cap)
{
    char *base = (char *)c + k->offset;
    double r;
    long long n;
    switch (k->type) {
    case K_INT:
    case K_LONG:
        switch (cc_parse_integer(v, &n)) {
        case 0: break;
        case -2: return FAIL("[%s] %s: %s is out of range [%.0f, %.0f]", k->section, k->key, v, k->min, k->max);
        default: return FAIL("[%s] %s: '%s' is not an integer", k->section, k->key, v);
        }
        if (n < k->min || n > k->max)
            return FAIL("[%s] %s: %lld is out of range [%.0f, %.0f]", k->section, k->key, n,
                        k->min, k->max);
        if (k->type == K_INT) *(int *)base = (int)n;
        else *(long *)base = (long)n;
        return 0;
    case K_U64: {
        char *end;
        errno = 0;
        unsigned long long u = 0;
        if (*v && *v != '-') u = strtoull(v, &end, 10);
        if (!*v || *v == '-' || *end || errno == ERANGE)
            return FAIL("[%s] %s: '%s' is not an unsigned 64-bit integer", k->section, k->key, v);
        *(uint64_t *)base = u;
        return 0;
    }
    case K_BYTES: {
        uint64_t u = 0;
        char least[32];
        switch (config_parse_bytes(v, &u)) {
        case BYTES_OK: break;
        case BYTES_NEGATIVE: return FAIL("[%s] %s: '%s' is negative", k->section, k->key, v);
        case BYTES_OVERFLOW:
            return FAIL("[%s] %s: '%s' is too large (more than 2^64 - 1 bytes)", k->section, k->key, v);
        default:
            return FAIL("[%s] %s: '%s' is not a byte size (a number with K, M, G or T after it if wanted: "
                        "10G, 24GiB, 512M; 0 = the device's own memory)", k->section, k->key, v);
        }
        /* a size that rounds to 0 bytes is not the 0 that means the device's own memory */
        if ((u && u < k->min) || (!u && strpbrk(v, "123456789"))) {
            config_format_bytes(least, sizeof(least), (uint64_t)k->min);
            return FAIL("[%s] %s: '%s' is below %s, too small to hold any model (0 = the device's own memory)",
                        k->section, k->key, v, least);
        }
        *(uint64_t *)base = u;
        return 0;
    }
    case K_SCALE:
        if (strcmp(v, "dynamic") == 0) {
            c->loss_scale_dynamic = 1;
            return 0;
        }
        /* fallthrough */
    case K_REAL:
        if (config_parse_real(v, &r) != 0)
            return FAIL("[%s] %s: '%s' is not a finite number%s", k->section, k->key, v,
                        k->type == K_SCALE ? " or 'dynamic'" : "");
        if (r < k->min || r > k->max)
            return FAIL("[%s] %s: %s is out of range [%g, %g]", k->section, k->key, v, k->min,
                        k->max);
        if (k->type == K_SCALE) c->loss_scale_dynamic = 0;
        *(double *)base = r;
        return 0;
    case K_PATH:
        if (!*v) return FAIL("[%s] %s: empty path", k->section, k->key);
        if (strlen(v) >= CC_PATH_MAX)
            return FAIL("[%s] %s: path longer than %d bytes%s", k->section, k->key, CC_PATH_MAX - 1,
                        config_is_list(k) ? " (a glob such as dir/train_*.bin names many files in a few bytes)" : "");
        strcpy(base, v);
        return 0;
    case K_CHOICE: {
        const size_t n = strlen(v);
        for (const char *ch = k->choices; *ch;) {
            const size_t len = strcspn(ch, "|");
            if (len == n && strncmp(ch, v, n) == 0) {
                strcpy(base, v);
                return 0;
            }
            ch += len + (ch[len] == '|');
        }
        /* the per-step recurrence's old name: refused, naming the new one */
        if (k->offset == OFF(gpu_recurrence) && strcmp(v, "stepwise") == 0)
            return FAIL("[%s] %s: 'stepwise' is spelled 'per-step'", k->section, k->key);
        char list[128] = "";
        for (const char *ch = k->choices; *ch;) { /* "a|b|c" as "a, b, c" */
            const size_t len = strcspn(ch, "|"), used = strlen(list);
            snprintf(list + used, sizeof(list) - used, "%s%.*s", used ? ", " : "", (int)len, ch);
            ch += len + (ch[len] == '|');
        }
        return FAIL("[%s] %s: '%s' is not one of %s", k->section, k->key, v, list);
    }
    }
    return FAIL("[%s] %s: unsupported key type", k->section, k->key);
}

/* As cc_config_set, but the reason goes into msg instead of stderr. */
int config_set_quiet(cc_config *c, const char *section, const char *key, const char *value,
                     char *msg, size_t cap)
{
    if (!*section) return FAIL("key '%s' is outside any section (put it under [model], [train], ...)", key);
    if (!config_section_exists(section))
        return FAIL("unknown section [%s] (key '%s')", section, key);
    const key_spec *k = config_find_key(section, key);
    if (!k) return FAIL("unknown key '%s' in section [%s]", key, section);
    return config_set_spec(c, k, value, msg, cap);
}
#undef FAIL

int cc_config_set(cc_config *c, const char *section, const char *key, const char *value,
                  const char *origin)
{
    char msg[512];
    if (config_set_quiet(c, section, key, value, msg, sizeof(msg)) != 0)
        return cc_error("%s: %s", origin, msg);
    const key_spec *k = config_find_key(section, key);
    if (k->type == K_PATH) {
        char how[CC_ORIGIN_MAX];
        if (strcmp(origin, "--set") == 0) snprintf(how, sizeof(how), "--set %s=%.*s%s", key, SHOWN(value));
        else snprintf(how, sizeof(how), "[%s] %s = %.*s%s from %s", section, key, SHOWN(value), origin);
        config_note_from(c, k, how, value, NULL);
    }
    return 0;
}

/* Copy s[0..n) without surrounding blanks into out (cap bytes); -1 if too long. */
static int copy_trimmed(char *out, size_t cap, const char *s, size_t n)
{
    while (n && (*s == ' ' || *s == '\t')) s++, n--;
    while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--;
    if (n >= cap) return -1;
    memcpy(out, s, n);
    out[n] = 0;
    return 0;
}

int cc_config_set_arg(cc_config *c, const char *assignment)
{
    const char *eq = strchr(assignment, '=');
    char name[128], value[CC_PATH_MAX + 8];
    if (!eq || copy_trimmed(name, sizeof(name), assignment, (size_t)(eq - assignment)) != 0 || !name[0])
        return cc_error("--set '%s': expected key=value or section.key=value", assignment);
    if (copy_trimmed(value, sizeof(value), eq + 1, strlen(eq + 1)) != 0)
        return cc_error("--set '%s': value longer than %d bytes", assignment, CC_PATH_MAX);
    char *dot = strchr(name, '.');
    if (dot) {
        *dot = 0;
        return cc_config_set(c, name, dot + 1, value, "--set");
    }
    const key_spec *k = config_find_key(NULL, name);
    if (!k) return cc_error("--set: unknown key '%s' (see 'catchat help config')", name);
    return cc_config_set(c, k->section, k->key, value, "--set");
}

void cc_config_defaults(cc_config *c)
{
    char msg[512];
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < config_nkeys; i++)
        config_set_spec(c, &config_keys[i], config_keys[i].def, msg, sizeof(msg));
}

void cc_config_tiny(cc_config *c)
{
    cc_config_defaults(c);
    c->d_model = 64;
    c->n_layers = 2;
    c->n_heads = 4;
    c->ctx_window = 16;
    c->seq_len = 32;
    c->batch_size = 4;
}

void cc_config_copy_section(cc_config *dst, const cc_config *src, const char *section)
{
    char msg[512], v[CC_PATH_MAX + 8];
    for (int i = 0; i < config_nkeys; i++) {
        const key_spec *k = &config_keys[i];
        if (strcmp(k->section, section) != 0) continue;
        config_value_text(src, k, v, sizeof(v));
        config_set_spec(dst, k, v, msg, sizeof(msg));
        if (k->type == K_PATH) memcpy((char *)dst + config_from_offset(k), (const char *)src + config_from_offset(k), CC_ORIGIN_MAX);
    }
}

int cc_config_key_info(int index, const char **section, const char **key,
                       const char **default_text, const char **help)
{
    if (index < 0 || index >= config_nkeys) return 0;
    *section = config_keys[index].section;
    *key = config_keys[index].key;
    *default_text = config_keys[index].def;
    *help = config_keys[index].help;
    return 1;
}
