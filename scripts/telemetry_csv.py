"""Reading a catchat telemetry CSV (<out_dir>/telemetry.csv) for the scripts beside it: a missing file,
another CSV or an empty one is one line and exit 1, never a traceback."""
import csv, sys

# the columns the scripts read (catchat writes more)
COLUMNS = ("step", "loss", "running_loss", "lr", "loss_scale", "grad_norm", "grad_norm_clipped", "skipped",
           "step_ms", "tok_per_s", "eval_loss", "eval_top1", "eval_top5")


def read(path, prog):
    """The rows of the telemetry CSV at path, as dicts; exits with one line naming prog and path."""
    try:
        with open(path, newline="", encoding="utf-8", errors="replace") as f:
            reader = csv.DictReader(f)
            header = reader.fieldnames or []
            missing = [c for c in COLUMNS if c not in header]
            if missing:
                sys.exit(f"{prog}: {path}: not a catchat telemetry CSV (it has no {', '.join(missing[:3])}"
                         f"{' ...' if len(missing) > 3 else ''} column; <out_dir>/telemetry.csv is one)")
            rows = list(reader)
    except OSError as e:
        sys.exit(f"{prog}: {path}: {e.strerror}")
    if not rows:
        sys.exit(f"{prog}: {path}: no rows")
    for i, r in enumerate(rows):
        try:
            for c in COLUMNS:
                if r[c] or not c.startswith("eval_"):
                    float(r[c])
        except (TypeError, ValueError):
            sys.exit(f"{prog}: {path}: row {i + 2} is not a telemetry row (its {c} is {r[c]!r})")
    return rows
