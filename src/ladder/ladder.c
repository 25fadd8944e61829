/* The ladder's table and runner: the stages in the order the training step
 * runs (docs/ladder.md), one row each, then a summary line. A stage is defined in
 * its own file (stage_<op>.c); this file only lists them. */
#include <ctype.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/ladder.h"
#include "ladder/ladder.h"

static const ladder_stage *const STAGES[] = {
    &ladder_stage_matmul,       &ladder_stage_embedding,   &ladder_stage_rmsnorm,
    &ladder_stage_gru_cell,     &ladder_stage_gru_forward, &ladder_stage_gru_backward,
    &ladder_stage_attention,    &ladder_stage_crossentropy, &ladder_stage_model,
    &ladder_stage_grad_reduce,  &ladder_stage_adamw,
};
#define N_STAGES ((int)(sizeof(STAGES) / sizeof(STAGES[0])))

int cc_ladder_stages(void) { return N_STAGES; }

const char *cc_ladder_stage_name(int k) { return k >= 1 && k <= N_STAGES ? STAGES[k - 1]->name : NULL; }

const char *cc_ladder_stage_title(int k) { return k >= 1 && k <= N_STAGES ? STAGES[k - 1]->title : NULL; }

static int same_text(const char *a, const char *b)
{
    for (; *a && *b; a++, b++)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    return *a == *b;
}

int cc_ladder_find_stage(const char *key)
{
    if (*key && strspn(key, "0123456789") == strlen(key)) {
        const long k = strlen(key) <= 3 ? strtol(key, NULL, 10) : 0;
        return k >= 1 && k <= N_STAGES ? (int)k : 0;
    }
    for (int k = 1; k <= N_STAGES; k++)
        if (same_text(key, STAGES[k - 1]->name) || same_text(key, STAGES[k - 1]->title)) return k;
    return 0;
}

/* ---- rows ---- */
static const char *verdict(const stage *st)
{
    return st->fail ? "FAIL" : st->skip ? "SKIP" : st->warn ? "WARN" : "PASS";
}

static void print_row(FILE *out, const stage *st, int markdown)
{
    char label[64], err[3][16],
        tail[sizeof(st->worst) + sizeof(st->note) + sizeof(st->why) + sizeof(st->part_skipped) + 40];
    snprintf(label, sizeof(label), "%s (%s)", st->name, st->title);
    if (st->worst[0]) { /* at least one tensor was compared */
        snprintf(err[0], sizeof(err[0]), "%.3e", st->max_abs);
        snprintf(err[1], sizeof(err[1]), "%.3e", st->worst_rel);
        snprintf(err[2], sizeof(err[2]), "%.0e", st->worst_tol);
    } else {
        for (int i = 0; i < 3; i++) snprintf(err[i], sizeof(err[i]), "-");
    }
    snprintf(tail, sizeof(tail), "%s%s%s%s%s", st->worst, st->worst[0] && st->note[0] ? "; " : "", st->note,
             (st->worst[0] || st->note[0]) && st->skip ? "; " : "", st->skip ? "skipped: " : "");
    if (st->skip) strncat(tail, st->why, sizeof(tail) - strlen(tail) - 1);
    if (st->part_skipped[0]) {
        strncat(tail, tail[0] ? "; not run here: " : "not run here: ", sizeof(tail) - strlen(tail) - 1);
        strncat(tail, st->part_skipped, sizeof(tail) - strlen(tail) - 1);
    }
    if (markdown)
        fprintf(out, "| %d | %s | %s | %s | %s | %s | %s | %s |\n", st->num, label, st->shape, err[0], err[1], err[2],
                verdict(st), tail);
    else
        fprintf(out, "%2d  %-32s %-58s %10s %10s %8s  %-4s  %s\n", st->num, label, st->shape, err[0], err[1], err[2],
                verdict(st), tail);
    fflush(out);
}

