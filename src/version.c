/* The version of catchat, from the build (project(... VERSION) in
 * CMakeLists.txt); checkpoints record it. The build id tells two builds of
 * one version apart. */
#define _GNU_SOURCE
#include "catchat/version.h"

#include <elf.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

#ifndef CATCHAT_VERSION
#define CATCHAT_VERSION "unknown"
#endif

const char *cc_version(void) { return CATCHAT_VERSION; }

typedef struct {
    char *buf;
    size_t len;
    int found;
} build_id_search;

/* The linker's NT_GNU_BUILD_ID note of the program (the first object
 * dl_iterate_phdr reports): a hash of everything linked in, the kernels'
 * device code included. */
static int find_build_id(struct dl_phdr_info *info, size_t size, void *arg)
{
    (void)size;
    build_id_search *s = arg;
    for (int i = 0; i < info->dlpi_phnum && !s->found; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_NOTE) continue;
        const char *p = (const char *)(info->dlpi_addr + ph->p_vaddr), *end = p + ph->p_memsz;
        while (p + sizeof(ElfW(Nhdr)) <= end) {
            const ElfW(Nhdr) *nh = (const ElfW(Nhdr) *)p;
            const char *name = p + sizeof(*nh), *desc = name + ((nh->n_namesz + 3) & ~3u);
            if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
                size_t k = 0;
                for (unsigned j = 0; j < nh->n_descsz && k + 3 <= s->len; j++, k += 2)
                    snprintf(s->buf + k, s->len - k, "%02x", (unsigned char)desc[j]);
                s->found = k > 0;
                break;
            }
            p = desc + ((nh->n_descsz + 3) & ~3u);
        }
    }
    return 1; /* the program only */
}

void cc_build_id(char *buf, size_t len)
{
    build_id_search s = { buf, len, 0 };
    dl_iterate_phdr(find_build_id, &s);
    if (!s.found) snprintf(buf, len, "none (built without --build-id)");
}
