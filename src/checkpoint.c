/* Checkpoints as safetensors (docs/formats.md). Model tensors are F32 under
 * docs/model.md's names; a resumable checkpoint adds opt.m.<name> / opt.v.<name>
 * and the run state as __metadata__ strings. */
#define _DEFAULT_SOURCE /* scandir, alphasort, link */
#include "catchat/checkpoint.h"

#include <dirent.h>
#include <inttypes.h>
#include <unistd.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/run_dir.h"
#include "catchat/safetensors.h"
#include "catchat/tokenizer.h"
#include "catchat/util.h"
#include "catchat/version.h"

#define N_META 16
#define N_TOKENIZER_META 3

/* start_dir as metadata text: the folder itself where it is UTF-8 (metadata is
 * JSON); else "hex:" and its bytes in hex, which no absolute folder starts with. */
static const char *start_dir_text(const char *dir, char *buf, size_t cap)
{
    char *valid = cc_valid_utf8(dir, strlen(dir));
    const int same = strcmp(valid, dir) == 0;
    free(valid);
    if (same) return dir;
    const size_t n = (size_t)snprintf(buf, cap, "hex:");
    cc_hex_encode(dir, buf + n, cap - n);
    return buf;
}

/* The folder stored by start_dir_text into buf; NULL for malformed hex. */
static const char *start_dir_read(const char *text, char *buf, size_t cap)
{
    if (strncmp(text, "hex:", 4) != 0) return text;
    return cc_hex_decode(text + 4, buf, cap) == 0 ? buf : NULL;
}

int cc_checkpoint_save(const char *path, const cc_config *cfg, const cc_layout *lay,
                       const float *params, const float *m, const float *v,
                       const cc_run_state *state)
{
    const int with_moments = m && v;
    const int n = lay->n * (with_moments ? 3 : 1);
    cc_st_entry *e = cc_calloc((size_t)n, sizeof(cc_st_entry));
    char (*names)[CC_NAME_MAX + 8] = cc_calloc((size_t)n, sizeof(*names));
    for (int k = 0; k < (with_moments ? 3 : 1); k++) {
        const float *base = k == 0 ? params : (k == 1 ? m : v);
        for (int i = 0; i < lay->n; i++) {
            const cc_tensor_info *t = &lay->t[i];
            cc_st_entry *en = &e[k * lay->n + i];
            char *nm = names[k * lay->n + i];
            snprintf(nm, CC_NAME_MAX + 8, "%s%s", k == 0 ? "" : (k == 1 ? "opt.m." : "opt.v."), t->name);
            en->name = nm;
            en->dtype = ST_F32;
            en->ndim = t->ndim;
            en->shape[0] = t->shape[0];
            en->shape[1] = t->shape[1];
            en->data = base + t->offset;
        }
    }
    char *cfg_json = cc_config_to_json(cfg);
    /* format, config, version and the folder the run started in (the config's relative paths are
     * relative to it); then the run state, when there is one */
    char cwd[CC_PATH_MAX];
    const char *keys[N_META + N_TOKENIZER_META] = { "format", "config", "catchat_version", "start_dir", "step", "applied_steps",
                                 "skipped_steps", "loss_scale", "scale_growth_count", "data_pos", "rng_state",
                                 "running_loss", "eval_track", "schedule", "data_sample_digest",
                                                       "data_order" };
    char vals[N_META][256];
    const char *valp[N_META + N_TOKENIZER_META];
    for (int i = 0; i < N_META; i++) valp[i] = vals[i];
    valp[0] = "catchat-v1";
    valp[1] = cfg_json;
    valp[2] = cc_version();
    char start_dir[2 * CC_PATH_MAX + 8];
    valp[3] = start_dir_text(getcwd(cwd, sizeof(cwd)) ? cwd : "", start_dir, sizeof(start_dir));
    int n_meta = 4;
    if (state) {
        snprintf(vals[4], 256, "%ld", state->step);
        snprintf(vals[5], 256, "%ld", state->counts.applied);
        snprintf(vals[6], 256, "%ld", state->counts.skipped);
        snprintf(vals[7], 256, "%.17g", state->scaler.scale);
        snprintf(vals[8], 256, "%ld", state->scaler.growth_count);
        snprintf(vals[9], 256, "%" PRIu64, state->data_pos);
        snprintf(vals[10], 256, "%016" PRIx64 ",%016" PRIx64 ",%016" PRIx64 ",%016" PRIx64,
                 state->rng.s[0], state->rng.s[1], state->rng.s[2], state->rng.s[3]);
        snprintf(vals[11], 256, "%.17g", state->running_loss);
        /* best eval loss, its step, then the overfitting watch (checkpoint.h) */
        snprintf(vals[12], 256, "%.17g,%ld,%d,%.17g,%.17g,%.17g,%.17g", state->best_eval, state->best_step, state->rising,
                 state->last_eval, state->last_train, state->rise_from_eval, state->rise_from_train);
        /* the max_steps the schedule is planned for, and where it was re-planned (checkpoint.h) */
        snprintf(vals[13], 256, "%ld,%ld,%.17g", state->sched_max_steps, state->lr_seg.from_step,
                 state->lr_seg.from_lr);
        snprintf(vals[14], 256, "%016" PRIx64 ",%016" PRIx64, state->train_digest, state->val_digest);
        snprintf(vals[15], 256, "%s", state->data_order == CC_ORDER_FEISTEL ? "feistel" : "shuffled_array");
        n_meta = N_META;
    }
    char *tok_owned[2] = { NULL, NULL };
    if (state && state->tokenizer) n_meta += cc_tokenizer_meta(state->tokenizer, keys + n_meta, valp + n_meta, tok_owned);
    int rc = cc_st_write(path, e, n, keys, valp, n_meta);
    free(tok_owned[0]);
    free(tok_owned[1]);
    free(cfg_json);
    free(e);
    free(names);
    return rc;
}

