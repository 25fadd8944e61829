/* catchat dump-state */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "cli/cli.h"
#include "catchat/device.h"
#include "catchat/gpu_plan.h"
#include "catchat/preflight.h"
#include "catchat/run_dir.h"
#include "catchat/safetensors.h"
#include "catchat/train.h"
#include "catchat/util.h"

static const char *HELP =
    "usage: catchat dump-state --config F --ckpt CKPT --out S.safetensors\n"
    "                          [--device cpu|gpu] [--set key=value]...\n"
    "                          [--preflight MODE] [--force]\n\n"
    "Runs one forward and backward pass on the first batch of the config's training\n"
    "data, with its loss_scale and grad_h_clamp, and writes x, y (I32 [B,T]), loss\n"
    "(F64 [1]) and grad.<name> (F32, unscaled) for every parameter. No optimizer\n"
    "step; the checkpoint is not changed.\n\n"
    "  --config F          the config (the [model] keys stored in CKPT win)\n"
    "  --set key=value     override one key, repeatable\n"
    "  --ckpt CKPT         the weights (without it: the config's seeded\n"
    "                      initialisation)\n"
    "  --out S.safetensors where to write the batch, the loss and the gradients\n"
    "  --device cpu|gpu    the executor (default: the config's [run] device)\n"
    "  --force             write over --out although it holds something other than an\n"
    "                      earlier dump-state output (a checkpoint, any other file);\n"
    "                      refused without it\n"
    CLI_PREFLIGHT_HELP("    ", "                      ");

/* An earlier dump-state output may be replaced; anything else at --out (a
 * run's checkpoint above all) is kept unless --force: nothing written is lost. */
static int refuse_overwrite(const char *out)
{
    struct stat st;
    if (stat(out, &st) != 0) return 0;
    if (S_ISDIR(st.st_mode)) return cc_error("--out '%s' is a directory: name a file", out);
    cc_st_file f;
    const int quiet = cc_error_quiet;
    cc_error_quiet = 1; /* not a safetensors file at all is an answer here, not an error */
    const int is_st = cc_st_open_meta(&f, out) == 0;
    cc_error_quiet = quiet;
    const char *what = "a file that is not a dump-state output";
    if (is_st) {
        /* a dump's metadata is device and loss_scale, and no format (docs/formats.md, "Debug state") */
        const char *format = cc_st_meta(&f, "format");
        const int dump = cc_st_meta(&f, "device") && cc_st_meta(&f, "loss_scale") && !format;
        what = format && strcmp(format, "catchat-v1") == 0 ? "a catchat checkpoint" : "safetensors that are not a dump-state output";
        cc_st_close(&f);
        if (dump) return 0;
    }
    return cc_error("--out '%s' holds %s: it would be overwritten; write elsewhere, or pass --force", out, what);
}

int cmd_dump_state(int argc, char **argv)
{
    static const struct option opts[] = {
        { "ckpt", required_argument, 0, 'k' },
        { "out", required_argument, 0, 'o' }, { "device", required_argument, 0, 'd' },
        { "force", no_argument, 0, 'f' },
        CLI_PREFLIGHT_OPTION, { 0, 0, 0, 0 } };
    cli_config_args ca = { 0 };
    const char *ckpt = NULL, *out = NULL, *device = NULL;
    int force = 0;
    int c;
    cli_parser parser;
    cli_parser_init(&parser, "dump-state", HELP, opts, &ca);
    while ((c = cli_next_opt(&parser, argc, argv)) > 0) {
        switch (c) {
        case 'k': ckpt = optarg; break;
        case 'o': out = optarg; break;
        case 'd': device = optarg; break;
        case 'f': force = 1; break;
        }
    }
    if (c < 0) return parser.status;
    if (!out) return cli_usage_error("dump-state", "--out is required");
    cc_preflight_opts po;
    if (cli_preflight_opts(&po, &ca, "dump-state", 0)) return 2;
    cc_config cfg;
    int rcfg;
    if ((rcfg = cli_resolve_config(&cfg, &ca, ckpt, CKPT_MODEL_WINS)) != 0) return cli_config_status(rcfg);
    if (device && cc_config_set(&cfg, "run", "device", device, "--device") != 0) return 2;
    /* the option, not the config key it sets, is what the user wrote: said by its name */
    if (device && strcmp(device, "gpu") == 0 && cc_gpu_count() == 0) {
        cc_error("dump-state: --device gpu, but no CUDA device is visible (no driver or no GPU): use --device cpu");
        return 1;
    }
    const char *inputs[] = { ckpt, ca.config_path, cfg.train };
    const char *names[] = { "--ckpt", "--config", "[data] train" };
    if (cc_refuse_output_over_input("--out", out, inputs, names, 3) != 0) return 1;
    if (!force && refuse_overwrite(out) != 0) return 1;
    gpu_step_plan plan;
    if (cli_plan_and_preflight(&cfg, &po, &plan) != 0) return 1;
    return cc_dump_state(&cfg, ckpt, out, po.plan) == 0 ? 0 : 1;
}
