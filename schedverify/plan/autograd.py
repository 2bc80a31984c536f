"""The one module of schedverify that imports torch: it runs a model's own code and counts what
autograd keeps.  Nothing imports it at import time; :mod:`.calibration` imports it when asked
to measure.

**The code that runs** is torchtitan's own Llama-3 modules when torchtitan imports here and
the model is one of its shape (``Llama3TransformerBlock`` built by
``torchtitan.models.llama3._build_llama3_layers``, its ``RMSNorm``, ``Linear`` LM head and
``Embedding``, and ``torchtitan.components.loss.cross_entropy_loss``), with one change:
torchtitan 0.3.0 gives language models FlexAttention, which needs ``torch.compile``, so the
block's inner attention is torchtitan's own ``ScaledDotProductAttention`` module, restricted to
the flash or the math kernel as the model file says.  Otherwise (torchtitan absent, LayerNorm,
a GeLU FFN, dropout, or Korthikanti's selective recomputation, none of which torchtitan's
Llama-3 has) it is the reference block below, which follows torchtitan's code op for op where
torchtitan has the op: ``nn.RMSNorm``; one fused QKV projection split into contiguous Q, K, V
(``FusedQKVLinear``); complex RoPE (``ComplexRoPE.apply_rotary_emb``); SDPA on (b, a, s, d)
with ``enable_gqa``; the output's ``transpose(1, 2).contiguous().flatten(2)`` into ``wo``;
``w2(F.silu(w1(x)) * w3(x))``; the head's ``F.cross_entropy(pred.flatten(0, 1).float(),
labels.flatten(0, 1))``.  GeLU, LayerNorm and dropout are placed as in GPT-2 and Megatron-LM
(dropout on the attention probabilities inside SDPA and on each residual branch, and on the
embedding).  tests/test_memory_truth.py holds the two equal, byte for byte, where torchtitan
imports.

**What is counted**: every tensor autograd saves during the forward
(``torch.autograd.graph.saved_tensors_hooks``), deduplicated by storage (a saved view keeps
its whole storage alive), less the parameters and buffers.  A non-reentrant checkpoint saves
its inputs through the same hooks, so recomputation is counted the same way.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.checkpoint import checkpoint

from ..errors import UsageError

DTYPES = {"bf16": torch.bfloat16, "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16,
          "fp32": torch.float32, "float32": torch.float32}


def torch_version() -> str:
    return str(torch.__version__)


def default_device() -> str:
    """cuda where there is one, else cpu."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def device(name: str) -> torch.device:
    """The device to measure on: ``cpu``, or ``cuda`` where there is one."""
    if name == "cpu":
        return torch.device("cpu")
    if name == "cuda":
        if not torch.cuda.is_available():
            raise UsageError("--measure on cuda: no CUDA device here (torch.cuda.is_available() is False); "
                             "measure on a machine with a GPU and reuse its file with --calibration, or plan "
                             "with the cuda formulas (--backend cuda, without --measure)")
        return torch.device("cuda")
    raise UsageError(f"--measure: cannot measure on {name!r}: expected cpu or cuda")


def device_name(dev: torch.device) -> str:
    if dev.type == "cuda":
        return torch.cuda.get_device_name(dev)
    import platform

    return f"{platform.machine() or 'cpu'}, {torch.get_num_threads()} threads"


# --- the shapes of a model --------------------------------------------------------------

@dataclass(frozen=True)
class Shape:
    """One layer's sizes and options: what the code is built from."""

    seq_len: int
    batch: int
    hidden: int
    heads: int
    kv_heads: int
    ffn: int
    vocab: int
    dtype: str
    norm: str
    gated: bool
    flash_attention: bool
    dropout: bool
    recompute: str
    loss_fp32: bool = True

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


#: The dropout probability of the reference block (its value does not change the bytes).
DROPOUT = 0.1
#: The fused attention kernels, in SDPA's order (CPU has flash only; CUDA's flash takes no fp32,
#: the memory-efficient kernel does, and keeps the same tensors).
FUSED = (SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.CUDNN_ATTENTION)


def _norm(shape: Shape) -> nn.Module:
    return nn.RMSNorm(shape.hidden, eps=1e-5) if shape.norm == "rmsnorm" else nn.LayerNorm(shape.hidden)