/* One path list ("a,b", globs) with each relative entry put under dir. */
static int rebase_list(const char *dir, const char *list, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    for (const char *p = list; *p;) {
        const char *comma = strchr(p, ',');
        const size_t n = comma ? (size_t)(comma - p) : strlen(p);
        const int rel = n > 0 && p[0] != '/';
        const int w = snprintf(out + len, cap - len, "%s%s%s%.*s", len ? "," : "", rel ? dir : "", rel ? "/" : "",
                               (int)n, p);
        if (w < 0 || (size_t)w >= cap - len) return -1;
        len += (size_t)w;
        p = comma ? comma + 1 : p + n;
    }
    return 0;
}

/* The stored config's relative [data] train and val paths name files
 * relative to the folder its run started in (metadata start_dir): put under
 * that folder, the checkpoint reads the same data from anywhere. Without
 * start_dir (before catchat 0.8), or started here, nothing changes. */
static int rebase_paths(const cc_st_file *f, const char *path, cc_config *cfg)
{
    char dir_buf[CC_PATH_MAX];
    const char *stored = cc_st_meta(f, "start_dir");
    const char *dir = stored ? start_dir_read(stored, dir_buf, sizeof(dir_buf)) : NULL;
    if (stored && !dir) return cc_error("%s: its start_dir metadata '%.40s' is not a folder nor hex: of one", path, stored);
    char cwd[CC_PATH_MAX];
    int rc = 0;
    /* absent before catchat 0.8, or the same folder as now: the paths read as they are */
    if (dir && *dir == '/' && !(getcwd(cwd, sizeof(cwd)) && strcmp(cwd, dir) == 0)) {
        char *const keys[] = { cfg->train, cfg->val };
        const char *const names[] = { "train", "val" };
        for (int i = 0; i < 2 && rc == 0; i++) {
            char out[CC_PATH_MAX];
            if (rebase_list(dir, keys[i], out, sizeof(out)) != 0)
                rc = cc_error("%s: [data] %s '%s' under the run's start folder %s is longer than %d bytes", path,
                              names[i], keys[i], dir, CC_PATH_MAX - 1);
            else
                snprintf(keys[i], CC_PATH_MAX, "%s", out);
        }
    }
    return rc;
}

