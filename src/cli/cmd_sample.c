/* catchat sample */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "cli/cli.h"
#include "catchat/checkpoint.h"
#include "catchat/text_escape.h"
#include "catchat/tokenizer.h"
#include "catchat/train.h"
#include "catchat/util.h"
#include "catchat/vocab.h"

static const char *HELP =
    "usage: catchat sample --ckpt CKPT\n"
    "                      [--prompt TEXT | --prompt-file F | --prompt-ids L]\n"
    "                      [--tokens N] [--temperature T] [--top-k K] [--top-p P]\n"
    "                      [--repetition-penalty R] [--stop TEXT] [--no-echo]\n"
    "                      [--json] [--seed N] [--vocab FILE] [--config F]\n"
    "                      [--set key=value]... [--preflight MODE]\n\n"
    "Streams the prompt and a continuation to stdout, one token at a time, with\n"
    "constant memory per token (one GRU state per layer and a ring of the last\n"
    "ctx_window keys and values). It decodes on the CPU, on every core\n"
    "(OMP_NUM_THREADS=N for fewer): at d_model 512, 3 layers and a vocabulary of\n"
    "50257, 210 tokens/s on 2 cores of a 2.6 GHz AMD EPYC, bound by reading the\n"
    "classifier's vocab_size x d_model weights once per token.\n"
    "On a terminal, control bytes other than newline and tab (an undertrained model\n"
    "writes ESC, NUL, CR...) and bytes that are not UTF-8 are shown as escapes such\n"
    "as \\x1b; into a file or a pipe every byte is written as it is.\n\n"
    "  --prompt TEXT      bytes to start from (default \"The \")\n"
    "  --prompt-file F    the prompt is the whole file F (- reads standard input)\n"
    "  --tokens N         tokens to generate (default 200)\n"
    "  --temperature T    softmax temperature; 0 = greedy argmax (default 0.8)\n"
    "  --top-k K          sample among the K most likely tokens; 0 = all (default 40)\n"
    "  --top-p P          then among the most likely tokens whose probability reaches\n"
    "                     P (nucleus sampling); 1 = off (default 1)\n"
    "  --repetition-penalty R  tokens already in the prompt or output are made less\n"
    "                     likely: positive logits divided by R, negative ones\n"
    "                     multiplied; 1 = off (default 1)\n"
    "  --stop TEXT        stop once the generated text ends with TEXT (it is written)\n"
    "  --no-echo          write only the continuation, not the prompt\n"
    "  --json             one JSON object at the end instead of streamed text:\n"
    "                     prompt, text (after the prompt), prompt_tokens (the ids\n"
    "                     fed), tokens (the ids generated), logprobs (each\n"
    "                     generated token's log-probability under the model, before\n"
    "                     temperature and penalties), stop_reason (stop|length)\n"
    "  --seed N           sampling seed (default 1)\n"
    "  --vocab FILE       token vocabulary (scripts/prepare.py's .vocab) to decode\n"
    "                     ids with; default: the tokenizer the checkpoint carries.\n"
    "                     Refused when it is not the checkpoint's tokenizer or has\n"
    "                     more tokens than the model. A checkpoint of an earlier\n"
    "                     catchat carries none: then the .vocab beside the run's\n"
    "                     training shards is used (a line on stderr names it)\n"
    "  --prompt-ids L     exact prompt token ids, comma-separated, instead of\n"
    "                     --prompt (never healed)\n"
    "  --preflight MODE   auto|always|never, as train takes it; sampling decodes on\n"
    "                     the CPU (the reference's own decoder), so it has no GPU\n"
    "                     kernel to check\n\n"
    "The prompt is encoded with the tokenizer's merges (a BPE's tokenizer.json, which\n"
    "checkpoints carry), giving the ids the tokenizer itself gives; with a .vocab\n"
    "alone, by greedy longest match (a note says so). It is healed: its last token\n"
    "is taken back and the first generated token must begin with that token's\n"
    "text, so a prompt that ends inside a token (\"The \": The + a lone space) goes\n"
    "on as the training text did (a prompt of one token is not healed). --json's\n"
    "prompt_tokens then lack that token; prompt + text is always the decode of\n"
    "prompt_tokens + tokens.\n"
    "\n"
    "Exit status: 0; 1 when a file fails (the checkpoint, --vocab, --prompt-file:\n"
    "missing, damaged or empty); 2 when the command line is wrong (an unknown option,\n"
    "a value out of range, a --prompt-ids id the model does not have).\n";

