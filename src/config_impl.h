/* Private to the config files (src/config_*.c): the key table's row type and
 * the few helpers more than one of them needs. The table itself is in
 * config_keys.c; every other file walks it rather than naming keys, so that a
 * key added there reaches the INI reader, --set, printing, JSON and the docs
 * at once. The public API is include/catchat/config.h: nothing here is for
 * callers outside these files. */
#ifndef CATCHAT_CONFIG_IMPL_H
#define CATCHAT_CONFIG_IMPL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "catchat/config.h"

typedef enum { K_INT, K_LONG, K_REAL, K_U64, K_PATH, K_CHOICE, K_SCALE, K_BYTES } key_type;

typedef struct {
    const char *section, *key;
    key_type type;
    size_t offset;
    double min, max; /* K_BYTES: min is the least size other than 0, max unused */
    const char *def;
    const char *help;
    const char *choices; /* K_CHOICE: the values allowed, '|'-separated (stored as text) */
} key_spec;

#define OFF(f) offsetof(cc_config, f)

/* ---- config_keys.c: the table, finding a key, setting one from text ---- */

/* The most keys the table may hold: the INI reader keeps the line each key
 * was set at in an array of this size (ini_state.seen). */
#define CONFIG_KEYS_MAX 64
extern const key_spec config_keys[];
extern const int config_nkeys;

/* Key `key` of `section` (of any section where section is NULL); NULL if none. */
const key_spec *config_find_key(const char *section, const char *key);
int config_section_exists(const char *section);
/* Parse `v` into key `k`. On failure writes "[section] key: why" into msg. */
int config_set_spec(cc_config *c, const key_spec *k, const char *v, char *msg, size_t cap);
/* As cc_config_set, but the reason goes into msg instead of stderr. */
int config_set_quiet(cc_config *c, const char *section, const char *key, const char *value,
                     char *msg, size_t cap);

/* Where path key k keeps its origin text (cc_config.from). */
static inline size_t config_from_offset(const key_spec *k)
{
    return k->offset == OFF(train) ? OFF(from.train) : k->offset == OFF(val) ? OFF(from.val) : OFF(from.out_dir);
}
_Static_assert(OFF(from) > OFF(out_dir), "cc_config.from follows every key");

/* [data] train and val are lists: comma-separated paths or globs. */
static inline int config_is_list(const key_spec *k) { return k->offset == OFF(train) || k->offset == OFF(val); }

/* ---- config_values.c: numbers and byte sizes as text ---- */

int config_parse_real(const char *v, double *out);
typedef enum { BYTES_OK, BYTES_SYNTAX, BYTES_NEGATIVE, BYTES_OVERFLOW } bytes_status;
bytes_status config_parse_bytes(const char *v, uint64_t *out);
void config_format_bytes(char *buf, size_t cap, uint64_t n);

/* ---- config_paths.c: where a path value came from, relative paths ---- */

/* Describe where path key k's value came from in c's origin field. */
void config_note_from(cc_config *c, const key_spec *k, const char *how, const char *raw, const char *dir);
/* The folder of the config file `path` as its path names it; -1 if too long. */
int config_file_dir(const char *path, char *out, size_t cap);
/* Path key k's value v with every relative path of it joined to dir; -1 if too long. */
int config_resolve_in_dir(const key_spec *k, const char *dir, const char *v, char *out, size_t cap);

/* ---- config_print.c ---- */

/* The value of a key as text, as it would be written in an INI file. */
void config_value_text(const cc_config *c, const key_spec *k, char *buf, size_t cap);

/* A value as a message shows it: long ones cut, saying so. */
#define SHOWN_MAX 120
#define SHOWN(v) SHOWN_MAX, (v), strlen(v) > SHOWN_MAX ? "..." : ""

#endif
