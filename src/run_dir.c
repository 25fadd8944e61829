/* out_dir bookkeeping (run_dir.h): which files are a run's, whether an
 * earlier run is there, and output-over-input refusals. */
#define _DEFAULT_SOURCE
#include "catchat/run_dir.h"

#include <dirent.h>
#include <errno.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "catchat/safetensors.h"
#include "catchat/telemetry.h"
#include "catchat/tfevents.h"
#include "catchat/util.h"

/* Files a run writes, by exact name or (for event files) by prefix. */
static const char *const RUN_FILES[] = { "telemetry.csv", "grad_norms.csv", "sample.txt",
                                         "nonfinite_batch.safetensors", CC_CHECKPOINT_NAME };
#define N_RUN_FILES ((int)(sizeof(RUN_FILES) / sizeof(RUN_FILES[0])))
#define EVENTS_PREFIX "events.out.tfevents."

static int is_run_file(const char *name)
{
    if (strncmp(name, EVENTS_PREFIX, strlen(EVENTS_PREFIX)) == 0) return 1;
    if (strcmp(name, CC_CHECKPOINT_BEST_NAME) == 0) return 1;
    const size_t np = strlen(CC_CHECKPOINT_STEP_PREFIX);
    if (strncmp(name, CC_CHECKPOINT_STEP_PREFIX, np) == 0 && name[np] >= '0' && name[np] <= '9') return 1;
    for (int i = 0; i < N_RUN_FILES; i++)
        if (strcmp(name, RUN_FILES[i]) == 0) return 1;
    return 0;
}

void cc_run_dir_probe(const char *dir, cc_run_dir_info *info)
{
    memset(info, 0, sizeof(*info));
    info->checkpoint_step = -1;
    char path[CC_PATH_MAX + 64];
    snprintf(path, sizeof(path), "%s/%s", dir, CC_CHECKPOINT_NAME);
    struct stat st;
    if (stat(path, &st) == 0) {
        info->has_checkpoint = 1;
        cc_st_file f;
        const int quiet = cc_error_quiet;
        cc_error_quiet = 1; /* an unreadable header is still a run's checkpoint: only its step is unknown */
        if (cc_st_open_meta(&f, path) == 0) {
            const char *s = cc_st_meta(&f, "step");
            if (s) info->checkpoint_step = atol(s);
            cc_st_close(&f);
        }
        cc_error_quiet = quiet;
    }
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d)))
        if (is_run_file(e->d_name) && strcmp(e->d_name, CC_CHECKPOINT_NAME) != 0 && !strstr(e->d_name, ".tmp.")) {
            snprintf(info->first_log, sizeof(info->first_log), "%s", e->d_name);
            break;
        }
    closedir(d);
}

int cc_run_dir_clear(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    char path[CC_PATH_MAX + 300];
    int rc = 0;
    while ((e = readdir(d)))
        if (is_run_file(e->d_name)) {
            snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
            if (unlink(path) != 0 && errno != ENOENT) rc = cc_error("cannot remove '%s': %s", path, strerror(errno));
        }
    closedir(d);
    return rc;
}

int cc_run_dir_holds(const char *dir, const char *path)
{
    DIR *d = opendir(dir);
    if (!d) return 0;
    struct dirent *e;
    char p[CC_PATH_MAX + 300];
    int held = 0;
    while (!held && (e = readdir(d)))
        if (is_run_file(e->d_name)) {
            snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
            held = cc_same_file(p, path);
        }
    closedir(d);
    return held;
}

