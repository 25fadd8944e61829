/* INI configuration (docs/formats.md). One table below lists every key with its
 * section, type, range, default and help; loading, --set, printing, JSON and
 * the docs all walk that table. */
#define _POSIX_C_SOURCE 200809L
#include "catchat/config.h"
#include "catchat/layout.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "catchat/version.h"

typedef enum { K_INT, K_LONG, K_REAL, K_U64, K_PATH, K_CHOICE, K_SCALE, K_BYTES } key_type;

typedef struct {
    const char *section, *key;
    key_type type;
    size_t offset;
    double min, max; /* K_BYTES: min is the least size other than 0, max unused */
    const char *def;
    const char *help;
    const char *choices; /* K_CHOICE: the values allowed, '|'-separated (stored as text) */
} key_spec;

#define OFF(f) offsetof(cc_config, f)
static const key_spec KEYS[] = {
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
#define NKEYS ((int)(sizeof(KEYS) / sizeof(KEYS[0])))
_Static_assert(sizeof(KEYS) / sizeof(KEYS[0]) <= 64, "ini_state.seen holds 64 keys");

static const key_spec *find_key(const char *section, const char *key)
{
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(KEYS[i].key, key) == 0 && (!section || strcmp(KEYS[i].section, section) == 0))
            return &KEYS[i];
    return NULL;
}

static int section_exists(const char *section)
{
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(KEYS[i].section, section) == 0) return 1;
    return 0;
}

static int parse_real(const char *v, double *out)
{
    if (!*v) return -1;
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (*end || errno == ERANGE || !isfinite(x)) return -1;
    *out = x;
    return 0;
}

/* An integer written with a fraction or an exponent ("1e12", "2.5e3",
 * "3.0"), taken exactly from its digits (a double would round past 2^53):
 * the digits d of the mantissa and the exponent e, with the point moved,
 * make d x 10^e; it is an integer when every digit the point leaves behind
 * is 0. 0, -1 not such an integer, -2 beyond long long. */
static int parse_scientific_integer(const char *v, long long *out)
{
    const char *p = v;
    const int negative = *p == '-';
    if (*p == '-' || *p == '+') p++;
    const char *digits = p;
    while (isdigit((unsigned char)*p)) p++;
    const char *int_end = p, *frac = p, *frac_end = p;
    if (*p == '.') {
        frac = ++p;
        while (isdigit((unsigned char)*p)) p++;
        frac_end = p;
    }
    if (int_end == digits && frac_end == frac) return -1; /* no digit at all */
    long exp10 = 0;
    if (*p == 'e' || *p == 'E') {
        p++;
        const int exp_negative = *p == '-';
        if (*p == '-' || *p == '+') p++;
        if (!isdigit((unsigned char)*p)) return -1;
        for (; isdigit((unsigned char)*p); p++)
            if (exp10 < 100000) exp10 = exp10 * 10 + (*p - '0'); /* past that only 0 can be in range */
        if (exp_negative) exp10 = -exp10;
    }
    if (*p) return -1;
    /* the mantissa's digits in order, the point after the integer part */
    char mant[128];
    size_t n = 0;
    for (const char *q = digits; q < frac_end; q++) {
        if (*q == '.') continue;
        if (n == 0 && *q == '0') continue; /* leading zeros say nothing */
        if (n == sizeof(mant)) return -1;  /* not a number anyone writes for a count */
        mant[n++] = *q;
    }
    exp10 -= (long)(frac_end - frac);
    while (n && exp10 < 0 && mant[n - 1] == '0') n--, exp10++; /* trailing zeros after the point */
    if (n == 0) { /* zero, however written */
        *out = 0;
        return 0;
    }
    if (exp10 < 0) return -1; /* a digit other than 0 after the point */
    unsigned long long x = 0;
    const unsigned long long limit = negative ? (unsigned long long)LLONG_MAX + 1 : (unsigned long long)LLONG_MAX;
    for (size_t i = 0; i < n + (size_t)(exp10 > 40 ? 40 : exp10); i++) {
        const unsigned d = i < n ? (unsigned)(mant[i] - '0') : 0;
        if (x > (limit - d) / 10) return -2;
        x = x * 10 + d;
    }
    if (exp10 > 40) return -2; /* a non-zero mantissa times 10^41 or more */
    *out = negative ? (long long)(0 - x) : (long long)x;
    return 0;
}

int cc_parse_integer(const char *v, long long *out)
{
    if (!*v) return -1;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*end && errno != ERANGE) {
        *out = x;
        return 0;
    }
    if (!*end) return -2; /* digits only, past long long */
    return parse_scientific_integer(v, out);
}

