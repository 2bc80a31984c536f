"""What autograd keeps between a layer's forward and its backward, per backend: each tensor
with its size in one of a few terms, its bytes per element, how tensor parallelism divides it,
and the source that says it is kept.

A *backend* is a set of kernel facts, written as data (:class:`Backend`, :data:`BACKENDS`),
never as branches on its name:

``paper``
    Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer
    Models"), section 4.1: the tensors the backward needs with Megatron-LM's fused kernels,
    16-bit throughout and 1-byte dropout masks.  Table 2 of the paper is this set's special
    case (tests/test_plan_model.py).
``cpu``
    PyTorch 2.13 eager autograd on CPU, as measured by ``saved_tensors_hooks`` on torchtitan's
    Llama-3 block and the reference block (tests/test_memory_truth.py): RMSNorm decomposes,
    dropout keeps a mask of the input's dtype, no fused attention kernel takes dropout.
``cuda``
    PyTorch 2.13 eager autograd on CUDA, from the same sources (not measured on this machine:
    it has no GPU; the memory-truth tier measures it where there is one): RMSNorm runs the
    fused ``_fused_rms_norm_cuda`` kernel, dropout the fused ``native_dropout`` with a bool
    mask.

The sources, one per fact (torch 2.13; ``Functions.h`` is
``torch/include/torch/csrc/autograd/generated/Functions.h``, generated from
``tools/autograd/derivatives.yaml``, which lists what each backward node saves):

- RMSNorm: ``aten/src/ATen/native/layer_norm.cpp`` ``rms_norm_symint`` calls
  ``_fused_rms_norm``, whose CUDA kernel is ``_fused_rms_norm_cuda``
  (``FusedRmsNormBackward0`` saves ``input`` and ``result1``, the fp32 rstd) and whose CPU
  path is ``rms_norm_composite``: ``x.float()``, ``pow``, ``mean``, ``rsqrt``, ``mul``, so
  autograd keeps the fp32 input, the fp32 rstd and the fp32 normalized ``x * rstd`` (for the
  weight's gradient), 8 bytes per element whatever the dtype (in fp32 the "copy" is the input
  itself).  A weight of another dtype than the input (autocast) takes the composite path on
  CUDA too.
- LayerNorm: ``native_layer_norm`` on both (``NativeLayerNormBackward0``: ``input``, and
  ``result1``, ``result2``, the mean and rstd per token: the input's dtype on CPU, fp32 on
  CUDA).
- Attention, fused: ``ScaledDotProductFlashAttentionForCpuBackward0`` (CPU) and
  ``ScaledDotProductFlashAttentionBackward0`` (CUDA) save ``query``, ``key``, ``value`` (the
  KV heads, not expanded), ``output`` and the fp32 ``logsumexp`` (one per head and token):
  no ``s x s`` term.  The output is laid out (b, s, a, d), so the output projection's input
  (``transpose(1, 2).contiguous()``) is the same storage.  CPU's flash kernel takes no
  dropout: with dropout, SDPA falls back to the math path (CUDA's flash takes it, keeping an
  RNG state, not a mask).
- Attention, math (``_scaled_dot_product_attention_math``): Q, K and V are upcast to fp32
  (16-bit inputs) and K, V expanded to all heads (``enable_gqa`` repeats them) before the
  matmuls save them; the softmax output is fp32 (``SafeSoftmaxBackward0``); with dropout the
  mask and the dropped probabilities too (fp32 on CPU, a bool mask on CUDA); the output is a
  new tensor the output projection saves.
- Dropout: ``at::dropout`` is ``native_dropout`` where ``is_fused_kernel_acceptable`` (CUDA:
  ``NativeDropoutBackward0`` saves the bool mask), else ``input * noise`` with ``noise`` of
  the input's dtype (CPU).
- SwiGLU, torchtitan's ``FeedForward.forward``, ``w2(F.silu(w1(x)) * w3(x))``: ``w1`` and
  ``w3`` save their one shared input; ``SiluBackward0`` saves ``w1(x)``; the product saves
  ``silu(w1(x))`` and ``w3(x)``; ``w2`` saves the product: 4 tensors of ``ffn`` (a fused
  SwiGLU, as Korthikanti counts, keeps 3).  GeLU: ``GeluBackward0`` saves its input, ``w2``
  its output: 2.
- The head, torchtitan's ``cross_entropy_loss``: ``F.cross_entropy(pred.flatten(0, 1).float(),
  labels)``: ``log_softmax`` saves its fp32 result (``s b V``), ``nll_loss`` the int64
  labels; before it the final norm, as in a layer, and the LM head's input.
- The embedding: ``EmbeddingBackward0`` saves the int64 token ids.
- Recomputation: ``full`` is a non-reentrant ``torch.utils.checkpoint`` around each layer
  (torchtitan's ``FullAC``): the layer keeps only its input.  ``selective`` is Korthikanti's:
  a checkpoint around the attention core (Megatron's ``--recompute-granularity selective``),
  which keeps the core's inputs Q, K, V and its output; torchtitan's op-level
  ``SelectiveAC`` (save every other matmul) is another policy, not modelled here.
- ``torch.compile``: not a backend here.  Inductor's partitioner decides per graph what to
  save and what to recompute; calibrate a compiled model with ``--measure`` on its device
  rather than trusting a formula (docs/memory.md).

Terms (:data:`UNITS`): ``sbh`` (s b h), ``sbf`` (s b f), ``sbkv`` (s b k h / a: a tensor of
the KV heads), ``s2ba`` (s^2 b a: attention scores), ``sba`` (one number per head and
token), ``sb`` (one per token), ``sbV`` (logits).  Everything here is plain arithmetic over
numbers or sympy symbols alike (no import of sympy or torch).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from ..errors import UsageError

UNITS = ("sbh", "sbf", "sbkv", "s2ba", "sba", "sb", "sbV")
UNIT_TEXT = {"sbh": "s*b*h", "sbf": "s*b*f", "sbkv": "s*b*k*h/a", "s2ba": "s^2*b*a", "sba": "s*b*a",
             "sb": "s*b", "sbV": "s*b*V"}
#: How tensor parallelism divides a kept tensor: ``tp`` by ``t`` (heads and FFN columns are
#: split), ``sp`` by ``t`` only with sequence parallelism (replicated otherwise), ``none``.
SPLITS = ("tp", "sp", "none")


@dataclass(frozen=True)
class Kept:
    """One tensor autograd keeps: ``bytes`` per element of ``unit``, divided as ``split``
    says, and the ``source`` that says it is kept."""

    what: str
    unit: str
    bytes: Any
    split: str
    source: str


@dataclass(frozen=True)
class Backend:
    """The kernel facts that decide what a layer keeps (the module docstring gives each one's
    source).  ``rms_norm``: ``composite`` (fp32 input, rstd and normalized kept), ``fused``
    (input and rstd) or ``input`` (the input only, as the paper counts a norm);
    ``norm_stats``: bytes of LayerNorm's mean and rstd per token (None: the dtype's, 0: not
    counted); ``mask_bytes``: a dropout mask's bytes per element (None: the dtype's);
    ``flash_dropout``: a fused attention kernel takes dropout; ``math_upcast``: the math
    attention keeps fp32 Q, K, V and scores with K and V expanded to all heads (else
    Megatron's fused softmax: 16-bit scores); ``ffn_gated``: SwiGLU tensors of ``ffn`` kept;
    ``labels``: the loss keeps the int64 labels; ``head_norm``: the final norm keeps what a
    layer's norm does (else only its input)."""

    name: str
    title: str
    rms_norm: str
    norm_stats: int | None
    mask_bytes: int | None
    flash_dropout: bool
    math_upcast: bool
    ffn_gated: int
    labels: bool
    head_norm: bool


BACKENDS: dict[str, Backend] = {b.name: b for b in (
    Backend("paper", "Korthikanti et al. 2022 section 4.1 (Megatron's fused kernels)", rms_norm="input",
            norm_stats=0, mask_bytes=1, flash_dropout=True, math_upcast=False, ffn_gated=3, labels=False,
            head_norm=False),
    Backend("cpu", "PyTorch 2.13 eager autograd on CPU", rms_norm="composite", norm_stats=None, mask_bytes=None,
            flash_dropout=False, math_upcast=True, ffn_gated=4, labels=True, head_norm=True),
    Backend("cuda", "PyTorch 2.13 eager autograd on CUDA", rms_norm="fused", norm_stats=4, mask_bytes=1,
            flash_dropout=True, math_upcast=True, ffn_gated=4, labels=True, head_norm=True),
)}

NORMS = ("rmsnorm", "layernorm")

_HDR = "torch 2.13"
_KOR = "Korthikanti et al. 2022 section 4.1"


def backend(name: str) -> Backend:
    """The backend of that name, or a :class:`UsageError` listing the known ones."""
    found = BACKENDS.get(name) if isinstance(name, str) else None
    if found is None:
        import difflib

        close = difflib.get_close_matches(str(name), list(BACKENDS), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UsageError(f"backend: expected one of {', '.join(BACKENDS)}, got {name!r}{hint}")
    return found


@dataclass(frozen=True)
class Options:
    """The training options the kept tensors depend on (a model's, see :mod:`.transformer`)."""

    backend: str = "paper"
    norm: str = "layernorm"
    gated: bool = False
    flash_attention: bool = False
    dropout: bool = True
    recompute: str = "none"
    loss_fp32: bool = True


def attention_kernel(o: Options) -> str:
    """``flash`` or ``math``: the attention kernel the backend runs for these options."""
    be = backend(o.backend)
    return "flash" if o.flash_attention and (be.flash_dropout or not o.dropout) else "math"


def _norm(be: Backend, o: Options, e: Any, name: str) -> list[Kept]:
    """What one norm keeps of its ``s b h`` input (and per token)."""
    if be.rms_norm == "input" or (o.norm == "layernorm" and be.norm_stats == 0):
        return [Kept(f"{name}: its input", "sbh", e, "sp", _KOR)]
    if o.norm == "rmsnorm":
        if be.rms_norm == "fused":
            return [Kept(f"{name}: its input", "sbh", e, "sp", f"{_HDR} FusedRmsNormBackward0 input"),
                     Kept(f"{name}: fp32 rstd", "sb", 4, "sp", f"{_HDR} FusedRmsNormBackward0 result1")]
        return [Kept(f"{name}: fp32 input (x.float())", "sbh", 4, "sp", "rms_norm_composite: pow saves x.float()"),
                Kept(f"{name}: fp32 rstd", "sb", 4, "sp", "rms_norm_composite: rsqrt saves its result"),
                Kept(f"{name}: fp32 x * rstd", "sbh", 4, "sp", "rms_norm_composite: the weight's mul saves it")]
    stats = e if be.norm_stats is None else be.norm_stats
    return [Kept(f"{name}: its input", "sbh", e, "sp", f"{_HDR} NativeLayerNormBackward0 input"),
            Kept(f"{name}: mean and rstd", "sb", 2 * stats, "sp", f"{_HDR} NativeLayerNormBackward0 result1, result2")]


def _mask(be: Backend, e: Any) -> Any:
    return e if be.mask_bytes is None else be.mask_bytes


def layer_kept(o: Options, e: Any) -> tuple[Kept, ...]:
    """The tensors one transformer layer keeps for its backward, ``e`` the dtype's bytes."""
    be = backend(o.backend)
    if o.recompute == "full":
        src = _KOR + " (full recomputation)" if be.name == "paper" else \
            "torch.utils.checkpoint (non-reentrant): the checkpoint keeps the layer's input"
        return (Kept("the layer's input (checkpoint)", "sbh", e, "sp", src),)
    out: list[Kept] = []
    out += _norm(be, o, e, "attention norm")
    out.append(Kept("QKV projection's input", "sbh", e, "sp", _KOR if be.name == "paper" else "linear saves its input"))
    out += _attention(be, o, e)
    if o.dropout:
        out.append(Kept("attention residual dropout mask", "sbh", _mask(be, e), "sp",
                        _KOR if be.name == "paper" else _dropout_source(be)))
    out += _norm(be, o, e, "FFN norm")
    out.append(Kept("FFN input (shared by w1 and w3)" if o.gated else "FFN input", "sbh", e, "sp",
                    _KOR if be.name == "paper" else "linear saves its input"))
    if o.gated:
        n = be.ffn_gated
        src = (_KOR + " (a fused SwiGLU: gate, up, down's input)" if be.name == "paper" else
               "torchtitan FeedForward: silu saves w1(x), the product silu(w1(x)) and w3(x), w2 the product")
        out.append(Kept(f"SwiGLU: {n} tensors of ffn", "sbf", n * e, "tp", src))
    else:
        out.append(Kept("GeLU: its input and output", "sbf", 2 * e, "tp",
                        _KOR if be.name == "paper" else f"{_HDR} GeluBackward0 self; w2 saves its input"))
    if o.dropout:
        out.append(Kept("FFN residual dropout mask", "sbh", _mask(be, e), "sp",
                        _KOR if be.name == "paper" else _dropout_source(be)))
    return tuple(out)


def _dropout_source(be: Backend) -> str:
    return (f"{_HDR} NativeDropoutBackward0 result1 (bool mask)" if be.mask_bytes == 1
            else "at::dropout without a fused kernel: input * noise saves noise, of the input's dtype")


def _attention(be: Backend, o: Options, e: Any) -> list[Kept]:
    kernel = attention_kernel(o)
    if o.recompute == "selective":
        src = (_KOR + " (selective recomputation)" if be.name == "paper"
               else "torch.utils.checkpoint around the attention core keeps its inputs")
        return [Kept("Q (checkpointed core's input)", "sbh", e, "tp", src),
                Kept("K and V (checkpointed core's inputs)", "sbkv", 2 * e, "tp", src),
                Kept("attention output (output projection's input)", "sbh", e, "tp", "linear saves its input")]
    if be.name == "paper":
        out = [Kept("Q", "sbh", e, "tp", _KOR), Kept("K and V", "sbkv", 2 * e, "tp", _KOR),
               Kept("output projection's input", "sbh", e, "tp", _KOR)]
        if kernel == "flash":
            out.append(Kept("fp32 log-sum-exp", "sba", 4, "tp", "Dao et al. 2022 (FlashAttention)"))
        elif o.dropout:
            out.append(Kept("softmax output, dropout mask and output", "s2ba", 2 * e + 1, "tp", _KOR))
        else:
            out.append(Kept("softmax output", "s2ba", e, "tp", _KOR))
        return out
    if kernel == "flash":
        src = f"{_HDR} ScaledDotProductFlashAttention{'ForCpu' if be.name == 'cpu' else ''}Backward0"
        return [Kept("Q", "sbh", e, "tp", src + " query"),
                Kept("K and V (the KV heads)", "sbkv", 2 * e, "tp", src + " key, value"),
                Kept("attention output (also the output projection's input)", "sbh", e, "tp", src + " output"),
                Kept("fp32 log-sum-exp", "sba", 4, "tp", src + " logsumexp")]
    up = 4 if be.math_upcast else e
    math = "_scaled_dot_product_attention_math"
    out = [Kept("Q (fp32)", "sbh", up, "tp", f"{math}: upcast, saved by the QK^T matmul"),
           Kept("K and V (fp32, expanded to all heads)", "sbh", 2 * up, "tp",
                f"{math}: upcast and repeated for enable_gqa, saved by the matmuls"),
           Kept("fp32 softmax output", "s2ba", up, "tp", f"{_HDR} SafeSoftmaxBackward0 result")]
    if o.dropout:
        mask = 4 if be.mask_bytes is None else be.mask_bytes
        out += [Kept("attention dropout mask", "s2ba", mask, "tp", f"{math}: " + _dropout_source(be)),
                Kept("dropped probabilities (fp32)", "s2ba", up, "tp", f"{math}: the matmul with V saves them")]
    out.append(Kept("attention output (output projection's input)", "sbh", e, "tp", "linear saves its input"))
    return out


def head_kept(o: Options, e: Any) -> tuple[Kept, ...]:
    """The last stage's final norm, LM head and loss (not recomputed)."""
    be = backend(o.backend)
    if be.head_norm:
        out = _norm(be, o, e, "final norm")
    else:
        out = [Kept("final norm's input", "sbh", e, "sp", _KOR + " section 4.3")]
    out.append(Kept("LM head's input", "sbh", e, "sp", _KOR + " section 4.3" if be.name == "paper"
                    else "linear saves its input"))
    logits = 4 if o.loss_fp32 else e
    out.append(Kept(f"log-softmax of the logits ({'fp32' if o.loss_fp32 else 'the dtype'})", "sbV", logits, "tp",
                    _KOR + " section 4.3" if be.name == "paper" else
                    "torchtitan cross_entropy_loss: log_softmax of pred.float() saves its result"))
    if be.labels:
        out.append(Kept("int64 labels", "sb", 8, "none", f"{_HDR} NllLossBackward0 target"))
    return tuple(out)


#: The bytes of one token id (int64, as PyTorch's embedding takes them).
TOKEN_ID_BYTES = 8


def embedding_kept(o: Options, e: Any) -> tuple[Kept, ...]:
    """The first stage's embedding: the token ids, and its dropout mask."""
    be = backend(o.backend)
    out = [Kept("int64 token ids", "sb", TOKEN_ID_BYTES, "none",
                _KOR if be.name == "paper" else f"{_HDR} EmbeddingBackward0 indices")]
    if o.dropout:
        out.append(Kept("embedding dropout mask", "sbh", _mask(be, e), "sp",
                        _KOR if be.name == "paper" else _dropout_source(be)))
    return tuple(out)


def unit_values(s: Any, b: Any, h: Any, f: Any, a: Any, k: Any, V: Any) -> dict[str, Any]:
    """Each term's value at these sizes (numbers or sympy symbols)."""
    return {"sbh": s * b * h, "sbf": s * b * f, "sbkv": s * b * k * h / a, "s2ba": s * s * b * a,
            "sba": s * b * a, "sb": s * b, "sbV": s * b * V}


def total(kept: Iterable[Kept], units: dict[str, Any], t: Any = 1, sequence_parallel: bool = False) -> Any:
    """The bytes of ``kept`` on one tensor-parallel rank of ``t``."""
    out: Any = 0
    for x in kept:
        d = t if x.split == "tp" or (x.split == "sp" and sequence_parallel) else 1
        out = out + x.bytes * units[x.unit] / d
    return out


def coefficients(kept: Iterable[Kept]) -> dict[str, Any]:
    """Bytes per element of each term (without tensor parallelism): what a calibration fits."""
    out: dict[str, Any] = {}
    for x in kept:
        out[x.unit] = out.get(x.unit, 0) + x.bytes
    return out


__all__ = ["BACKENDS", "NORMS", "SPLITS", "TOKEN_ID_BYTES", "UNITS", "UNIT_TEXT", "Backend", "Kept", "Options",
           "attention_kernel", "backend", "coefficients", "embedding_kept", "head_kept", "layer_kept", "total",
           "unit_values"]