void cc_run_dir_clear_temporaries(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[CC_PATH_MAX + 300];
    while ((e = readdir(d))) {
        const char *tmp = strstr(e->d_name, ".tmp.");
        if (!tmp) continue;
        char base[256];
        snprintf(base, sizeof(base), "%.*s", (int)(tmp - e->d_name), e->d_name);
        if (!is_run_file(base)) continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
}

/* realpath of a file that may not exist yet: its folder resolved, its name kept. */
static int resolve(const char *p, char *out)
{
    if (realpath(p, out)) return 0;
    char a[CC_PATH_MAX], b[CC_PATH_MAX], dirpart[PATH_MAX];
    snprintf(a, sizeof(a), "%s", p);
    snprintf(b, sizeof(b), "%s", p);
    if (!realpath(dirname(a), dirpart)) return -1;
    const char *name = basename(b);
    if (strlen(dirpart) + 1 + strlen(name) >= PATH_MAX) return -1;
    strcat(strcat(strcpy(out, dirpart), "/"), name);
    return 0;
}

int cc_same_file(const char *a, const char *b)
{
    struct stat sa, sb;
    if (stat(a, &sa) == 0 && stat(b, &sb) == 0) return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char ra[PATH_MAX], rb[PATH_MAX];
    if (resolve(a, ra) != 0 || resolve(b, rb) != 0) return 0;
    return strcmp(ra, rb) == 0;
}

int cc_refuse_output_over_input(const char *what, const char *output, const char *const *inputs,
                                const char *const *input_names, int n)
{
    for (int i = 0; i < n; i++)
        if (inputs[i] && cc_same_file(output, inputs[i]))
            return cc_error("%s '%s' is the same file as %s: it would be overwritten; write elsewhere", what,
                            output, input_names[i]);
    return 0;
}

int cc_run_dir_prepare(const cc_config *cfg, const cc_run_intent *in)
{
    char own[CC_PATH_MAX + 64];
    snprintf(own, sizeof(own), "%s/%s", cfg->out_dir, CC_CHECKPOINT_NAME);
    cc_run_dir_info info;
    cc_run_dir_probe(cfg->out_dir, &info);
    const int resuming_own = in->resume && info.has_checkpoint && cc_same_file(in->resume, own);
    const char *input = in->init_ckpt ? in->init_ckpt : in->resume;
    if (in->init_ckpt && cc_same_file(in->init_ckpt, own) && in->force)
        return cc_error("--init %s is the checkpoint this run would replace: copy it elsewhere first, or --resume it",
                        in->init_ckpt);
    if (in->force && input && !resuming_own && cc_run_dir_holds(cfg->out_dir, input))
        return cc_error("%s is one of the files --force would delete from %s: copy it elsewhere first", input,
                        cfg->out_dir);
    if (in->resume && !resuming_own && info.has_checkpoint && cc_run_dir_holds(cfg->out_dir, in->resume))
        return cc_error("%s is not %s's latest checkpoint (%s, step %ld): to go on from it, --set out_dir=DIR (a new "
                        "folder)", in->resume, cfg->out_dir, CC_CHECKPOINT_NAME, info.checkpoint_step);
    if (!resuming_own && !in->force && info.has_checkpoint) {
        char at[48] = "";
        if (info.checkpoint_step >= 0) snprintf(at, sizeof(at), " at step %ld", info.checkpoint_step);
        return cc_error("%s holds a run%s: --resume it, or pass --force to start over", cfg->out_dir, at);
    }
    char best[CC_PATH_MAX + 64];
    snprintf(best, sizeof(best), "%s/%s", cfg->out_dir, CC_CHECKPOINT_BEST_NAME);
    struct stat bst;
    if (!in->resume && !in->force && info.first_log[0] && stat(best, &bst) == 0)
        /* a run whose last checkpoint could not be written (a full disk) kept its best one: offered, not
         * left to --force, which would delete it */
        return cc_error("%s holds an earlier run's %s but no %s: --resume %s goes on from it; --force deletes it "
                        "and starts over", cfg->out_dir, CC_CHECKPOINT_BEST_NAME, CC_CHECKPOINT_NAME, best);
    if (!in->resume && !in->force && info.first_log[0])
        return cc_error("%s holds the logs of an earlier run (%s) but no checkpoint%s: pass --force to start over, "
                        "or choose another [run] out_dir", cfg->out_dir, info.first_log,
                        in->resume_auto ? " for --resume auto to resume" : "");
    /* --force deletes catchat's files only: a CSV of the user's own under a log's name stays, and is said */
    for (int i = 0; i < 2 && !resuming_own && in->force; i++) {
        const char *name = i ? "grad_norms.csv" : "telemetry.csv";
        char log[CC_PATH_MAX + 64];
        snprintf(log, sizeof(log), "%s/%s", cfg->out_dir, name);
        if (!(i ? cc_csv_starts_with(log, "step,") : cc_telemetry_file_is_ours(log)))
            return cc_error("%s is not catchat's (its first line is not catchat's header): --force deletes only "
                            "what catchat wrote; move it, or choose another [run] out_dir", log);
    }
    if ((!resuming_own && in->force && cc_run_dir_clear(cfg->out_dir) != 0) || cc_mkdir_p(cfg->out_dir) != 0) return -1;
    cc_run_dir_clear_temporaries(cfg->out_dir);
    /* a resumed run continues its logs from the checkpoint's step: nothing twice (telemetry.csv: when opened) */
    char path[CC_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/grad_norms.csv", cfg->out_dir);
    if (in->resume && (cc_csv_truncate_after(path, NULL, in->resume_step, NULL) != 0 ||
                       cc_tfevents_truncate_after(cfg->out_dir, in->resume_step) != 0))
        return -1;
    return 0;
}

int cc_run_dir_check_inputs(const cc_config *cfg, const char *init_ckpt)
{
    static const char *const written[] = { "telemetry.csv", "grad_norms.csv", "sample.txt", CC_CHECKPOINT_BEST_NAME,
                                           CC_CHECKPOINT_NAME };
    const char *inputs[] = { cfg->train, cfg->val, init_ckpt };
    const char *names[] = { "[data] train", "[data] val", "--init" };
    char path[CC_PATH_MAX + 64];
    for (int i = 0; i < 5; i++) { /* the data never; the checkpoint only as --resume (the last one) */
        snprintf(path, sizeof(path), "%s/%s", cfg->out_dir, written[i]);
        if (cc_refuse_output_over_input("the run's output", path, inputs, names, i == 4 ? 2 : 3) != 0) return -1;
    }
    return 0;
}
