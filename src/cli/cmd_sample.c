/* catchat sample */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "catchat/checkpoint.h"
#include "catchat/train.h"
#include "catchat/util.h"
#include "catchat/vocab.h"

static const char *HELP =
    "usage: catchat sample --ckpt CKPT [--prompt TEXT | --prompt-ids L] [--tokens N] [--temperature T]\n"
    "                      [--top-k K] [--seed N] [--vocab FILE] [--config F] [--set key=value]...\n\n"
    "Streams the prompt and a continuation to stdout, one token at a time, with constant\n"
    "memory per token (one GRU state per layer and a ring of the last ctx_window keys\n"
    "and values).\n\n"
    "  --prompt TEXT      bytes to start from (default \"The \")\n"
    "  --tokens N         tokens to generate (default 200)\n"
    "  --temperature T    softmax temperature; 0 = greedy argmax (default 0.8)\n"
    "  --top-k K          sample among the K most likely tokens; 0 = all (default 40)\n"
    "  --seed N           sampling seed (default 1)\n"
    "  --vocab FILE       token vocabulary (scripts/prepare.py's .vocab) to decode ids with and to\n"
    "                     encode the prompt (greedy longest match); default: ids are bytes\n"
    "  --prompt-ids L     exact prompt token ids, comma-separated, instead of --prompt\n";

int cmd_sample(int argc, char **argv)
{
    static const struct option opts[] = {
        { "ckpt", required_argument, 0, 'k' }, { "prompt", required_argument, 0, 'p' },
        { "tokens", required_argument, 0, 'n' }, { "temperature", required_argument, 0, 't' },
        { "top-k", required_argument, 0, 'K' }, { "seed", required_argument, 0, 'S' },
        { "vocab", required_argument, 0, 'V' }, { "prompt-ids", required_argument, 0, 'I' },
        { 0, 0, 0, 0 } };
    cli_config_args ca = { 0 };
    const char *ckpt = NULL, *vocab_path = NULL, *ids_text = NULL;
    cc_sample_opts so = { "The ", 200, 0.8, 40, 1, NULL, NULL, 0 };
    long v;
    unsigned long long seed;
    int c;
    cli_parser parser;
    cli_parser_init(&parser, "sample", HELP, opts, &ca);
    while ((c = cli_next_opt(&parser, argc, argv)) > 0) {
        switch (c) {
        case 'k': ckpt = optarg; break;
        case 'p': so.prompt = optarg; break;
        case 'n': if (cli_parse_long("--tokens", optarg, 0, 1L << 30, &v)) return 2; so.tokens = (int)v; break;
        case 't': if (cli_parse_double("--temperature", optarg, 0, 1e6, &so.temperature)) return 2; break;
        case 'K': if (cli_parse_long("--top-k", optarg, 0, 1 << 20, &v)) return 2; so.top_k = (int)v; break;
        case 'S': if (cli_parse_u64("--seed", optarg, &seed)) return 2; so.seed = seed; break;
        case 'V': vocab_path = optarg; break;
        case 'I': ids_text = optarg; break;
        }
    }
    if (c < 0) return parser.status;
    if (!ckpt) return cli_usage_error("sample", "--ckpt is required");
    cc_config cfg;
    if (cli_resolve_config(&cfg, &ca, ckpt, CKPT_MODEL_WINS) != 0) return 1;
    cc_vocab vocab;
    int ids[4096], n_ids = 0;
    if (vocab_path) {
        if (cc_vocab_load(&vocab, vocab_path) != 0) return 1;
        if (vocab.n < cfg.vocab_size)
            fprintf(stderr, "catchat: %s has %d tokens, the model %d: ids past it print as <id>\n", vocab_path,
                    vocab.n, cfg.vocab_size);
        so.vocab = &vocab;
    }
    if (ids_text) {
        char buf[16384];
        snprintf(buf, sizeof(buf), "%s", ids_text);
        for (char *t = strtok(buf, ","); t && n_ids < 4096; t = strtok(NULL, ",")) {
            if (cli_parse_long("--prompt-ids", t, 0, 65535, &v)) return 2;
            ids[n_ids++] = (int)v;
        }
        so.prompt_ids = ids;
        so.n_prompt_ids = n_ids;
    }
    cc_dims d = cc_dims_from_config(&cfg);
    cc_layout lay;
    cc_layout_build(&lay, &d);
    float *p = cc_calloc(lay.total, sizeof(float));
    int rc = cc_checkpoint_load(ckpt, &lay, p, NULL, NULL, NULL, NULL, NULL);
    if (rc == 0) rc = cc_sample(&lay, p, &so, stdout);
    if (rc == 0) putchar('\n');
    free(p);
    if (vocab_path) cc_vocab_free(&vocab);
    return rc == 0 ? 0 : 1;
}
