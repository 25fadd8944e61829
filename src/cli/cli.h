/* Shared pieces of the subcommands: config resolution and strict parsing of
 * option values. Each cmd_*.c holds one subcommand. */
#ifndef CATCHAT_CLI_H
#define CATCHAT_CLI_H

#include <getopt.h>
#include "catchat/config.h"

#define CLI_MAX_SETS 128

/* The program as the user ran it (argv[0], e.g. "build/catchat"), for hints
 * that print a command to run next. */
extern const char *cli_program;

typedef struct cli_config_args {
    const char *config_path;
    const char *sets[CLI_MAX_SETS];
    int nsets;
    const char *preflight; /* --preflight, where the subcommand takes it (CLI_PREFLIGHT_OPTION) */
} cli_config_args;

/* Options every config-taking subcommand accepts (getopt_long ids). */
enum { OPT_CONFIG = 1000, OPT_SET, OPT_HELP_ID, OPT_PREFLIGHT };
/* --preflight MODE in a subcommand's option list: the parser stores it in ca->preflight. */
#define CLI_PREFLIGHT_OPTION { "preflight", required_argument, 0, OPT_PREFLIGHT }
/* Its help lines, in the subcommand's columns: PAD follows "--preflight MODE"
 * up to the descriptions' column, INDENT starts the continued lines. */
#define CLI_PREFLIGHT_HELP(PAD, INDENT)                                                                     \
    "  --preflight MODE" PAD "auto (default), always or never: before the first GPU\n"                      \
    INDENT "step, check this run's kernels against the CPU reference\n"                                     \
    INDENT "on this GPU (docs/gpus.md); auto skips a check that passed\n"                                   \
    INDENT "before on the same GPU, driver, build and kernel path\n"

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
 * environment (cli_env.c) → --set, then the stored [model] keys by `policy`. ckpt may be NULL.
 * Tells the data loader where the [data] paths came from (cc_data_note_origin)
 * and, once a process, says the config's notes (cc_config_notes; a policy other
 * than CKPT_MODEL_WINS is a training run). */
int cli_resolve_config(cc_config *cfg, const cli_config_args *a, const char *ckpt, cli_ckpt_model policy);
/* cli_resolve_config's answer where the --set values broke keys that fit each other without them. */
#define CLI_BAD_COMMAND_LINE (-2)
/* The exit status of a failed cli_resolve_config: 2 for a bad command line, else 1. */
static inline int cli_config_status(int rc) { return rc == CLI_BAD_COMMAND_LINE ? 2 : 1; }
/* Whether a --set of `a` names [section] key ("key=…" or "section.key=…"). */
int cli_sets_key(const cli_config_args *a, const char *section, const char *key);
/* After cli_resolve_config: when [data] KEY (train or val) came from the
 * checkpoint's stored config and cannot be read, one line naming the
 * checkpoint, the path and `way_out` (what the user can pass instead); -1. */
int cli_check_stored_data(const cli_config_args *a, const char *ckpt, const cc_config *cfg, const char *key,
                          const char *way_out);

/* The preflight options of a subcommand run (for cc_preflight): --preflight,
 * checked against auto|always|never (a usage error returns 2), and the
 * cache directory; 0. */
struct cc_preflight_opts;
int cli_preflight_opts(struct cc_preflight_opts *o, const cli_config_args *ca, const char *cmd, int quiet);
/* cfg's GPU step planned once (cc_executor_plan: *plan, po->plan set to it,
 * or NULL on the CPU), then the preflight of that plan (cc_preflight, at
 * cfg's batch_size and seq_len); 0, or -1 said in one line. The run's
 * executor is then made from po->plan (cc_executor_create_planned). */
struct gpu_step_plan;
int cli_plan_and_preflight(const cc_config *cfg, struct cc_preflight_opts *po, struct gpu_step_plan *plan);
/* $XDG_CACHE_HOME/catchat, else $HOME/.cache/catchat, else NULL (cli_env.c). */
const char *cli_cache_dir(void);

/* Environment variables that stand for config keys ([gpu] lanes, ...) and
 * library settings, applied over the config (cli_env.c). */
int cli_apply_env(cc_config *cfg);
/* What a launcher (mpirun, srun, torchrun-style variables) says about ranks. */
struct cc_dist_launch;
void cli_dist_launch(struct cc_dist_launch *l);

/* An integer option, "1e6" too (cc_parse_integer), in [min, max]. */
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
int cmd_data(int argc, char **argv);
int cmd_audit(int argc, char **argv);
/* --version: version, git revision, compiled GPU architectures, CUDA runtime
 * and driver, cuBLASLt and NCCL versions, one per line. */
int cmd_version(void);

#endif
