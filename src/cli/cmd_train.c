/* catchat train */
#define _GNU_SOURCE
#include <getopt.h>
#include <sys/ioctl.h>
#include <unistd.h>
#include <signal.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "cli/cli.h"
#include "catchat/checkpoint.h"
#include "catchat/dist.h"
#include "catchat/preflight.h"
#include "catchat/run_dir.h"
#include "catchat/train.h"
#include "catchat/util.h"

static const char *HELP =
    "usage: catchat train [--config F] [--set key=value]...\n"
    "                     [--resume CKPT|auto | --init CKPT] [--force] [--new-data]\n"
    "                     [--steps N] [--quiet] [--sample-prompt TEXT]\n"
    "                     [--sample-tokens N] [--check-finite] [--dist MODE]\n"
    "                     [--dist-id FILE] [--preflight MODE]\n"
    "                     [--plant-nan NAME[@STEP]] [--plant-overflow N]\n"
    "                     [--plant-wrong-result CHECK]\n"
    "                     [--plant-nan-grad-h STEP:L,B,T,U]\n\n"
    "Trains the model described by the config on [data] train, evaluating on [data]\n"
    "val.\n"
    "Writes <out_dir>/telemetry.csv (one row per step),\n"
    "<out_dir>/checkpoint.safetensors (every checkpoint_interval steps and at the\n"
    "end) and <out_dir>/sample.txt.\n"
    "SIGINT (Ctrl-C), SIGTERM, SIGHUP (a closed terminal) or SIGUSR1 (Slurm's\n"
    "--signal) finishes the step in flight, writes the checkpoint and exits 128 + the\n"
    "signal's number (130, 143, 129, 138). Signals within a second of the first are\n"
    "the same request; a later one exits at once, saying which checkpoint is saved\n"
    "(the last one stays intact). SIGHUP ignored at start (nohup) stays ignored.\n"
    "Progress: on a terminal one line rewritten in place each step, the fields that\n"
    "do not fit its width left off from the end (eval steps stay on screen);\n"
    "otherwise (a log file, CI) a line per step with every field.\n\n"
    "  --config F          INI file (configs/*.ini); every key has a default\n"
    "  --set key=value     override one key ('lr=1e-3' or 'train.lr=1e-3'),\n"
    "                      repeatable\n"
    "  --resume CKPT       continue the run saved in CKPT (weights, moments,\n"
    "                      schedule, data) in CKPT's folder (--set out_dir=DIR writes\n"
    "                      elsewhere); its stored config is used unless --config is\n"
    "                      given, and [model] keys must match; a changed max_steps\n"
    "                      re-plans the lr from where it is (docs/training.md)\n"
    "  --resume auto       resume <out_dir>/checkpoint.safetensors if there is one,\n"
    "                      else start afresh (for jobs a scheduler may requeue); logs\n"
    "                      without a checkpoint are kept (refused) unless --force is\n"
    "                      given too\n"
    "  --new-data          with --resume: go on although [data] train or val differs\n"
    "                      from the checkpoint's (a new best-eval record; changed\n"
    "                      training data read from its start); without it such a\n"
    "                      resume is refused\n"
    "  --init CKPT         start from the weights in CKPT with a fresh optimizer\n"
    "  --force             out_dir holds an earlier run: delete what it wrote\n"
    "                      (checkpoint, telemetry, grad norms, TensorBoard events,\n"
    "                      sample) and start over\n"
    "  --steps N           stop after N steps of this invocation (checkpoint written)\n"
    "  --quiet             no progress; the summary at the end (steps, best eval\n"
    "                      loss, checkpoints, time) is still printed\n"
    "  --sample-prompt T   prompt of the sample written at the end (default \"The \")\n"
    "  --sample-tokens N   length of that sample (default 300, 0 = none)\n"
    "  --check-finite      NaN provenance: scan every stage's output as the step\n"
    "                      runs; stop at the first non-finite value, name its stage,\n"
    "                      layer, timestep and tensor, and keep the batch in\n"
    "                      <out_dir>/nonfinite_batch.safetensors (costs one scan and\n"
    "                      one device sync per stage: see docs/stability.md)\n"
    "  --dist MODE         data parallelism: auto (default: mpi under mpirun/srun,\n"
    "                      env when WORLD_SIZE is set, else none), mpi, env, none;\n"
    "                      one process per GPU\n"
    "  --dist-id FILE      env bootstrap: file on a shared path for the NCCL unique\n"
    "                      id (or CATCHAT_NCCL_ID_FILE)\n"
    CLI_PREFLIGHT_HELP("    ", "                      ")
    "                      (with data parallelism every rank checks its own GPU; all\n"
    "                      must pass)\n"
    "  --plant-nan NAME[@STEP]  testing aid: fill parameter tensor NAME with NaN\n"
    "                      before step STEP (default: the run's first step)\n"
    "  --plant-overflow N  testing aid: make one gradient +Inf at step N (the step is\n"
    "                      skipped)\n"
    "  --plant-nan-grad-h STEP:L,B,T,U  testing aid: at step STEP, a NaN in the\n"
    "                      hidden-state gradient entering layer L's BPTT at sequence\n"
    "                      B, timestep T, unit U, seen by the recurrence only (the\n"
    "                      step must be skipped, docs/stability.md)\n"
    "  --plant-wrong-result CHECK  testing aid: the preflight takes CHECK's GPU\n"
    "                      results as wrong (gru_forward, gru_backward, attention,\n"
    "                      model, grad_reduce, adamw), so the run is refused; nothing\n"
    "                      is remembered\n";

