/* catchat train */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "catchat/train.h"
#include "catchat/util.h"

static const char *HELP =
    "usage: catchat train [--config F] [--set key=value]... [--resume CKPT | --init CKPT]\n"
    "                     [--steps N] [--quiet] [--sample-prompt TEXT] [--sample-tokens N]\n\n"
    "Trains the model described by the config on [data] train, evaluating on [data] val.\n"
    "Writes <out_dir>/telemetry.csv (one row per step), <out_dir>/checkpoint.safetensors\n"
    "(every checkpoint_interval steps and at the end) and <out_dir>/sample.txt.\n\n"
    "  --config F          INI file (configs/*.ini); every key has a default\n"
    "  --set key=value     override one key ('lr=1e-3' or 'train.lr=1e-3'), repeatable\n"
    "  --resume CKPT       continue the run saved in CKPT (weights, moments, schedule, data)\n"
    "  --init CKPT         start from the weights in CKPT with a fresh optimizer\n"
    "  --steps N           stop after N steps of this invocation (checkpoint written)\n"
    "  --quiet             no per-step lines\n"
    "  --sample-prompt T   prompt of the sample written at the end (default \"The \")\n"
    "  --sample-tokens N   length of that sample (default 300, 0 = none)\n"
    "  --check-finite      NaN provenance: scan every stage's output as the step runs; stop at the\n"
    "                      first non-finite value, name its stage, layer, timestep and tensor, and\n"
    "                      keep the batch in <out_dir>/nonfinite_batch.safetensors (costs one scan\n"
    "                      and one device sync per stage: see docs/stability.md)\n"
    "  --dist MODE         data parallelism: auto (default: mpi under mpirun/srun, env when\n"
    "                      WORLD_SIZE is set, else none), mpi, env, none; one process per GPU\n"
    "  --dist-id FILE      env bootstrap: file on a shared path for the NCCL unique id\n"
    "                      (or CATCHAT_NCCL_ID_FILE)\n"
    "  --plant-nan NAME    testing aid: fill parameter tensor NAME with NaN before the first step\n"
    "  --plant-overflow N  testing aid: make one gradient +Inf at step N (the step is skipped)\n";

int cmd_train(int argc, char **argv)
{
    static const struct option opts[] = {
        { "resume", required_argument, 0, 'r' }, { "init", required_argument, 0, 'i' },
        { "steps", required_argument, 0, 'n' },  { "quiet", no_argument, 0, 'q' },
        { "sample-prompt", required_argument, 0, 'p' },
        { "sample-tokens", required_argument, 0, 't' }, { "check-finite", no_argument, 0, 'F' }, { "plant-nan", required_argument, 0, 'N' },
        { "plant-overflow", required_argument, 0, 'O' }, { "dist", required_argument, 0, 'D' },
        { "dist-id", required_argument, 0, 'I' },
        { 0, 0, 0, 0 } };
    cli_config_args ca = { 0 };
    cc_train_opts o = { 0 };
    o.sample_prompt = "The ";
    o.sample_tokens = 300;
    long v;
    int c;
    cli_parser parser;
    cli_parser_init(&parser, "train", HELP, opts, &ca);
    while ((c = cli_next_opt(&parser, argc, argv)) > 0) {
        switch (c) {
        case 'r': o.resume = optarg; break;
        case 'i': o.init_ckpt = optarg; break;
        case 'n': if (cli_parse_long("--steps", optarg, 1, 1L << 40, &v)) return 2; o.stop_after = v; break;
        case 'q': o.quiet = 1; break;
        case 'p': o.sample_prompt = optarg; break;
        case 't': if (cli_parse_long("--sample-tokens", optarg, 0, 1 << 24, &v)) return 2; o.sample_tokens = (int)v; break;
        case 'F': o.check_finite = 1; break;
        case 'D': o.dist_mode = optarg; break;
        case 'I': o.dist_id = optarg; break;
        case 'N': o.plant_nan = optarg; break;
        case 'O': if (cli_parse_long("--plant-overflow", optarg, 1, 1L << 40, &v)) return 2; o.plant_overflow_step = v; break;
        }
    }
    if (c < 0) return parser.status;
    if (o.resume && o.init_ckpt) return cli_usage_error("train", "--resume and --init exclude each other");
    cc_config cfg;
    if (cli_resolve_config(&cfg, &ca, NULL) != 0) return 1;
    cc_train_result res;
    int rc = cc_train(&cfg, &o, &res);
    free(res.losses);
    return rc == 0 ? 0 : 1;
}
