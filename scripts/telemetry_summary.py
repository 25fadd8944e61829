#!/usr/bin/env python3
"""Summarise a catchat telemetry CSV: first/last loss, eval rows, throughput.
   scripts/telemetry_summary.py runs/x/telemetry.csv [--markdown]"""
import statistics, sys

import telemetry_csv


def main():
    args = [x for x in sys.argv[1:] if x != "--markdown"]
    if len(args) != 1:
        sys.exit("usage: scripts/telemetry_summary.py runs/x/telemetry.csv [--markdown]")
    path = args[0]
    md = "--markdown" in sys.argv
    rows = telemetry_csv.read(path, "telemetry_summary")
    losses = [float(r["loss"]) for r in rows]
    finite = all(l == l and abs(l) != float("inf") for l in losses)
    skipped = sum(int(r["skipped"]) for r in rows)
    tok = statistics.median(float(r["tok_per_s"]) for r in rows[5:] or rows)
    ms = statistics.median(float(r["step_ms"]) for r in rows[5:] or rows)
    evals = [r for r in rows if r["eval_loss"]]
    out = [f"steps: {len(rows)} (all losses finite: {finite}; skipped steps: {skipped})",
           f"loss: first {losses[0]:.4f}, last {losses[-1]:.4f}, running {float(rows[-1]['running_loss']):.4f}",
           f"median step: {ms:.1f} ms, {tok:,.0f} tokens/s"]
    if md:
        out = ["- " + o for o in out]
        out.append("\n| step | eval loss | top-1 | top-5 |\n|---|---|---|---|")
        out += [f"| {r['step']} | {float(r['eval_loss']):.4f} | {100*float(r['eval_top1']):.2f}% | "
                f"{100*float(r['eval_top5']):.2f}% |" for r in evals]
    else:
        out += [f"eval @ {r['step']}: loss {float(r['eval_loss']):.4f} top-1 {100*float(r['eval_top1']):.2f}% "
                f"top-5 {100*float(r['eval_top5']):.2f}%" for r in evals]
    print("\n".join(out))


if __name__ == "__main__":
    main()