/* First stop signal (SIGINT, SIGTERM, SIGHUP, SIGUSR1): remember it; the
 * trainer stops after the step in flight. Signals that arrive together are
 * that one request: timeout(1) signals its child and then its process group
 * (two SIGTERMs microseconds apart), and a job system may repeat one. Only a
 * signal STOP_AGAIN_NS or more after the first, a deliberate second Ctrl-C,
 * is a second request: one line on what is saved, then the default action,
 * at once. The line is put together from parts made before the run, with
 * write(2) and clock_gettime(2) only: nothing else is safe in a handler. */
#define STOP_AGAIN_NS 1000000000LL
static volatile sig_atomic_t stop_signal = 0;
static struct timespec stop_at; /* when the first stop signal came (the handlers block each other) */
static volatile sig_atomic_t saved_step = 0; /* the trainer's last checkpoint of this invocation, 0: none */
static char saved_path[CC_PATH_MAX + 64];
static volatile sig_atomic_t resumed_step = -1; /* the step of the checkpoint resumed, -1: none */

static void say(const char *text) { ssize_t n = write(STDERR_FILENO, text, strlen(text)); (void)n; }

static void say_long(long v)
{
    char digits[24];
    int n = 0;
    do digits[sizeof(digits) - 1 - n++] = (char)('0' + v % 10);
    while ((v /= 10) > 0 && n < (int)sizeof(digits));
    ssize_t w = write(STDERR_FILENO, digits + sizeof(digits) - n, (size_t)n);
    (void)w;
}

static long long ns_since(const struct timespec *t0)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (long long)(now.tv_sec - t0->tv_sec) * 1000000000LL + (now.tv_nsec - t0->tv_nsec);
}

static void on_stop_signal(int sig)
{
    if (stop_signal) {
        if (ns_since(&stop_at) < STOP_AGAIN_NS) return; /* the same request, sent again at once */
        say("\ncatchat: a second ");
        say(sig == stop_signal ? cc_signal_name(sig) : "signal");
        say(": stopped at once; ");
        if (saved_step > 0) {
            say("the checkpoint of step ");
            say_long(saved_step);
            say(" is saved in ");
            say(saved_path);
        } else if (resumed_step >= 0) {
            say("nothing was saved by this run: the checkpoint it resumed (step ");
            say_long(resumed_step);
            say(") is unchanged");
        } else {
            say("nothing was saved (no checkpoint had been written yet)");
        }
        say("\n");
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    clock_gettime(CLOCK_MONOTONIC, &stop_at);
    stop_signal = sig;
    say("\ncatchat: ");
    say(cc_signal_name(sig));
    say(sig == SIGINT ? ": stopping after the step in flight, with a checkpoint (another Ctrl-C, a second or more "
                        "later, stops at once)\n"
                      : ": stopping after the step in flight, with a checkpoint\n");
}

/* A signal ignored at start (a background job of a script: SIGINT; nohup:
 * SIGHUP) stays ignored, as shells and Python do; SIGTERM and SIGUSR1 are
 * always stop requests. */
static void catch_stop_signals(void)
{
    const int sigs[] = { SIGINT, SIGTERM, SIGHUP, SIGUSR1 };
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_stop_signal;
    sigemptyset(&sa.sa_mask);
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) sigaddset(&sa.sa_mask, sigs[i]);
    for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) {
        struct sigaction old;
        const int inherited_ignore = (sigs[i] == SIGINT || sigs[i] == SIGHUP) && sigaction(sigs[i], NULL, &old) == 0 &&
                                     old.sa_handler == SIG_IGN;
        if (!inherited_ignore) sigaction(sigs[i], &sa, NULL);
        else if (sigs[i] == SIGINT)
            fprintf(stderr, "catchat: note: SIGINT is ignored in this process (a script's background job, nohup): "
                            "Ctrl-C will not stop it; 'kill %ld' (SIGTERM) stops it after the step, with a checkpoint\n",
                    (long)getpid());
    }
}


