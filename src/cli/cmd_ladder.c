/* catchat ladder: the parity ladder's command line; the stages and the runner
 * are in src/ladder/. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "catchat/device.h"
#include "catchat/dist.h"
#include "catchat/gpu_caps.h"
#include "catchat/ladder.h"
#include "catchat/util.h"

static const char *HELP_HEAD =
    "usage: catchat ladder [--seed N] [--stage NAME|N] [--markdown] [--gpu-profile P]\n"
    "                      [--dist MODE] [--dist-id F]\n\n"
    "The GPU-vs-CPU parity ladder (docs/ladder.md): each GPU op against its CPU twin\n"
    "on the same random inputs (outputs poisoned first), in the order the training\n"
    "step runs. One row per stage: max |gpu - ref|, relative error, tolerance and\n"
    "PASS, WARN (a diagnostic over its bound), SKIP (this GPU cannot take the\n"
    "stage's path; the reason is shown) or FAIL; then a summary line. Exit status:\n"
    "0 a stage ran and none failed (the summary counts the skipped ones), 1 a stage\n"
    "failed or the NVIDIA driver is installed but fails, 2 a bad option, 77 skipped:\n"
    "no GPU, no driver, or no stage could run here.\n\n"
    "Stages (number, op name, title; --stage takes any of the three):\n";

static const char *HELP_TAIL =
    "\n"
    "  --seed N          input seed (default 1234, printed)\n"
    "  --stage NAME|N    run one stage only, named by op name, title or number; its\n"
    "                    inputs then differ from a full run's (the seed's draws\n"
    "                    start at it)\n"
    "  --markdown        print the table as Markdown\n"
    "  --gpu-profile P   run as another GPU family would on this GPU (its shared\n"
    "                    memory a block, clusters and SM count; [gpu] profile):\n"
    "                    native (default), sm80, sm86, sm89, sm90, sm100, sm120;\n"
    "                    cases that family cannot take are named as not run\n"
    "  --dist MODE       auto (default), mpi, env, none: with a communicator\n"
    "                    (mpirun, or RANK/WORLD_SIZE), grad_reduce also checks the\n"
    "                    NCCL all-reduce; rank 0 prints the table\n"
    "  --dist-id F       env bootstrap: the NCCL id file on a shared path\n";

/* The help with the stage table read from the ladder itself. */
static const char *help_text(void)
{
    static char buf[4096];
    size_t len = (size_t)snprintf(buf, sizeof(buf), "%s", HELP_HEAD);
    for (int k = 1; k <= cc_ladder_stages() && len < sizeof(buf); k++)
        len += (size_t)snprintf(buf + len, sizeof(buf) - len, "  %2d  %-14s %s\n", k, cc_ladder_stage_name(k),
                                cc_ladder_stage_title(k));
    if (len < sizeof(buf)) snprintf(buf + len, sizeof(buf) - len, "%s", HELP_TAIL);
    return buf;
}

/* The stage `key` names, or a usage error (0) listing the names. */
static int parse_stage(const char *key)
{
    const int k = cc_ladder_find_stage(key);
    if (k) return k;
    char what[512];
    size_t len = (size_t)snprintf(what, sizeof(what), "--stage '%s': expected a stage name, title or number 1-%d (",
                                  key, cc_ladder_stages());
    for (int i = 1; i <= cc_ladder_stages() && len < sizeof(what); i++)
        len += (size_t)snprintf(what + len, sizeof(what) - len, "%s%s", i > 1 ? "|" : "", cc_ladder_stage_name(i));
    if (len < sizeof(what)) snprintf(what + len, sizeof(what) - len, ")");
    cli_usage_error("ladder", what);
    return 0;
}

int cmd_ladder(int argc, char **argv)
{
    static const struct option opts[] = { { "seed", required_argument, 0, 's' },
                                          { "stage", required_argument, 0, 'k' },
                                          { "markdown", no_argument, 0, 'm' },
                                          { "dist", required_argument, 0, 'd' },
                                          { "dist-id", required_argument, 0, 'i' },
                                          { "gpu-profile", required_argument, 0, 'p' },
                                          { 0, 0, 0, 0 } };
    cc_ladder_opts o = { 1234, 0, 0, NULL, "native" };
    const char *dist_mode = "auto", *dist_id = NULL;
    unsigned long long seed;
    int c;
    cli_parser parser;
    cli_parser_init(&parser, "ladder", help_text(), opts, NULL);
    while ((c = cli_next_opt(&parser, argc, argv)) > 0) {
        switch (c) {
        case 's': if (cli_parse_u64("--seed", optarg, &seed)) return 2; o.seed = seed; break;
        case 'k': if (!(o.only_stage = parse_stage(optarg))) return 2; break;
        case 'm': o.markdown = 1; break;
        case 'd': dist_mode = optarg; break;
        case 'i': dist_id = optarg; break;
        case 'p': o.gpu_profile = optarg; break;
        }
    }
    if (c < 0) return parser.status;
    if (cli_check_choice("ladder", "--dist", dist_mode, "auto|mpi|env|none")) return 2;
    if (cli_check_choice("ladder", "--gpu-profile", o.gpu_profile, gpu_caps_profile_names())) return 2;
    const int gpus = cc_gpu_count();
    if (gpus < 0) return 1; /* a driver that fails is a failure, never a skip: cc_gpu_count said why */
    if (gpus == 0) {
        fprintf(stderr, "catchat: ladder: no CUDA device visible (no GPU or no driver): skipped (exit %d)\n",
                CC_EXIT_SKIP);
        return CC_EXIT_SKIP;
    }
    cc_dist dist;
    cc_dist_launch launch;
    cli_dist_launch(&launch);
    if (cc_dist_init(&dist, dist_mode, dist_id, &launch) != 0) return 1;
    o.dist = &dist;
    FILE *out = dist.rank == 0 ? stdout : fopen("/dev/null", "w");
    const cc_ladder_counts n = cc_ladder_run(&o, out); /* prints the rows and the summary line */
    const int rank0 = dist.rank == 0;
    if (out != stdout) fclose(out);
    cc_dist_finalize(&dist);
    const int status = cc_ladder_exit_status(n);
    if (status == CC_EXIT_SKIP && rank0)
        fprintf(stderr, "catchat: ladder: no stage ran (%d skipped): skipped (exit %d)\n", n.skipped, CC_EXIT_SKIP);
    return status;
}