int cc_checkpoint_read_config(const char *path, cc_config *cfg)
{
    cc_st_file f;
    if (cc_st_open_meta(&f, path) != 0) return -1;
    const char *js = cc_st_meta(&f, "config");
    int rc = 0;
    if (js) rc = cc_config_from_json(cfg, js, path) == 0 && rebase_paths(&f, path, cfg) == 0 ? 1 : -1;
    cc_st_close(&f);
    return rc;
}

int cc_checkpoint_verify(const char *path)
{
    cc_st_file f;
    if (cc_st_open(&f, path) != 0) return -1;
    cc_st_close(&f);
    return 0;
}

static int shape_matches(const cc_st_tensor *st, const cc_tensor_info *t)
{
    return st->ndim == t->ndim && st->shape[0] == t->shape[0] && (t->ndim == 1 || st->shape[1] == t->shape[1]);
}

int cc_checkpoint_fits(const char *path, const cc_layout *lay)
{
    cc_st_file f;
    if (cc_st_open(&f, path) != 0) return -1;
    int fits = 1;
    for (int i = 0; i < lay->n && fits; i++) {
        const cc_st_tensor *st = cc_st_find(&f, lay->t[i].name);
        fits = st && shape_matches(st, &lay->t[i]);
    }
    cc_st_close(&f);
    return fits;
}

/* Load every tensor of the layout named prefix+name into base. */
static int load_set(const cc_st_file *f, const cc_layout *lay, const char *prefix, float *base,
                    int required)
{
    for (int i = 0; i < lay->n; i++) {
        const cc_tensor_info *t = &lay->t[i];
        char name[CC_NAME_MAX + 8];
        snprintf(name, sizeof(name), "%s%s", prefix, t->name);
        const cc_st_tensor *st = cc_st_find(f, name);
        if (!st) {
            if (required) return cc_error("%s: missing tensor '%s'", f->path, name);
            return 1;
        }
        if (!shape_matches(st, t)) {
            char want[64], got[64] = "";
            if (t->ndim == 1) snprintf(want, sizeof(want), "[%d]", t->shape[0]);
            else snprintf(want, sizeof(want), "[%d, %d]", t->shape[0], t->shape[1]);
            for (int d = 0; d < st->ndim; d++) {
                size_t l = strlen(got);
                snprintf(got + l, sizeof(got) - l, "%s%lld", d ? ", " : "[", (long long)st->shape[d]);
            }
            strcat(got, st->ndim ? "]" : "[]");
            return cc_error("%s: tensor '%s' has shape %s, the config needs %s", f->path, name, got, want);
        }
        if (cc_st_read_float(f, st, base + t->offset) != 0) return -1;
        /* A NaN weight trains nothing and scores garbage: refuse it here, naming it. */
        for (size_t k = 0; k < t->numel; k++)
            if (!isfinite(base[t->offset + k]))
                return cc_error("%s: tensor '%s' holds %s at element %zu: this checkpoint is unusable; "
                                "take an earlier one", f->path, name, isnan(base[t->offset + k]) ? "NaN" : "Inf", k);
    }
    return 0;
}

static int meta_long(const cc_st_file *f, const char *key, long *out)
{
    const char *s = cc_st_meta(f, key);
    char *end;
    if (!s) return cc_error("%s: metadata '%s' missing", f->path, key);
    long v = strtol(s, &end, 10);
    if (*end || end == s) return cc_error("%s: metadata '%s' = '%s' is not an integer", f->path, key, s);
    *out = v;
    return 0;
}

