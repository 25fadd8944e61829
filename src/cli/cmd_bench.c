/* catchat bench */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include "cli/cli.h"
#include "catchat/bench.h"
#include "catchat/gpu_plan.h"
#include "catchat/preflight.h"
#include "catchat/util.h"

static const char *HELP =
    "usage: catchat bench [--config F] [--set key=value]... [--steps N] [--warmup N]\n"
    "                     [--cpu-steps N] [--json] [--preflight MODE]\n\n"
    "Times the full training step (forward, backward, optimizer) of the config on the\n"
    "GPU: median of --steps after --warmup, tokens/s and the number of lanes (groups\n"
    "of sequences on their own streams) the step ran in; then --steps more steps\n"
    "whose operations run one after another on one stream (the serial schedule, [gpu]\n"
    "schedule = serial: the same operations and numbers as the step that trains, not\n"
    "its overlap), for the device time per phase (CUDA events) and microseconds per\n"
    "timestep per layer of a lane's recurrence (under recompute the BPTT's include\n"
    "the rebuilds), with which implementation ran and why; then the CPU reference on\n"
    "the same batch (--cpu-steps, 0 to skip) and the GPU's speedup over it.\n\n"
    "  --steps N       timed steps (default 30)\n"
    "  --warmup N      untimed steps first (default 5)\n"
    "  --cpu-steps N   CPU reference steps, their median (default: 1 beside a GPU,\n"
    "                  for the speedup; 3 without one, none started after a minute of\n"
    "                  them)\n"
    "  --json          one JSON object; what was not measured (no GPU, --cpu-steps 0)\n"
    "                  is null\n"
    CLI_PREFLIGHT_HELP("  ", "                  ") "\n"
    "Exit status: 0, 1 on error, 2 on a bad option, 77 (skipped) when nothing could\n"
    "be measured: no GPU and --cpu-steps 0.\n\n"
    "How the GPU runs the step ([gpu] keys, also for training; --set or the\n"
    "environment):\n"
    "  lanes=N (CATCHAT_GPU_LANES)          lanes per step, 1..8 dividing batch_size\n"
    "                                       (0: up to 4)\n"
    "  lane_trace=1 (CATCHAT_LANE_TRACE=1)  print when each lane's recurrences ran,\n"
    "                                       after every step\n"
    "  cuda_graph=on|off (CATCHAT_CUDA_GRAPH=1|0)  replay the step as one CUDA graph\n"
    "                                       (default auto: where the recurrence's\n"
    "                                       clusters all fit at once)\n"
    "  attention=tiled|fp32                 the tiled tensor-core attention kernel at\n"
    "                                       every shape, or the FP32 kernels (default\n"
    "                                       auto: the band kernel at head sizes 64,\n"
    "                                       128, 256 with windows up to 129, the\n"
    "                                       tiled one elsewhere)\n"
    "  recurrence=persistent|per-step       force a GRU recurrence implementation\n"
    "  recompute=auto|off|on                keep every activation, or rebuild them in\n"
    "                                       the backward (less memory)\n"
    "  memory_limit=SIZE                    plan as if the GPU had SIZE (e.g. 10G):\n"
    "                                       will it fit that card?\n"
    "  classifier_rows=N                    rows of the classifier's chunk (default:\n"
    "                                       what fits 256 MiB over the lanes)\n"
    "  wavefront=auto|off, wavefront_chunk=N  the layers' recurrences over time\n"
    "                                       chunks at once, or one after another\n"
    "  profile=sm80|sm86|sm89|sm90|sm100|sm120  run as that GPU family would\n"
    "                                       (docs/gpus.md)\n"
    "  sm_count=N, smem_per_block=KB, clusters=off  the same limits one at a time\n";

int cmd_bench(int argc, char **argv)
{
    static const struct option opts[] = { { "steps", required_argument, 0, 'n' }, { "warmup", required_argument, 0, 'w' },
                                          { "cpu-steps", required_argument, 0, 'p' }, { "json", no_argument, 0, 'j' },
                                          CLI_PREFLIGHT_OPTION, { 0, 0, 0, 0 } };
    cli_config_args ca = { 0 };
    cc_bench_opts o = { 30, 5, -1, 0, NULL }; /* cpu_steps -1: cc_bench chooses, knowing whether a GPU was measured */
    long v;
    int c;
    cli_parser parser;
    cli_parser_init(&parser, "bench", HELP, opts, &ca);
    while ((c = cli_next_opt(&parser, argc, argv)) > 0) {
        switch (c) {
        case 'n': if (cli_parse_long("--steps", optarg, 1, 100000, &v)) return 2; o.steps = (int)v; break;
        case 'w': if (cli_parse_long("--warmup", optarg, 0, 100000, &v)) return 2; o.warmup = (int)v; break;
        case 'p': if (cli_parse_long("--cpu-steps", optarg, 0, 1000, &v)) return 2; o.cpu_steps = (int)v; break;
        case 'j': o.json = 1; break;
        }
    }
    if (c < 0) return parser.status;
    cc_preflight_opts po;
    if (cli_preflight_opts(&po, &ca, "bench", o.json)) return 2;
    cc_config cfg;
    int rcfg;
    if ((rcfg = cli_resolve_config(&cfg, &ca, NULL, CKPT_MODEL_WINS)) != 0) return cli_config_status(rcfg);
    gpu_step_plan plan;
    if (cli_plan_and_preflight(&cfg, &po, &plan) != 0) return 1;
    o.plan = po.plan;
    const int rc = cc_bench(&cfg, &o, stdout);
    if (rc == CC_BENCH_NOTHING_MEASURED) {
        fprintf(stderr, "catchat: bench: no GPU measured and --cpu-steps 0: nothing measured (skipped, exit 77)\n");
        return 77;
    }
    return rc == 0 ? 0 : 1;
}
