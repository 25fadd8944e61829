/* The config as INI text: every key (the run's signature that data-parallel
 * ranks compare), only the keys that differ from the defaults (what a run
 * says it was given), and the keys of one section that differ between two
 * configs (a checkpoint's stored [model] against the one asked for). Each
 * value is written as an INI file would hold it, so that the text reads back
 * as the same config and two equal texts mean two equal configs. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include "config_impl.h"

/* The value of a key as text, as it would be written in an INI file. */
void config_value_text(const cc_config *c, const key_spec *k, char *buf, size_t cap)
{
    const char *base = (const char *)c + k->offset;
    switch (k->type) {
    case K_INT: snprintf(buf, cap, "%d", *(const int *)base); break;
    case K_LONG: snprintf(buf, cap, "%ld", *(const long *)base); break;
    case K_U64: snprintf(buf, cap, "%llu", (unsigned long long)*(const uint64_t *)base); break;
    case K_BYTES: config_format_bytes(buf, cap, *(const uint64_t *)base); break;
    case K_SCALE:
        if (c->loss_scale_dynamic) { snprintf(buf, cap, "dynamic"); break; }
        /* fallthrough */
    case K_REAL: cc_format_real(buf, cap, *(const double *)base); break;
    case K_PATH:
    case K_CHOICE: snprintf(buf, cap, "%s", base); break;
    }
}

void cc_config_print(const cc_config *c, FILE *f)
{
    const char *section = "";
    char buf[CC_PATH_MAX + 8];
    for (int i = 0; i < config_nkeys; i++) {
        if (strcmp(section, config_keys[i].section) != 0) {
            section = config_keys[i].section;
            fprintf(f, "%s[%s]\n", i ? "\n" : "", section);
        }
        config_value_text(c, &config_keys[i], buf, sizeof(buf));
        fprintf(f, "%s = %s\n", config_keys[i].key, buf);
    }
}

void cc_config_print_changed(const cc_config *c, FILE *f)
{
    cc_config def;
    cc_config_defaults(&def);
    const char *section = "";
    int n = 0;
    char buf[CC_PATH_MAX + 8], was[CC_PATH_MAX + 8];
    for (int i = 0; i < config_nkeys; i++) {
        config_value_text(c, &config_keys[i], buf, sizeof(buf));
        config_value_text(&def, &config_keys[i], was, sizeof(was));
        if (strcmp(buf, was) == 0) continue;
        if (strcmp(section, config_keys[i].section) != 0) {
            section = config_keys[i].section;
            fprintf(f, "%s[%s]\n", n ? "\n" : "", section);
        }
        fprintf(f, "%s = %s\n", config_keys[i].key, buf);
        n++;
    }
    if (!n) fprintf(f, "(all defaults)\n");
}

int cc_config_section_diff(const cc_config *a, const cc_config *b, const char *section, char *out, size_t cap)
{
    int n = 0;
    size_t used = 0;
    if (cap) out[0] = 0;
    for (int i = 0; i < config_nkeys; i++) {
        if (strcmp(config_keys[i].section, section) != 0) continue;
        char va[CC_PATH_MAX + 8], vb[CC_PATH_MAX + 8];
        config_value_text(a, &config_keys[i], va, sizeof(va));
        config_value_text(b, &config_keys[i], vb, sizeof(vb));
        if (strcmp(va, vb) == 0) continue;
        if (used < cap) used += (size_t)snprintf(out + used, cap - used, "%s%s %s (stored %s)", n ? ", " : "",
                                                 config_keys[i].key, va, vb);
        n++;
    }
    return n;
}
