/* What a training run reports as it goes (progress.h). */
#define _POSIX_C_SOURCE 200809L /* open_memstream */
#include "catchat/progress.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/text_escape.h"
#include "catchat/train.h"
#include "catchat/util.h"

int cc_progress_log_row(cc_telemetry *tel, cc_tfevents *tfe, const cc_telemetry_row *row, const cc_run_progress *pr)
{
    if (cc_telemetry_write(tel, row) != 0) return -1;
    static const char *const tags[] = { "train/loss",   "train/running_loss", "train/lr",
                                        "train/loss_scale", "train/grad_norm", "train/grad_norm_clipped",
                                        "perf/tokens_per_s", "train/epoch", "perf/elapsed_s",
                                        "eval/loss", "eval/top1", "eval/top5", "eval/overfitting_evals" };
    const float vals[] = { (float)row->loss, (float)row->running_loss, (float)row->lr, (float)row->loss_scale,
                           (float)row->grad_norm, (float)row->grad_norm_clipped, (float)row->tok_per_s,
                           (float)pr->epoch, (float)pr->elapsed_s, (float)row->eval_loss, (float)row->eval_top1,
                           (float)row->eval_top5, (float)pr->rising };
    return cc_tfevents_scalars(tfe, row->step, tags, vals, row->has_eval ? 13 : 9);
}

