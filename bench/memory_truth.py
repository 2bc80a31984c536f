"""What PyTorch's autograd keeps for one transformer layer, against the formulas: the table of
docs/memory.md.

    python bench/memory_truth.py                 # the eager configurations, a few seconds
    python bench/memory_truth.py --compile       # and torch.compile's (minutes: inductor compiles each)
    python bench/memory_truth.py --torchtitan    # and torchtitan's own block where it imports

Each row: bytes per s*b*h of the layer measured (saved_tensors_hooks, unique storages) on CPU, and
measured / predicted for the paper's count (Korthikanti et al. 2022) and the cpu formulas.  The
layer is h = 512, 8 heads, 2 KV heads, ffn 1408 (SwiGLU) or 2048 (GeLU), s = 256, b = 1.
"""

from __future__ import annotations

import argparse
import time

import torch

from schedverify.plan import activations as act
from schedverify.plan import autograd

ROWS = [
    ("bf16, flash", {}),
    ("bf16, math", {"flash_attention": False}),
    ("bf16, math, s = 1024", {"flash_attention": False, "seq_len": 1024}),
    ("fp32, flash", {"dtype": "fp32"}),
    ("fp32, math", {"dtype": "fp32", "flash_attention": False}),
    ("bf16, GeLU (ffn 2048), flash", {"gated": False, "ffn": 2048}),
    ("bf16, GeLU, LayerNorm, flash (GPT)", {"gated": False, "ffn": 2048, "norm": "layernorm"}),
    ("bf16, dropout 0.1, math", {"dropout": True, "flash_attention": False}),
    ("bf16, MHA, flash", {"kv_heads": 8}),
    ("bf16, selective recomputation, math", {"recompute": "selective", "flash_attention": False}),
    ("bf16, full recomputation", {"recompute": "full"}),
]


def shape(**options) -> autograd.Shape:
    base = dict(seq_len=256, batch=1, hidden=512, heads=8, kv_heads=2, ffn=1408, vocab=32000, dtype="bf16",
                norm="rmsnorm", gated=True, flash_attention=True, dropout=False, recompute="none")
    return autograd.Shape(**{**base, **options})


def predicted(sh: autograd.Shape, backend: str, part: str) -> float:
    o = act.Options(backend=backend, norm=sh.norm, gated=sh.gated, flash_attention=sh.flash_attention,
                    dropout=sh.dropout, recompute=sh.recompute)
    kept = {"layer": act.layer_kept, "head": act.head_kept}[part]
    u = act.unit_values(sh.seq_len, sh.batch, sh.hidden, sh.ffn, sh.heads, sh.kv_heads, sh.vocab)
    return float(act.total(kept(o, {"bf16": 2, "fp32": 4}[sh.dtype]), u))


def compiled_layer(sh: autograd.Shape) -> int:
    layer, _head, _emb = autograd.build(sh, torch.device("cpu"), "reference")
    fn = torch.compile(layer)
    x = torch.randn(sh.batch, sh.seq_len, sh.hidden, dtype=autograd.DTYPES[sh.dtype], requires_grad=True)
    fn(x).sum().backward()  # compile forward and backward first
    n, _, _ = autograd.saved(lambda: fn(x), [*layer.parameters(), *layer.buffers()])
    return n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compile", action="store_true", help="also torch.compile's layer (minutes)")
    ap.add_argument("--torchtitan", action="store_true", help="also torchtitan's block, where it imports")
    args = ap.parse_args()
    cpu = torch.device("cpu")
    tt = autograd.torchtitan_version() if args.torchtitan else None
    print(f"torch {torch.__version__}, CPU; torchtitan: {tt or 'not run'}")
    header = f"{'configuration':40} {'B / sbh':>8} {'/ paper':>8} {'/ cpu':>7}"
    print(header + ("  compiled B/sbh" if args.compile else ""))
    t0 = time.perf_counter()
    for name, options in ROWS:
        sh = shape(**options)
        parts = autograd.measure(sh, cpu, "reference")
        if tt is not None and autograd.torchtitan_fits(sh) is None:
            theirs = autograd.measure(sh, cpu, "torchtitan")
            assert theirs.layer == parts.layer, (name, theirs.layer, parts.layer)
        sbh = sh.seq_len * sh.batch * sh.hidden
        line = (f"{name:40} {parts.layer / sbh:8.3f} {parts.layer / predicted(sh, 'paper', 'layer'):8.3f} "
                f"{parts.layer / predicted(sh, 'cpu', 'layer'):7.3f}")
        if args.compile and sh.recompute == "none":
            line += f"  {compiled_layer(sh) / sbh:15.3f}"
        print(line, flush=True)
    sh = shape()
    parts = autograd.measure(sh, cpu, "reference")
    head = "head (final norm, LM head, loss; V 32000)"
    print(f"{head:40} {'':8} {parts.head / predicted(sh, 'paper', 'head'):8.3f} "
          f"{parts.head / predicted(sh, 'cpu', 'head'):7.3f}")
    print(f"({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    main()