/* The trainer calls this once its ranks are up, before the executor: every
 * rank checks its own GPU; only rank 0 says that it passed. */
static int run_preflight(const cc_config *cfg, int B, int T, cc_dist *dist, const struct gpu_step_plan *plan,
                         const void *arg)
{
    cc_preflight_opts po = *(const cc_preflight_opts *)arg;
    po.plan = plan;
    if (dist && dist->rank != 0) po.quiet = 1;
    return cc_preflight(cfg, B, T, dist, &po);
}

/* --plant-nan NAME[@STEP] */
static int parse_plant_nan(char *arg, cc_train_opts *o)
{
    char *at = strrchr(arg, '@');
    o->plant_nan = arg;
    o->plant_nan_step = 0; /* the run's first step */
    if (!at) return 0;
    *at = 0;
    long step = 0;
    if (*arg == 0 || cli_parse_long("--plant-nan (the step after @)", at + 1, 1, 1L << 40, &step)) {
        if (*arg == 0) cli_usage_error("train", "--plant-nan: expected NAME or NAME@STEP (STEP from 1)");
        return 1;
    }
    o->plant_nan_step = step;
    return 0;
}

/* --plant-nan-grad-h STEP:L,B,T,U (the ranges against the model are the trainer's to check) */
static int parse_plant_grad_h(const char *arg, cc_train_opts *o)
{
    long step;
    int l, b, t, u, end = 0;
    if (sscanf(arg, "%ld:%d,%d,%d,%d%n", &step, &l, &b, &t, &u, &end) != 5 || arg[end] != 0 || step < 1 || l < 0 ||
        b < 0 || t < 0 || u < 0) {
        cli_usage_error("train", "--plant-nan-grad-h: expected STEP:LAYER,SEQUENCE,TIMESTEP,UNIT (STEP from 1, the "
                                 "rest from 0), e.g. 3:1,0,5,7");
        return 1;
    }
    o->plant_grad_h_step = step;
    o->plant_grad_h = (cc_plant_grad_h){ 1, l, b, t, u };
    return 0;
}

