/* Commands whose engines are not built yet. They say so and exit non-zero
 * (never pretend to have run); --help still describes what they will do. */
#include <stdio.h>
#include <string.h>
#include "cli/cli.h"
#include "catchat/util.h"

static int unbuilt(int argc, char **argv, const char *help)
{
    if (argc > 1 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("%s\n\nnot built yet in this version: it exits with status 2.\n", help);
        return 0;
    }
    cc_error("%s: not built yet in this version", argv[0]);
    return 2;
}

int cmd_bisect(int argc, char **argv)
{
    return unbuilt(argc, argv, "usage: catchat bisect --config F --lengths 64,128,256,512 --steps N\n"
                               "Length bisect: which sequence lengths stay finite.");
}

int cmd_audit(int argc, char **argv)
{
    return unbuilt(argc, argv, "usage: catchat audit --config F --ckpt C\n"
                               "CPU/GPU tensor-by-tensor norm audit of one long sequence.");
}