/* A checkpoint without a tokenizer (an earlier catchat's), no --vocab: the
 * .vocab scripts/prepare.py wrote beside the shards the checkpoint's run
 * trained on (its stored [data] train, else val), so a BPE model prints text
 * without the user naming the file again. Where there is
 * none, one line says what was looked for and that ids print as they are
 * (found is empty then); a run on raw text is byte-level, its ids are the
 * bytes, and nothing is said. */
static int find_vocab(const char *ckpt, const cc_config *cfg, char *found, size_t cap)
{
    cc_config run;
    cc_config_defaults(&run);
    const int stored = cc_checkpoint_read_config(ckpt, &run);
    if (stored < 0) return -1;
    const cc_config *c = stored ? &run : cfg; /* no stored config: --config's data is the best guess */
    char looked[CC_PATH_MAX];
    if (cc_vocab_beside_data(c->train, found, cap)) return 0;
    snprintf(looked, sizeof(looked), "%s", found);
    if (cc_vocab_beside_data(c->val, found, cap)) return 0;
    if (!*looked) snprintf(looked, sizeof(looked), "%s", found);
    *found = 0;
    if (*looked)
        fprintf(stderr, "catchat: note: no vocabulary beside the run's training data (no %s): ids print as bytes "
                        "below 256, <id> above (--vocab FILE)\n", looked);
    else if (cfg->vocab_size > 256)
        fprintf(stderr, "catchat: note: the run's training data (%s) is not scripts/prepare.py's shards, so there "
                        "is no vocabulary beside it: ids print as bytes below 256, <id> above (--vocab FILE)\n",
                c->train);
    return 0;
}

/* --vocab FILE in place of the checkpoint's tokens: refused when it is not
 * the tokenizer the checkpoint names, or has more tokens than the model. */
static int take_vocab_file(cc_tokenizer *tz, int carried, const cc_config *cfg, const char *path)
{
    cc_vocab given;
    if (cc_vocab_load(&given, path) != 0) return -1;
    const uint64_t fp = cc_vocab_fingerprint(&given);
    char a[96], b[96];
    if (carried && tz->id && fp != tz->id) {
        cc_vocab_free(&given);
        return cc_error("--vocab %s: %s, not the model's %s (the checkpoint carries its own: leave --vocab out)", path, cc_tokenizer_describe(fp, a, sizeof(a)),
                        cc_tokenizer_describe(tz->id, b, sizeof(b)));
    }
    if (given.n > cfg->vocab_size) {
        const int n = given.n;
        cc_vocab_free(&given);
        return cc_error("--vocab %s has %d tokens, more than the model's vocab_size %d: it is another tokenizer's",
                        path, n, cfg->vocab_size);
    }
    if (tz->vocab.n && fp == cc_vocab_fingerprint(&tz->vocab)) { /* the one the checkpoint carries, merges and all */
        cc_vocab_free(&given);
        return 0;
    }
    const uint64_t id = tz->id;
    cc_tokenizer_free(tz);
    tz->id = id;
    tz->vocab = given;
    if (given.n < cfg->vocab_size)
        fprintf(stderr, "catchat: %s has %d tokens, the model %d: ids past it print as <id>\n", path, given.n,
                cfg->vocab_size);
    return 0;
}

/* The tokenizer to encode the prompt and decode ids with: the one the
 * checkpoint carries; --vocab FILE where given (and fitting); for a
 * checkpoint of a catchat that stored none, the .vocab beside its run's data. */
static int take_tokenizer(cc_tokenizer *tz, const char *ckpt, const cc_config *cfg, const char *vocab_path)
{
    const int carried = cc_tokenizer_from_checkpoint(tz, ckpt, 1);
    if (carried < 0) return -1;
    char found[CC_PATH_MAX], a[96];
    if (!vocab_path && !carried) {
        if (find_vocab(ckpt, cfg, found, sizeof(found)) != 0) return -1;
        if (!*found) return 0;
        cc_vocab v;
        if (cc_vocab_load(&v, found) != 0) return -1;
        if (v.n > cfg->vocab_size) { /* not the vocabulary the model trained with */
            fprintf(stderr, "catchat: note: %s, beside the run's training data, has %d tokens, more than the model's "
                            "vocab_size %d: not used; ids print as bytes below 256, <id> above (--vocab FILE)\n",
                    found, v.n, cfg->vocab_size);
            cc_vocab_free(&v);
            return 0;
        }
        fprintf(stderr, "catchat: note: decoding with %s, the vocabulary beside the run's training data "
                        "(--vocab FILE for another)\n", found);
        if (v.n < cfg->vocab_size)
            fprintf(stderr, "catchat: %s has %d tokens, the model %d: ids past it print as <id>\n", found, v.n,
                    cfg->vocab_size);
        tz->vocab = v;
        /* and the merges beside it, where prepare.py wrote them */
        cc_config run;
        cc_config_defaults(&run);
        const char *data = cc_checkpoint_read_config(ckpt, &run) > 0 ? run.train : cfg->train;
        return cc_tokenizer_merges_beside_data(tz, data, 1);
    }
    if (vocab_path) {
        if (take_vocab_file(tz, carried, cfg, vocab_path) != 0) {
            cc_tokenizer_free(tz);
            return -1;
        }
    } else if (tz->id && tz->id != cc_vocab_bytes_id() && !tz->vocab.n)
        fprintf(stderr, "catchat: note: the checkpoint names %s but holds none of its tokens (its run had no .vocab "
                        "beside the shards): ids print as bytes below 256, <id> above (--vocab FILE)\n",
                cc_tokenizer_describe(tz->id, a, sizeof(a)));
    return 0;
}

