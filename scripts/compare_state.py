#!/usr/bin/env python3
"""Compare two `catchat dump-state` files (e.g. --device gpu vs --device cpu):
loss relative difference and, per gradient tensor, ‖a − b‖/‖b‖.
   scripts/compare_state.py A.safetensors B.safetensors [--loss-tol 1e-3] [--grad-tol 2e-2]
Exit status 1 when a tolerance is exceeded (or a value is not finite)."""
import argparse, json, math, struct, sys

import numpy as np

DT = {"F32": np.float32, "F64": np.float64, "I32": np.int32, "F16": np.float16}


def load(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    hdr = json.loads(blob[8:8 + n])
    hdr.pop("__metadata__", None)
    data = memoryview(blob)[8 + n:]
    return {k: np.frombuffer(data[v["data_offsets"][0]:v["data_offsets"][1]], dtype=DT[v["dtype"]]).reshape(v["shape"])
            for k, v in hdr.items()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--loss-tol", type=float, default=1e-3)
    ap.add_argument("--grad-tol", type=float, default=2e-2)
    args = ap.parse_args()
    a, b = load(args.a), load(args.b)
    ok = bool((a["x"] == b["x"]).all() and (a["y"] == b["y"]).all())
    print(f"same batch: {ok}")
    la, lb = float(a["loss"][0]), float(b["loss"][0])
    rel = abs(la - lb) / abs(lb)
    print(f"loss {la:.7f} vs {lb:.7f}  rel diff {rel:.2e}  (tol {args.loss_tol:g})")
    ok &= math.isfinite(la) and rel <= args.loss_tol
    worst = 0.0
    for k in sorted(x for x in b if x.startswith("grad.")):
        ga, gb = a[k].astype(np.float64), b[k].astype(np.float64)
        e = np.linalg.norm(ga - gb) / max(np.linalg.norm(gb), 1e-30)
        if not np.isfinite(ga).all():
            e = math.inf
        worst = max(worst, e)
        print(f"  {k:28s} rel err {e:.2e}")
        ok &= e <= args.grad_tol
    print(f"worst gradient rel err {worst:.2e} (tol {args.grad_tol:g}): {'PASS' if ok else 'FAIL'}")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
