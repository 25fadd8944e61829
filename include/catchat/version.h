/* The version of catchat (semantic, 0.x while file formats may change), as
 * `catchat --version` prints it and checkpoints record it. */
#ifndef CATCHAT_VERSION_H
#define CATCHAT_VERSION_H

#include <stddef.h>

const char *cc_version(void);
/* The program's GNU build id in hex (changes with any change to what was
 * linked, device code included); "none (...)" where the linker wrote none. */
void cc_build_id(char *buf, size_t len);

#endif
