/* catchat ladder */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "catchat/device.h"
#include "catchat/dist.h"
#include "catchat/ladder.h"
#include "catchat/util.h"

static const char *HELP =
    "usage: catchat ladder [--seed N] [--stage K] [--markdown] [--dist MODE] [--dist-id F]\n\n"
    "The 11-stage parity ladder: GEMM, embedding, RMSNorm, GRU gates, GRU recurrence,\n"
    "GRU BPTT, context attention, classifier + loss, full step, gradient reduction,\n"
    "optimizer; each GPU op against its CPU twin on the same random inputs (outputs\n"
    "poisoned first). One row per stage: max |gpu - ref|, relative error, tolerance,\n"
    "PASS / WARN / FAIL. Exit status: 0 all pass, 1 a stage failed, 77 no GPU (skipped).\n\n"
    "  --seed N     input seed (default 1234, printed)\n"
    "  --stage K    run stage K only\n"
    "  --markdown   print the table as Markdown\n"
    "  --dist MODE  auto (default), mpi, env, none: with a communicator (mpirun, or RANK/WORLD_SIZE),\n"
    "               stage 10 also checks the NCCL all-reduce; rank 0 prints the table\n"
    "  --dist-id F  env bootstrap: the NCCL id file on a shared path\n";

int cmd_ladder(int argc, char **argv)
{
    static const struct option opts[] = { { "seed", required_argument, 0, 's' },
                                          { "stage", required_argument, 0, 'k' },
                                          { "markdown", no_argument, 0, 'm' },
                                          { "dist", required_argument, 0, 'd' },
                                          { "dist-id", required_argument, 0, 'i' },
                                          { 0, 0, 0, 0 } };
    cc_ladder_opts o = { 1234, 0, 0, NULL };
    const char *dist_mode = "auto", *dist_id = NULL;
    unsigned long long seed;
    long k;
    int c;
    cli_parser parser;
    cli_parser_init(&parser, "ladder", HELP, opts, NULL);
    while ((c = cli_next_opt(&parser, argc, argv)) > 0) {
        switch (c) {
        case 's': if (cli_parse_u64("--seed", optarg, &seed)) return 2; o.seed = seed; break;
        case 'k': if (cli_parse_long("--stage", optarg, 1, 11, &k)) return 2; o.only_stage = (int)k; break;
        case 'm': o.markdown = 1; break;
        case 'd': dist_mode = optarg; break;
        case 'i': dist_id = optarg; break;
        }
    }
    if (c < 0) return parser.status;
    if (cli_check_choice("ladder", "--dist", dist_mode, "auto|mpi|env|none")) return 2;
    if (cc_gpu_count() == 0) {
        fprintf(stderr, "catchat: ladder: no CUDA device visible: skipped (exit %d)\n", CC_EXIT_SKIP);
        return CC_EXIT_SKIP;
    }
    cc_dist dist;
    if (cc_dist_init(&dist, dist_mode, dist_id) != 0) return 1;
    o.dist = &dist;
    FILE *out = dist.rank == 0 ? stdout : fopen("/dev/null", "w");
    const int fails = cc_ladder_run(&o, out);
    if (fails) fprintf(out, "ladder: %d stage(s) FAILED\n", fails);
    else fprintf(out, "ladder: all stages passed\n");
    if (out != stdout) fclose(out);
    cc_dist_finalize(&dist);
    return fails ? 1 : 0;
}
