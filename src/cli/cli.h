/* Shared pieces of the subcommands: config resolution and strict parsing of
 * option values. Each cmd_*.c holds one subcommand. */
#ifndef CATCHAT_CLI_H
#define CATCHAT_CLI_H

#include "catchat/config.h"

#define CLI_MAX_SETS 128

typedef struct cli_config_args {
    const char *config_path;
    const char *sets[CLI_MAX_SETS];
    int nsets;
} cli_config_args;

/* Options every config-taking subcommand accepts (getopt_long ids). */
enum { OPT_CONFIG = 1000, OPT_SET, OPT_HELP_ID };

int cli_add_set(cli_config_args *a, const char *assignment);
/* defaults → config stored in `ckpt` (if given and no --config) → --config → --set */
int cli_resolve_config(cc_config *cfg, const cli_config_args *a, const char *ckpt);

int cli_parse_long(const char *opt, const char *text, long min, long max, long *out);
int cli_parse_double(const char *opt, const char *text, double min, double max, double *out);
int cli_parse_u64(const char *opt, const char *text, unsigned long long *out);
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

#endif
