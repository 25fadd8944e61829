/* catchat bisect */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "catchat/stability.h"
#include "catchat/util.h"

static const char *HELP =
    "usage: catchat bisect [--config F] [--set key=value]...\n"
    "                      [--lengths 64,128,256,512] [--steps N]\n\n"
    "Length bisect: trains the same initial weights (the config's seed) on the same\n"
    "batches with the sequences capped at each length, checking every stage for\n"
    "non-finite values (as train --check-finite). For each length it reports \"finite\n"
    "through N steps\" or the first step that went non-finite and where: stage, layer,\n"
    "timestep, tensor.\n\n"
    "  --lengths L,...   caps to try (default 64,128,256,512)\n"
    "  --steps N         steps per length (default 50)\n";

static int parse_lengths(const char *text, int *out, int *n)
{
    char buf[256];
    snprintf(buf, sizeof(buf), "%s", text);
    *n = 0;
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        long v;
        if (*n >= CC_BISECT_MAX) return cc_error("--lengths: at most %d lengths", CC_BISECT_MAX);
        if (cli_parse_long("--lengths", tok, 1, 1 << 20, &v)) return -1;
        out[(*n)++] = (int)v;
    }
    return *n ? 0 : cc_error("--lengths: empty list");
}

int cmd_bisect(int argc, char **argv)
{
    static const struct option opts[] = { { "lengths", required_argument, 0, 'l' }, { "steps", required_argument, 0, 'n' },
                                          { 0, 0, 0, 0 } };
    cli_config_args ca = { 0 };
    int lengths[CC_BISECT_MAX] = { 64, 128, 256, 512 }, n = 4, c;
    long steps = 50;
    cli_parser parser;
    cli_parser_init(&parser, "bisect", HELP, opts, &ca);
    while ((c = cli_next_opt(&parser, argc, argv)) > 0) {
        switch (c) {
        case 'l': if (parse_lengths(optarg, lengths, &n)) return 2; break;
        case 'n': if (cli_parse_long("--steps", optarg, 1, 1L << 30, &steps)) return 2; break;
        }
    }
    if (c < 0) return parser.status;
    cc_config cfg;
    int rcfg;
    if ((rcfg = cli_resolve_config(&cfg, &ca, NULL, CKPT_MODEL_WINS)) != 0) return cli_config_status(rcfg);
    cc_bisect_result res[CC_BISECT_MAX];
    return cc_bisect(&cfg, lengths, n, steps, res, stdout) == 0 ? 0 : 1;
}
