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

Losses, the large-vocabulary choices a PyTorch user has: plain (the logits
[B·T, V] under autocast, F.cross_entropy in FP32), liger (Liger-Kernel's fused
linear cross-entropy: the final norm's output and lm_head's weight, the
logits a chunk of rows at a time) and cce (Apple's cut cross-entropy: the
logits never leave on-chip memory). A loss whose package does not import, or
does not run here, prints one line {"loss": ..., "skipped": why} instead.

Not modelled: catchat's per-timestep grad_h clamp (cuDNN's GRU exposes no
per-step hidden gradient) and RMSNorm's identity fallback/cap; both make the
PyTorch side cheaper, not dearer."""
import argparse, json, statistics, time

import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    def __init__(self, d, eps=1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(d))
        self.eps = eps

    def forward(self, x):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


class DualStream(nn.Module):
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
        return LigerFusedLinearCrossEntropyLoss(ignore_index=-1), False
    if name == "cce":
        from cut_cross_entropy import linear_cross_entropy
        return (lambda w, h, y: linear_cross_entropy(h, w, y, ignore_index=-1)), False
    raise SystemExit(f"pytorch_model.py: --losses: unknown loss '{name}' (plain, liger, cce)")


def bench(mode, loss_name, args):
    torch.manual_seed(0)
    torch.cuda.reset_peak_memory_stats()
    dev = "cuda"
    model = DualStream(args.vocab, args.d, args.layers, args.heads, args.window, args.seq).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.1, fused=True)
    scaler = torch.amp.GradScaler("cuda")
    fwd = torch.compile(model) if mode == "compile" else model
    fused, head = loss_fn(loss_name)
    x = torch.randint(0, args.vocab, (args.batch, args.seq + 1), device=dev)
    inp, tgt = x[:, :-1], x[:, 1:]

    def step():
        with torch.autocast("cuda", dtype=torch.float16):
            out = fwd(inp, head)
            if head:
                loss = F.cross_entropy(out.float().view(-1, args.vocab), tgt.reshape(-1))
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
    for _ in range(args.warmup):
        step()
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
            "skipped_steps": skipped,
            "warmup_s": round(warm_s, 1), "torch": torch.__version__, "gpu": torch.cuda.get_device_name()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--d", type=int, default=512)
    ap.add_argument("--layers", type=int, default=3)
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--window", type=int, default=128)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--vocab", type=int, default=256)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--modes", default="eager,compile")
    ap.add_argument("--losses", default="plain")
    args = ap.parse_args()
    for loss_name in args.losses.split(","):
        for mode in args.modes.split(","):
            try:
                loss_fn(loss_name)
                row = bench(mode, loss_name, args)
            except SystemExit:
                raise
            except Exception as e:  # not installed, no Triton, no GPU: say so and go on
                row = {"impl": "pytorch", "mode": mode, "loss": loss_name, "V": args.vocab,
                       "skipped": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:200]}
                torch.cuda.empty_cache() if torch.cuda.is_available() else None
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
