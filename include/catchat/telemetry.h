/* Telemetry CSV (docs/formats.md): one row per step, header first, flushed as
 * written so a crash loses no rows. */
#ifndef CATCHAT_TELEMETRY_H
#define CATCHAT_TELEMETRY_H

#include <stdio.h>

typedef struct cc_telemetry_row {
    long step, tokens;
    double loss, running_loss, lr, loss_scale, grad_norm, grad_norm_clipped;
    int skipped;
    double step_ms, tok_per_s, seq_per_s;
    int has_eval;
    double eval_loss, eval_top1, eval_top5;
} cc_telemetry_row;

typedef struct cc_telemetry { FILE *f; } cc_telemetry;

/* Open `path`; on resume (`resume_step` ≥ 0) keep the rows with step ≤
 * resume_step and drop later ones (they belong to the run being replaced).
 * A file that ends before resume_step (cut by a full disk or a copy) or with
 * a torn row is said in a note on stderr: its missing steps stay missing. */
int cc_telemetry_open(cc_telemetry *t, const char *path, long resume_step);
int cc_telemetry_write(cc_telemetry *t, const cc_telemetry_row *r);
void cc_telemetry_close(cc_telemetry *t);
/* Whether the CSV at `path` is missing, empty, or its first line starts with
 * `head`; cc_telemetry_file_is_ours: with the telemetry header's leading
 * columns (--force deletes catchat's files only). */
int cc_csv_starts_with(const char *path, const char *head);
int cc_telemetry_file_is_ours(const char *path);
/* What cc_csv_truncate_after found. */
typedef struct cc_csv_kept {
    int found;      /* the file was there */
    long rows;      /* rows kept (the header not counted) */
    long last_step; /* the step of the last row kept, -1 none */
    int torn;       /* a last row without its newline was dropped */
} cc_csv_kept;
/* Any CSV whose rows start with the step: keep the header (replaced by
 * `header` unless NULL) and the rows of step <= keep_step; a missing file is
 * left missing. Rewritten through a temporary file and a rename. `kept`
 * (may be NULL) says what was kept. */
int cc_csv_truncate_after(const char *path, const char *header, long keep_step, cc_csv_kept *kept);

#endif
