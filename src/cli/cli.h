/* Shared pieces of the subcommands: config resolution and strict parsing of
 * option values. Each cmd_*.c holds one subcommand. */
#ifndef CATCHAT_CLI_H
#define CATCHAT_CLI_H

#include <getopt.h>
#include "catchat/config.h"

#define CLI_MAX_SETS 128

typedef struct cli_config_args {
    const char *config_path;
    const char *sets[CLI_MAX_SETS];
    int nsets;
} cli_config_args;

/* Options every config-taking subcommand accepts (getopt_long ids). */
enum { OPT_CONFIG = 1000, OPT_SET, OPT_HELP_ID };

#define CLI_MAX_OPTS 32

/* The option loop every subcommand shares. The subcommand lists only its own
 * options (ids below 1000); the parser adds --help, and --config/--set when
 * `ca` is given, and handles those itself:
 *     cli_parser parser;
 *     cli_parser_init(&parser, "bench", HELP, opts, &ca);
 *     while ((c = cli_next_opt(&parser, argc, argv)) > 0)
 *         switch (c) { ... }            // optarg holds the value
 *     if (c < 0) return parser.status;  // --help (0), or a usage error (2)
 * cli_next_opt returns the next option id of the subcommand's own, 0 when
 * all arguments are taken, or -1 with parser.status set. */
typedef struct cli_parser {
    const char *cmd, *help;
    cli_config_args *ca;
    struct option all[CLI_MAX_OPTS + 4];
    int status;
} cli_parser;

void cli_parser_init(cli_parser *p, const char *cmd, const char *help, const struct option *opts,
                     cli_config_args *ca);
int cli_next_opt(cli_parser *p, int argc, char **argv);

int cli_add_set(cli_config_args *a, const char *assignment);
/* What the [model] keys stored in a checkpoint mean against the config given. */
typedef enum {
    CKPT_MODEL_WINS,       /* eval, sample, dump-state, audit: the stored keys are used (a note names any change) */
    CKPT_MODEL_MUST_MATCH, /* train --resume: a difference is an error */
    CKPT_MODEL_MAY_DIFFER, /* train --init: a difference is a warning (changing them is the point) */
} cli_ckpt_model;
/* defaults → config stored in `ckpt` (if given and no --config) → --config →
 * environment (cli_env.c) → --set, then the stored [model] keys by `policy`. ckpt may be NULL. */
int cli_resolve_config(cc_config *cfg, const cli_config_args *a, const char *ckpt, cli_ckpt_model policy);

/* Environment variables that stand for config keys ([gpu] lanes, ...) and
 * library settings, applied over the config (cli_env.c). */
int cli_apply_env(cc_config *cfg);
/* What a launcher (mpirun, srun, torchrun-style variables) says about ranks. */
struct cc_dist_launch;
void cli_dist_launch(struct cc_dist_launch *l);

int cli_parse_long(const char *opt, const char *text, long min, long max, long *out);
int cli_parse_double(const char *opt, const char *text, double min, double max, double *out);
int cli_parse_u64(const char *opt, const char *text, unsigned long long *out);
/* 0 when `value` is one of the '|'-separated `choices`, else a usage error
 * naming the option and the choices (returns 2). */
int cli_check_choice(const char *cmd, const char *opt, const char *value, const char *choices);
/* "catchat <cmd>: unknown option ..." and the usual hint */
int cli_usage_error(const char *cmd, const char *what);

typedef int (*cli_cmd_fn)(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_sample(int argc, char **argv);
int cmd_dump_state(int argc, char **argv);
int cmd_ladder(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_bisect(int argc, char **argv);
int cmd_audit(int argc, char **argv);
/* --version: version, git revision, compiled GPU architectures, CUDA runtime
 * and driver, cuBLASLt and NCCL versions, one per line. */
int cmd_version(void);

#endif
