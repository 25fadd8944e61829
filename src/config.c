/* INI configuration (formats.md). One table below lists every key with its
 * section, type, range, default and help; loading, --set, printing, JSON and
 * the docs all walk that table. */
#define _POSIX_C_SOURCE 200809L
#include "catchat/config.h"
#include "catchat/layout.h"

#include <errno.h>
#include <ini.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

typedef enum { K_INT, K_LONG, K_REAL, K_U64, K_PATH, K_DEVICE, K_SCALE } key_type;

typedef struct {
    const char *section, *key;
    key_type type;
    size_t offset;
    double min, max;
    const char *def;
    const char *help;
} key_spec;

#define OFF(f) offsetof(cc_config, f)
static const key_spec KEYS[] = {
    { "model", "vocab_size", K_INT, OFF(vocab_size), 2, 65536, "256", "token ids are 0..vocab_size-1 (256 = bytes)" },
    { "model", "d_model", K_INT, OFF(d_model), 1, 16384, "512", "width of every stream" },
    { "model", "n_layers", K_INT, OFF(n_layers), 1, CC_MAX_LAYERS, "3", "stacked GRU layers" },
    { "model", "n_heads", K_INT, OFF(n_heads), 1, 1024, "8", "context-stream heads (must divide d_model)" },
    { "model", "ctx_window", K_INT, OFF(ctx_window), 1, 1 << 20, "128", "positions each query reads, itself included" },
    { "model", "seq_len", K_INT, OFF(seq_len), 1, 1 << 20, "512", "positions per training sequence" },
    { "model", "rms_eps", K_REAL, OFF(rms_eps), 0, 1, "1e-6", "added to the mean square" },
    { "model", "rms_floor", K_REAL, OFF(rms_floor), 0, 1, "1e-6", "mean square at or under it: identity" },
    { "model", "inv_rms_max", K_REAL, OFF(inv_rms_max), 1e-30, 1e30, "1000", "cap on the inverse RMS" },
    { "train", "batch_size", K_INT, OFF(batch_size), 1, 1 << 20, "64", "sequences per step" },
    { "train", "max_steps", K_LONG, OFF(max_steps), 1, 1e12, "1000", "optimizer steps (also the end of the cosine)" },
    { "train", "lr", K_REAL, OFF(lr), 0, 10, "1e-3", "peak learning rate" },
    { "train", "lr_min", K_REAL, OFF(lr_min), 0, 10, "1e-4", "learning rate at max_steps" },
    { "train", "warmup_steps", K_LONG, OFF(warmup_steps), 0, 1e12, "100", "linear warmup steps" },
    { "train", "weight_decay", K_REAL, OFF(weight_decay), 0, 10, "0.1", "AdamW decoupled decay (2-D tensors only)" },
    { "train", "beta1", K_REAL, OFF(beta1), 0, 0.999999, "0.9", "AdamW first-moment decay" },
    { "train", "beta2", K_REAL, OFF(beta2), 0, 0.99999999, "0.99", "AdamW second-moment decay" },
    { "train", "adam_eps", K_REAL, OFF(adam_eps), 0, 1, "1e-8", "AdamW epsilon" },
    { "train", "max_grad_norm", K_REAL, OFF(max_grad_norm), 0, 1e30, "1.0", "global-norm clip (0 = off)" },
    { "train", "grad_h_clamp", K_REAL, OFF(grad_h_clamp), 0, 1e30, "1000", "unscaled clamp on the per-timestep hidden-state gradient (0 = off)" },
    { "train", "ctx_grad_clamp", K_REAL, OFF(ctx_grad_clamp), 0, 1e30, "0", "unscaled L2 cap per token on the context-stream gradient (0 = off)" },
    { "train", "seed", K_U64, OFF(seed), 0, 0, "1337", "seed of initialisation and data order" },
    { "train", "eval_interval", K_LONG, OFF(eval_interval), 0, 1e12, "100", "steps between evaluations (0 = only at the end)" },
    { "train", "eval_batches", K_LONG, OFF(eval_batches), 1, 1e9, "4", "validation batches per evaluation" },
    { "train", "checkpoint_interval", K_LONG, OFF(checkpoint_interval), 0, 1e12, "500", "steps between checkpoints (0 = only at the end)" },
    { "precision", "loss_scale", K_SCALE, OFF(loss_scale), 1e-30, 1e30, "1.0", "static loss scale, or 'dynamic' (GradScaler-style)" },
    { "precision", "init_scale", K_REAL, OFF(init_scale), 1e-30, 1e30, "65536", "first scale of the dynamic loss scale" },
    { "precision", "scale_growth_interval", K_LONG, OFF(scale_growth_interval), 1, 1e12, "2000", "clean steps before the dynamic scale doubles" },
    { "data", "train", K_PATH, OFF(train), 0, 0, "data/fortunes/train.txt", "training data: text file or .bin shard" },
    { "data", "val", K_PATH, OFF(val), 0, 0, "data/fortunes/val.txt", "validation data: text file or .bin shard" },
    { "run", "device", K_DEVICE, OFF(device), 0, 0, "auto", "auto, cpu or gpu" },
    { "run", "out_dir", K_PATH, OFF(out_dir), 0, 0, "runs/default", "telemetry, checkpoints and samples go here" },
};
#define NKEYS ((int)(sizeof(KEYS) / sizeof(KEYS[0])))

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

