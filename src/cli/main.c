/* catchat: one program, git-style subcommands. */
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "catchat/util.h"

static const struct {
    const char *name;
    cli_cmd_fn fn;
    const char *summary;
} COMMANDS[] = {
    { "train", cmd_train, "train a model from a config (CPU or GPU), with telemetry and checkpoints" },
    { "eval", cmd_eval, "loss, top-1 and top-5 of a checkpoint on a data file" },
    { "sample", cmd_sample, "generate text from a checkpoint, streaming" },
    { "ladder", cmd_ladder, "the 11-stage GPU-vs-CPU parity ladder" },
    { "bench", cmd_bench, "time a training step and its parts" },
    { "bisect", cmd_bisect, "length bisect: the shortest sequence length that goes non-finite" },
    { "audit", cmd_audit, "CPU/GPU tensor-by-tensor norm audit of one long sequence" },
    { "dump-state", cmd_dump_state, "one batch's loss and every gradient, as safetensors" },
};
#define NCOMMANDS ((int)(sizeof(COMMANDS) / sizeof(COMMANDS[0])))

static void usage(FILE *f)
{
    fprintf(f, "usage: catchat <command> [options]   ('catchat <command> --help' for each)\n\n"
               "catchat trains the dual-stream recurrent language model (GRU token stream +\n"
               "sliding-window attention context stream) on the CPU reference or an NVIDIA GPU.\n\n"
               "commands:\n");
    for (int i = 0; i < NCOMMANDS; i++) fprintf(f, "  %-11s %s\n", COMMANDS[i].name, COMMANDS[i].summary);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return 0;
    }
    for (int i = 0; i < NCOMMANDS; i++)
        if (strcmp(argv[1], COMMANDS[i].name) == 0) return COMMANDS[i].fn(argc - 1, argv + 1);
    cc_error("unknown command '%s' (try 'catchat --help')", argv[1]);
    return 2;
}
