#define _POSIX_C_SOURCE 200809L
#include "cli/cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "catchat/checkpoint.h"
#include "catchat/data.h"
#include "catchat/layout.h"
#include "catchat/preflight.h"
#include "catchat/util.h"

int cli_add_set(cli_config_args *a, const char *assignment)
{
    if (a->nsets >= CLI_MAX_SETS) return cc_error("too many --set options (max %d)", CLI_MAX_SETS);
    a->sets[a->nsets++] = assignment;
    return 0;
}

int cli_resolve_config(cc_config *cfg, const cli_config_args *a, const char *ckpt, cli_ckpt_model policy)
{
    cc_config stored;
    int has_stored = 0;
    cc_config_defaults(cfg);
    if (ckpt) {
        /* the whole file and its checksums first: a damaged checkpoint is
         * said to be damaged, not reported as whatever its stored config
         * (a data path, a shape) would make fail later */
        if (cc_checkpoint_verify(ckpt) != 0) return -1;
        cc_config_defaults(&stored);
        if ((has_stored = cc_checkpoint_read_config(ckpt, &stored)) < 0) return -1;
        if (!has_stored && !a->config_path)
            return cc_error("%s holds no config: pass --config with the model's shape", ckpt);
        if (has_stored && !a->config_path) *cfg = stored;
    }
    /* keys that span each other (n_heads | d_model, lr_min ≤ lr) are checked
     * once everything is applied, so --set can mend a file's pair */
    if (a->config_path && cc_config_load_unchecked(cfg, a->config_path) != 0) return -1;
    if (cli_apply_env(cfg) != 0) return -1;
    const cc_config before_sets = *cfg; /* a value type: fixed arrays only */
    for (int i = 0; i < a->nsets; i++)
        if (cc_config_set_arg(cfg, a->sets[i]) != 0) return -1;
    if (has_stored) {
        /* The [model] keys define the network the weights belong to. */
        char diff[1024];
        const int n = cc_config_section_diff(cfg, &stored, "model", diff, sizeof(diff));
        if (n && policy == CKPT_MODEL_MUST_MATCH) {
            /* --init loads the weights under this config's [model] keys: offer it only where the file
             * holds every tensor they need in its shape (n_heads, ctx_window, seq_len and the norm
             * constants change no shape; vocab_size and d_model change them; fewer n_layers leave
             * tensors unused, more miss some) */
            const cc_dims d = cc_dims_from_config(cfg);
            cc_layout lay;
            cc_layout_build(&lay, &d);
            const int init_works = cc_checkpoint_fits(ckpt, &lay) == 1;
            return cc_error("%s was trained with other [model] keys than this config: %s; --resume continues "
                            "the same model (%s%s)", ckpt, diff,
                            a->config_path ? "drop --config to take the stored one" : "drop the --set of those keys",
                            init_works ? ", or use --init to start from its weights under this config's [model] keys" : "");
        }
        if (n && policy == CKPT_MODEL_WINS) {
            fprintf(stderr, "catchat: note: the [model] keys stored in %s win over the config: %s\n", ckpt, diff);
            cc_config_copy_section(cfg, &stored, "model");
        }
        if (n && policy == CKPT_MODEL_MAY_DIFFER)
            fprintf(stderr, "catchat: warning: starting from %s with other [model] keys than it was trained "
                            "with: %s\n", ckpt, diff);
    }
    if (cc_config_validate(cfg, a->nsets ? "config and --set" : a->config_path ? a->config_path : "config") != 0) {
        /* keys that fit each other without the --set values: the command line broke the pair (exit 2, as
         * any bad --set); a pair the file breaks too is the file's (exit 1) */
        cc_config without = before_sets;
        if (has_stored && policy == CKPT_MODEL_WINS) cc_config_copy_section(&without, &stored, "model");
        cc_error_quiet++;
        const int file_fits = a->nsets && cc_config_validate(&without, "config") == 0;
        cc_error_quiet--;
        return file_fits ? CLI_BAD_COMMAND_LINE : -1;
    }
    /* the data loader's errors say where a [data] path came from */
    char why[CC_ORIGIN_MAX];
    cc_config_path_origin(cfg, "data", "train", why, sizeof(why));
    cc_data_note_origin(cfg->train, why);
    cc_config_path_origin(cfg, "data", "val", why, sizeof(why));
    cc_data_note_origin(cfg->val, why);
    /* once a process: train --resume auto resolves the config twice */
    static int noted;
    if (!noted++) cc_config_notes(cfg, policy != CKPT_MODEL_WINS);
    return 0;
}

int cli_parse_long(const char *opt, const char *text, long min, long max, long *out)
{
    long long v;
    const int rc = cc_parse_integer(text, &v); /* "1e6" too, as config values take it */
    if (rc == -2 || (rc == 0 && (v < min || v > max)))
        return cc_error("%s: %s is out of range [%ld, %ld]", opt, text, min, max);
    if (rc != 0) return cc_error("%s: '%s' is not an integer", opt, text);
    *out = (long)v;
    return 0;
}

/* A --set is checked as it is read, against the defaults: a key or value
 * it cannot take is a bad command line (exit 2), like any other option,
 * while a bad value in a config file (exit 1) is the file's. Keys that
 * span each other are checked once all is applied (cli_resolve_config). */
static int check_set(const char *assignment)
{
    cc_config scratch;
    cc_config_defaults(&scratch);
    return cc_config_set_arg(&scratch, assignment);
}

