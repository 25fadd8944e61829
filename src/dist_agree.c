/* Every rank of a data-parallel run must train the same run: the same model,
 * schedule, data and precision. Ranks are started by a launcher from one
 * command line, but their configs can still differ: another file on another
 * node, an environment variable set on one host, a --set typed into one
 * terminal. A difference found at step 1000 is a wasted job; one not found
 * is a wrong model, and options that change which collectives a step makes
 * (--check-finite, one lane or several) deadlock the ranks. So at start-up
 * rank 0 sends its signature (the config as `catchat train` prints it, then
 * those options: run_signature in src/run_open.c), and each rank compares it
 * with its own, line by line, naming the keys that differ; the run starts
 * only if none do. */
#define _POSIX_C_SOURCE 200809L
#include "catchat/dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "catchat/config.h"
#include "catchat/util.h"

#define SIGNATURE_MAX (64 * 1024) /* the printed config is ~2 KB; paths are at most CC_PATH_MAX */

char *cc_run_signature(const cc_config *cfg)
{
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) return NULL;
    cc_config_print(cfg, f);
    fclose(f);
    return text;
}

/* The next line of *p (advanced past it) into line[cap]; 0 at the end. */
static int next_line(const char **p, char *line, size_t cap)
{
    if (!**p) return 0;
    const char *end = strchr(*p, '\n');
    const size_t n = end ? (size_t)(end - *p) : strlen(*p);
    snprintf(line, cap, "%.*s", (int)(n < cap ? n : cap - 1), *p);
    *p += n + (end != NULL);
    return 1;
}

int cc_signature_diff(const char *mine, const char *lead, char *out, size_t cap)
{
    if (cap) out[0] = 0;
    char a[CC_PATH_MAX + 128], b[CC_PATH_MAX + 128], section[64] = "";
    int n = 0, shown = 0;
    size_t used = 0;
    for (;;) {
        const int ha = next_line(&mine, a, sizeof(a)), hb = next_line(&lead, b, sizeof(b));
        if (!ha && !hb) break;
        if (ha && a[0] == '[') snprintf(section, sizeof(section), "%.*s", (int)sizeof(section) - 1, a);
        if (ha && hb && strcmp(a, b) == 0) continue;
        n++;
        if (shown >= 4 || used >= cap) continue; /* the first few; the count says how many */
        /* "[train] lr = 0.002 here, lr = 0.001 on rank 0" */
        const int w = snprintf(out + used, cap - used, "%s%s %s here, %s on rank 0", shown ? "; " : "", section,
                               ha ? a : "(nothing)", hb ? b : "(nothing)");
        if (w > 0) used += (size_t)w < cap - used ? (size_t)w : cap - used - 1;
        shown++;
    }
    if (n > shown && used < cap) snprintf(out + used, cap - used, "; and %d more", n - shown);
    return n;
}

int cc_dist_agree(cc_dist *d, const char *mine)
{
    if (!d || !d->active) return 0;
    char *lead = cc_calloc(SIGNATURE_MAX, 1);
    if (d->rank == 0 && mine) snprintf(lead, SIGNATURE_MAX, "%s", mine);
    cc_dist_enter(d, "the broadcast of rank 0's config", NULL);
    cc_dist_broadcast_bytes(d, lead, SIGNATURE_MAX);
    cc_dist_leave(d);
    char diff[1024];
    const int n = mine ? cc_signature_diff(mine, lead, diff, sizeof(diff)) : 1;
    if (n) cc_error("rank %d: its config differs from rank 0's in %d line%s: %s; every rank must run the same "
                    "config (same file, same --set, same options, same environment)", d->rank, n, n == 1 ? "" : "s",
                    mine ? diff : "(its config could not be printed)");
    free(lead);
    return cc_dist_all_passed(d, n != 0, "the config check");
}

int cc_dist_all_passed(cc_dist *d, int failed, const char *what)
{
    if (!d || !d->active) return failed ? -1 : 0;
    double v[2] = { failed ? 1 : 0, failed ? d->rank + 1 : 0 }; /* how many failed; with one, which */
    cc_dist_enter(d, "the all-reduce of every rank's verdict on", what);
    cc_dist_allreduce_host(d, v, 2, 0);
    cc_dist_leave(d);
    if (v[0] == 0) return 0;
    if (!failed && d->rank == 0) {
        if (v[0] == 1) cc_error("rank %d failed %s (its own line says why); no rank starts", (int)v[1] - 1, what);
        else cc_error("%d ranks failed %s (their own lines say why); no rank starts", (int)v[0], what);
    }
    return -1;
}
