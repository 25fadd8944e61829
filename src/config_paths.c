/* The path keys ([data] train, val, [run] out_dir): where each value came
 * from, kept for the error that cannot open it, and a relative path in a
 * config file taken from that file's folder. Lexical only (nothing here
 * touches the file system but getcwd for a message): the loaders open the
 * files later. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include "config_impl.h"

/* ---- Where a path value came from (cc_config.from) ---- */

/* The current folder, for messages; "." where it cannot be named. */
static void current_folder(char *buf, size_t cap)
{
    if (!getcwd(buf, cap)) snprintf(buf, cap, ".");
}

/* Whether a path value (any entry of a [data] list) is relative. */
static int has_relative(const key_spec *k, const char *v)
{
    if (!config_is_list(k)) return *v && *v != '/';
    for (const char *p = v;;) {
        p += strspn(p, " \t");
        const size_t n = strcspn(p, ",");
        if (n && *p != '/') return 1;
        if (!p[n]) return 0;
        p += n + 1;
    }
}

/* Say where path key k's value came from into out: `how` ("--set
 * train=x.txt") and, where the value as written (`raw`) is relative, what it
 * was taken from: the config's folder `dir`, or the current folder (dir
 * NULL, or "" for a config in the current folder). */
static void describe_from(char *out, size_t cap, const key_spec *k, const char *how, const char *raw, const char *dir)
{
    char here[CC_PATH_MAX];
    if (!has_relative(k, raw)) {
        snprintf(out, cap, "%s", how);
    } else if (dir && *dir) {
        snprintf(out, cap, "%s, resolved against %s (the config's folder)", how, dir);
    } else {
        current_folder(here, sizeof(here));
        snprintf(out, cap, "%s, resolved against %s (the current folder%s)", how, here, dir ? ", which holds the config" : "");
    }
}

/* The same, kept in c's origin field of path key k. */
void config_note_from(cc_config *c, const key_spec *k, const char *how, const char *raw, const char *dir)
{
    if (k->type == K_PATH) describe_from((char *)c + config_from_offset(k), CC_ORIGIN_MAX, k, how, raw, dir);
}

void cc_config_path_origin(const cc_config *c, const char *section, const char *key, char *out, size_t cap)
{
    const key_spec *k = config_find_key(section, key);
    if (cap) out[0] = 0;
    if (!k || k->type != K_PATH) return;
    const char *from = (const char *)c + config_from_offset(k);
    if (*from) {
        snprintf(out, cap, "%s", from);
        return;
    }
    char how[64];
    snprintf(how, sizeof(how), "the default [%s] %s", k->section, k->key);
    describe_from(out, cap, k, how, (const char *)c + k->offset, NULL);
}

/* ---- Relative paths in a config file: taken from the file's folder ---- */

/* Add one component to the path out (len bytes used, cap the room): "" and
 * "." add nothing; ".." takes the last component off where there is a name
 * to take (and stays "/" at the root); anything else is appended after a
 * '/'. Lexical: a symbolic link is not followed, as the user reads the path.
 * -1 when out is full. */
static int push_component(char *out, size_t *len, size_t cap, const char *comp, size_t n)
{
    if (n == 0 || (n == 1 && comp[0] == '.')) return 0;
    if (n == 2 && comp[0] == '.' && comp[1] == '.') {
        size_t start = *len;
        while (start && out[start - 1] != '/') start--;
        const size_t last = *len - start;
        if (last && !(last == 2 && out[start] == '.' && out[start + 1] == '.')) {
            *len = start == 1 && out[0] == '/' ? 1 : start ? start - 1 : 0;
            out[*len] = 0;
            return 0;
        }
        if (*len == 1 && out[0] == '/') return 0; /* the root's parent is the root */
    }
    const size_t sep = *len && out[*len - 1] != '/';
    if (*len + sep + n >= cap) return -1;
    if (sep) out[(*len)++] = '/';
    memcpy(out + *len, comp, n);
    *len += n;
    out[*len] = 0;
    return 0;
}

/* The folder of the config file `path` as its path names it, tidied
 * ("./configs/a.ini" gives "configs", "a.ini" gives ""); -1 if too long. */
int config_file_dir(const char *path, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    const char *slash = strrchr(path, '/');
    if (!slash) return 0;
    if (*path == '/') out[len++] = '/', out[len] = 0;
    for (const char *p = path; p < slash;) {
        const char *e = p;
        while (e < slash && *e != '/') e++;
        if (push_component(out, &len, cap, p, (size_t)(e - p)) != 0) return -1;
        p = e + 1;
    }
    return 0;
}

/* Append to out the path e (n bytes) taken from the folder dir: an absolute
 * one as it is; a relative one joined to dir, its leading "./" and "../"
 * applied to dir ("configs" and "../data/x" give "data/x"), the rest as
 * written. -1 when out (cap bytes) is full. */
static int join_entry(const char *dir, const char *e, size_t n, char *out, size_t *len, size_t cap)
{
    char joined[CC_PATH_MAX];
    size_t jl = strlen(dir);
    if (*e == '/') {
        if (*len + n >= cap) return -1;
        memcpy(out + *len, e, n);
        *len += n;
        out[*len] = 0;
        return 0;
    }
    if (jl >= sizeof(joined)) return -1;
    memcpy(joined, dir, jl + 1);
    const char *p = e, *end = e + n;
    while (p < end) { /* the leading "." and ".." components */
        const char *q = p;
        while (q < end && *q != '/') q++;
        const size_t m = (size_t)(q - p);
        const int dots = m == 0 || (m == 1 && *p == '.') || (m == 2 && p[0] == '.' && p[1] == '.');
        if (!dots) break;
        if (push_component(joined, &jl, sizeof(joined), p, m) != 0) return -1;
        p = q < end ? q + 1 : q;
    }
    if (p < end && push_component(joined, &jl, sizeof(joined), p, (size_t)(end - p)) != 0) return -1;
    if (!jl) joined[jl++] = '.', joined[jl] = 0; /* "configs" and ".." */
    if (*len + jl >= cap) return -1;
    memcpy(out + *len, joined, jl + 1);
    *len += jl;
    return 0;
}

/* Path key k's value v as read from a config file in the folder dir (not
 * ""): every relative path of it (each entry of a [data] list, globs too)
 * joined to dir. -1 when the result does not fit out. */
int config_resolve_in_dir(const key_spec *k, const char *dir, const char *v, char *out, size_t cap)
{
    size_t len = 0;
    out[0] = 0;
    if (!config_is_list(k)) return join_entry(dir, v, strlen(v), out, &len, cap);
    for (const char *p = v;;) {
        p += strspn(p, " \t"); /* the blanks after a comma, which the loader drops too */
        const size_t n = strcspn(p, ",");
        if (n && join_entry(dir, p, n, out, &len, cap) != 0) return -1;
        if (!p[n]) return 0;
        if (len + 1 >= cap) return -1;
        out[len++] = ',';
        out[len] = 0;
        p += n + 1;
    }
}
