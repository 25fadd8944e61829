/* catchat ladder */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "catchat/device.h"
#include "catchat/ladder.h"
#include "catchat/util.h"

static const char *HELP =
    "usage: catchat ladder [--seed N] [--stage K] [--markdown]\n\n"
    "The 11-stage parity ladder: GEMM, embedding, RMSNorm, GRU gates, GRU recurrence,\n"
    "GRU BPTT, context attention, classifier + loss, full step, gradient reduction,\n"
    "optimizer; each GPU op against its CPU twin on the same random inputs (outputs\n"
    "poisoned first). One row per stage: max |gpu - ref|, relative error, tolerance,\n"
    "PASS / WARN / FAIL. Exit status: 0 all pass, 1 a stage failed, 77 no GPU (skipped).\n\n"
    "  --seed N     input seed (default 1234, printed)\n"
    "  --stage K    run stage K only\n"
    "  --markdown   print the table as Markdown\n";

int cmd_ladder(int argc, char **argv)
{
    static const struct option opts[] = { { "seed", required_argument, 0, 's' },
                                          { "stage", required_argument, 0, 'k' },
                                          { "markdown", no_argument, 0, 'm' },
                                          { "help", no_argument, 0, 'h' },
                                          { 0, 0, 0, 0 } };
    cc_ladder_opts o = { 1234, 0, 0 };
    unsigned long long seed;
    long k;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 's': if (cli_parse_u64("--seed", optarg, &seed)) return 2; o.seed = seed; break;
        case 'k': if (cli_parse_long("--stage", optarg, 1, 11, &k)) return 2; o.only_stage = (int)k; break;
        case 'm': o.markdown = 1; break;
        case 'h': fputs(HELP, stdout); return 0;
        default: return cli_usage_error("ladder", "unknown option or missing value");
        }
    }
    if (optind < argc) return cli_usage_error("ladder", "unexpected argument");
    if (cc_gpu_count() == 0) {
        fprintf(stderr, "catchat: ladder: no CUDA device visible: skipped (exit %d)\n", CC_EXIT_SKIP);
        return CC_EXIT_SKIP;
    }
    const int fails = cc_ladder_run(&o, stdout);
    if (fails) printf("ladder: %d stage(s) FAILED\n", fails);
    else printf("ladder: all stages passed\n");
    return fails ? 1 : 0;
}