/* A byte size: digits, optionally a '.' and more digits, then optionally a
 * unit K, M, G or T (any case, 1024-based) with 'B' or 'iB' after it if
 * wanted ("10G", "24GiB", "1.5g", "512MB", "123456789"); blanks around it
 * and before the unit are allowed. The fraction is taken exactly (no
 * double in between) and rounded to the nearest byte. */
typedef enum { BYTES_OK, BYTES_SYNTAX, BYTES_NEGATIVE, BYTES_OVERFLOW } bytes_status;

static bytes_status parse_bytes(const char *v, uint64_t *out)
{
    while (isspace((unsigned char)*v)) v++;
    const char *end = v + strlen(v);
    while (end > v && isspace((unsigned char)end[-1])) end--;
    const char *p = v;
    const int negative = p < end && *p == '-';
    if (negative) p++;
    const char *whole = p, *frac = NULL, *frac_end = NULL;
    while (p < end && isdigit((unsigned char)*p)) p++;
    const char *whole_end = p;
    if (whole_end == whole) return BYTES_SYNTAX;
    if (p < end && *p == '.') {
        frac = ++p;
        while (p < end && isdigit((unsigned char)*p)) p++;
        frac_end = p;
        if (frac_end == frac) return BYTES_SYNTAX;
    }
    while (p < end && (*p == ' ' || *p == '\t')) p++;
    int shift = 0;
    static const char units[] = "KMGT";
    const char *u = p < end ? strchr(units, toupper((unsigned char)*p)) : NULL;
    if (u) {
        shift = 10 * (int)(u - units + 1);
        p++;
        if (p < end && tolower((unsigned char)*p) == 'i') {
            p++;
            if (p == end || tolower((unsigned char)*p) != 'b') return BYTES_SYNTAX;
        }
    }
    if (p < end && tolower((unsigned char)*p) == 'b') p++;
    if (p != end) return BYTES_SYNTAX;
    if (negative) return BYTES_NEGATIVE;
    uint64_t n = 0;
    for (const char *q = whole; q < whole_end; q++) {
        const unsigned d = (unsigned)(*q - '0');
        if (n > (UINT64_MAX - d) / 10) return BYTES_OVERFLOW;
        n = n * 10 + d;
    }
    if (n > UINT64_MAX >> shift) return BYTES_OVERFLOW;
    n <<= shift;
    if (frac) {
        /* 0.d1d2...dk times the unit, from the last digit: what carries past
         * the point is whole bytes, the digit left at d1 rounds them */
        const uint64_t unit = (uint64_t)1 << shift;
        uint64_t carry = 0, first = 0;
        for (const char *q = frac_end; q > frac; q--) {
            const uint64_t prod = (uint64_t)(q[-1] - '0') * unit + carry;
            first = prod % 10;
            carry = prod / 10;
        }
        carry += first >= 5;
        if (carry > UINT64_MAX - n) return BYTES_OVERFLOW;
        n += carry;
    }
    *out = n;
    return BYTES_OK;
}

/* A byte size in the shortest form parse_bytes reads back exactly: the
 * largest unit it is a whole number of ("10G", "1536M"), else bytes. */
static void format_bytes(char *buf, size_t cap, uint64_t n)
{
    static const char units[] = "TGMK";
    for (int i = 0; n && i < 4; i++) {
        const int shift = 10 * (4 - i);
        if (n % ((uint64_t)1 << shift) == 0) {
            snprintf(buf, cap, "%llu%c", (unsigned long long)(n >> shift), units[i]);
            return;
        }
    }
    snprintf(buf, cap, "%llu", (unsigned long long)n);
}

/* Where path key k keeps its origin text (cc_config.from). */
static size_t from_offset(const key_spec *k)
{
    return k->offset == OFF(train) ? OFF(from.train) : k->offset == OFF(val) ? OFF(from.val) : OFF(from.out_dir);
}
_Static_assert(OFF(from) > OFF(out_dir), "cc_config.from follows every key");

/* [data] train and val are lists: comma-separated paths or globs. */
static int is_list(const key_spec *k) { return k->offset == OFF(train) || k->offset == OFF(val); }

/* Parse `v` into key `k`. On failure writes "[section] key: why" into msg. */
#define FAIL(...) (snprintf(msg, cap, __VA_ARGS__), -1)
static int set_spec(cc_config *c, const key_spec *k, const char *v, char *msg, size_t cap)
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
        switch (parse_bytes(v, &u)) {
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
            format_bytes(least, sizeof(least), (uint64_t)k->min);
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
        if (parse_real(v, &r) != 0)
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
                        is_list(k) ? " (a glob such as dir/train_*.bin names many files in a few bytes)" : "");
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
static int set_quiet(cc_config *c, const char *section, const char *key, const char *value,
                     char *msg, size_t cap)
{
    if (!*section) return FAIL("key '%s' is outside any section (put it under [model], [train], ...)", key);
    if (!section_exists(section))
        return FAIL("unknown section [%s] (key '%s')", section, key);
    const key_spec *k = find_key(section, key);
    if (!k) return FAIL("unknown key '%s' in section [%s]", key, section);
    return set_spec(c, k, value, msg, cap);
}
#undef FAIL

