#!/usr/bin/env python3
"""The catchat model as a PyTorch user would write it (cuDNN nn.GRU per layer,
RMSNorm, residuals, SDPA with a sliding-window mask, AMP fp16 + GradScaler,
fused AdamW), timed per training step: median of --steps after --warmup, CUDA
events, eager and torch.compile. Prints one JSON object per mode.

Memory: mem_mb and bytes_per_token are the peak allocated over the whole run
(model, warm-up and compile included); peak_allocated_bytes and
peak_reserved_bytes (torch.cuda.max_memory_allocated / max_memory_reserved:
the caching allocator's footprint) and their *_bytes_per_token are the peaks
over the timed steps only, the peak stats reset after the warm-up.

   python3 bench/pytorch_model.py [--d 512 --layers 3 --heads 8 --window 128 --seq 512 --batch 64]
                                  [--vocab 256] [--modes eager,compile] [--losses plain,liger,cce]
                                  [--ignore-frac 0]

Losses, the large-vocabulary choices a PyTorch user has: plain (the logits
[B·T, V] under autocast, F.cross_entropy in FP32), liger (Liger-Kernel's fused
linear cross-entropy: the final norm's output and lm_head's weight, the
logits a chunk of rows at a time) and cce (Apple's cut cross-entropy: the
logits never leave on-chip memory). A loss whose package does not import, or
does not run here, prints one line {"loss": ..., "skipped": why} instead; so
does every variant where torch does not import or no CUDA device is seen
(the script then exits 0). Every line names its mode, loss and V. Targets
equal to -1 are ignored by all three (ignore_index=-1); --ignore-frac sets
that fraction of the random targets to -1 (default 0: none). loss0 is the
first step's loss, about ln V for all three at initialisation; loss_package
the liger or cce package's version. bench/vocab_table.sh runs every loss
beside catchat at V = 256, 8192, 32000 and 50257.

Not modelled: catchat's per-timestep grad_h clamp (cuDNN's GRU exposes no
per-step hidden gradient) and RMSNorm's identity fallback/cap; both make the
PyTorch side cheaper, not dearer."""
import argparse, gc, json, statistics, time

try:
    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    NO_TORCH = None
except Exception as e:  # noqa: BLE001 -- any import failure: every variant prints a skip line
    torch = nn = F = None
    NO_TORCH = f"torch does not import: {type(e).__name__}: {e}"

LOSSES = ("plain", "liger", "cce")
IGNORE = -1  # the ignored target, passed to every loss as ignore_index
Module = nn.Module if nn is not None else object