static int parse_integer(const char *v, long long *out)
{
    if (!*v) return -1;
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (*end || errno == ERANGE) return -1;
    *out = x;
    return 0;
}

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
        if (parse_integer(v, &n) != 0)
            return FAIL("[%s] %s: '%s' is not an integer", k->section, k->key, v);
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
            return FAIL("[%s] %s: path longer than %d bytes", k->section, k->key, CC_PATH_MAX - 1);
        strcpy(base, v);
        return 0;
    case K_DEVICE:
        if (strcmp(v, "auto") && strcmp(v, "cpu") && strcmp(v, "gpu"))
            return FAIL("[%s] %s: '%s' is not one of auto, cpu, gpu", k->section, k->key, v);
        strcpy(base, v);
        return 0;
    }
    return FAIL("[%s] %s: unsupported key type", k->section, k->key);
}

/* As cc_config_set, but the reason goes into msg instead of stderr. */
static int set_quiet(cc_config *c, const char *section, const char *key, const char *value,
                     char *msg, size_t cap)
{
    if (!section_exists(section))
        return FAIL("unknown section [%s] (key '%s')", section, key);
    const key_spec *k = find_key(section, key);
    if (!k) return FAIL("unknown key '%s' in section [%s]", key, section);
    return set_spec(c, k, value, msg, cap);
}
#undef FAIL

int cc_config_set(cc_config *c, const char *section, const char *key, const char *value,
                  const char *origin)
{
    char msg[512];
    if (set_quiet(c, section, key, value, msg, sizeof(msg)) != 0)
        return cc_error("%s: %s", origin, msg);
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

/* inih tells the handler nothing about lines; it returns the line of the first
 * handler failure. So the handler keeps the first failure's reason and the
 * loader prints it with that line. */
typedef struct {
    cc_config *c;
    char msg[512];
    int failed;
} ini_state;

static int ini_apply(void *user, const char *section, const char *name, const char *value)
{
    ini_state *st = user;
    if (st->failed) return 1; /* only the first failure is reported */
    if (set_quiet(st->c, section, name, value, st->msg, sizeof(st->msg)) != 0) {
        st->failed = 1;
        return 0;
    }
    return 1;
}

/* Shared tail of the two loaders: report the first failure with its line. */
static int finish_load(cc_config *c, cc_config *work, const ini_state *st, int rc, const char *path)
{
    if (rc > 0 && st->failed) return cc_error("%s:%d: %s", path, rc, st->msg);
    if (rc != 0)
        return cc_error("%s:%d: syntax error (expected 'key = value' or '[section]', at most 199 "
                        "bytes a line)", path, rc);
    if (cc_config_validate(work, path) != 0) return -1;
    *c = *work;
    return 0;
}

int cc_config_load_string(cc_config *c, const char *text, const char *origin)
{
    cc_config work = *c;
    ini_state st = { .c = &work };
    return finish_load(c, &work, &st, ini_parse_string(text, ini_apply, &st), origin);
}

int cc_config_load(cc_config *c, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f) return cc_error("cannot open config '%s': %s", path, strerror(errno));
    /* Apply to a copy: a config that fails leaves the caller's untouched. */
    cc_config work = *c;
    ini_state st = { .c = &work };
    int rc = ini_parse_file(f, ini_apply, &st);
    fclose(f);
    return finish_load(c, &work, &st, rc, path);
}

