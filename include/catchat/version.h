/* The version of catchat (semantic, 0.x while file formats may change), as
 * `catchat --version` prints it and checkpoints record it. */
#ifndef CATCHAT_VERSION_H
#define CATCHAT_VERSION_H

const char *cc_version(void);

#endif