def _rope_cache(head_dim: int, seq_len: int, theta: float = 500000.0) -> torch.Tensor:
    """torchtitan's ComplexRoPE cache (without Llama-3.1's frequency scaling: same shapes)."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2)[: head_dim // 2].float() / head_dim))
    t = torch.arange(seq_len)
    freqs = torch.outer(t, freqs).float()
    return torch.polar(torch.ones_like(freqs), freqs)


def _rope(x: torch.Tensor, cache: torch.Tensor) -> torch.Tensor:
    """ComplexRoPE.apply_rotary_emb for one tensor of (b, s, heads, d)."""
    x_ = torch.view_as_complex(x.float().reshape(*x.shape[:-1], -1, 2))
    c = cache[: x.shape[1]].view(1, x.shape[1], 1, x.shape[-1] // 2)
    return torch.view_as_real(x_ * c).flatten(3).type_as(x)


class ReferenceBlock(nn.Module):
    """A pre-norm decoder layer as torchtitan's Llama-3 block writes it (module docstring)."""

    def __init__(self, shape: Shape):
        super().__init__()
        self.shape = shape
        h, a, k, d = shape.hidden, shape.heads, shape.kv_heads, shape.head_dim
        self.attention_norm = _norm(shape)
        self.ffn_norm = _norm(shape)
        self.wqkv = nn.Linear(h, (a + 2 * k) * d, bias=False)
        self.wo = nn.Linear(a * d, h, bias=False)
        self.w1 = nn.Linear(h, shape.ffn, bias=False)
        self.w2 = nn.Linear(shape.ffn, h, bias=False)
        self.w3 = nn.Linear(h, shape.ffn, bias=False) if shape.gated else None
        self.register_buffer("rope_cache", _rope_cache(d, shape.seq_len), persistent=False)

    def _core(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s = self.shape
        kernels = list(FUSED) if s.flash_attention else [SDPBackend.MATH]
        p = DROPOUT if s.dropout else 0.0
        if p and s.flash_attention:
            kernels.append(SDPBackend.MATH)  # CPU's flash kernel takes no dropout
        with sdpa_kernel(kernels):
            return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True, enable_gqa=s.heads > s.kv_heads)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.shape
        b, L, _ = x.shape
        hpk = s.heads // s.kv_heads
        qkv = self.wqkv(self.attention_norm(x)).view(b, L, -1, hpk + 2, s.head_dim)
        xq, xk, xv = torch.split(qkv, [hpk, 1, 1], dim=-2)
        xq, xk, xv = (t.reshape(b, L, -1, s.head_dim).contiguous() for t in (xq, xk, xv))
        cache = self.get_buffer("rope_cache")
        xq, xk = _rope(xq, cache), _rope(xk, cache)
        q, k, v = (t.transpose(1, 2) for t in (xq, xk, xv))
        if s.recompute == "selective":
            out = checkpoint(self._core, q, k, v, use_reentrant=False)
        else:
            out = self._core(q, k, v)
        out = out.transpose(1, 2).contiguous().flatten(2)
        p = DROPOUT if s.dropout else 0.0
        h = x + F.dropout(self.wo(out), p, self.training)
        y = self.ffn_norm(h)
        z = self.w2(F.silu(self.w1(y)) * self.w3(y)) if self.w3 is not None else self.w2(F.gelu(self.w1(y)))
        return h + F.dropout(z, p, self.training)


