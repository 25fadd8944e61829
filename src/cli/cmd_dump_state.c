/* catchat dump-state */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "catchat/preflight.h"
#include "catchat/run_dir.h"
#include "catchat/train.h"
#include "catchat/util.h"

static const char *HELP =
    "usage: catchat dump-state --config F --ckpt CKPT --out S.safetensors [--device cpu|gpu]\n"
    "                          [--set key=value]... [--preflight MODE]\n\n"
    "Runs one forward and backward pass on the first batch of the config's training\n"
    "data, with its loss_scale and grad_h_clamp, and writes x, y (I32 [B,T]), loss\n"
    "(F64 [1]) and grad.<name> (F32, unscaled) for every parameter. No optimizer step;\n"
    "the checkpoint is not changed.\n\n"
    "  --config F          the config (the [model] keys stored in CKPT win)\n"
    "  --set key=value     override one key, repeatable\n"
    "  --ckpt CKPT         the weights (without it: the config's seeded initialisation)\n"
    "  --out S.safetensors where to write the batch, the loss and the gradients\n"
    "  --device cpu|gpu    the executor (default: the config's [run] device)\n"
    CLI_PREFLIGHT_HELP("    ", "                      ");

int cmd_dump_state(int argc, char **argv)
{
    static const struct option opts[] = {
        { "ckpt", required_argument, 0, 'k' },
        { "out", required_argument, 0, 'o' }, { "device", required_argument, 0, 'd' },
        CLI_PREFLIGHT_OPTION, { 0, 0, 0, 0 } };
    cli_config_args ca = { 0 };
    const char *ckpt = NULL, *out = NULL, *device = NULL;
    int c;
    cli_parser parser;
    cli_parser_init(&parser, "dump-state", HELP, opts, &ca);
    while ((c = cli_next_opt(&parser, argc, argv)) > 0) {
        switch (c) {
        case 'k': ckpt = optarg; break;
        case 'o': out = optarg; break;
        case 'd': device = optarg; break;
        }
    }
    if (c < 0) return parser.status;
    if (!out) return cli_usage_error("dump-state", "--out is required");
    cc_preflight_opts po;
    if (cli_preflight_opts(&po, &ca, "dump-state", 0)) return 2;
    cc_config cfg;
    if (cli_resolve_config(&cfg, &ca, ckpt, CKPT_MODEL_WINS) != 0) return 1;
    if (device && cc_config_set(&cfg, "run", "device", device, "--device") != 0) return 2;
    const char *inputs[] = { ckpt, ca.config_path, cfg.train };
    const char *names[] = { "--ckpt", "--config", "[data] train" };
    if (cc_refuse_output_over_input("--out", out, inputs, names, 3) != 0) return 1;
    if (cc_preflight(&cfg, cfg.batch_size, cfg.seq_len, NULL, &po) != 0) return 1;
    return cc_dump_state(&cfg, ckpt, out) == 0 ? 0 : 1;
}