int cli_parse_double(const char *opt, const char *text, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(text, &end);
    if (!*text || *end || errno == ERANGE || !isfinite(v))
        return cc_error("%s: '%s' is not a finite number", opt, text);
    if (v < min || v > max) return cc_error("%s: %g is out of range [%g, %g]", opt, v, min, max);
    *out = v;
    return 0;
}

int cli_parse_u64(const char *opt, const char *text, unsigned long long *out)
{
    char *end;
    errno = 0;
    if (!*text || *text == '-') return cc_error("%s: '%s' is not an unsigned integer", opt, text);
    unsigned long long v = strtoull(text, &end, 10);
    if (*end || errno == ERANGE) return cc_error("%s: '%s' is not an unsigned integer", opt, text);
    *out = v;
    return 0;
}

void cli_parser_init(cli_parser *p, const char *cmd, const char *help, const struct option *opts,
                     cli_config_args *ca)
{
    int n = 0;
    for (; opts[n].name; n++) p->all[n] = opts[n];
    if (n > CLI_MAX_OPTS) abort(); /* a programming error: raise CLI_MAX_OPTS */
    if (ca) {
        p->all[n++] = (struct option){ "config", required_argument, 0, OPT_CONFIG };
        p->all[n++] = (struct option){ "set", required_argument, 0, OPT_SET };
    }
    p->all[n++] = (struct option){ "help", no_argument, 0, OPT_HELP_ID };
    p->all[n] = (struct option){ 0, 0, 0, 0 };
    p->cmd = cmd;
    p->help = help;
    p->ca = ca;
    p->status = 0;
    optind = 1;
    opterr = 0; /* errors are reported by cli_usage_error, naming the subcommand */
}

int cli_next_opt(cli_parser *p, int argc, char **argv)
{
    for (;;) {
        const int c = getopt_long(argc, argv, "h", p->all, NULL); /* -h: --help, as 'catchat -h' */
        switch (c) {
        case -1:
            if (optind < argc) {
                char what[300];
                snprintf(what, sizeof(what), "unexpected argument '%s'", argv[optind]);
                p->status = cli_usage_error(p->cmd, what);
                return -1;
            }
            return 0;
        case OPT_CONFIG: p->ca->config_path = optarg; break;
        case OPT_PREFLIGHT: p->ca->preflight = optarg; break;
        case OPT_SET:
            if (cli_add_set(p->ca, optarg) || check_set(optarg)) {
                p->status = 2;
                return -1;
            }
            break;
        case 'h':
        case OPT_HELP_ID:
            fputs(p->help, stdout);
            p->status = 0;
            return -1;
        case '?':
        case ':': {
            /* getopt_long leaves optopt 0 for an unknown long option and sets it
             * to the option's id when a known option lacks its value */
            char what[300];
            const char *arg = optind > 0 && optind <= argc ? argv[optind - 1] : "?";
            if (optopt && strncmp(arg, "--", 2) == 0) snprintf(what, sizeof(what), "option '%s' needs a value", arg);
            else snprintf(what, sizeof(what), "unknown option '%s'", arg);
            p->status = cli_usage_error(p->cmd, what);
            return -1;
        }
        default: return c;
        }
    }
}

int cli_check_choice(const char *cmd, const char *opt, const char *value, const char *choices)
{
    const size_t n = strlen(value);
    for (const char *c = choices; *c;) {
        const size_t len = strcspn(c, "|");
        if (len == n && strncmp(c, value, n) == 0) return 0;
        c += len + (c[len] == '|');
    }
    char what[256];
    snprintf(what, sizeof(what), "%s '%s': expected one of %s", opt, value, choices);
    return cli_usage_error(cmd, what);
}

int cli_usage_error(const char *cmd, const char *what)
{
    cc_error("%s: %s (see 'catchat %s --help')", cmd, what, cmd);
    return 2;
}

int cli_preflight_opts(cc_preflight_opts *o, const cli_config_args *ca, const char *cmd, int quiet)
{
    memset(o, 0, sizeof(*o));
    o->mode = ca->preflight ? ca->preflight : "auto";
    if (cli_check_choice(cmd, "--preflight", o->mode, "auto|always|never")) return 2;
    o->cache_dir = cli_cache_dir();
    o->command = cmd;
    o->quiet = quiet;
    return 0;
}

int cli_sets_key(const cli_config_args *a, const char *section, const char *key)
{
    for (int i = 0; i < a->nsets; i++) {
        const char *s = a->sets[i];
        while (*s == ' ' || *s == '\t') s++;
        size_t n = strcspn(s, "=");
        while (n && (s[n - 1] == ' ' || s[n - 1] == '\t')) n--; /* "key = value" as --set trims it */
        const size_t ls = strlen(section), lk = strlen(key);
        if ((n == lk && strncmp(s, key, lk) == 0) ||
            (n == ls + 1 + lk && strncmp(s, section, ls) == 0 && s[ls] == '.' && strncmp(s + ls + 1, key, lk) == 0))
            return 1;
    }
    return 0;
}

int cli_check_stored_data(const cli_config_args *a, const char *ckpt, const cc_config *cfg, const char *key,
                          const char *way_out)
{
    if (a->config_path || cli_sets_key(a, "data", key)) return 0; /* the path is the user's own, not the checkpoint's */
    const char *path = strcmp(key, "train") == 0 ? cfg->train : cfg->val;
    if (strpbrk(path, ",*?[")) return 0; /* a list or a glob: the data loader names the entry that fails */
    if (access(path, R_OK) == 0) return 0;
    return cc_error("%s: the [data] %s stored in its config, '%s', cannot be read (%s; a relative path is taken "
                    "from the folder its run started in): %s", ckpt, key, path, strerror(errno), way_out);
}
