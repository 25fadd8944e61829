/* The version of catchat, from the build (project(... VERSION) in
 * CMakeLists.txt); checkpoints record it. */
#include "catchat/version.h"

#ifndef CATCHAT_VERSION
#define CATCHAT_VERSION "unknown"
#endif

const char *cc_version(void) { return CATCHAT_VERSION; }

