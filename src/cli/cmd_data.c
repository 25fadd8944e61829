/* catchat data check */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "catchat/data.h"
#include "catchat/util.h"
#include "catchat/vocab.h"

static const char *HELP =
    "usage: catchat data check [--config F] [--set key=value]... [FILES]...\n\n"
    "Checks every token of a dataset against vocab_size, at once, before a long\n"
    "run. A run maps its shards and checks each id where a batch reads it, so a\n"
    "damaged shard stops it only when a batch reaches the bad id (with a\n"
    "checkpoint). FILES are paths, globs or comma-separated lists as [data] train\n"
    "takes them (default: the config's [data] train and val); vocab_size is the\n"
    "config's (--set vocab_size=N). One line a dataset: its files, tokens and\n"
    "tokenizer, or the first bad id with its file, token index and byte offset.\n\n"
    "Exit status: 0 when every id is below vocab_size; 1 when one is not or a\n"
    "file cannot be read; 2 when the command line is wrong.\n";

/* One dataset (a value as [data] train takes it): loaded, every id checked. */
static int check_one(const char *spec, const cc_config *cfg)
{
    cc_tokens t;
    if (cc_tokens_load_as(&t, spec, cfg->vocab_size, cfg->data_format) != 0) return -1;
    const int rc = cc_tokens_check(&t);
    char who[96];
    if (rc == 0)
        printf("%s: %d file%s, %zu tokens, %s: every id below vocab_size %d\n", spec, t.nfiles,
               t.nfiles == 1 ? "" : "s", t.n, cc_tokenizer_describe(t.tokenizer_id, who, sizeof(who)), cfg->vocab_size);
    cc_tokens_free(&t);
    return rc;
}

int cmd_data(int argc, char **argv)
{
    if (argc < 2 || (strcmp(argv[1], "check") != 0 && argv[1][0] != '-'))
        return cli_usage_error("data", argc < 2 ? "which? (check)" : "unknown action: the one is check");
    const int check = strcmp(argv[1], "check") == 0;
    /* the files apart from the options (the parser takes options alone): an option's value stays with it */
    char **opt_argv = cc_malloc(sizeof(char *) * (size_t)(argc + 1)), **files = cc_malloc(sizeof(char *) * (size_t)argc);
    int n_opt = 0, n_files = 0;
    opt_argv[n_opt++] = argv[0];
    for (int i = 1 + check; i < argc; i++) {
        const int takes_value = strcmp(argv[i], "--config") == 0 || strcmp(argv[i], "--set") == 0;
        if (argv[i][0] == '-') {
            opt_argv[n_opt++] = argv[i];
            if (takes_value && i + 1 < argc) opt_argv[n_opt++] = argv[++i];
        } else files[n_files++] = argv[i];
    }
    opt_argv[n_opt] = NULL;
    static const struct option opts[] = { { 0, 0, 0, 0 } };
    cli_config_args ca = { 0 };
    cli_parser parser;
    cli_parser_init(&parser, "data", HELP, opts, &ca);
    int c, rc = 0;
    while ((c = cli_next_opt(&parser, n_opt, opt_argv)) > 0) {}
    cc_config cfg;
    int rcfg = 0;
    if (c < 0) rc = parser.status;
    else if (!check) rc = cli_usage_error("data", "which? (check)");
    else if ((rcfg = cli_resolve_config(&cfg, &ca, NULL, CKPT_MODEL_WINS)) != 0) rc = cli_config_status(rcfg);
    else {
        int bad = 0;
        if (n_files == 0) {
            bad |= check_one(cfg.train, &cfg) != 0;
            bad |= check_one(cfg.val, &cfg) != 0;
        }
        for (int i = 0; i < n_files; i++) bad |= check_one(files[i], &cfg) != 0;
        rc = bad ? 1 : 0;
    }
    free(opt_argv);
    free(files);
    return rc;
}
