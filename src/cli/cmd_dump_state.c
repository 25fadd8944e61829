/* catchat dump-state */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "catchat/train.h"
#include "catchat/util.h"

static const char *HELP =
    "usage: catchat dump-state --config F --ckpt CKPT --out S.safetensors [--device cpu|gpu]\n"
    "                          [--set key=value]...\n\n"
    "Runs one forward and backward pass on the first batch of the config's training\n"
    "data, with its loss_scale and grad_h_clamp, and writes x, y (I32 [B,T]), loss\n"
    "(F64 [1]) and grad.<name> (F32, unscaled) for every parameter. No optimizer step;\n"
    "the checkpoint is not changed.\n";

int cmd_dump_state(int argc, char **argv)
{
    static const struct option opts[] = {
        { "config", required_argument, 0, 'c' }, { "ckpt", required_argument, 0, 'k' },
        { "out", required_argument, 0, 'o' }, { "device", required_argument, 0, 'd' },
        { "set", required_argument, 0, 's' }, { "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 } };
    cli_config_args ca = { 0 };
    const char *ckpt = NULL, *out = NULL, *device = NULL;
    int c;
    optind = 1;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'c': ca.config_path = optarg; break;
        case 'k': ckpt = optarg; break;
        case 'o': out = optarg; break;
        case 'd': device = optarg; break;
        case 's': if (cli_add_set(&ca, optarg)) return 2; break;
        case 'h': fputs(HELP, stdout); return 0;
        default: return cli_usage_error("dump-state", "unknown option or missing value");
        }
    }
    if (optind < argc) return cli_usage_error("dump-state", "unexpected argument");
    if (!out) return cli_usage_error("dump-state", "--out is required");
    cc_config cfg;
    if (cli_resolve_config(&cfg, &ca, ckpt) != 0) return 1;
    if (device && cc_config_set(&cfg, "run", "device", device, "--device") != 0) return 2;
    return cc_dump_state(&cfg, ckpt, out) == 0 ? 0 : 1;
}