int cmd_train(int argc, char **argv)
{
    static const struct option opts[] = {
        { "resume", required_argument, 0, 'r' }, { "init", required_argument, 0, 'i' },
        { "steps", required_argument, 0, 'n' },  { "quiet", no_argument, 0, 'q' },
        { "sample-prompt", required_argument, 0, 'p' },
        { "sample-tokens", required_argument, 0, 't' }, { "check-finite", no_argument, 0, 'F' }, { "plant-nan", required_argument, 0, 'N' },
        { "plant-overflow", required_argument, 0, 'O' }, { "dist", required_argument, 0, 'D' },
        { "dist-id", required_argument, 0, 'I' }, { "force", no_argument, 0, 'f' },
        { "plant-wrong-result", required_argument, 0, 'W' }, { "plant-nan-grad-h", required_argument, 0, 'G' },
        { "new-data", no_argument, 0, 'R' },
        CLI_PREFLIGHT_OPTION,
        { 0, 0, 0, 0 } };
    cli_config_args ca = { 0 };
    cc_train_opts o = { 0 };
    const char *plant_wrong = NULL;
    o.sample_prompt = "The ";
    o.sample_tokens = 300;
    long v;
    int c;
    cli_parser parser;
    cli_parser_init(&parser, "train", HELP, opts, &ca);
    while ((c = cli_next_opt(&parser, argc, argv)) > 0) {
        switch (c) {
        case 'r': o.resume = optarg; break;
        case 'i': o.init_ckpt = optarg; break;
        case 'n': if (cli_parse_long("--steps", optarg, 1, 1L << 40, &v)) return 2; o.stop_after = v; break;
        case 'q': o.quiet = 1; break;
        case 'p':
            /* an empty prompt gives the sampler nothing to start from: said, not a silent no-sample */
            if (!*optarg)
                return cli_usage_error("train", "--sample-prompt is empty: give the sample's first text, or "
                                                "--sample-tokens 0 for no sample");
            o.sample_prompt = optarg;
            break;
        case 't': if (cli_parse_long("--sample-tokens", optarg, 0, 1 << 24, &v)) return 2; o.sample_tokens = (int)v; break;
        case 'F': o.check_finite = 1; break;
        case 'D': o.dist_mode = optarg; break;
        case 'I': o.dist_id = optarg; break;
        case 'f': o.force = 1; break;
        case 'R': o.new_data = 1; break;
        case 'N': if (parse_plant_nan(optarg, &o)) return 2; break;
        case 'O': if (cli_parse_long("--plant-overflow", optarg, 1, 1L << 40, &v)) return 2; o.plant_overflow_step = v; break;
        case 'W': plant_wrong = optarg; break;
        case 'G': if (parse_plant_grad_h(optarg, &o)) return 2; break;
        }
    }
    if (c < 0) return parser.status;
    cc_preflight_opts po;
    if (cli_preflight_opts(&po, &ca, "train", o.quiet)) return 2;
    if (plant_wrong && cli_check_choice("train", "--plant-wrong-result", plant_wrong, cc_preflight_check_names()))
        return 2;
    if (plant_wrong && strcmp(po.mode, "never") == 0)
        return cli_usage_error("train", "--plant-wrong-result needs the preflight (not --preflight never)");
    po.plant = plant_wrong;
    o.preflight = run_preflight;
    o.preflight_arg = &po;
    if (o.resume && o.init_ckpt) return cli_usage_error("train", "--resume and --init exclude each other");
    if (o.resume && o.force && strcmp(o.resume, "auto") != 0)
        return cli_usage_error("train", "--force starts over: it does not go with --resume CKPT");
    if (o.new_data && !o.resume) return cli_usage_error("train", "--new-data goes with --resume");
    if (o.dist_mode && cli_check_choice("train", "--dist", o.dist_mode, "auto|mpi|env|none")) return 2;
    cc_config cfg;
    char auto_path[CC_PATH_MAX + 64];
    if (o.resume && strcmp(o.resume, "auto") == 0) {
        /* the config names out_dir; its checkpoint, if any, is the one to resume */
        int rcfg;
        if ((rcfg = cli_resolve_config(&cfg, &ca, NULL, CKPT_MODEL_MUST_MATCH)) != 0) return cli_config_status(rcfg);
        snprintf(auto_path, sizeof(auto_path), "%s/%s", cfg.out_dir, CC_CHECKPOINT_NAME);
        struct stat st;
        o.resume = stat(auto_path, &st) == 0 ? auto_path : NULL;
        /* without a checkpoint it is a new run: logs there are kept unless --force (trainer) */
        o.resume_auto = !o.resume;
        /* the trainer's "resumed from" line says it once the out_dir is this run's (a run holding it refuses) */
        if (o.new_data && !o.resume) o.new_data = 0; /* nothing to resume: the data is new anyway */
    }
    const int resume_named = o.resume && o.resume != auto_path;
    const int rres = cli_resolve_config(&cfg, &ca, o.resume ? o.resume : o.init_ckpt,
                                        o.resume ? CKPT_MODEL_MUST_MATCH : CKPT_MODEL_MAY_DIFFER);
    if (rres != 0) return cli_config_status(rres);
    if (resume_named && !cli_sets_key(&ca, "run", "out_dir")) {
        /* --resume CKPT continues that run where its checkpoint is, wherever
         * that folder is now; a config's out_dir names where new runs go */
        char dir[CC_PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", o.resume);
        char *slash = strrchr(dir, '/');
        if (slash) *slash = 0;
        else snprintf(dir, sizeof(dir), ".");
        if (ca.config_path && !cc_same_file(dir, cfg.out_dir))
            fprintf(stderr, "catchat: note: --resume goes on in %s, the checkpoint's folder, not the config's out_dir "
                            "%s (--set out_dir=DIR to write elsewhere)\n", dir, cfg.out_dir);
        snprintf(cfg.out_dir, sizeof(cfg.out_dir), "%s", dir);
    }
    const char *from = o.resume ? o.resume : o.init_ckpt;
    static const char way_out[] = "pass --set train=PATH --set val=PATH where the data is now";
    if (from && (cli_check_stored_data(&ca, from, &cfg, "train", way_out) != 0 ||
                 cli_check_stored_data(&ca, from, &cfg, "val", way_out) != 0))
        return 1;
    /* what the handler of a second signal says, set before it can run */
    snprintf(saved_path, sizeof(saved_path), "%s/%s", cfg.out_dir, CC_CHECKPOINT_NAME);
    if (o.resume) resumed_step = (sig_atomic_t)cc_checkpoint_step(o.resume);
    catch_stop_signals();
    o.stop_signal = &stop_signal;
    o.saved_step = &saved_step;
    o.prog = cli_program;
    cc_dist_launch launch;
    cli_dist_launch(&launch);
    o.launch = &launch;
    cc_train_result res;
    /* one line rewritten in place on a terminal (cut to its width), a line per step in a log */
    struct winsize ws;
    if (isatty(STDOUT_FILENO)) o.live = ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 20 ? ws.ws_col : 80;
    int rc = cc_train(&cfg, &o, &res);
    free(res.losses);
    if (rc == 0 && res.stopped_by) return 128 + res.stopped_by;
    return rc == 0 ? 0 : 1;
}