void cc_progress_grad_norms(const char *out_dir, cc_executor *ex, long step, int first)
{
    char path[CC_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/grad_norms.csv", out_dir);
    FILE *f = fopen(path, first ? "w" : "a");
    if (!f) return;
    if (first) {
        fputs("step", f);
        for (int i = 0; i < ex->lay.n; i++) fprintf(f, ",%s", ex->lay.t[i].name);
        fputc('\n', f);
    }
    float *g = cc_malloc(sizeof(float) * ex->lay.total);
    ex->ops->get_grads(ex, g);
    fprintf(f, "%ld", step);
    for (int i = 0; i < ex->lay.n; i++) {
        double ss = 0;
        for (size_t k = 0; k < ex->lay.t[i].numel; k++) ss += (double)g[ex->lay.t[i].offset + k] * g[ex->lay.t[i].offset + k];
        fprintf(f, ",%.6g", sqrt(ss));
    }
    fputc('\n', f);
    fclose(f);
    free(g);
}

void cc_progress_break(cc_progress *p)
{
    if (p->open) {
        putchar('\n');
        fflush(stdout);
        p->open = 0;
    }
}

/* tokens/s in 5 characters before the unit (9876, 98.8k, 3.40M), padded, so
 * the line keeps its width from step to step */
static void fmt_rate(char *buf, size_t cap, double per_s)
{
    if (per_s < 9999.5) snprintf(buf, cap, "%5.0f", per_s);
    else if (per_s < 999.95e3) snprintf(buf, cap, "%4.1fk", per_s * 1e-3);
    else snprintf(buf, cap, "%4.2fM", per_s * 1e-6);
}

/* The fields of `order` joined by `sep` into line; on a terminal (width >
 * 0) a field that would pass width - 1 columns ends the line there, it and
 * those after it left off whole (the first is always there). */
static void join_fields(char *line, size_t cap, const char *const *order, int n, const char *sep, int width)
{
    int len = 0;
    line[0] = 0;
    for (int i = 0; i < n; i++) {
        const int add = (i ? (int)strlen(sep) : 0) + (int)strlen(order[i]);
        if (width && i > 0 && len + add > width - 1) break;
        len += snprintf(line + len, cap - (size_t)len, "%s%s", i ? sep : "", order[i]);
    }
}

/* The progress line, its fields in the order a user looks for them: where
 * the run is, how it learns, how fast, how long; then the optimizer's state.
 * On a terminal the line is rewritten in place and must fit one row (a
 * longer one wraps, and \r returns to its last row only), so the fields
 * that do not fit are left off whole, from the end; in a log every field,
 * an eval step's figures last. An eval step stays on screen: on a terminal
 * its figures come right after the loss, the other fields follow as room
 * allows, and where even that does not fit they get a row of their own;
 * a wrapped row would stay on screen as two. */
void cc_progress_print(cc_progress *p, const cc_telemetry_row *row, long max_steps, long first, long end,
                       const cc_run_progress *pr)
{
    if (p->quiet) return;
    const double per = pr->elapsed_s / (double)(row->step - first);
    char eta[32], took[32], rate[32];
    cc_format_duration(eta, sizeof(eta), per * (double)(end - row->step));
    cc_format_duration(took, sizeof(took), pr->elapsed_s);
    fmt_rate(rate, sizeof(rate), row->tok_per_s);
    char field[9][96], figures[3][32], eval[96];
    /* widths that do not change from step to step, so the fields a terminal shows stay the same */
    char total[24];
    const int digits = snprintf(total, sizeof(total), "%ld", max_steps);
    snprintf(field[0], sizeof(field[0]), "step %*ld/%ld", digits, row->step, max_steps);
    snprintf(field[1], sizeof(field[1]), "loss %.4f%s", row->loss, row->skipped ? " SKIPPED" : "");
    snprintf(field[2], sizeof(field[2]), "%6.1f ms", row->step_ms);
    snprintf(field[3], sizeof(field[3]), "%s tok/s", rate);
    snprintf(field[4], sizeof(field[4]), "%s ETA %s", took, eta);
    snprintf(field[5], sizeof(field[5]), "lr %.2e", row->lr);
    snprintf(field[6], sizeof(field[6]), "norm %.3f", row->grad_norm);
    snprintf(field[7], sizeof(field[7]), "scale %g", row->loss_scale);
    snprintf(field[8], sizeof(field[8]), "epoch %.2f", pr->epoch);
    snprintf(figures[0], sizeof(figures[0]), "eval loss %.4f", row->eval_loss);
    snprintf(figures[1], sizeof(figures[1]), "top1 %.2f%%", 100 * row->eval_top1);
    snprintf(figures[2], sizeof(figures[2]), "top5 %.2f%%", 100 * row->eval_top5);
    const char *const fig[3] = { figures[0], figures[1], figures[2] };
    join_fields(eval, sizeof(eval), fig, 3, " ", 0);
    const char *order[10];
    int n = 0, eval_row = 0;
    order[n++] = field[0];
    order[n++] = field[1];
    if (row->has_eval && p->live) {
        const int head = (int)(strlen(field[0]) + 3 + strlen(field[1]) + 3 + strlen(eval));
        if (head <= p->live - 1) order[n++] = eval;
        else eval_row = 1;
    }
    for (int i = 2; i < 9; i++) order[n++] = field[i];
    if (row->has_eval && !p->live) order[n++] = eval;
    char line[1024];
    join_fields(line, sizeof(line), order, n, " | ", p->live);
    printf("%s%s%s", p->live ? "\r" : "", line, p->live ? "\033[K" : ""); /* \033[K: what a longer line left */
    if (eval_row) { /* a terminal too narrow for even this row keeps the eval loss */
        join_fields(eval, sizeof(eval), fig, 3, " ", p->live);
        printf("\n%s", eval);
    }
    if (p->live && !row->has_eval) {
        p->open = 1; /* rewritten by the next step; eval steps stay on screen */
    } else {
        putchar('\n');
        p->open = 0;
    }
    fflush(stdout);
}

void cc_progress_sample(const cc_progress *pg, cc_executor *ex, const cc_config *cfg,
                        const struct cc_tokenizer *tokenizer, cc_tfevents *tfe, const char *prompt, int tokens,
                        long step)
{
    float *p = cc_malloc(sizeof(float) * ex->lay.total);
    ex->ops->get_params(ex, p);
    char path[CC_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/sample.txt", cfg->out_dir);
    /* the prompt encoded and the ids written through the run's tokenizer, as
     * `catchat sample` does with the checkpoint */
    cc_sample_opts so = { .prompt = prompt, .tokens = tokens, .temperature = 0.8, .top_k = 40,
                          .seed = cfg->seed, .tokenizer = tokenizer };
    char *text = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&text, &len);
    const int rc = mem ? cc_sample(&ex->lay, p, &so, mem) : -1;
    if (mem) fclose(mem);
    if (rc == 0) {
        FILE *sf = fopen(path, "w");
        if (sf) {
            fwrite(text, 1, len, sf);
            fclose(sf);
        }
        char *utf8 = cc_valid_utf8(text, len); /* TensorBoard's text tab takes UTF-8 only */
        cc_tfevents_text(tfe, step, "sample", utf8);
        free(utf8);
        if (!pg->quiet) {
            printf("sample (%s):\n", path);
            /* an undertrained model writes any byte: on a terminal its controls are shown, not obeyed */
            if (pg->live) cc_write_text_for_terminal(stdout, text, len);
            else fwrite(text, 1, len, stdout);
            putchar('\n');
        }
    }
    free(text);
    free(p);
}