class RMSNorm(Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class DualStream(Module):
    def __init__(self, V, D, L, H, W, T):
        super().__init__()
        self.H, self.W = H, W
        self.embed = nn.Embedding(V, D)
        self.norms = nn.ModuleList(RMSNorm(D) for _ in range(L))
        self.grus = nn.ModuleList(nn.GRU(D, D, batch_first=True) for _ in range(L))
        self.ctx_norm = RMSNorm(D)
        self.qkv = nn.Linear(D, 3 * D, bias=False)
        self.out = nn.Linear(D, D, bias=False)
        self.final_norm = RMSNorm(D)
        self.lm_head = nn.Linear(D, V, bias=False)
        i = torch.arange(T)
        self.register_buffer("mask", (i[None, :] <= i[:, None]) & (i[None, :] > i[:, None] - W), persistent=False)

    def forward(self, x, head=True):
        B, T = x.shape
        u = self.embed(x)
        for norm, gru in zip(self.norms, self.grus):
            h, _ = gru(norm(u))
            u = u + h
        q, k, v = self.qkv(self.ctx_norm(u)).chunk(3, dim=-1)
        q, k, v = (t.view(B, T, self.H, -1).transpose(1, 2) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=self.mask[:T, :T])
        c = self.out(o.transpose(1, 2).reshape(B, T, -1))
        f = self.final_norm(u + c)
        return self.lm_head(f) if head else f


def loss_fn(name):
    """(hidden or logits) -> loss for a loss variant, and whether it takes the final norm's output."""
    if name == "plain":
        return None, True
    if name == "liger":
        from liger_kernel.transformers.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyLoss
        # forward(lin_weight, _input, target, bias=None)
        return LigerFusedLinearCrossEntropyLoss(ignore_index=IGNORE), False
    if name == "cce":
        from cut_cross_entropy import linear_cross_entropy  # (e, c, targets, ignore_index=-100, ...)
        return (lambda w, h, y: linear_cross_entropy(h, w, y, ignore_index=IGNORE)), False
    raise SystemExit(f"pytorch_model.py: --losses: unknown loss '{name}' ({', '.join(LOSSES)})")


def bench(mode, loss_name, args):
    torch.manual_seed(0)
    gc.collect()
    torch.cuda.empty_cache()  # the previous variant's cached blocks would count in peak_reserved
    torch.cuda.reset_peak_memory_stats()
    dev = "cuda"
    model = DualStream(args.vocab, args.d, args.layers, args.heads, args.window, args.seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, fused=True)
    scaler = torch.amp.GradScaler("cuda")
    fwd = torch.compile(model) if mode == "compile" else model
    fused, head = loss_fn(loss_name)
    x = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device=dev)
    inp, tgt = x[:, :-1], x[:, 1:].clone()
    if args.ignore_frac > 0:
        tgt[torch.rand(tgt.shape, device=dev) < args.ignore_frac] = IGNORE

    def step():
        with torch.autocast("cuda", dtype=torch.float16):
            out = fwd(inp, head)
            if head:
                loss = F.cross_entropy(out.float().view(-1, args.vocab), tgt.reshape(-1), ignore_index=IGNORE)
            else:  # the fused losses take the FP16 hidden states and weight, as autocast would feed them
                h = out.reshape(-1, args.d).half()
                loss = fused(model.lm_head.weight.half(), h, tgt.reshape(-1))
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        return loss

    t0 = time.time()
    loss0 = None  # the first step's loss: the variants should agree on it (about ln V)
    for i in range(args.warmup):
        loss = step()
        if i == 0:
            loss0 = round(float(loss.detach()), 4)
    torch.cuda.synchronize()
    warm_s = time.time() - t0
    warm_peak = torch.cuda.max_memory_allocated()  # the whole-run peak so far (mem_mb)
    torch.cuda.reset_peak_memory_stats()  # the peak_* fields: the timed steps only
    times = []
    scale0 = scaler.get_scale()
    skipped = 0
    for _ in range(args.steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
        if scaler.get_scale() < scale0:  # an overflow: GradScaler skipped the optimizer step
            skipped += 1
        scale0 = scaler.get_scale()
    ms = statistics.median(times)
    tokens = args.batch * args.seq
    peak_alloc = torch.cuda.max_memory_allocated()
    peak_reserved = torch.cuda.max_memory_reserved()
    mem = max(warm_peak, peak_alloc) / 2**20
    return {"mem_mb": round(mem, 1), "bytes_per_token": round(mem * 2**20 / tokens),
            "peak_allocated_bytes": peak_alloc, "peak_reserved_bytes": peak_reserved,
            "allocated_bytes_per_token": round(peak_alloc / tokens),
            "reserved_bytes_per_token": round(peak_reserved / tokens),
            "impl": "pytorch", "mode": mode, "loss": loss_name, "V": args.vocab, "B": args.batch, "T": args.seq, "D": args.d, "L": args.layers,
            "W": args.window, "ms": round(ms, 3), "tok_per_s": round(args.batch * args.seq / ms * 1e3),
            "min_ms": round(min(times), 3), "max_ms": round(max(times), 3), "steps": args.steps,
            "skipped_steps": skipped, "loss0": loss0, "ignore_frac": args.ignore_frac,
            "warmup_s": round(warm_s, 1), "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
            "loss_package": package_version(loss_name)}


def package_version(loss_name):
    """The installed version of the loss's package ("liger-kernel 0.8.5"), None for plain."""
    dist = {"liger": "liger-kernel", "cce": "cut-cross-entropy"}.get(loss_name)
    if dist is None:
        return None
    try:
        from importlib.metadata import version
        return f"{dist} {version(dist)}"
    except Exception:  # noqa: BLE001 -- imported from a path without its metadata
        return f"{dist} (version unknown)"


class Unavailable(Exception):
    """This machine cannot run the variant (no torch, no CUDA): the skip line says so as it is."""


def skip(mode, loss_name, args, why):
    return {"impl": "pytorch", "mode": mode, "loss": loss_name, "V": args.vocab, "B": args.batch, "T": args.seq,
            "D": args.d, "L": args.layers, "skipped": why[:200]}


def main():
    ap = argparse.ArgumentParser(description="The catchat model in PyTorch, one training step timed; one JSON line "
                                             "per (loss, mode), or a skip line where that variant cannot run here.")
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=256, help="V: the embedding's and lm_head's rows (default 256)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--modes", default="eager,compile", help="comma list of eager, compile (default eager,compile)")
    ap.add_argument("--losses", "--loss", default="plain",
                    help="comma list of plain (F.cross_entropy on the full logits), liger (Liger-Kernel's fused "
                         "linear cross-entropy), cce (cut cross-entropy); default plain")
    ap.add_argument("--ignore-frac", type=float, default=0.0,
                    help="fraction of targets set to -1, the ignore_index every loss is given (default 0)")
    args = ap.parse_args()
    losses = [x for x in args.losses.split(",") if x]
    modes = [x for x in args.modes.split(",") if x]
    for name in losses:
        if name not in LOSSES:
            ap.error(f"--losses: unknown loss '{name}' ({', '.join(LOSSES)})")
    for m in modes:
        if m not in ("eager", "compile"):
            ap.error(f"--modes: unknown mode '{m}' (eager, compile)")
    if args.vocab < 2 or not 0 <= args.ignore_frac < 1:
        ap.error("--vocab must be at least 2 and --ignore-frac in [0, 1)")
    no_cuda = None
    if NO_TORCH is None and not torch.cuda.is_available():
        no_cuda = f"no CUDA device (torch {torch.__version__}, built for CUDA {torch.version.cuda})"
    for loss_name in losses:
        for mode in modes:
            try:
                if NO_TORCH:
                    raise Unavailable(NO_TORCH)
                loss_fn(loss_name)  # the package first: its absence is the likelier news
                if no_cuda:
                    raise Unavailable(no_cuda)
                row = bench(mode, loss_name, args)
            except Unavailable as e:
                row = skip(mode, loss_name, args, " ".join(str(e).split()))
            except Exception as e:  # not installed, no Triton, out of memory, a kernel that fails: go on
                msg = str(e).splitlines()[0] if str(e) else ""
                row = skip(mode, loss_name, args, f"{type(e).__name__}: {msg}")
                if torch is not None and torch.cuda.is_available():
                    gc.collect()
                    torch.cuda.empty_cache()
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
