/* Telemetry CSV, flushed per row. On resume, rows after the checkpoint's step
 * are dropped (rewritten through a temporary file and a rename, so a crash
 * during the rewrite keeps the old file); grad_norms.csv goes the same way. */
#define _POSIX_C_SOURCE 200809L
#include "catchat/telemetry.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "catchat/util.h"

static const char *HEADER =
    "step,tokens,loss,running_loss,lr,loss_scale,grad_norm,grad_norm_clipped,skipped,step_ms,"
    "tok_per_s,seq_per_s,eval_loss,eval_top1,eval_top5\n";

int cc_csv_truncate_after(const char *path, const char *header, long keep_step, cc_csv_kept *kept)
{
    cc_csv_kept k = { 0, 0, -1, 0 };
    if (kept) *kept = k;
    FILE *in = fopen(path, "r");
    if (!in) return 0; /* nothing to keep */
    k.found = 1;
    char tmp[CC_PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp.%ld", path, (long)getpid());
    FILE *out = fopen(tmp, "w");
    if (!out) {
        fclose(in);
        return cc_error("cannot rewrite '%s': %s", path, strerror(errno));
    }
    char line[1 << 16];
    int first = 1;
    while (fgets(line, sizeof(line), in)) {
        if (first) { fputs(header ? header : line, out); first = 0; continue; }
        if (!strchr(line, '\n')) { /* a torn last row */
            k.torn = 1;
            break;
        }
        const long step = atol(line);
        if (step <= keep_step) {
            fputs(line, out);
            k.rows++;
            k.last_step = step;
        }
    }
    if (first && header) fputs(header, out);
    fclose(in);
    if (fflush(out) != 0 || fclose(out) != 0 || rename(tmp, path) != 0) {
        unlink(tmp);
        return cc_error("cannot rewrite '%s': %s", path, strerror(errno));
    }
    if (kept) *kept = k;
    return 0;
}

int cc_telemetry_open(cc_telemetry *t, const char *path, long resume_step)
{
    t->f = NULL;
    if (resume_step >= 0) {
        cc_csv_kept k;
        if (cc_csv_truncate_after(path, HEADER, resume_step, &k) != 0) return -1;
        /* every step writes its row before its checkpoint: rows short of the resumed step were lost */
        if (!k.found)
            fprintf(stderr, "catchat: note: no %s: its rows start after step %ld, where the run resumes\n", path,
                    resume_step);
        else if (k.last_step < resume_step)
            fprintf(stderr, "catchat: note: %s ends at step %ld%s, the run resumes at step %ld: steps %ld to %ld "
                            "have no rows (the file was cut short: a full disk, a partial copy, a crash before its rows reached the disk)\n", path,
                    k.last_step < 0 ? 0 : k.last_step, k.torn ? " and a torn row" : "", resume_step,
                    k.last_step < 0 ? 1 : k.last_step + 1, resume_step);
        t->f = fopen(path, "a");
    } else {
        t->f = fopen(path, "w");
        if (t->f) fputs(HEADER, t->f);
    }
    if (!t->f) return cc_error("cannot open telemetry '%s': %s", path, strerror(errno));
    fflush(t->f);
    return 0;
}

int cc_telemetry_write(cc_telemetry *t, const cc_telemetry_row *r)
{
    fprintf(t->f, "%ld,%ld,%.6f,%.6f,%.6g,%.6g,%.6g,%.6g,%d,%.3f,%.1f,%.2f", r->step, r->tokens,
            r->loss, r->running_loss, r->lr, r->loss_scale, r->grad_norm, r->grad_norm_clipped,
            r->skipped, r->step_ms, r->tok_per_s, r->seq_per_s);
    if (r->has_eval) fprintf(t->f, ",%.6f,%.6f,%.6f\n", r->eval_loss, r->eval_top1, r->eval_top5);
    else fputs(",,,\n", t->f);
    return fflush(t->f) == 0 ? 0 : cc_error("telemetry write failed: %s", strerror(errno));
}

void cc_telemetry_close(cc_telemetry *t)
{
    if (t->f) fclose(t->f);
    t->f = NULL;
}

int cc_csv_starts_with(const char *path, const char *head)
{
    char line[256] = "";
    FILE *f = fopen(path, "r");
    if (!f) return 1;
    const int empty = !fgets(line, sizeof(line), f);
    fclose(f);
    return empty || strncmp(line, head, strlen(head)) == 0;
}

int cc_telemetry_file_is_ours(const char *path)
{
    /* the leading columns every catchat telemetry.csv has had: step, tokens, loss */
    char head[32];
    const char *third = strchr(strchr(strchr(HEADER, ',') + 1, ',') + 1, ',');
    snprintf(head, sizeof(head), "%.*s", (int)(third - HEADER + 1), HEADER);
    return cc_csv_starts_with(path, head);
}