/* ---- Where a path value came from (cc_config.from) ---- */

/* The current folder, for messages; "." where it cannot be named. */
static void current_folder(char *buf, size_t cap)
{
    if (!getcwd(buf, cap)) snprintf(buf, cap, ".");
}

/* Whether a path value (any entry of a [data] list) is relative. */
static int has_relative(const key_spec *k, const char *v)
{
    if (!is_list(k)) return *v && *v != '/';
    for (const char *p = v;;) {
        p += strspn(p, " \t");
        const size_t n = strcspn(p, ",");
        if (n && *p != '/') return 1;
        if (!p[n]) return 0;
        p += n + 1;
    }
}

/* Say where path key k's value came from into out: `how` ("--set
 * train=x.txt") and, where the value as written (`raw`) is relative, what it
 * was taken from: the config's folder `dir`, or the current folder (dir
 * NULL, or "" for a config in the current folder). */
static void describe_from(char *out, size_t cap, const key_spec *k, const char *how, const char *raw, const char *dir)
{
    char here[CC_PATH_MAX];
    if (!has_relative(k, raw)) {
        snprintf(out, cap, "%s", how);
    } else if (dir && *dir) {
        snprintf(out, cap, "%s, resolved against %s (the config's folder)", how, dir);
    } else {
        current_folder(here, sizeof(here));
        snprintf(out, cap, "%s, resolved against %s (the current folder%s)", how, here, dir ? ", which holds the config" : "");
    }
}

/* The same, kept in c's origin field of path key k. */
static void note_from(cc_config *c, const key_spec *k, const char *how, const char *raw, const char *dir)
{
    if (k->type == K_PATH) describe_from((char *)c + from_offset(k), CC_ORIGIN_MAX, k, how, raw, dir);
}

/* A value as a message shows it: long ones cut, saying so. */
#define SHOWN_MAX 120
#define SHOWN(v) SHOWN_MAX, (v), strlen(v) > SHOWN_MAX ? "..." : ""

void cc_config_path_origin(const cc_config *c, const char *section, const char *key, char *out, size_t cap)
{
    const key_spec *k = find_key(section, key);
    if (cap) out[0] = 0;
    if (!k || k->type != K_PATH) return;
    const char *from = (const char *)c + from_offset(k);
    if (*from) {
        snprintf(out, cap, "%s", from);
        return;
    }
    char how[64];
    snprintf(how, sizeof(how), "the default [%s] %s", k->section, k->key);
    describe_from(out, cap, k, how, (const char *)c + k->offset, NULL);
}

int cc_config_set(cc_config *c, const char *section, const char *key, const char *value,
                  const char *origin)
{
    char msg[512];
    if (set_quiet(c, section, key, value, msg, sizeof(msg)) != 0)
        return cc_error("%s: %s", origin, msg);
    const key_spec *k = find_key(section, key);
    if (k->type == K_PATH) {
        char how[CC_ORIGIN_MAX];
        if (strcmp(origin, "--set") == 0) snprintf(how, sizeof(how), "--set %s=%.*s%s", key, SHOWN(value));
        else snprintf(how, sizeof(how), "[%s] %s = %.*s%s from %s", section, key, SHOWN(value), origin);
        note_from(c, k, how, value, NULL);
    }
    return 0;
}

