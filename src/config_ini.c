/* The INI reader (docs/formats.md): a config file or INI text in memory
 * applied over a config through inih, every error naming the file and line.
 * inih is fed line by line by a reader of ours (why below); the values go
 * through the key table's setters (config_keys.c), relative paths are taken
 * from the file's folder (config_paths.c). */
#define _POSIX_C_SOURCE 200809L
#include <ctype.h>
#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "config_impl.h"

/* inih tells the handler nothing about lines (Debian builds it without
 * INI_HANDLER_LINENO), so the text is fed to it line by line through a reader
 * that counts lines: the handler then knows the line it is called for, which
 * names the line of a bad value and both lines of a duplicated key. The reader
 * also catches what inih only reports as a bare line number: a section header
 * without its ']'. Values do not continue over indented lines (inih's
 * multi-line values): every line stands alone.
 *
 * Comments are the reader's too. inih's options are fixed when it is built,
 * and Debian's ends a value only at a ';' after a blank: a '#' after a value
 * would be part of it (a path "runs/x # where"), and inih drops anything
 * after a header's first ']' ("[train]]" would read as "[train]"). So the
 * reader cuts the line at the first '#' or ';' that follows a blank, checks
 * the header itself, and inih sees only what is left.
 *
 * Long lines are the reader's as well. inih's line buffer is fixed when it is
 * built (198 bytes and no growing, as Debian builds it), too short for a list
 * of shards. A "key = value" line longer than that reaches inih as "key = -"
 * while the reader keeps the value, cut and trimmed as inih would, for the
 * handler to take instead; a line may hold up to INI_LINE_MAX bytes. */
#define INI_LINE_MAX 65536

typedef struct {
    cc_config *c;
    const char *text;   /* what is left to read */
    const char *origin; /* the file's name, in errors and in cc_config.from */
    const char *dir;    /* the file's folder, for relative paths; NULL for text in memory */
    int line;           /* line the handler is called for */
    int seen[CONFIG_KEYS_MAX]; /* line where each key of config_keys was set, 0 = not yet */
    char *long_value;   /* the value of line long_line, too long for inih's buffer */
    int long_line;
    char msg[512];
    int failed;         /* line of the first failure, 0 = none */
} ini_state;

#define INI_FAIL(st, ln, ...) ((st)->failed = (ln), snprintf((st)->msg, sizeof((st)->msg), __VA_ARGS__))

/* Cut s at its inline comment: the first '#' or ';' after a blank. One at
 * the start of the line is a whole-line comment, which inih skips; one
 * after any other character is part of the value ("data/run#3"). */
static void cut_inline_comment(char *s)
{
    if (*s == '#' || *s == ';') return;
    for (char *p = s; *p; p++)
        if ((*p == '#' || *p == ';') && p > s && (p[-1] == ' ' || p[-1] == '\t')) {
            *p = 0;
            return;
        }
}

/* A header line is '[', a name, ']' and nothing after it but blanks (its
 * comment is already cut). Blanks around the name go, as most INI readers
 * drop them: "[ train ]" is "[train]". Anything else is refused, naming the
 * line as written, rather than read as some section. */
static void check_header(ini_state *st, char *s)
{
    size_t n = strlen(s);
    while (n && strchr(" \t\r\n", s[n - 1])) n--;
    s[n] = 0;
    const char *close = strchr(s, ']');
    const char *why = !close ? "expected '[name]'"
                      : close != s + n - 1 ? "only a comment may follow the ']'"
                                           : NULL;
    const char *name = s + 1;
    size_t len = close ? (size_t)(close - name) : 0;
    while (len && (*name == ' ' || *name == '\t')) name++, len--;
    while (len && (name[len - 1] == ' ' || name[len - 1] == '\t')) len--;
    if (!why && !len) why = "the section has no name";
    if (why) {
        if (!st->failed) INI_FAIL(st, st->line, "malformed section header '%.200s' (%s)", s, why);
        return;
    }
    memmove(s + 1, name, len);
    s[len + 1] = ']';
    s[len + 2] = 0;
}

/* Hand inih (its buffer str, num bytes) the line s, which does not fit it:
 * a "key = value" line as "key = -", its value kept for the handler. */
static void set_aside(ini_state *st, const char *s, char *str, size_t num)
{
    const char *eq = strpbrk(s, "=:"); /* inih's delimiters */
    str[0] = 0;
    if (*s == '#' || *s == ';') { /* a whole-line comment, which inih skips */
        snprintf(str, num, "#");
    } else if (*s == '[') {
        if (!st->failed) INI_FAIL(st, st->line, "section header longer than %zu bytes", num - 3);
    } else if (!eq) { /* inih's own syntax error, at this line */
        snprintf(str, num, "%.*s", (int)(num - 1), s);
    } else if ((size_t)(eq - s) + 4 > num) {
        if (!st->failed) INI_FAIL(st, st->line, "key longer than %zu bytes", num - 5);
    } else {
        const char *v = eq + 1;
        size_t n = strlen(v);
        while (n && isspace((unsigned char)*v)) v++, n--;
        while (n && isspace((unsigned char)v[n - 1])) n--;
        free(st->long_value);
        st->long_value = cc_malloc(n + 1);
        memcpy(st->long_value, v, n);
        st->long_value[n] = 0;
        st->long_line = st->line;
        snprintf(str, num, "%.*s= -", (int)(eq - s), s);
    }
}