#define PROMPT_IDS_MAX 4096 /* --prompt-ids takes at most this many (said so when more) */

/* --prompt-ids: ids typed on the command line, into ids (PROMPT_IDS_MAX).
 * One outside the model's vocabulary is a wrong argument (exit 2, the
 * status returned), said before the weights are read; 0 when all are sound. */
static int parse_prompt_ids(const char *ids_text, const cc_config *cfg, int *ids, int *n_ids)
{
    char buf[16384], what[160];
    long v;
    if (strlen(ids_text) >= sizeof(buf))
        return cli_usage_error("sample", "--prompt-ids: longer than 16383 characters");
    snprintf(buf, sizeof(buf), "%s", ids_text);
    for (char *t = strtok(buf, ","); t; t = strtok(NULL, ",")) {
        if (cli_parse_long("--prompt-ids", t, 0, 65535, &v)) return 2;
        if (v >= cfg->vocab_size) {
            snprintf(what, sizeof(what), "--prompt-ids: %ld is not a token of this model (vocab_size %d: ids "
                     "0 to %d)", v, cfg->vocab_size, cfg->vocab_size - 1);
            return cli_usage_error("sample", what);
        }
        if (*n_ids == PROMPT_IDS_MAX) return cli_usage_error("sample", "--prompt-ids: more than 4096 ids");
        ids[(*n_ids)++] = (int)v;
    }
    return 0;
}

/* --prompt-file: the whole file (or standard input, "-") as the prompt,
 * into *text (malloc'd). A file that cannot be read, is empty or holds a
 * NUL byte is a failed file, not a wrong command line: 1 (said). */
static int read_prompt_file(const char *prompt_file, char **text)
{
    size_t len = 0;
    char *p;
    *text = NULL;
    if (strcmp(prompt_file, "-") == 0) {
        size_t cap = 4096;
        p = cc_malloc(cap);
        size_t got;
        while ((got = fread(p + len, 1, cap - len - 1, stdin)) > 0)
            if ((len += got) + 1 >= cap) p = cc_realloc(p, cap *= 2);
    } else if (!(p = (char *)cc_read_file_what(prompt_file, "prompt file", &len))) {
        return 1;
    }
    p[len] = 0;
    if (len == 0) {
        free(p);
        fprintf(stderr, "catchat: %s: the prompt file is empty: the model needs at least one token to start "
                        "from\n", strcmp(prompt_file, "-") == 0 ? "standard input" : prompt_file);
        return 1;
    }
    if (strlen(p) != len) {
        free(p);
        fprintf(stderr, "catchat: %s: the prompt holds a NUL byte; use --prompt-ids for such ids\n", prompt_file);
        return 1;
    }
    *text = p;
    return 0;
}