static int load_state(const cc_st_file *f, cc_run_state *st)
{
    long dp = 0;
    if (meta_long(f, "step", &st->step) || meta_long(f, "applied_steps", &st->counts.applied) ||
        meta_long(f, "skipped_steps", &st->counts.skipped) ||
        meta_long(f, "scale_growth_count", &st->scaler.growth_count) || meta_long(f, "data_pos", &dp))
        return -1;
    st->data_pos = (uint64_t)dp;
    const char *ls = cc_st_meta(f, "loss_scale"), *rs = cc_st_meta(f, "rng_state");
    char *end;
    if (!ls || (st->scaler.scale = strtod(ls, &end), *end) || !(st->scaler.scale > 0))
        return cc_error("%s: metadata 'loss_scale' missing or invalid", f->path);
    if (!rs || sscanf(rs, "%" SCNx64 ",%" SCNx64 ",%" SCNx64 ",%" SCNx64, &st->rng.s[0],
                      &st->rng.s[1], &st->rng.s[2], &st->rng.s[3]) != 4)
        return cc_error("%s: metadata 'rng_state' missing or invalid", f->path);
    const char *rl = cc_st_meta(f, "running_loss");
    st->running_loss = rl ? strtod(rl, NULL) : 0.0;
    /* absent before catchat 0.6: no eval seen yet */
    const char *et = cc_st_meta(f, "eval_track");
    st->best_step = 0;
    st->rising = 0;
    if (et && sscanf(et, "%lf,%ld,%d,%lf,%lf,%lf,%lf", &st->best_eval, &st->best_step, &st->rising, &st->last_eval,
                     &st->last_train, &st->rise_from_eval, &st->rise_from_train) != 7)
        return cc_error("%s: metadata 'eval_track' invalid", f->path);
    /* both absent before catchat 0.8: the schedule's plan and the data are unknown */
    /* data_sample_digest (cc_tokens_digest); an earlier catchat's data_digest hashed every token: kept as
     * that kind, which a resume compares with one pass over the data (cc_tokens_digest_all) */
    const char *sc = cc_st_meta(f, "schedule"), *dd = cc_st_meta(f, "data_sample_digest"),
               *dd_all = cc_st_meta(f, "data_digest");
    st->digest_all = !dd && dd_all;
    const char *dd_key = dd ? "data_sample_digest" : "data_digest";
    if (!dd) dd = dd_all;
    st->sched_max_steps = 0;
    st->lr_seg = (cc_lr_segment){ 0, 0 };
    st->train_digest = st->val_digest = 0;
    if (sc && (sscanf(sc, "%ld,%ld,%lf", &st->sched_max_steps, &st->lr_seg.from_step, &st->lr_seg.from_lr) != 3 ||
               st->sched_max_steps < 0 || st->lr_seg.from_step < 0 || !(st->lr_seg.from_lr >= 0)))
        return cc_error("%s: metadata 'schedule' = '%s' invalid", f->path, sc);
    /* the order of windows: absent before the keyed permutation, whose runs go on with the array's */
    const char *order = cc_st_meta(f, "data_order");
    if (order && strcmp(order, "feistel") != 0 && strcmp(order, "shuffled_array") != 0)
        return cc_error("%s: metadata 'data_order' = '%.40s' is neither feistel nor shuffled_array", f->path, order);
    st->data_order = order && strcmp(order, "feistel") == 0 ? CC_ORDER_FEISTEL : CC_ORDER_SHUFFLED_ARRAY;
    if (dd && sscanf(dd, "%" SCNx64 ",%" SCNx64, &st->train_digest, &st->val_digest) != 2)
        return cc_error("%s: metadata '%s' = '%s' invalid", f->path, dd_key, dd);
    return 0;
}

int cc_checkpoint_load(const char *path, const cc_layout *lay, float *params, float *m,
                       float *v, int *has_moments, cc_run_state *state, int *has_state)
{
    cc_st_file f;
    if (cc_st_open(&f, path) != 0) return -1;
    int rc = load_set(&f, lay, "", params, 1);
    if (has_moments) *has_moments = 0;
    if (has_state) *has_state = 0;
    if (rc == 0 && m && v) {
        int rm = load_set(&f, lay, "opt.m.", m, 0);
        int rv = rm == 0 ? load_set(&f, lay, "opt.v.", v, 1) : rm;
        if (rm < 0 || rv < 0) rc = -1;
        else if (rm == 0 && has_moments) *has_moments = 1;
    }
    if (rc == 0 && state && cc_st_meta(&f, "step")) {
        rc = load_state(&f, state);
        if (rc == 0 && has_state) *has_state = 1;
    }
    cc_st_close(&f);
    return rc;
}