static void print_header(FILE *out, int markdown)
{
    if (markdown)
        fprintf(out, "| # | stage | shape | max abs err | rel err | tol | verdict | worst tensor |\n"
                     "|---|---|---|---|---|---|---|---|\n");
    else
        fprintf(out, "%2s  %-32s %-58s %10s %10s %8s  %-4s  %s\n", "#", "stage", "shape", "max|d|", "rel err", "tol",
                "", "worst tensor");
}

/* ---- summary ---- */
typedef struct {
    cc_ladder_counts n;
    char warned[256], skipped[1024], failed[256]; /* "a, b" / "a: why; b: why" */
} tally;

static void append(char *buf, size_t cap, const char *sep, const char *a, const char *b)
{
    const size_t len = strlen(buf);
    snprintf(buf + len, cap - len, "%s%s%s", len ? sep : "", a, b);
}

static void count(tally *t, const stage *st)
{
    if (st->fail) {
        t->n.failed++;
        append(t->failed, sizeof(t->failed), ", ", st->name, "");
    } else if (st->skip) {
        t->n.skipped++;
        char what[sizeof(st->why) + 4];
        snprintf(what, sizeof(what), ": %s", st->why);
        append(t->skipped, sizeof(t->skipped), "; ", st->name, what);
    } else if (st->warn) {
        t->n.warned++;
        append(t->warned, sizeof(t->warned), ", ", st->name, "");
    } else {
        t->n.passed++;
    }
}

/* "ladder: 10 passed, 1 skipped (gru_forward: why), 0 failed"; warned only when some did. */
static void print_summary(FILE *out, const tally *t)
{
    fprintf(out, "ladder: %d passed", t->n.passed);
    if (t->n.warned) fprintf(out, ", %d warned (%s)", t->n.warned, t->warned);
    fprintf(out, ", %d skipped", t->n.skipped);
    if (t->n.skipped) fprintf(out, " (%s)", t->skipped);
    fprintf(out, ", %d failed", t->n.failed);
    if (t->n.failed) fprintf(out, " (%s)", t->failed);
    fprintf(out, "\n");
}

/* ---- runner ---- */
/* The RNG is seeded once and runs through the stages in table order: a
 * stage's inputs depend on the stages before it (with --stage, on none). */
cc_ladder_counts cc_ladder_run(const cc_ladder_opts *o, FILE *out)
{
    cc_rng r;
    cc_rng_seed(&r, o->seed);
    gpu_caps caps;
    const char *profile = o->gpu_profile ? o->gpu_profile : "native";
    if (gpu_caps_query(&caps) != 0 || gpu_caps_limit(&caps, profile, 0, 0, 0) != 0) exit(1);
    gpu_gru_state gru = { .refused = "" }; /* the stages' own launches: no refusal, no testing aid yet */
    const ladder_ctx cx = { &r, gpu_matmul_create(), o->dist, &caps, profile, &gru };
    fprintf(out, "catchat ladder: %s (sm_%d%d, code for sm_%d from PTX %d), seed %llu\n", caps.name, caps.cc_major,
            caps.cc_minor, caps.binary_version, caps.ptx_version, (unsigned long long)o->seed);
    if (strcmp(profile, "native") != 0)
        fprintf(out, "run as profile %s: %d SMs, %d KB shared memory a block, clusters %s\n", profile, caps.sm_count,
                caps.smem_per_block_optin / 1024, caps.cluster_launch ? "on" : "off");
    print_header(out, o->markdown);
    tally t;
    memset(&t, 0, sizeof(t));
    for (int k = 1; k <= N_STAGES; k++) {
        if (o->only_stage && o->only_stage != k) continue;
        stage st;
        memset(&st, 0, sizeof(st));
        st.num = k;
        st.name = STAGES[k - 1]->name;
        st.title = STAGES[k - 1]->title;
        STAGES[k - 1]->run(&cx, &st);
        cudaCheck(cudaDeviceSynchronize());
        print_row(out, &st, o->markdown);
        count(&t, &st);
    }
    gpu_matmul_destroy(cx.gemm);
    print_summary(out, &t);
    return t.n;
}