static char *ini_read_line(char *str, int num, void *user)
{
    ini_state *st = user;
    if (!*st->text) return NULL;
    const char *nl = strchr(st->text, '\n');
    const size_t len = nl ? (size_t)(nl - st->text) + 1 : strlen(st->text);
    const char *line = st->text;
    st->text += len;
    st->line++;
    /* Leading blanks go: inih would take an indented line for the continuation
     * of the key above it, and report a key set twice or a strange value. */
    size_t skip = 0;
    while (skip < len && (line[skip] == ' ' || line[skip] == '\t')) skip++;
    const size_t n = len - skip;
    if (n > INI_LINE_MAX) {
        if (!st->failed) INI_FAIL(st, st->line, "line longer than %d bytes", INI_LINE_MAX);
        str[0] = 0;
        return str;
    }
    char *s = n < (size_t)num ? str : cc_malloc(n + 1);
    memcpy(s, line + skip, n);
    s[n] = 0;
    cut_inline_comment(s);
    if (*s == '[') check_header(st, s);
    if (s != str) {
        if (strlen(s) < (size_t)num) strcpy(str, s); /* what is left after the comment fits */
        else set_aside(st, s, str, (size_t)num);
        free(s);
    }
    return str;
}

static int ini_apply(void *user, const char *section, const char *name, const char *value)
{
    ini_state *st = user;
    if (st->failed) return 1; /* only the first failure is reported */
    if (st->long_value && st->long_line == st->line) value = st->long_value;
    const key_spec *k = config_section_exists(section) ? config_find_key(section, name) : NULL;
    if (k) {
        const int i = (int)(k - config_keys);
        if (st->seen[i]) {
            INI_FAIL(st, st->line, "[%s] %s is set twice (first at line %d): keep one", section, name, st->seen[i]);
            return 0;
        }
        st->seen[i] = st->line;
    }
    const char *raw = value;
    char resolved[CC_PATH_MAX];
    if (k && k->type == K_PATH && st->dir && *st->dir && *value && strlen(value) < CC_PATH_MAX) {
        if (config_resolve_in_dir(k, st->dir, value, resolved, sizeof(resolved)) != 0) {
            INI_FAIL(st, st->line, "[%s] %s: path longer than %d bytes once taken from the config's folder %s%s",
                     section, name, CC_PATH_MAX - 1, st->dir,
                     config_is_list(k) ? " (a glob such as dir/train_*.bin names many files in a few bytes)" : "");
            return 0;
        }
        value = resolved;
    }
    if (config_set_quiet(st->c, section, name, value, st->msg, sizeof(st->msg)) != 0) {
        st->failed = st->line;
        return 0;
    }
    if (k && k->type == K_PATH) {
        char how[CC_ORIGIN_MAX];
        snprintf(how, sizeof(how), "[%s] %s = %.*s%s in %s:%d", section, name, SHOWN(raw), st->origin, st->line);
        config_note_from(st->c, k, how, raw, st->dir);
    }
    return 1;
}

/* Read INI text over *c; `dir` is the folder relative paths are taken from
 * (NULL: the current folder). */
static int load_text(cc_config *c, const char *text, const char *origin, const char *dir, int validate)
{
    /* Apply to a copy: a config that fails leaves the caller's untouched. */
    cc_config work = *c;
    ini_state st = { .c = &work, .text = text, .origin = origin, .dir = dir };
    const int rc = ini_parse_stream(ini_read_line, &st, ini_apply, &st);
    free(st.long_value);
    /* the earliest line wins: inih's own syntax error or the handler's */
    if (rc > 0 && (!st.failed || rc < st.failed))
        return cc_error("%s:%d: syntax error (expected 'key = value' or '[section]'; comments start with '#' "
                        "or ';' at the start of a line or after a blank)", origin, rc);
    if (st.failed) return cc_error("%s:%d: %s", origin, st.failed, st.msg);
    if (rc != 0) return cc_error("%s: cannot be parsed", origin);
    if (validate && cc_config_validate(&work, origin) != 0) return -1;
    *c = work;
    return 0;
}

int cc_config_load_string(cc_config *c, const char *text, const char *origin)
{
    return load_text(c, text, origin, NULL, 1);
}

int cc_config_load_unchecked(cc_config *c, const char *path)
{
    char dir[CC_PATH_MAX];
    if (config_file_dir(path, dir, sizeof(dir)) != 0)
        return cc_error("config '%s': its folder's path is longer than %d bytes", path, CC_PATH_MAX - 1);
    size_t len;
    char *text = (char *)cc_read_file_what(path, "config", &len); /* refuses a directory, names the path */
    if (!text) return -1;
    if (memchr(text, 0, len)) {
        free(text);
        return cc_error("config '%s' is not a text file (it holds NUL bytes)", path);
    }
    const int rc = load_text(c, text, path, dir, 0);
    free(text);
    return rc;
}

int cc_config_load(cc_config *c, const char *path)
{
    cc_config work = *c;
    if (cc_config_load_unchecked(&work, path) != 0 || cc_config_validate(&work, path) != 0) return -1;
    *c = work;
    return 0;
}
