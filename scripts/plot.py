#!/usr/bin/env python3
"""Plot a catchat telemetry CSV: loss (and running loss, eval loss), eval
top-1/top-5, the learning rate ([train] lr_schedule), gradient norm (before
and after clipping), loss scale and tokens/s against the step, as one PNG.
   scripts/plot.py runs/x/telemetry.csv [-o out.png] [--title TEXT]"""
import argparse, sys

import telemetry_csv


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("-o", "--out", default=None)
    ap.add_argument("--title", default=None)
    a = ap.parse_args()
    rows = telemetry_csv.read(a.csv, "plot")
    try:
        import matplotlib
    except ImportError:
        sys.exit("plot: matplotlib is not installed (scripts/install_deps.sh puts it into .venv: "
                 ".venv/bin/python scripts/plot.py ...)")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    col = lambda k: [float(r[k]) for r in rows]
    step = col("step")
    ev = [r for r in rows if r["eval_loss"]]
    es = [float(r["step"]) for r in ev]
    fig, ax = plt.subplots(2, 3, figsize=(15, 7), dpi=110)
    ax[0][0].plot(step, col("loss"), lw=0.6, alpha=0.5, label="loss")
    ax[0][0].plot(step, col("running_loss"), lw=1.2, label="running loss")
    ax[0][0].plot(es, [float(r["eval_loss"]) for r in ev], "o-", label="eval loss")
    ax[0][0].set_ylabel("nats / token")
    ax[0][0].legend()
    ax[0][1].plot(es, [100 * float(r["eval_top1"]) for r in ev], "o-", label="eval top-1")
    ax[0][1].plot(es, [100 * float(r["eval_top5"]) for r in ev], "o-", label="eval top-5")
    ax[0][1].set_ylabel("%")
    ax[0][1].legend()
    ax[1][0].plot(step, col("grad_norm"), lw=0.8, label="grad norm")
    ax[1][0].plot(step, col("grad_norm_clipped"), lw=0.8, label="after clip")
    ax[1][0].set_yscale("log")
    ax[1][0].legend()
    ax[1][1].plot(step, col("loss_scale"), lw=1.2, label="loss scale")
    skipped = [float(r["step"]) for r in rows if r["skipped"] == "1"]
    if skipped:
        ax[1][1].plot(skipped, [float(r["loss_scale"]) for r in rows if r["skipped"] == "1"], "rx", label="skipped step")
    ax[1][1].set_yscale("log")
    ax[1][1].legend()
    ax[0][2].plot(step, col("lr"), lw=1.2, label="learning rate")
    ax[0][2].legend()
    ax[1][2].plot(step, col("tok_per_s"), lw=0.6, label="tokens/s")
    ax[1][2].legend()
    for a_ in ax.flat:
        a_.set_xlabel("step")
        a_.grid(alpha=0.3)
    fig.suptitle(a.title or a.csv)
    fig.tight_layout()
    out = a.out or a.csv.rsplit(".", 1)[0] + ".png"
    fig.savefig(out)
    print(out)


if __name__ == "__main__":
    main()