long cc_checkpoint_step(const char *path)
{
    cc_st_file f;
    if (cc_st_open_meta(&f, path) != 0) return -1;
    const char *s = cc_st_meta(&f, "step");
    char *end = NULL;
    const long step = s ? strtol(s, &end, 10) : -1;
    const int ok = s && end != s && *end == 0 && step >= 0;
    cc_st_close(&f);
    return ok ? step : -1;
}

/* ---- a run's checkpoints: written from and restored into an executor ---- */

int cc_checkpoint_save_run(const cc_config *cfg, cc_executor *ex, const cc_run_state *st, const char *name)
{
    const size_t n = ex->lay.total;
    float *p = cc_malloc(sizeof(float) * n), *m = cc_malloc(sizeof(float) * n),
          *v = cc_malloc(sizeof(float) * n);
    ex->ops->get_params(ex, p);
    ex->ops->get_moments(ex, m, v);
    char path[CC_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/%s", cfg->out_dir, name);
    int rc = cc_checkpoint_save(path, cfg, &ex->lay, p, m, v, st);
    free(p);
    free(m);
    free(v);
    return rc;
}

static int step_name_filter(const struct dirent *e)
{
    const size_t n = strlen(CC_CHECKPOINT_STEP_PREFIX);
    return strncmp(e->d_name, CC_CHECKPOINT_STEP_PREFIX, n) == 0 && e->d_name[n] >= '0' && e->d_name[n] <= '9' &&
           !strstr(e->d_name, ".tmp.");
}

int cc_checkpoint_keep_step(const cc_config *cfg, long step)
{
    if (cfg->keep_last <= 0) return 0;
    char cur[CC_PATH_MAX + 32], kept[CC_PATH_MAX + 300];
    snprintf(cur, sizeof(cur), "%s/%s", cfg->out_dir, CC_CHECKPOINT_NAME);
    snprintf(kept, sizeof(kept), "%s/%s%012ld.safetensors", cfg->out_dir, CC_CHECKPOINT_STEP_PREFIX, step);
    unlink(kept);
    if (link(cur, kept) != 0 && cc_copy_file(cur, kept) != 0) return -1;
    struct dirent **names;
    const int n = scandir(cfg->out_dir, &names, step_name_filter, alphasort); /* zero-padded: oldest first */
    for (int i = 0; i < n; i++) {
        if (i < n - cfg->keep_last) {
            snprintf(kept, sizeof(kept), "%s/%s", cfg->out_dir, names[i]->d_name);
            unlink(kept);
        }
        free(names[i]);
    }
    if (n >= 0) free(names);
    return 0;
}

int cc_checkpoint_restore(cc_executor *ex, const char *path, int resume, cc_run_state *st)
{
    const size_t n = ex->lay.total;
    float *p = cc_calloc(n, sizeof(float)), *m = cc_calloc(n, sizeof(float)),
          *v = cc_calloc(n, sizeof(float));
    int has_m = 0, has_state = 0, rc;
    ex->ops->get_params(ex, p); /* padding and anything not loaded keep their values */
    rc = cc_checkpoint_load(path, &ex->lay, p, resume ? m : NULL, resume ? v : NULL, &has_m, resume ? st : NULL,
                            &has_state);
    if (rc == 0 && resume && (!has_m || !has_state))
        rc = cc_error("%s: no optimizer moments or run state: use --init to start from its "
                      "weights instead of --resume", path);
    if (rc == 0) {
        ex->ops->set_params(ex, p);
        if (resume) ex->ops->set_moments(ex, m, v);
    }
    free(p);
    free(m);
    free(v);
    return rc;
}