void cc_config_defaults(cc_config *c)
{
    char msg[512];
    memset(c, 0, sizeof(*c));
    for (int i = 0; i < NKEYS; i++) set_spec(c, &KEYS[i], KEYS[i].def, msg, sizeof(msg));
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

/* ---- Relative paths in a config file: taken from the file's folder ---- */

/* Add one component to the path out (len bytes used, cap the room): "" and
 * "." add nothing; ".." takes the last component off where there is a name
 * to take (and stays "/" at the root); anything else is appended after a
 * '/'. Lexical: a symbolic link is not followed, as the user reads the path.
 * -1 when out is full. */
static int push_component(char *out, size_t *len, size_t cap, const char *comp, size_t n)
{
    if (n == 0 || (n == 1 && comp[0] == '.')) return 0;
    if (n == 2 && comp[0] == '.' && comp[1] == '.') {
        size_t start = *len;
        while (start && out[start - 1] != '/') start--;
        const size_t last = *len - start;
        if (last && !(last == 2 && out[start] == '.' && out[start + 1] == '.')) {
            *len = start == 1 && out[0] == '/' ? 1 : start ? start - 1 : 0;
            out[*len] = 0;
            return 0;
        }
        if (*len == 1 && out[0] == '/') return 0; /* the root's parent is the root */
    }
    const size_t sep = *len && out[*len - 1] != '/';
    if (*len + sep + n >= cap) return -1;
    if (sep) out[(*len)++] = '/';
    memcpy(out + *len, comp, n);
    *len += n;
    out[*len] = 0;
    return 0;
}

/* The folder of the config file `path` as its path names it, tidied
 * ("./configs/a.ini" gives "configs", "a.ini" gives ""); -1 if too long. */
static int config_dir(const char *path, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    const char *slash = strrchr(path, '/');
    if (!slash) return 0;
    if (*path == '/') out[len++] = '/', out[len] = 0;
    for (const char *p = path; p < slash;) {
        const char *e = p;
        while (e < slash && *e != '/') e++;
        if (push_component(out, &len, cap, p, (size_t)(e - p)) != 0) return -1;
        p = e + 1;
    }
    return 0;
}

/* Append to out the path e (n bytes) taken from the folder dir: an absolute
 * one as it is; a relative one joined to dir, its leading "./" and "../"
 * applied to dir ("configs" and "../data/x" give "data/x"), the rest as
 * written. -1 when out (cap bytes) is full. */
static int join_entry(const char *dir, const char *e, size_t n, char *out, size_t *len, size_t cap)
{
    char joined[CC_PATH_MAX];
    size_t jl = strlen(dir);
    if (*e == '/') {
        if (*len + n >= cap) return -1;
        memcpy(out + *len, e, n);
        *len += n;
        out[*len] = 0;
        return 0;
    }
    if (jl >= sizeof(joined)) return -1;
    memcpy(joined, dir, jl + 1);
    const char *p = e, *end = e + n;
    while (p < end) { /* the leading "." and ".." components */
        const char *q = p;
        while (q < end && *q != '/') q++;
        const size_t m = (size_t)(q - p);
        const int dots = m == 0 || (m == 1 && *p == '.') || (m == 2 && p[0] == '.' && p[1] == '.');
        if (!dots) break;
        if (push_component(joined, &jl, sizeof(joined), p, m) != 0) return -1;
        p = q < end ? q + 1 : q;
    }
    if (p < end && push_component(joined, &jl, sizeof(joined), p, (size_t)(end - p)) != 0) return -1;
    if (!jl) joined[jl++] = '.', joined[jl] = 0; /* "configs" and ".." */
    if (*len + jl >= cap) return -1;
    memcpy(out + *len, joined, jl + 1);
    *len += jl;
    return 0;
}

/* Path key k's value v as read from a config file in the folder dir (not
 * ""): every relative path of it (each entry of a [data] list, globs too)
 * joined to dir. -1 when the result does not fit out. */
static int resolve_in_dir(const key_spec *k, const char *dir, const char *v, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    if (!is_list(k)) return join_entry(dir, v, strlen(v), out, &len, cap);
    for (const char *p = v;;) {
        p += strspn(p, " \t"); /* the blanks after a comma, which the loader drops too */
        const size_t n = strcspn(p, ",");
        if (n && join_entry(dir, p, n, out, &len, cap) != 0) return -1;
        if (!p[n]) return 0;
        if (len + 1 >= cap) return -1;
        out[len++] = ',';
        out[len] = 0;
        p += n + 1;
    }
}

/* ---- The INI reader ---- */

/* inih tells the handler nothing about lines (Debian builds it without
 * INI_HANDLER_LINENO), so the text is fed to it line by line through a reader
 * that counts lines: the handler then knows the line it is called for, which
 * names the line of a bad value and both lines of a duplicated key. The reader
 * also catches what inih only reports as a bare line number: a section header
 * without its ']'. Values do not continue over indented lines (inih's
 * multi-line values): every line stands alone.
 *
 * Comments are the reader's too. inih's options are fixed when it is built,
 * and Debian's ends a value only at a ';' after a blank: a '#' after a value
 * would be part of it (a path "runs/x # where"), and inih drops anything
 * after a header's first ']' ("[train]]" would read as "[train]"). So the
 * reader cuts the line at the first '#' or ';' that follows a blank, checks
 * the header itself, and inih sees only what is left.
 *
 * Long lines are the reader's as well. inih's line buffer is fixed when it is
 * built (198 bytes and no growing, as Debian builds it), too short for a list
 * of shards. A "key = value" line longer than that reaches inih as "key = -"
 * while the reader keeps the value, cut and trimmed as inih would, for the
 * handler to take instead; a line may hold up to INI_LINE_MAX bytes. */
#define INI_LINE_MAX 65536

typedef struct {
    cc_config *c;
    const char *text;   /* what is left to read */
    const char *origin; /* the file's name, in errors and in cc_config.from */
    const char *dir;    /* the file's folder, for relative paths; NULL for text in memory */
    int line;           /* line the handler is called for */
    int seen[64];       /* line where each key of KEYS was set, 0 = not yet */
    char *long_value;   /* the value of line long_line, too long for inih's buffer */
    int long_line;
    char msg[512];
    int failed;         /* line of the first failure, 0 = none */
} ini_state;

#define INI_FAIL(st, ln, ...) ((st)->failed = (ln), snprintf((st)->msg, sizeof((st)->msg), __VA_ARGS__))

/* Cut s at its inline comment: the first '#' or ';' after a blank. One at
 * the start of the line is a whole-line comment, which inih skips; one
 * after any other character is part of the value ("data/run#3"). */
static void cut_inline_comment(char *s)
{
    if (*s == '#' || *s == ';') return;
    for (char *p = s; *p; p++)
        if ((*p == '#' || *p == ';') && p > s && (p[-1] == ' ' || p[-1] == '\t')) {
            *p = 0;
            return;
        }
}

/* A header line is '[', a name, ']' and nothing after it but blanks (its
 * comment is already cut). Blanks around the name go, as most INI readers
 * drop them: "[ train ]" is "[train]". Anything else is refused, naming the
 * line as written, rather than read as some section. */
static void check_header(ini_state *st, char *s)
{
    size_t n = strlen(s);
    while (n && strchr(" \t\r\n", s[n - 1])) n--;
    s[n] = 0;
    const char *close = strchr(s, ']');
    const char *why = !close ? "expected '[name]'"
                      : close != s + n - 1 ? "only a comment may follow the ']'"
                                           : NULL;
    const char *name = s + 1;
    size_t len = close ? (size_t)(close - name) : 0;
    while (len && (*name == ' ' || *name == '\t')) name++, len--;
    while (len && (name[len - 1] == ' ' || name[len - 1] == '\t')) len--;
    if (!why && !len) why = "the section has no name";
    if (why) {
        if (!st->failed) INI_FAIL(st, st->line, "malformed section header '%.200s' (%s)", s, why);
        return;
    }
    memmove(s + 1, name, len);
    s[len + 1] = ']';
    s[len + 2] = 0;
}

/* Hand inih (its buffer str, num bytes) the line s, which does not fit it:
 * a "key = value" line as "key = -", its value kept for the handler. */
static void set_aside(ini_state *st, const char *s, char *str, size_t num)
{
    const char *eq = strpbrk(s, "=:"); /* inih's delimiters */
    str[0] = 0;
    if (*s == '#' || *s == ';') { /* a whole-line comment, which inih skips */
        snprintf(str, num, "#");
    } else if (*s == '[') {
        if (!st->failed) INI_FAIL(st, st->line, "section header longer than %zu bytes", num - 3);
    } else if (!eq) { /* inih's own syntax error, at this line */
        snprintf(str, num, "%.*s", (int)(num - 1), s);
    } else if ((size_t)(eq - s) + 4 > num) {
        if (!st->failed) INI_FAIL(st, st->line, "key longer than %zu bytes", num - 5);
    } else {
        const char *v = eq + 1;
        size_t n = strlen(v);
        while (n && isspace((unsigned char)*v)) v++, n--;
        while (n && isspace((unsigned char)v[n - 1])) n--;
        free(st->long_value);
        st->long_value = cc_malloc(n + 1);
        memcpy(st->long_value, v, n);
        st->long_value[n] = 0;
        st->long_line = st->line;
        snprintf(str, num, "%.*s= -", (int)(eq - s), s);
    }
}

static char *ini_read_line(char *str, int num, void *user)
{
    ini_state *st = user;
    if (!*st->text) return NULL;
    const char *nl = strchr(st->text, '\n');
    const size_t len = nl ? (size_t)(nl - st->text) + 1 : strlen(st->text);
    const char *line = st->text;
    st->text += len;
    st->line++;
    /* Leading blanks go: inih would take an indented line for the continuation
     * of the key above it, and report a key set twice or a strange value. */
    size_t skip = 0;
    while (skip < len && (line[skip] == ' ' || line[skip] == '\t')) skip++;
    const size_t n = len - skip;
    if (n > INI_LINE_MAX) {
        if (!st->failed) INI_FAIL(st, st->line, "line longer than %d bytes", INI_LINE_MAX);
        str[0] = 0;
        return str;
    }
    char *s = n < (size_t)num ? str : cc_malloc(n + 1);
    memcpy(s, line + skip, n);
    s[n] = 0;
    cut_inline_comment(s);
    if (*s == '[') check_header(st, s);
    if (s != str) {
        if (strlen(s) < (size_t)num) strcpy(str, s); /* what is left after the comment fits */
        else set_aside(st, s, str, (size_t)num);
        free(s);
    }
    return str;
}

static int ini_apply(void *user, const char *section, const char *name, const char *value)
{
    ini_state *st = user;
    if (st->failed) return 1; /* only the first failure is reported */
    if (st->long_value && st->long_line == st->line) value = st->long_value;
    const key_spec *k = section_exists(section) ? find_key(section, name) : NULL;
    if (k) {
        const int i = (int)(k - KEYS);
        if (st->seen[i]) {
            INI_FAIL(st, st->line, "[%s] %s is set twice (first at line %d): keep one", section, name, st->seen[i]);
            return 0;
        }
        st->seen[i] = st->line;
    }
    const char *raw = value;
    char resolved[CC_PATH_MAX];
    if (k && k->type == K_PATH && st->dir && *st->dir && *value && strlen(value) < CC_PATH_MAX) {
        if (resolve_in_dir(k, st->dir, value, resolved, sizeof(resolved)) != 0) {
            INI_FAIL(st, st->line, "[%s] %s: path longer than %d bytes once taken from the config's folder %s%s",
                     section, name, CC_PATH_MAX - 1, st->dir,
                     is_list(k) ? " (a glob such as dir/train_*.bin names many files in a few bytes)" : "");
            return 0;
        }
        value = resolved;
    }
    if (set_quiet(st->c, section, name, value, st->msg, sizeof(st->msg)) != 0) {
        st->failed = st->line;
        return 0;
    }
    if (k && k->type == K_PATH) {
        char how[CC_ORIGIN_MAX];
        snprintf(how, sizeof(how), "[%s] %s = %.*s%s in %s:%d", section, name, SHOWN(raw), st->origin, st->line);
        note_from(st->c, k, how, raw, st->dir);
    }
    return 1;
}

/* Read INI text over *c; `dir` is the folder relative paths are taken from
 * (NULL: the current folder). */
static int load_text(cc_config *c, const char *text, const char *origin, const char *dir, int validate)
{
    /* Apply to a copy: a config that fails leaves the caller's untouched. */
    cc_config work = *c;
    ini_state st = { .c = &work, .text = text, .origin = origin, .dir = dir };
    const int rc = ini_parse_stream(ini_read_line, &st, ini_apply, &st);
    free(st.long_value);
    /* the earliest line wins: inih's own syntax error or the handler's */
    if (rc > 0 && (!st.failed || rc < st.failed))
        return cc_error("%s:%d: syntax error (expected 'key = value' or '[section]'; comments start with '#' "
                        "or ';' at the start of a line or after a blank)", origin, rc);
    if (st.failed) return cc_error("%s:%d: %s", origin, st.failed, st.msg);
    if (rc != 0) return cc_error("%s: cannot be parsed", origin);
    if (validate && cc_config_validate(&work, origin) != 0) return -1;
    *c = work;
    return 0;
}

int cc_config_load_string(cc_config *c, const char *text, const char *origin)
{
    return load_text(c, text, origin, NULL, 1);
}

int cc_config_load_unchecked(cc_config *c, const char *path)
{
    char dir[CC_PATH_MAX];
    if (config_dir(path, dir, sizeof(dir)) != 0)
        return cc_error("config '%s': its folder's path is longer than %d bytes", path, CC_PATH_MAX - 1);
    size_t len;
    char *text = (char *)cc_read_file_what(path, "config", &len); /* refuses a directory, names the path */
    if (!text) return -1;
    if (memchr(text, 0, len)) {
        free(text);
        return cc_error("config '%s' is not a text file (it holds NUL bytes)", path);
    }
    const int rc = load_text(c, text, path, dir, 0);
    free(text);
    return rc;
}

int cc_config_load(cc_config *c, const char *path)
{
    cc_config work = *c;
    if (cc_config_load_unchecked(&work, path) != 0 || cc_config_validate(&work, path) != 0) return -1;
    *c = work;
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
    const key_spec *k = find_key(NULL, name);
    if (!k) return cc_error("--set: unknown key '%s' (see 'catchat help config')", name);
    return cc_config_set(c, k->section, k->key, value, "--set");
}

int cc_config_validate(const cc_config *c, const char *origin)
{
    if (c->d_model % c->n_heads != 0)
        return cc_error("%s: [model] n_heads = %d does not divide d_model = %d", origin, c->n_heads,
                        c->d_model);
    if (c->lr_min > c->lr)
        return cc_error("%s: [train] lr = %g is below lr_min = %g: the schedule decays from lr to lr_min, "
                        "so set lr_min <= lr", origin, c->lr, c->lr_min);
    return 0;
}

int cc_config_notes(const cc_config *c, int training)
{
    int n = 0;
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (strcmp(c->device, "gpu") != 0 && cores > 0 && c->threads > cores) {
        fprintf(stderr, "catchat: note: [run] threads = %d is more than the %ld cores of this machine: the CPU "
                        "reference's threads will share cores and run slower (0 = all cores)\n", c->threads, cores);
        n++;
    }
    if (training && c->warmup_steps >= c->max_steps) {
        fprintf(stderr, "catchat: note: [train] warmup_steps = %ld is not below max_steps = %ld: the whole run is "
                        "warmup, the learning rate %s and never decays to lr_min\n", c->warmup_steps, c->max_steps,
                c->warmup_steps > c->max_steps ? "never reaches lr" : "reaches lr at the last step");
        n++;
    }
    return n;
}

/* The value of a key as text, as it would be written in an INI file. */
static void value_text(const cc_config *c, const key_spec *k, char *buf, size_t cap)
{
    const char *base = (const char *)c + k->offset;
    switch (k->type) {
    case K_INT: snprintf(buf, cap, "%d", *(const int *)base); break;
    case K_LONG: snprintf(buf, cap, "%ld", *(const long *)base); break;
    case K_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)base); break;
    case K_BYTES: format_bytes(buf, cap, *(const uint64_t *)base); break;
    case K_SCALE:
        if (c->loss_scale_dynamic) { snprintf(buf, cap, "dynamic"); break; }
        /* fallthrough */
    case K_REAL: cc_format_real(buf, cap, *(const double *)base); break;
    case K_PATH:
    case K_CHOICE: snprintf(buf, cap, "%s", base); break;
    }
}