int cc_config_set_arg(cc_config *c, const char *assignment)
{
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment)
        return cc_error("--set '%s': expected key=value or section.key=value", assignment);
    char name[128];
    size_t n = (size_t)(eq - assignment);
    if (n >= sizeof(name)) return cc_error("--set '%s': key too long", assignment);
    memcpy(name, assignment, n);
    name[n] = 0;
    const char *value = eq + 1;
    char *dot = strchr(name, '.');
    if (dot) {
        *dot = 0;
        return cc_config_set(c, name, dot + 1, value, "--set");
    }
    const key_spec *k = find_key(NULL, name);
    if (!k) return cc_error("--set: unknown key '%s'", name);
    return cc_config_set(c, k->section, k->key, value, "--set");
}

int cc_config_validate(const cc_config *c, const char *origin)
{
    if (c->d_model % c->n_heads != 0)
        return cc_error("%s: [model] n_heads: %d does not divide d_model %d", origin, c->n_heads,
                        c->d_model);
    if (c->lr_min > c->lr)
        return cc_error("%s: [train] lr_min: %g is above lr %g", origin, c->lr_min, c->lr);
    return 0;
}

/* The value of a key as text, as it would be written in an INI file. */
static void value_text(const cc_config *c, const key_spec *k, char *buf, size_t cap)
{
    const char *base = (const char *)c + k->offset;
    switch (k->type) {
    case K_INT: snprintf(buf, cap, "%d", *(const int *)base); break;
    case K_LONG: snprintf(buf, cap, "%ld", *(const long *)base); break;
    case K_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)base); break;
    case K_SCALE:
        if (c->loss_scale_dynamic) { snprintf(buf, cap, "dynamic"); break; }
        /* fallthrough */
    case K_REAL: cc_format_real(buf, cap, *(const double *)base); break;
    case K_PATH:
    case K_DEVICE: snprintf(buf, cap, "%s", base); break;
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
        default: value_text(c, k, buf, sizeof(buf)); v = json_string(buf); break;
        }
        json_object_set_new(sec, k->key, v);
    }
    char *s = json_dumps(root, JSON_COMPACT | JSON_REAL_PRECISION(17));
    json_decref(root);
    return s;
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
            if (json_is_string(val)) snprintf(buf, sizeof(buf), "%s", json_string_value(val));
            else if (json_is_integer(val)) snprintf(buf, sizeof(buf), "%lld", (long long)json_integer_value(val));
            else if (json_is_real(val)) cc_format_real(buf, sizeof(buf), json_real_value(val));
            else { rc = cc_error("%s: config key %s.%s has an unsupported JSON type", origin, sname, kname); break; }
            if ((rc = cc_config_set(c, sname, kname, buf, origin)) != 0) break;
        }
        if (rc) break;
    }
    json_decref(root);
    return rc ? rc : cc_config_validate(c, origin);
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
