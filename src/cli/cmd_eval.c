/* catchat eval */
#define _GNU_SOURCE
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "cli/cli.h"
#include "catchat/checkpoint.h"
#include "catchat/executor.h"
#include "catchat/gpu_plan.h"
#include "catchat/preflight.h"
#include "catchat/tokenizer.h"
#include "catchat/train.h"
#include "catchat/util.h"

static const char *HELP =
    "usage: catchat eval --ckpt CKPT [--data FILE] [--config F] [--set key=value]...\n"
    "                    [--batches N] [--json] [--preflight MODE]\n\n"
    "Loss (nats per token), top-1 and top-5 accuracy of a checkpoint on a data file\n"
    "(default: the config's [data] val). The [model] keys stored in the checkpoint\n"
    "are used (a note names any the config would change). Batches of batch_size x\n"
    "seq_len windows; each window of the file is scored at most once, and the tokens\n"
    "scored are reported. A loss that is not finite is an error (exit 1), never a\n"
    "result.\n\n"
    "  --ckpt CKPT    safetensors file with the model tensors (F32, F16 or BF16)\n"
    "  --data FILE    text file or .bin shard to score\n"
    "  --batches N    batches of batch_size to score (default: the config's\n"
    "                 eval_batches x grad_accum, as training evaluates; at most the\n"
    "                 file)\n"
    "  --json         print one JSON object instead of text\n"
    CLI_PREFLIGHT_HELP(" ", "                 ");

int cmd_eval(int argc, char **argv)
{
    static const struct option opts[] = {
        { "ckpt", required_argument, 0, 'k' }, { "data", required_argument, 0, 'd' },
        { "batches", required_argument, 0, 'b' }, { "json", no_argument, 0, 'j' },
        CLI_PREFLIGHT_OPTION, { 0, 0, 0, 0 } };
    cli_config_args ca = { 0 };
    const char *ckpt = NULL, *data = NULL;
    long batches = 0;
    int json = 0, c;
    cli_parser parser;
    cli_parser_init(&parser, "eval", HELP, opts, &ca);
    while ((c = cli_next_opt(&parser, argc, argv)) > 0) {
        switch (c) {
        case 'k': ckpt = optarg; break;
        case 'd': data = optarg; break;
        case 'b': if (cli_parse_long("--batches", optarg, 1, 1L << 30, &batches)) return 2; break;
        case 'j': json = 1; break;
        }
    }
    if (c < 0) return parser.status;
    if (!ckpt) return cli_usage_error("eval", "--ckpt is required");
    cc_preflight_opts po;
    if (cli_preflight_opts(&po, &ca, "eval", json)) return 2;
    cc_config cfg;
    int rcfg;
    if ((rcfg = cli_resolve_config(&cfg, &ca, ckpt, CKPT_MODEL_WINS)) != 0) return cli_config_status(rcfg);
    if (!data && cli_check_stored_data(&ca, ckpt, &cfg, "val", "pass --data FILE to score another file") != 0)
        return 1;
    const int data_given = data != NULL;
    if (!data) data = cfg.val;
    if (!batches) batches = cfg.eval_batches * cfg.grad_accum; /* batches of batch_size, as training evaluates */
    cc_tokens tok;
    cc_loader ld;
    if (cc_tokens_load_as(&tok, data, cfg.vocab_size, cfg.data_format) != 0) return 1;
    if (cc_tokenizer_check_checkpoint(ckpt, "--ckpt", tok.tokenizer_id, data) != 0) {
        cc_tokens_free(&tok);
        return 1;
    }
    if (cc_loader_init(&ld, &tok, cfg.batch_size, cfg.seq_len, 0, cfg.seed) != 0) {
        cc_tokens_free(&tok);
        return 1;
    }
    int rc = 1;
    gpu_step_plan plan;
    cc_executor *ex = cli_plan_and_preflight(&cfg, &po, &plan) == 0
                          ? cc_executor_create_planned(&cfg, cfg.batch_size, cfg.seq_len, po.plan)
                          : NULL;
    if (ex) {
        float *p = cc_calloc(ex->lay.total, sizeof(float));
        cc_run_state st;
        int has_state = 0;
        if (cc_checkpoint_load(ckpt, &ex->lay, p, NULL, NULL, NULL, &st, &has_state) == 0) {
            /* the run's own val file, re-made since (another tokenization, other text): a loss not to compare */
            if (!data_given && has_state && st.val_digest &&
                st.val_digest != (st.digest_all ? cc_tokens_digest_all(&tok) : cc_tokens_digest(&tok)))
                fprintf(stderr, "catchat: note: %s holds other tokens than the run validated on (their digest "
                                "differs): this loss does not compare with the run's eval_loss\n", data);
            ex->ops->set_params(ex, p);
            cc_eval_result ev;
            if (cc_evaluate(ex, &ld, batches, &ev) != 0) {
                ev.scored = 0; /* an id past vocab_size, said: no result */
            } else if (ev.scored == 0) {
                cc_error("eval: %s has no token to score", data);
            } else if (!isfinite(ev.loss)) {
                /* never a number that looks like a result: NaN logits are no prediction */
                cc_error("eval: the loss of %s on %s is not finite (%s over %ld tokens): the weights give "
                         "non-finite logits", ckpt, data, isnan(ev.loss) ? "NaN" : "Inf", ev.scored);
            } else if (json) {
                /* JSON strings are UTF-8: a path that is not (a Latin-1 file name) goes with U+FFFD
                 * for each byte that is not */
                char *ck = cc_valid_utf8(ckpt, strlen(ckpt)), *dt = cc_valid_utf8(data, strlen(data));
                json_t *o = json_pack("{s:s,s:s,s:f,s:f,s:f,s:I,s:s}", "ckpt", ck, "data", dt,
                                      "loss", ev.loss, "top1", ev.top1, "top5", ev.top5,
                                      "tokens", (json_int_t)ev.scored, "device", ex->name);
                char *s = o ? json_dumps(o, JSON_REAL_PRECISION(10)) : NULL;
                if (s) printf("%s\n", s);
                else cc_error("eval: the result could not be written as JSON");
                if (!s) ev.scored = 0; /* no result said: not a success */
                free(s);
                free(ck);
                free(dt);
                json_decref(o);
            } else {
                printf("eval %s on %s: loss %.6f | top-1 %.2f%% | top-5 %.2f%% | %ld tokens scored (%s)\n",
                       ckpt, data, ev.loss, 100 * ev.top1, 100 * ev.top5, ev.scored, ex->name);
            }
            if (ev.scored > 0 && isfinite(ev.loss)) rc = 0;
        }
        free(p);
        ex->ops->destroy(ex);
    }
    cc_loader_free(&ld);
    cc_tokens_free(&tok);
    return rc;
}