void cc_config_print(const cc_config *c, FILE *f)
{
    const char *section = "";
    char buf[CC_PATH_MAX + 8];
    for (int i = 0; i < NKEYS; i++) {
        if (strcmp(section, KEYS[i].section) != 0) {
            section = KEYS[i].section;
            fprintf(f, "%s[%s]\n", i ? "\n" : "", section);
        }
        value_text(c, &KEYS[i], buf, sizeof(buf));
        fprintf(f, "%s = %s\n", KEYS[i].key, buf);
    }
}

void cc_config_print_changed(const cc_config *c, FILE *f)
{
    cc_config def;
    cc_config_defaults(&def);
    const char *section = "";
    int n = 0;
    char buf[CC_PATH_MAX + 8], was[CC_PATH_MAX + 8];
    for (int i = 0; i < NKEYS; i++) {
        value_text(c, &KEYS[i], buf, sizeof(buf));
        value_text(&def, &KEYS[i], was, sizeof(was));
        if (strcmp(buf, was) == 0) continue;
        if (strcmp(section, KEYS[i].section) != 0) {
            section = KEYS[i].section;
            fprintf(f, "%s[%s]\n", n ? "\n" : "", section);
        }
        fprintf(f, "%s = %s\n", KEYS[i].key, buf);
        n++;
    }
    if (!n) fprintf(f, "(all defaults)\n");
}

