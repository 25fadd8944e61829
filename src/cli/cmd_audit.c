/* catchat audit */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include "cli/cli.h"
#include "catchat/stability.h"
#include "catchat/util.h"

static const char *HELP =
    "usage: catchat audit [--config F] [--set key=value]... [--ckpt C] [--length T]\n"
    "                     [--device-a cpu] [--device-b gpu] [--loss-scale S]\n"
    "                     [--plant unscale|token-scale]\n\n"
    "One long sequence (the start of [data] val) through two executors, CPU and GPU\n"
    "by default: the loss per token (difference), every gradient tensor (norm ratio\n"
    "and relative error, unscaled), the per-token ratio of the gradient reaching each\n"
    "position, and a verdict: agree (small noise: summation order, FP16 rounding), a\n"
    "uniform norm ratio (a missing unscale or a scale applied twice), a ratio that\n"
    "varies per token (a per-token scale difference), or a mismatch with no scale\n"
    "pattern.\n"
    "Exit status: 0 agree, 3 any other verdict, 1 error.\n\n"
    "  --ckpt C          weights (default: initialised from the config's seed)\n"
    "  --length T        positions (default: the config's seq_len)\n"
    "  --loss-scale S    loss scale of both sides (default 128)\n"
    "  --plant KIND      plant a fault on side B, to see the verdict name it\n";

int cmd_audit(int argc, char **argv)
{
    static const struct option opts[] = {
        { "ckpt", required_argument, 0, 'k' }, { "length", required_argument, 0, 'l' },
        { "device-a", required_argument, 0, 'a' }, { "device-b", required_argument, 0, 'b' },
        { "loss-scale", required_argument, 0, 'S' }, { "plant", required_argument, 0, 'p' },
        { 0, 0, 0, 0 } };
    cli_config_args ca = { 0 };
    cc_audit_opts o = { NULL, 0, "cpu", "gpu", 128.0, NULL };
    long v;
    int c;
    cli_parser parser;
    cli_parser_init(&parser, "audit", HELP, opts, &ca);
    while ((c = cli_next_opt(&parser, argc, argv)) > 0) {
        switch (c) {
        case 'k': o.ckpt = optarg; break;
        case 'l': if (cli_parse_long("--length", optarg, 1, 1 << 20, &v)) return 2; o.length = (int)v; break;
        case 'a': o.device_a = optarg; break;
        case 'b': o.device_b = optarg; break;
        case 'S': if (cli_parse_double("--loss-scale", optarg, 1e-30, 1e30, &o.loss_scale)) return 2; break;
        case 'p': o.plant = optarg; break;
        }
    }
    if (c < 0) return parser.status;
    if (cli_check_choice("audit", "--device-a", o.device_a, "cpu|gpu") ||
        cli_check_choice("audit", "--device-b", o.device_b, "cpu|gpu") ||
        (o.plant && cli_check_choice("audit", "--plant", o.plant, "unscale|token-scale")))
        return 2;
    cc_config cfg;
    int rcfg;
    if ((rcfg = cli_resolve_config(&cfg, &ca, o.ckpt, CKPT_MODEL_WINS)) != 0) return cli_config_status(rcfg);
    cc_audit_verdict verdict;
    if (cc_audit(&cfg, &o, &verdict, stdout) != 0) return 1;
    return verdict == AUDIT_AGREE ? 0 : 3;
}