class ReferenceHead(nn.Module):
    """The final norm, the LM head and torchtitan's cross-entropy loss."""

    def __init__(self, shape: Shape):
        super().__init__()
        self.shape = shape
        self.norm = _norm(shape)
        self.lm_head = nn.Linear(shape.hidden, shape.vocab, bias=False)

    def forward(self, h: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        pred = self.lm_head(self.norm(h))
        if self.shape.loss_fp32:
            pred = pred.float()
        return F.cross_entropy(pred.flatten(0, 1), labels.flatten(0, 1), reduction="sum")


class ReferenceEmbedding(nn.Module):
    def __init__(self, shape: Shape):
        super().__init__()
        self.shape = shape
        self.tok_embeddings = nn.Embedding(shape.vocab, shape.hidden)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(tokens)
        return F.dropout(h, DROPOUT, self.training) if self.shape.dropout else h


# --- torchtitan's own modules ----------------------------------------------------------

def torchtitan_version() -> str | None:
    """torchtitan's version when its Llama-3 model imports here, else None."""
    try:
        import importlib.metadata

        import torchtitan.models.llama3  # noqa: F401
        return importlib.metadata.version("torchtitan")
    except Exception:  # an absent or broken install (torchtitan 0.3.0 imports triton): the reference runs
        return None


def torchtitan_fits(shape: Shape) -> str | None:
    """Why torchtitan's Llama-3 cannot be this model (None: it can)."""
    if shape.norm != "rmsnorm":
        return "torchtitan's Llama-3 has RMSNorm"
    if not shape.gated:
        return "torchtitan's Llama-3 has a SwiGLU FFN"
    if shape.dropout:
        return "torchtitan's Llama-3 has no dropout"
    if shape.recompute == "selective":
        return "torchtitan's selective recomputation is op-level, not the attention core's"
    if not shape.loss_fp32:
        return "torchtitan's loss upcasts the logits to fp32"
    return None


def _torchtitan_parts(shape: Shape) -> tuple[nn.Module, nn.Module, nn.Module]:
    from torchtitan.components.loss import cross_entropy_loss
    from torchtitan.models.common import ComplexRoPE, Embedding, Linear, RMSNorm
    from torchtitan.models.common.attention import ScaledDotProductAttention
    from torchtitan.models.llama3 import _build_llama3_layers

    rope = ComplexRoPE.Config(dim=shape.head_dim, max_seq_len=shape.seq_len, theta=500000, scaling="llama")
    cfg = _build_llama3_layers(n_layers=1, dim=shape.hidden, n_heads=shape.heads, n_kv_heads=shape.kv_heads,
                               hidden_dim=shape.ffn, rope=rope, attn_backend="flex")[0]
    cfg.attention.inner_attention = ScaledDotProductAttention.Config()
    block = cfg.build()
    block.attention.inner_attention.sdpa_backends = list(FUSED) if shape.flash_attention else [SDPBackend.MATH]

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.block = block

        def forward(self, x):
            return self.block(x, None, None)

    class Head(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = RMSNorm.Config(normalized_shape=shape.hidden).build()
            self.lm_head = Linear.Config(in_features=shape.hidden, out_features=shape.vocab).build()

        def forward(self, h, labels):
            pred = self.lm_head(self.norm(h))
            return cross_entropy_loss(pred, labels)

    emb = Embedding.Config(num_embeddings=shape.vocab, embedding_dim=shape.hidden).build()
    return Layer(), Head(), emb


# --- counting ----------------------------------------------------------------------------

@dataclass(frozen=True)
class SavedTensor:
    shape: tuple[int, ...]
    dtype: str
    nbytes: int
    made_by: str


def saved(fn: Callable[[], Any], exclude: list[torch.Tensor]) -> tuple[int, tuple[SavedTensor, ...], Any]:
    """(bytes, the saved storages, ``fn()``): what autograd saves while ``fn`` runs, one entry per
    storage, less the storages of ``exclude``."""
    skip = {t.untyped_storage().data_ptr() for t in exclude}
    seen: dict[int, SavedTensor] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in skip and ptr not in seen:
            seen[ptr] = SavedTensor(tuple(t.shape), str(t.dtype).replace("torch.", ""), st.nbytes(),
                                    t.grad_fn.name() if t.grad_fn is not None else "input")
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        out = fn()
    return sum(x.nbytes for x in seen.values()), tuple(seen.values()), out


def _cast(module: nn.Module, dtype: torch.dtype, dev: torch.device) -> nn.Module:
    """The module on ``dev`` with floating parameters in ``dtype`` (as FSDP's mixed precision
    gives them; buffers such as the complex RoPE cache keep theirs)."""
    module.to(dev)
    for p in module.parameters():
        p.data = p.data.to(dtype)
    module.train()
    return module


@dataclass(frozen=True)
class Parts:
    """Bytes autograd keeps for one layer, the head and the embedding, and what they are."""

    layer: int
    head: int
    embedding: int
    tensors: dict[str, tuple[SavedTensor, ...]]
    code: str


def build(shape: Shape, dev: torch.device, code: str) -> tuple[nn.Module, nn.Module, nn.Module]:
    if code == "torchtitan":
        layer, head, emb = _torchtitan_parts(shape)
    else:
        layer, head, emb = ReferenceBlock(shape), ReferenceHead(shape), ReferenceEmbedding(shape)
    dtype = DTYPES[shape.dtype]
    for m in (layer, head, emb):
        for p in m.parameters():  # torchtitan's modules are built empty; values do not change the bytes
            nn.init.normal_(p, std=0.02)
    return _cast(layer, dtype, dev), _cast(head, dtype, dev), _cast(emb, dtype, dev)


def _layer_fn(layer: nn.Module, shape: Shape) -> Callable[[torch.Tensor], torch.Tensor]:
    if shape.recompute == "full":
        return lambda x: checkpoint(layer, x, use_reentrant=False)
    return layer


def measure(shape: Shape, dev: torch.device, code: str, *, seed: int = 0) -> Parts:
    """What autograd keeps for one layer, the head and the embedding at ``shape``."""
    torch.manual_seed(seed)
    layer, head, emb = build(shape, dev, code)
    dtype = DTYPES[shape.dtype]
    b, s, h = shape.batch, shape.seq_len, shape.hidden
    x = torch.randn(b, s, h, dtype=dtype, device=dev, requires_grad=True)
    run = _layer_fn(layer, shape)
    exclude = [*layer.parameters(), *layer.buffers()]
    n_layer, t_layer, _ = saved(lambda: run(x), exclude)
    labels = torch.randint(0, shape.vocab, (b, s), device=dev)
    hx = torch.randn(b, s, h, dtype=dtype, device=dev, requires_grad=True)
    n_head, t_head, _ = saved(lambda: head(hx, labels), [*head.parameters(), *head.buffers()])
    tokens = torch.randint(0, shape.vocab, (b, s), device=dev)
    n_emb, t_emb, _ = saved(lambda: emb(tokens), [*emb.parameters()])
    return Parts(n_layer, n_head, n_emb, {"layer": t_layer, "head": t_head, "embedding": t_emb}, code)


# --- timing ------------------------------------------------------------------------------

def _sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2]


def time_passes(shape: Shape, dev: torch.device, code: str, *, repeats: int = 3) -> dict[str, dict[str, float]]:
    """Seconds of F, I (the input gradient alone, ``torch.autograd.grad`` of the input), W
    (the full backward less I) and B (the full backward) of one layer and of the head at
    ``shape``, the median of ``repeats`` runs after one warm-up."""
    torch.manual_seed(0)
    layer, head, _emb = build(shape, dev, code)
    dtype = DTYPES[shape.dtype]
    b, s, h = shape.batch, shape.seq_len, shape.hidden
    labels = torch.randint(0, shape.vocab, (b, s), device=dev)
    run = _layer_fn(layer, shape)
    out: dict[str, dict[str, float]] = {}
    for part, fn in (("layer", lambda x: run(x)), ("head", lambda x: head(x, labels))):
        samples: dict[str, list[float]] = {"F": [], "I": [], "B": []}
        for i in range(repeats + 1):
            x = torch.randn(b, s, h, dtype=dtype, device=dev, requires_grad=True)
            _sync(dev)
            t0 = time.perf_counter()
            y = fn(x)
            _sync(dev)
            t1 = time.perf_counter()
            g = torch.ones_like(y) if y.dim() else None
            torch.autograd.grad(y, x, g, retain_graph=True)
            _sync(dev)
            t2 = time.perf_counter()
            y2 = fn(x)
            _sync(dev)
            t3 = time.perf_counter()
            y2.backward(g)
            _sync(dev)
            t4 = time.perf_counter()
            if i:  # the first run warms up
                samples["F"].append(t1 - t0)
                samples["I"].append(t2 - t1)
                samples["B"].append(t4 - t3)
        f, i_, bw = (_median(samples[k]) for k in ("F", "I", "B"))
        out[part] = {"F": f, "I": min(i_, bw), "W": max(0.0, bw - i_), "B": bw}
    return out
