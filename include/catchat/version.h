/* The version of catchat (semantic, 0.x while file formats may change), as
 * `catchat --version` prints it and checkpoints record it. */
#ifndef CATCHAT_VERSION_H
#define CATCHAT_VERSION_H

#include <stdio.h>

const char *cc_version(void);
/* Version, git revision, compiled GPU architectures, CUDA runtime and driver,
 * cuBLASLt and NCCL versions, one per line. */
void cc_version_print(FILE *f);

#endif