/* A path as JSON: a string where it is UTF-8, else {"hex": "<its bytes>"}
 * (JSON strings hold only UTF-8; the bytes are kept whatever they are). */
static json_t *path_to_json(const char *path)
{
    json_t *v = json_string(path);
    if (v) return v;
    char hex[2 * CC_PATH_MAX + 1];
    cc_hex_encode(path, hex, sizeof(hex));
    return json_pack("{s:s}", "hex", hex);
}

/* The path of a {"hex": "..."} object into buf; -1 if val is not one. */
static int path_from_hex(const json_t *val, char *buf, size_t cap)
{
    const json_t *h = json_object_get(val, "hex");
    const char *hex = json_is_string(h) && json_object_size(val) == 1 ? json_string_value(h) : NULL;
    return hex ? cc_hex_decode(hex, buf, cap) : -1;
}

char *cc_config_to_json(const cc_config *c)
{
    json_t *root = json_object();
    char buf[CC_PATH_MAX + 8];
    for (int i = 0; i < NKEYS; i++) {
        const key_spec *k = &KEYS[i];
        json_t *sec = json_object_get(root, k->section);
        if (!sec) {
            sec = json_object();
            json_object_set_new(root, k->section, sec);
        }
        const char *base = (const char *)c + k->offset;
        json_t *v;
        switch (k->type) {
        case K_INT: v = json_integer(*(const int *)base); break;
        case K_LONG: v = json_integer(*(const long *)base); break;
        case K_REAL: v = json_real(*(const double *)base); break;
        case K_SCALE:
            v = c->loss_scale_dynamic ? json_string("dynamic") : json_real(c->loss_scale);
            break;
        case K_PATH: v = path_to_json(base); break;
        default: value_text(c, k, buf, sizeof(buf)); v = json_string(buf); break;
        }
        /* a key left out would read back as its default: a stored config holds every key or none */
        if (!v || json_object_set_new(sec, k->key, v) != 0) {
            json_decref(root);
            cc_error("the config cannot be written as JSON ([%s] %s)", k->section, k->key);
            return NULL;
        }
    }
    char *s = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(root);
    return s;
}