int cmd_sample(int argc, char **argv)
{
    static const struct option opts[] = {
        { "ckpt", required_argument, 0, 'k' }, { "prompt", required_argument, 0, 'p' },
        { "tokens", required_argument, 0, 'n' }, { "temperature", required_argument, 0, 't' },
        { "top-k", required_argument, 0, 'K' }, { "seed", required_argument, 0, 'S' },
        { "vocab", required_argument, 0, 'V' }, { "prompt-ids", required_argument, 0, 'I' },
        { "prompt-file", required_argument, 0, 'F' }, { "top-p", required_argument, 0, 'P' },
        { "repetition-penalty", required_argument, 0, 'R' }, { "stop", required_argument, 0, 'X' },
        { "no-echo", no_argument, 0, 'E' }, { "json", no_argument, 0, 'J' },
        CLI_PREFLIGHT_OPTION, { 0, 0, 0, 0 } };
    cli_config_args ca = { 0 };
    const char *ckpt = NULL, *vocab_path = NULL, *ids_text = NULL, *prompt_file = NULL;
    cc_sample_opts so = { .prompt = "The ", .tokens = 200, .temperature = 0.8, .top_k = 40, .seed = 1,
                          .top_p = 1, .repetition_penalty = 1 };
    int prompt_given = 0;
    long v;
    unsigned long long seed;
    int c;
    cli_parser parser;
    cli_parser_init(&parser, "sample", HELP, opts, &ca);
    while ((c = cli_next_opt(&parser, argc, argv)) > 0) {
        switch (c) {
        case 'k': ckpt = optarg; break;
        case 'p': so.prompt = optarg; prompt_given = 1; break;
        case 'F': prompt_file = optarg; break;
        case 'P': if (cli_parse_double("--top-p", optarg, 1e-9, 1, &so.top_p)) return 2; break;
        case 'R': if (cli_parse_double("--repetition-penalty", optarg, 1, 1e6, &so.repetition_penalty)) return 2; break;
        case 'X': so.stop = optarg; break;
        case 'E': so.no_echo = 1; break;
        case 'J': so.json = 1; break;
        case 'n': if (cli_parse_long("--tokens", optarg, 0, 1L << 30, &v)) return 2; so.tokens = (int)v; break;
        case 't': if (cli_parse_double("--temperature", optarg, 0, 1e6, &so.temperature)) return 2; break;
        case 'K': if (cli_parse_long("--top-k", optarg, 0, 1 << 20, &v)) return 2; so.top_k = (int)v; break;
        case 'S': if (cli_parse_u64("--seed", optarg, &seed)) return 2; so.seed = seed; break;
        case 'V': vocab_path = optarg; break;
        case 'I': ids_text = optarg; break;
        }
    }
    if (c < 0) return parser.status;
    if (ca.preflight && cli_check_choice("sample", "--preflight", ca.preflight, "auto|always|never")) return 2;
    if (!ckpt) return cli_usage_error("sample", "--ckpt is required");
    if ((prompt_given != 0) + (prompt_file != NULL) + (ids_text != NULL) > 1)
        return cli_usage_error("sample", "--prompt, --prompt-file and --prompt-ids exclude each other");
    if (so.stop && !*so.stop) return cli_usage_error("sample", "--stop: empty text");
    /* the model needs a token to start from: an empty prompt is an argument
     * error, said before the checkpoint is read */
    if (prompt_given && !*so.prompt)
        return cli_usage_error("sample", "--prompt: empty text (give at least one byte, or --prompt-ids)");
    if (ids_text && !ids_text[strspn(ids_text, ",")])
        return cli_usage_error("sample", "--prompt-ids: no ids (expected a comma-separated list such as 84,104)");
    cc_config cfg;
    int rcfg;
    if ((rcfg = cli_resolve_config(&cfg, &ca, ckpt, CKPT_MODEL_WINS)) != 0) return cli_config_status(rcfg);
    int ids[PROMPT_IDS_MAX], n_ids = 0;
    if (ids_text) {
        const int bad = parse_prompt_ids(ids_text, &cfg, ids, &n_ids);
        if (bad) return bad;
        so.prompt_ids = ids;
        so.n_prompt_ids = n_ids;
    }
    cc_tokenizer tz;
    if (take_tokenizer(&tz, ckpt, &cfg, vocab_path) != 0) return 1;
    so.tokenizer = &tz;
    if (!ids_text && tz.vocab.n && !tz.bpe)
        fprintf(stderr, "catchat: note: no usable tokenizer.json came with the tokenizer: the prompt is matched "
                        "greedily, which can split it otherwise (--prompt-ids for exact ids)\n");
    char *file_prompt = NULL;
    if (prompt_file) {
        if (read_prompt_file(prompt_file, &file_prompt) != 0) {
            cc_tokenizer_free(&tz);
            return 1;
        }
        so.prompt = file_prompt;
    }
    cc_dims d = cc_dims_from_config(&cfg);
    cc_layout lay;
    cc_layout_build(&lay, &d);
    float *p = cc_calloc(lay.total, sizeof(float));
    int rc = cc_checkpoint_load(ckpt, &lay, p, NULL, NULL, NULL, NULL, NULL);
    /* An undertrained model writes any byte (ESC, NUL, CR): on a terminal
     * they are shown as escapes, not obeyed; files and pipes get the bytes
     * as they are, and --json escapes its own. */
    FILE *shown = rc == 0 && !so.json && isatty(STDOUT_FILENO) ? cc_terminal_text_stream(stdout) : NULL;
    if (rc == 0) rc = cc_sample(&lay, p, &so, shown ? shown : stdout);
    if (shown && fclose(shown) != 0 && rc == 0) rc = cc_error("sample: cannot write to the terminal");
    if (rc == 0) putchar('\n');
    free(p);
    free(file_prompt);
    cc_tokenizer_free(&tz);
    return rc == 0 ? 0 : 1;
}