/* A stored value as the text cc_config_set takes (k NULL for a key this
 * catchat does not know); -1 for a JSON type that no key of its kind has. */
static int stored_text(const key_spec *k, const json_t *val, char *buf, size_t cap)
{
    if (json_is_object(val) && k && k->type == K_PATH) return path_from_hex(val, buf, CC_PATH_MAX);
    if (json_is_string(val)) snprintf(buf, cap, "%s", json_string_value(val));
    else if (json_is_integer(val)) snprintf(buf, cap, "%lld", (long long)json_integer_value(val));
    else if (json_is_real(val)) cc_format_real(buf, cap, json_real_value(val));
    else return -1;
    return 0;
}

int cc_config_from_json(cc_config *c, const char *json, const char *origin)
{
    json_error_t err;
    json_t *root = json_loads(json, 0, &err);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return cc_error("%s: config is not a JSON object (%s)", origin, err.text);
    }
    int rc = 0;
    const char *sname, *kname;
    json_t *sec, *val;
    json_object_foreach(root, sname, sec) {
        if (!json_is_object(sec)) { rc = cc_error("%s: config section '%s' is not an object", origin, sname); break; }
        json_object_foreach(sec, kname, val) {
            char buf[CC_PATH_MAX + 8];
            const key_spec *k = find_key(sname, kname);
            if ((rc = stored_text(k, val, buf, sizeof(buf))) != 0) {
                cc_error("%s: config key %s.%s %s", origin, sname, kname,
                         k && k->type == K_PATH ? "is neither a string nor {\"hex\": \"<the path's bytes in hex>\"}"
                                                : "has an unsupported JSON type");
                break;
            }
            /* a stored config is a record, not the user's input: a key of a newer catchat that does not
             * shape the model is passed over with a note, and an old spelling is read as today's */
            if (!k && strcmp(sname, "model") != 0) {
                fprintf(stderr, "catchat: note: %s: stored config key [%s] %s is not known to this catchat (%s): "
                                "passed over\n", origin, sname, kname, cc_version());
                continue;
            }
            if (strcmp(sname, "gpu") == 0 && strcmp(kname, "recurrence") == 0 && strcmp(buf, "stepwise") == 0)
                snprintf(buf, sizeof(buf), "per-step");
            if ((rc = cc_config_set(c, sname, kname, buf, origin)) != 0) break;
            if (k && k->type == K_PATH)
                snprintf((char *)c + from_offset(k), CC_ORIGIN_MAX, "the [%s] %s stored in %s", sname, kname, origin);
        }
        if (rc) break;
    }
    json_decref(root);
    return rc ? rc : cc_config_validate(c, origin);
}

int cc_config_section_diff(const cc_config *a, const cc_config *b, const char *section, char *out, size_t cap)
{
    int n = 0;
    size_t used = 0;
    if (cap) out[0] = 0;
    for (int i = 0; i < NKEYS; i++) {
        if (strcmp(KEYS[i].section, section) != 0) continue;
        char va[CC_PATH_MAX + 8], vb[CC_PATH_MAX + 8];
        value_text(a, &KEYS[i], va, sizeof(va));
        value_text(b, &KEYS[i], vb, sizeof(vb));
        if (strcmp(va, vb) == 0) continue;
        if (used < cap) used += (size_t)snprintf(out + used, cap - used, "%s%s %s (stored %s)", n ? ", " : "",
                                                 KEYS[i].key, va, vb);
        n++;
    }
    return n;
}

void cc_config_copy_section(cc_config *dst, const cc_config *src, const char *section)
{
    char msg[512], v[CC_PATH_MAX + 8];
    for (int i = 0; i < NKEYS; i++)
        if (strcmp(KEYS[i].section, section) == 0) {
            value_text(src, &KEYS[i], v, sizeof(v));
            set_spec(dst, &KEYS[i], v, msg, sizeof(msg));
            if (KEYS[i].type == K_PATH) memcpy((char *)dst + from_offset(&KEYS[i]), (const char *)src + from_offset(&KEYS[i]), CC_ORIGIN_MAX);
        }
}

int cc_config_key_info(int index, const char **section, const char **key,
                       const char **default_text, const char **help)
{
    if (index < 0 || index >= NKEYS) return 0;
    *section = KEYS[index].section;
    *key = KEYS[index].key;
    *default_text = KEYS[index].def;
    *help = KEYS[index].help;
    return 1;
}
