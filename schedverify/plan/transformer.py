"""A decoder-only transformer described in TOML, cut into pipeline stages: per-stage F, I, W in
seconds and memory in bytes, as a :class:`~schedverify.plan.stages.StageProfile`.

The model file::

    [model]
    name = "llama3-8b"            # optional, shown in reports
    layers = 32
    hidden = 4096
    heads = 32
    kv_heads = 8                  # grouped-query attention (default: heads)
    ffn = 14336                   # the FFN's hidden size
    gated = true                  # SwiGLU: three FFN matrices (default false: two, GeLU)
    norm = "rmsnorm"              # rmsnorm | layernorm (default: rmsnorm when gated, else layernorm)
    vocab = 128256
    tied_embeddings = false       # the LM head reuses the embedding matrix
    dropout = false               # attention and FFN dropout (default true, as in the papers)

    [training]
    seq_len = 8192
    microbatch_size = 1
    microbatches = 32             # per step; needed for the receive buffers (optional)
    dtype = "bf16"                # bf16 | fp16 | fp32 | fp8: weights and activations
    backend = "cuda"              # cuda | cpu | paper: what autograd keeps (schedverify.plan.activations)
    recompute = "none"            # none | selective | full
    flash_attention = true        # fused attention: no s*s scores stored (default false)
    causal_attention = false      # count the score FLOPs of a causal mask as half (default false)
    loss_dtype = "fp32"           # fp32 | same: the logits kept for the loss's backward
    grad_dtype = "fp32"           # fp32 | same: the gradient accumulation buffer
    optimizer_bytes = 12          # per parameter: fp32 master weight, Adam m and v

    [parallel]
    tensor = 1                    # tensor-parallel degree t (a stage runs on t devices)
    sequence_parallel = false     # Megatron's sequence parallelism (needs tensor > 1 to matter)
    data = 8                      # data-parallel degree, for optimizer sharding
    sharding = "zero1"            # none | zero1 | zero2 | fsdp

    [layout]
    stages = "even"               # or layers per stage: [0, 16, 16, 0]
    embedding_stage = false       # with "even": the first stage holds only the embedding
    head_stage = false            # with "even": the last stage holds only the norm, LM head, loss

    [hardware]                    # see schedverify.plan.hardware; default H100-SXM
    device = "H100-SXM"

**Layout.**  ``"even"`` splits the layers over the stages as evenly as possible (the first
``layers % n`` stages take one more, as numpy's ``array_split``); the embedding is on the first
stage and the final norm, LM head and loss on the last.  ``embedding_stage`` and ``head_stage``
give those their own stage (torchtitan and Megatron offer both: the LM head of a large
vocabulary costs as much as a few layers).  An explicit list gives the layers of each stage;
a 0 is allowed only first (an embedding-only stage) or last (a head-only stage), and the list
fixes the number of stages.

**FLOPs** (Narayanan et al. 2021, "Efficient Large-Scale Language Model Training on GPU
Clusters Using Megatron-LM", section 5.1: a multiply-add is 2 FLOPs; only the matrix
multiplications count).  Per layer of a microbatch of ``b`` sequences of ``s`` tokens: forward
``F = 2 s b P + 4 b s^2 h`` with ``P`` the layer's matrix parameters (``2h^2 + 2h k h/a`` for
Q, O and the ``k`` KV heads, plus ``2 h f``, or ``3 h f`` gated) and ``4 b s^2 h`` the scores
``QK^T`` and ``softmax * V`` over the full ``s x s`` (halved with ``causal_attention``).  The
input gradient ``I = 2 s b P + 8 b s^2 h`` (the attention core has no weights, so its whole
backward is ``I``; a fused attention recomputes the scores, ``10 b s^2 h``, Dao et al. 2022),
the weight gradient ``W = 2 s b P``.  Full recomputation adds ``F`` to ``I``, selective
(Korthikanti et al. 2022) adds the attention core's forward ``4 b s^2 h``.  The LM head:
``2 s b h V`` in each of F, I and W (not recomputed).  With full recomputation the sum over the
layers and the head is Narayanan's eq. (3), ``96 B s l h^2 (1 + s/(6h) + V/(16 l h))`` per
batch ``B`` (tested).  Norms, softmax, elementwise operations, the embedding lookup and the loss
are not counted.  Seconds are ``FLOPs / t / (peak_flops * efficiency)``: tensor parallelism
divides the work by ``t``, and its all-reduces are inside ``efficiency``.

**Activation bytes** per layer and microbatch, per tensor-parallel rank: the tensors the
backward needs, counted as Korthikanti et al. 2022 ("Reducing Activation Recomputation in
Large Transformer Models") section 4.1 does, in units of ``s b h`` with ``e`` the dtype's
bytes and masks 1 byte: two norm inputs ``2e``; the QKV input ``e``; Q, K, V ``e(1 + 2k/a)``;
the scores ``(2e + 1) a s / h`` (softmax output, its dropout mask and output) or ``e a s / h``
without dropout, or the fp32 log-sum-exp ``4 a / h`` with a fused attention; the output
projection's input ``e``; the FFN's input ``e``, its intermediate ``2 e f / h`` (GeLU's input
and output) or ``3 e f / h`` gated (the gate and up projections and the down projection's
input, as a fused SwiGLU keeps them); two dropout masks ``2``.  Tensor parallelism divides
everything but the norm inputs, the QKV and FFN inputs and the dropout masks by ``t``;
sequence parallelism divides those too.  Selective recomputation drops the scores; full
recomputation keeps only the layer's input ``e s b h`` (``/t`` with sequence parallelism).
With ``k = a``, ``f = 4h``, not gated, ``e = 2`` this is exactly the paper's Table 2:
``sbh(34 + 5as/h)``, ``sbh(10 + 24/t + 5as/(ht))``, ``sbh/t (34 + 5as/h)``, ``34 sbh/t``,
``2sbh`` (tested symbolically).  The first stage adds the token ids (int64) and the embedding
dropout mask; the last stage the final norm's and the head's inputs and the logits,
``4 s b V / t`` in fp32 (section 4.3: ``4sbh/t (1 + V/h)`` with sequence parallelism).

**The weight gradient's share** ``w`` (Zero Bubble's ``M_W / M_B``, docs/spec.md section 5):
``dW = X^T dY`` needs, after the input-gradient pass, the inputs ``X`` of the four linear
layers (kept from the forward) and the gradients ``dY`` of their outputs (made by ``I``):
``32 s b h`` for the paper's layer, of its ``34 s b h + 5 a s^2 b``.  With full recomputation
that exceeds the stored checkpoint; ``w`` is then 1 and the notes say so.

**Static bytes** per stage and rank: parameters (matrices and embeddings divided by ``t``,
norms replicated) times ``e`` for the weight, 4 (``grad_dtype = "fp32"``, Megatron's fp32
gradient buffer) or ``e`` for the gradient, and ``optimizer_bytes`` (12: the fp32 master
weight, Adam's m and v; Rajbhandari et al. 2020, ZeRO, section 3.1: 16 bytes per parameter
with 16-bit gradients).  Sharding over the ``data``-parallel degree ``dp``: zero1 divides the
optimizer state by ``dp``, zero2 also the gradients, fsdp everything (FSDP's transient
all-gathered layer is not counted).

**Receive buffers** (PyTorch ``torch/distributed/pipelining/stage.py``, as of torch 2.13):
``PipelineStage._setup_forward_recv_info`` (called from ``_prepare_forward_infra``) allocates,
for every microbatch of the step, a buffer of each stage input on every stage but the first
(``_RecvInfo.buffer = _make_tensor_from_meta(meta)``), and ``_setup_backward_recv_info`` /
``_create_grad_recv_info`` one gradient buffer of each stage output, per microbatch, on every
stage but the last.  They live in ``args_recv_info`` / ``grad_recv_info`` for as long as the
stage does, so ``recv_buffers = M * boundary`` for each direction the stage receives in, with
``boundary = e s b h`` (``/t`` with sequence parallelism, whose stage outputs are sharded
DTensors sent as their local shard).  With a split backward, ``stage_backward_input``
(``_backward.py``) also leaves each input gradient on its receive buffer's ``.grad`` until the
next step's ``clear_runtime_states``: another ``M * boundary`` on every stage but the first,
which :func:`stage_profile` adds when told ``split_backward=True`` (it does not know the
schedule).  (A DTensor input, as with torchtitan's tensor
parallelism, is a new object each microbatch and its ``.grad`` goes with it after ``W``.)  On a
V placement, ``set_local_fwd_input`` replaces the buffers of a stage whose input comes from the
same device as the microbatches pass; they are counted anyway (conservative).

sympy is a dependency but a heavy one: the formulas are written once over plain arithmetic,
evaluated exactly with :class:`fractions.Fraction` for the numbers, and with sympy symbols
(imported inside :func:`symbols`, never at import) by :func:`model_formulas` and
:func:`layer_activation_formula`, so a user can print the memory formula as ``formula`` prints
a makespan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError, UsageError
from ..io.files import parse_toml, read_text
from . import activations as act
from .activations import BACKENDS, NORMS
from .hardware import DEVICES, Hardware, hardware_from_table
from .stages import StageProfile

if TYPE_CHECKING:
    from .calibration import Calibration

RECOMPUTE = ("none", "selective", "full")
SHARDING = ("none", "zero1", "zero2", "fsdp")
DTYPES = {"bf16": 2, "bfloat16": 2, "fp16": 2, "float16": 2, "fp32": 4, "float32": 4, "fp8": 1}

class _FieldError(UsageError):
    """A bad field value; ``field`` lets the TOML reader name the key."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True)
class TransformerModel:
    """A decoder-only transformer and how it is trained (see the module docstring).

    ``kv_heads`` defaults to ``heads`` (multi-head attention); ``layout`` is ``None`` for an
    even split or the layers of each stage.  Invalid values raise :class:`UsageError` naming
    the field.
    """

    layers: int
    hidden: int
    heads: int
    ffn: int
    vocab: int
    seq_len: int
    kv_heads: int | None = None
    gated: bool = False
    microbatch_size: int = 1
    microbatches: int | None = None
    dtype: str = "bf16"
    tensor_parallel: int = 1
    sequence_parallel: bool = False
    recompute: str = "none"
    flash_attention: bool = False
    causal_attention: bool = False
    dropout: bool = True
    tied_embeddings: bool = False
    loss_fp32: bool = True
    grad_bytes: int = 4
    optimizer_bytes: int = 12
    data_parallel: int = 1
    sharding: str = "none"
    layout: tuple[int, ...] | None = None
    embedding_stage: bool = False
    head_stage: bool = False
    name: str = ""
    norm: str | None = None
    backend: str = "cuda"

    def __post_init__(self):
        if self.kv_heads is None:
            object.__setattr__(self, "kv_heads", self.heads)
        if self.norm is None:
            object.__setattr__(self, "norm", "rmsnorm" if self.gated is True else "layernorm")
        if isinstance(self.layout, list):
            object.__setattr__(self, "layout", tuple(self.layout))
        for field, message in self._problems():
            raise _FieldError(field, message)

    def _problems(self):
        whole = ("layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len", "microbatch_size",
                 "tensor_parallel", "data_parallel", "grad_bytes")
        for f in whole:
            v = getattr(self, f)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                yield f, f"expected a whole number >= 1, got {v!r}"
                return
        if self.microbatches is not None and (isinstance(self.microbatches, bool)
                                              or not isinstance(self.microbatches, int) or self.microbatches < 1):
            yield "microbatches", f"expected a whole number >= 1, got {self.microbatches!r}"
        if isinstance(self.optimizer_bytes, bool) or not isinstance(self.optimizer_bytes, int) \
                or self.optimizer_bytes < 0:
            yield "optimizer_bytes", f"expected a whole number >= 0, got {self.optimizer_bytes!r}"
        for f in ("gated", "sequence_parallel", "flash_attention", "causal_attention", "dropout",
                  "tied_embeddings", "loss_fp32", "embedding_stage", "head_stage"):
            if not isinstance(getattr(self, f), bool):
                yield f, f"expected true or false, got {getattr(self, f)!r}"
        for f, choices in (("dtype", tuple(DTYPES)), ("recompute", RECOMPUTE), ("sharding", SHARDING),
                           ("norm", NORMS), ("backend", tuple(BACKENDS))):
            value = getattr(self, f)
            if not isinstance(value, str) or value not in choices:
                yield f, f"expected one of {', '.join(choices)}, got {value!r}"
                return
        if self.dtype == "fp8" and self.backend != "paper":
            yield "dtype", ("fp8: PyTorch's autograd keeps no fp8 activations (float8 training keeps "
                            f"bf16 ones): use dtype = \"bf16\" with backend = {self.backend!r}, or backend = \"paper\"")
        if self.hidden % self.heads:
            yield "heads", f"the hidden size {self.hidden} is not a multiple of {self.heads} heads"
        kv = self.kv_heads
        assert isinstance(kv, int)  # set above
        if kv > self.heads or self.heads % kv:
            yield "kv_heads", f"{self.heads} heads do not form groups of {kv} KV heads (heads % kv_heads != 0)"
        t = self.tensor_parallel
        for f, n in (("heads", self.heads), ("kv_heads", kv), ("ffn", self.ffn)):
            if n % t:
                yield "tensor_parallel", f"{f} = {n} is not divisible by the tensor-parallel degree {t}"
        if self.layout is not None:
            lay = self.layout
            if not isinstance(lay, tuple) or not lay or any(
                    isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in lay):
                yield "layout", f"expected \"even\" or a list of whole numbers >= 0, got {lay!r}"
                return
            if sum(lay) != self.layers:
                yield "layout", f"the stages hold {sum(lay)} layers, the model has {self.layers}"
            inner = lay[1:-1]
            if 0 in inner:
                yield "layout", (f"stage {1 + inner.index(0)} holds no layers: only the first stage "
                                 "(embedding only) or the last (head only) may be empty")
            if len(lay) == 1 and lay[0] == 0:
                yield "layout", "a single stage must hold the layers"
            if self.embedding_stage or self.head_stage:
                yield "layout", ("embedding_stage and head_stage go with \"even\"; in a list, "
                                 "write a 0 first or last")

    @property
    def dtype_bytes(self) -> int:
        return DTYPES[self.dtype]

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


@dataclass(frozen=True)
class StageSpan:
    """What one stage holds: ``layers`` transformer layers from ``first_layer``, and whether it
    holds the embedding (the first stage) and the final norm, LM head and loss (the last)."""

    index: int
    first_layer: int
    layers: int
    embedding: bool
    head: bool


def split(model: TransformerModel, stages: int) -> tuple[StageSpan, ...]:
    """The model's layout cut into ``stages`` stages (see the module docstring).

    Raises :class:`UsageError` naming the rule when the layout cannot be cut so: more stages
    than layers, an explicit list of another length, or too few stages for
    ``embedding_stage`` / ``head_stage``.
    """
    if isinstance(stages, bool) or not isinstance(stages, int) or stages < 1:
        raise UsageError(f"stages: expected a whole number >= 1, got {stages!r}")
    if model.layout is not None:
        if len(model.layout) != stages:
            raise UsageError(f"the model's layout {list(model.layout)} has {len(model.layout)} stages, "
                             f"not {stages}: an explicit layout fixes the number of stages "
                             "(use stages = \"even\" to let the plan choose)")
        counts = list(model.layout)
    else:
        body = stages - model.embedding_stage - model.head_stage
        extra = " (embedding_stage and head_stage take one each)" if model.embedding_stage or model.head_stage else ""
        if body < 1:
            raise UsageError(f"cannot cut the model into {stages} stage(s): at least one stage must hold "
                             f"layers{extra}")
        if body > model.layers:
            raise UsageError(f"cannot cut {model.layers} layers into {body} layer-holding stages{extra}: "
                             "each stage needs at least one layer")
        q, r = divmod(model.layers, body)
        counts = [q + (i < r) for i in range(body)]
        if model.embedding_stage:
            counts.insert(0, 0)
        if model.head_stage:
            counts.append(0)
    out, first = [], 0
    for i, n in enumerate(counts):
        out.append(StageSpan(i, first, n, embedding=i == 0, head=i == stages - 1))
        first += n
    return tuple(out)


# --- the formulas, written once over plain arithmetic -------------------------------------

@dataclass(frozen=True)
class _Vals:
    """The sizes a formula reads: numbers (Fractions) or sympy symbols alike.

    s: sequence length, b: microbatch size, h: hidden, a: heads, k: KV heads, f: FFN size,
    V: vocabulary, t: tensor-parallel degree, e: bytes of the dtype.
    """

    s: Any
    b: Any
    h: Any
    a: Any
    k: Any
    f: Any
    V: Any
    t: Any
    e: Any


@dataclass(frozen=True)
class _Opts:
    recompute: str = "none"
    sequence_parallel: bool = False
    gated: bool = False
    flash_attention: bool = False
    dropout: bool = True
    causal_attention: bool = False
    loss_fp32: bool = True
    backend: str = "paper"
    norm: str = "layernorm"

    @property
    def kept(self) -> act.Options:
        return act.Options(backend=self.backend, norm=self.norm, gated=self.gated,
                           flash_attention=self.flash_attention, dropout=self.dropout, recompute=self.recompute,
                           loss_fp32=self.loss_fp32)


def _opts(model: TransformerModel) -> _Opts:
    return _Opts(**{f.name: getattr(model, f.name) for f in fields(_Opts)})


def _matrix_params(v: _Vals, o: _Opts):
    """Matrix parameters of one layer (all ranks): Q and O, K and V of the KV heads, the FFN."""
    return 2 * v.h * v.h + 2 * v.h * (v.k * v.h / v.a) + (3 if o.gated else 2) * v.h * v.f


def _core_forward(v: _Vals, o: _Opts):
    """FLOPs of the attention core's forward, ``QK^T`` and ``softmax * V``: ``4 b s^2 h``."""
    core = 4 * v.b * v.s * v.s * v.h
    return core / 2 if o.causal_attention else core


def _layer_flops(v: _Vals, o: _Opts):
    """(F, I, W) FLOPs of one layer and microbatch over the tensor-parallel group."""
    mm = 2 * v.s * v.b * _matrix_params(v, o)
    core = _core_forward(v, o)
    forward = mm + core
    core_backward = core * 5 / 2 if o.flash_attention else 2 * core
    input_grad = mm + core_backward
    if o.recompute == "full":
        input_grad = input_grad + forward
    elif o.recompute == "selective":
        input_grad = input_grad + core
    return forward, input_grad, mm


def _head_flops(v: _Vals):
    """F, I and W of the LM head are each ``2 s b h V`` (the loss is not counted)."""
    x = 2 * v.s * v.b * v.h * v.V
    return x, x, x


def _units(v: _Vals) -> dict[str, Any]:
    return act.unit_values(v.s, v.b, v.h, v.f, v.a, v.k, v.V)


def _layer_activation(v: _Vals, o: _Opts):
    """Activation bytes of one layer and microbatch on one tensor-parallel rank."""
    return act.total(act.layer_kept(o.kept, v.e), _units(v), v.t, o.sequence_parallel)


def _layer_weight_grad_bytes(v: _Vals, o: _Opts):
    """Bytes the weight gradient of one layer needs after its input gradient: the inputs of
    the four linear layers and the gradients of their outputs."""
    sbh = v.s * v.b * v.h
    rd = v.t if o.sequence_parallel else 1
    g = v.k / v.a
    inputs = v.e / rd + v.e / v.t + v.e / rd + v.e * v.f / v.h / v.t
    grads = v.e * (1 + 2 * g) / v.t + v.e / rd + v.e * (2 if o.gated else 1) * v.f / v.h / v.t + v.e / rd
    return sbh * (inputs + grads)


def _head_activation(v: _Vals, o: _Opts):
    """The last stage: the final norm, the head's input and the logits for the loss."""
    return act.total(act.head_kept(o.kept, v.e), _units(v), v.t, o.sequence_parallel)


def _embedding_activation(v: _Vals, o: _Opts):
    """The first stage: the token ids and the embedding's dropout mask."""
    return act.total(act.embedding_kept(o.kept, v.e), _units(v), v.t, o.sequence_parallel)


def _boundary(v: _Vals, o: _Opts):
    """Bytes of one microbatch's activation between two stages, on one rank."""
    rd = v.t if o.sequence_parallel else 1
    return v.e * v.s * v.b * v.h / rd


def _layer_params(v: _Vals, o: _Opts):
    """Parameters of one layer on one tensor-parallel rank (two norm weights replicated)."""
    return _matrix_params(v, o) / v.t + 2 * v.h


def _values(model: TransformerModel) -> _Vals:
    m = model
    return _Vals(*(Fraction(x) for x in (m.seq_len, m.microbatch_size, m.hidden, m.heads, m.kv_heads or m.heads,
                                          m.ffn, m.vocab, m.tensor_parallel, m.dtype_bytes)))


# --- symbolic ----------------------------------------------------------------------------

SYMBOL_NAMES = ("s", "b", "h", "a", "k", "f", "V", "t", "e")


def symbols() -> dict[str, Any]:
    """The formula symbols (positive sympy Symbols): s sequence length, b microbatch size,
    h hidden, a heads, k KV heads, f FFN size, V vocabulary, t tensor-parallel degree, e dtype
    bytes.  Imports sympy."""
    import sympy

    return {n: sympy.Symbol(n, positive=True) for n in SYMBOL_NAMES}


def _symbolic_vals() -> _Vals:
    return _Vals(**symbols())


def layer_activation_formula(*, recompute: str = "none", sequence_parallel: bool = False, gated: bool = False,
                             flash_attention: bool = False, dropout: bool = True, backend: str = "paper",
                             norm: str | None = None):
    """The activation bytes of one layer and microbatch per tensor-parallel rank, as a sympy
    expression in :func:`symbols` (substitute ``t = 1`` for no tensor parallelism).  The
    default ``backend`` is the paper's count (Korthikanti et al. 2022); ``"cpu"`` and
    ``"cuda"`` are what PyTorch's autograd keeps (:mod:`.activations`)."""
    if recompute not in RECOMPUTE:
        raise UsageError(f"recompute: expected one of {', '.join(RECOMPUTE)}, got {recompute!r}")
    act.backend(backend)
    norm = norm or ("rmsnorm" if gated else "layernorm")
    if norm not in NORMS:
        raise UsageError(f"norm: expected one of {', '.join(NORMS)}, got {norm!r}")
    import sympy

    o = _Opts(recompute=recompute, sequence_parallel=sequence_parallel, gated=gated,
              flash_attention=flash_attention, dropout=dropout, backend=backend, norm=norm)
    return sympy.simplify(_layer_activation(_symbolic_vals(), o))


def model_formulas(model: TransformerModel) -> dict[str, Any]:
    """The model's formulas as sympy expressions in :func:`symbols`, under its options:
    per layer and microbatch ``F``, ``I``, ``W`` (FLOPs over the tensor-parallel group),
    ``activation`` and ``weight_grad_bytes`` (bytes per rank), ``params`` (per rank); the
    ``head_*`` and ``embedding_activation`` terms; ``boundary`` (bytes of one stage-to-stage
    message).  ``expr.subs(formula_values(model))`` gives the numbers; the expressions are as
    written, not simplified (``sympy.simplify`` them to print)."""
    v, o = _symbolic_vals(), _opts(model)
    f, i, w = _layer_flops(v, o)
    hf, hi, hw = _head_flops(v)
    out = {"F": f, "I": i, "W": w, "activation": _layer_activation(v, o),
           "weight_grad_bytes": _layer_weight_grad_bytes(v, o), "params": _layer_params(v, o),
           "head_F": hf, "head_I": hi, "head_W": hw, "head_activation": _head_activation(v, o),
           "embedding_activation": _embedding_activation(v, o), "boundary": _boundary(v, o)}
    import sympy

    return {k: sympy.sympify(e) for k, e in out.items()}


#: What each of :func:`model_formulas`'s expressions counts, for a table.
FORMULA_UNITS = {"F": "FLOPs", "I": "FLOPs", "W": "FLOPs", "activation": "bytes", "weight_grad_bytes": "bytes",
                 "params": "parameters", "head_F": "FLOPs", "head_I": "FLOPs", "head_W": "FLOPs",
                 "head_activation": "bytes", "embedding_activation": "bytes", "boundary": "bytes"}


def kept_table(model: TransformerModel) -> dict[str, list[dict[str, Any]]]:
    """What the model's backend keeps, per part (layer, head, embedding): each tensor's
    ``what``, ``term`` (:data:`~.activations.UNIT_TEXT`), ``bytes`` per element (a string:
    an exact number), ``split`` under tensor parallelism and ``source``."""
    o, e = _opts(model).kept, model.dtype_bytes
    parts = {"layer": act.layer_kept(o, e), "head": act.head_kept(o, e), "embedding": act.embedding_kept(o, e)}
    return {part: [{"what": k.what, "term": act.UNIT_TEXT[k.unit], "bytes": str(Fraction(k.bytes)),
                    "split": k.split, "source": k.source} for k in kept] for part, kept in parts.items()}


def formulas_table(model: TransformerModel) -> list[dict[str, Any]]:
    """:func:`model_formulas` as rows ``{"name", "expression", "value", "unit"}``: each
    expression simplified, and its value at the model's sizes (exact, rounded to an int)."""
    import sympy

    values = formula_values(model)
    return [{"name": name, "expression": sympy.sstr(sympy.simplify(expr)),
             "value": int(sympy.Rational(expr.subs(values)).round()), "unit": FORMULA_UNITS[name]}
            for name, expr in model_formulas(model).items()]


def formula_values(model: TransformerModel) -> dict[Any, int]:
    """The substitution ``{symbol: value}`` of the model's sizes into :func:`model_formulas`."""
    syms = symbols()
    vals = _values(model)
    return {syms[n]: int(getattr(vals, n)) for n in SYMBOL_NAMES}


# --- numbers -----------------------------------------------------------------------------

@dataclass(frozen=True)
class Passes:
    """FLOPs of one microbatch's forward, input-gradient and weight-gradient passes."""

    F: Fraction
    I: Fraction  # noqa: E741
    W: Fraction


def stage_flops(model: TransformerModel, stages: int) -> tuple[Passes, ...]:
    """Exact FLOPs of F, I, W per stage and microbatch, over the tensor-parallel group."""
    v, o = _values(model), _opts(model)
    layer = _layer_flops(v, o)
    head = _head_flops(v)
    out = []
    for span in split(model, stages):
        parts = [span.layers * x + (h if span.head else 0) for x, h in zip(layer, head)]
        out.append(Passes(*parts))
    return tuple(out)


def _param_bytes(model: TransformerModel) -> Fraction:
    """Bytes held per parameter, after sharding over the data-parallel degree."""
    wb, gb, ob = model.dtype_bytes, model.grad_bytes, model.optimizer_bytes
    dp = model.data_parallel
    if model.sharding == "zero1":
        return Fraction(wb + gb) + Fraction(ob, dp)
    if model.sharding == "zero2":
        return wb + Fraction(gb + ob, dp)
    if model.sharding == "fsdp":
        return Fraction(wb + gb + ob, dp)
    return Fraction(wb + gb + ob)


def stage_params(model: TransformerModel, stages: int) -> tuple[Fraction, ...]:
    """Parameters per stage on one tensor-parallel rank.  Tied embeddings are counted once when
    the embedding and the head are on one stage, else on both (each stage keeps a copy)."""
    v, o = _values(model), _opts(model)
    layer = _layer_params(v, o)
    table = v.V * v.h / v.t
    out = []
    for span in split(model, stages):
        p = span.layers * layer
        if span.embedding:
            p += table
        if span.head:
            p += v.h + (0 if (model.tied_embeddings and span.embedding) else table)
        out.append(p)
    return tuple(out)


def boundary_bytes(model: TransformerModel) -> int:
    """Bytes of one microbatch's activation (or its gradient) between two stages, per rank:
    what a send moves and what one receive buffer holds."""
    return math.ceil(_boundary(_values(model), _opts(model)))


def weight_share(model: TransformerModel) -> float:
    """``w``: the share of a layer's activation the weight gradient still needs after the input
    gradient (capped at 1; see the module docstring)."""
    v, o = _values(model), _opts(model)
    return float(min(Fraction(1), _layer_weight_grad_bytes(v, o) / _layer_activation(v, o)))


def _layer_act(model: TransformerModel, calibration: Calibration | None):
    if calibration is not None:
        calibration.check_model(model)
        return calibration.bytes("layer", model)
    return _layer_activation(_values(model), _opts(model))


def stage_activations(model: TransformerModel, stages: int, *,
                      calibration: Calibration | None = None) -> tuple[int, ...]:
    """Bytes autograd keeps for one microbatch on each of ``stages`` stages, from its forward
    to its backward, per device: the stage's layers, and the embedding or the head where it
    holds them (the backend's formulas, or ``calibration``'s measured bytes).  No receive
    buffer (:func:`stage_profile` adds those of PyTorch's runtime).  Raises
    :class:`UsageError` as :func:`split` does, or when the calibration is another model's."""
    spans = split(model, stages)
    layer_act = _layer_act(model, calibration)
    if calibration is not None:
        head_act, embed_act = (calibration.bytes(p, model) for p in ("head", "embedding"))
    else:
        v, o = _values(model), _opts(model)
        head_act, embed_act = _head_activation(v, o), _embedding_activation(v, o)
    return tuple(math.ceil(s.layers * layer_act + (embed_act if s.embedding else 0)
                           + (head_act if s.head else 0)) for s in spans)


def stage_profile(model: TransformerModel, hardware: Hardware, stages: int, *,
                  microbatches: int | None = None, split_backward: bool = False,
                  calibration: Calibration | None = None, torch: str | None = None) -> StageProfile:
    """Per-stage F, I, W (seconds per microbatch), activation, static and receive-buffer bytes
    of ``model`` cut into ``stages`` stages on ``hardware`` (one stage per tensor-parallel
    group of ``t`` devices; the bytes are per device).

    ``microbatches`` (default: the model's) sizes the receive buffers; when neither is known
    they are left out and the notes say so.  ``split_backward``: the schedule runs I and W
    separately, so PyTorch keeps each input gradient on its receive buffer's ``.grad`` for the
    rest of the step: another ``microbatches * boundary`` on every stage but the first.
    ``calibration`` (:mod:`.calibration`, made for this model): its measured bytes replace the
    backend's formulas, and its measured times, when taken at the model's sequence length and
    microbatch size, the FLOPs model's seconds.  ``torch``: the PyTorch release whose runtime
    holds the receive buffers (default: the installed one): 2.13 and 2.14 preallocate one per
    microbatch and direction for the step; 2.15 allocates each right before its receive and
    hands it to its consumer, so a stage's input is counted with its activation instead
    (docs/spec.md 9.6).
    Raises :class:`UsageError` when the layout cannot be cut into ``stages`` stages, or the
    calibration is another model's.
    """
    spans = split(model, stages)
    v, o = _values(model), _opts(model)
    t = model.tensor_parallel
    rate = hardware.peak_flops * hardware.efficiency
    flops = stage_flops(model, stages)
    layer_act = _layer_act(model, calibration)
    activation = stage_activations(model, stages, calibration=calibration)
    per_param = _param_bytes(model)
    static = tuple(math.ceil(p * per_param) for p in stage_params(model, stages))
    m = microbatches if microbatches is not None else model.microbatches
    if m is not None and (isinstance(m, bool) or not isinstance(m, int) or m < 1):
        raise UsageError(f"microbatches: expected a whole number >= 1, got {m!r}")
    boundary = _boundary(v, o)
    from ..releases import installed_torch, release

    preallocated = release(torch, installed=installed_torch() if torch is None else None)[0].recv_buffers \
        == "preallocated"
    recv: tuple[int, ...] = ()
    if not preallocated:  # 2.15: no buffer for the step; each stage input lives from its receive to its backward
        recv = (0,) * stages
        activation = tuple(a + (0 if s.embedding else math.ceil(boundary)) for a, s in zip(activation, spans))
    elif m is not None:
        per_stage = ((not s.embedding) * (2 if split_backward else 1) + (not s.head) for s in spans)
        recv = tuple(math.ceil(m * boundary * k) for k in per_stage)
    w_bytes = _layer_weight_grad_bytes(v, o)
    w = float(min(Fraction(1), w_bytes / layer_act))
    notes = _notes(model, hardware, spans, m if preallocated else None, w_bytes > layer_act, split_backward,
                   calibration, per_receive=not preallocated)
    F = tuple(float(p.F / t / rate) for p in flops)
    I = tuple(float(p.I / t / rate) for p in flops)  # noqa: E741
    W = tuple(float(p.W / t / rate) for p in flops)
    B = None
    times = calibration.times_for(model) if calibration is not None else None
    if times is not None:
        def measured(key: str) -> tuple[float, ...]:
            return tuple(s.layers * times["layer"][key] + (times["head"][key] if s.head else 0.0) for s in spans)

        F, I, W, B = (measured(k) for k in ("F", "I", "W", "B"))  # noqa: E741
    return StageProfile(
        F=F,
        I=I,
        W=W,
        B=B,
        activation=activation,
        w=w,
        static=static,
        recv_buffers=recv,
        message=(math.ceil(boundary),) * stages,
        comm=hardware.send_seconds(float(boundary)) if stages > 1 else 0.0,
        source=f"model {model.name or 'transformer'} on {hardware.name}",
        notes=notes,
    )


def _notes(model: TransformerModel, hw: Hardware, spans, m, w_capped: bool, split_backward: bool,
           cal: Calibration | None = None, *, per_receive: bool = False) -> tuple[str, ...]:
    t = model.tensor_parallel
    lay = ", ".join(str(s.layers) for s in spans)
    times = cal.times_for(model) if cal is not None else None
    if times is not None and cal is not None:
        seconds = (f"{hw.name}'s memory; seconds measured on {cal.device} ({cal.device_name}), one layer and the "
                   "head at the model's sizes (the calibration's times)")
    else:
        seconds = (f"{hw.describe()}; seconds = FLOPs / {t} tensor-parallel rank(s) / "
                   f"({hw.peak_flops / 1e12:g}e12 x {hw.efficiency:g}); tensor-parallel communication is inside "
                   "the efficiency")
        if cal is not None and cal.times_at is not None:
            at = cal.times_at
            seconds += (f" (the calibration's times were measured at seq_len {at['seq_len']}, microbatch_size "
                        f"{at['microbatch_size']}: not used)")
    out = [
        f"layers per stage: {lay} (embedding on stage 0, norm + LM head + loss on stage {len(spans) - 1})",
        seconds,
        "FLOPs: matrix multiplications only, 2 per multiply-add (Narayanan et al. 2021); attention scores "
        + ("halved for the causal mask" if model.causal_attention else "over the full s x s")
        + (", fused attention recomputes the scores in the backward" if model.flash_attention else "")
        + f"; recompute = {model.recompute}",
        _activation_note(model, cal),
        f"w = {weight_share(model):.3f}: the linear layers' inputs and output gradients the weight gradient "
        "needs after the input gradient (Zero Bubble's M_W / M_B), from the transformer layers"
        + ("; with full recomputation W needs more than the checkpoint: capped at 1, the excess during "
           "I..W is not counted" if w_capped else ""),
        f"static: {model.dtype_bytes} B weight + {model.grad_bytes} B gradient + {model.optimizer_bytes} B "
        f"optimizer state per parameter, sharding = {model.sharding} over data = {model.data_parallel}"
        + ("; FSDP's all-gathered layer is not counted" if model.sharding == "fsdp" else "")
        + ("; tied embeddings: the first and the last stage each keep a copy"
           if model.tied_embeddings and len(spans) > 1 else ""),
    ]
    if per_receive:
        out.append(f"receive buffers: PyTorch 2.15 allocates each right before its receive and hands it to its "
                   f"consumer, so each stage's input ({boundary_bytes(model)} B) is counted with its activation, "
                   "from the forward to the backward; a gradient's buffer, freed once its backward has run, is not "
                   "counted")
    elif m is None:
        out.append("receive buffers not counted: the number of microbatches is not known "
                   "(give [training] microbatches or microbatches=)")
    else:
        out.append(f"receive buffers: torch.distributed.pipelining keeps one per microbatch ({m}) and "
                   f"direction, {boundary_bytes(model)} B each (counted also where a V placement passes "
                   "activations within a device, which replaces them as the microbatches go); "
                   + ("with the split backward (I/W), also each input gradient PyTorch leaves on its buffer's "
                      ".grad until the next step" if split_backward else
                      "a split backward (I/W) also keeps each plain-tensor input gradient on its buffer's .grad "
                      "until the next step: not counted here (split_backward=True counts it)"))
    return tuple(out)


def _activation_note(model: TransformerModel, cal: Calibration | None) -> str:
    """What the activation bytes are: the backend's formulas, or a calibration."""
    t = model.tensor_parallel
    o = _opts(model).kept
    if cal is not None:
        where = f"measured on {cal.device} ({cal.device_name}), torch {cal.torch}, {cal.code}"
        text = f"activations: calibrated, {where}"
        if cal.device != model.backend:
            text += (f"; the model's backend is {model.backend}: what {model.backend}'s kernels keep may differ "
                     f"(--backend {model.backend} without a calibration gives its formulas)")
        return text
    be = act.backend(model.backend)
    kernel = act.attention_kernel(o)
    ffn = be.ffn_gated if model.gated else 2
    return (f"activations: backend {be.name}, {be.title}: {model.dtype} ({model.dtype_bytes} B), {model.norm}, "
            f"kv_heads = {model.kv_heads}, " + ("SwiGLU" if model.gated else "GeLU") + f" FFN ({ffn} tensors of ffn), "
            + ("fused attention (no s x s scores)" if kernel == "flash" else
               "math attention (s x s scores" + (", fp32" if be.math_upcast else "") + ")")
            + (" (no fused kernel takes dropout here)" if model.flash_attention and kernel == "math" else "")
            + (", dropout masks" if model.dropout else ", no dropout")
            + (f", sequence parallel over {t}" if model.sequence_parallel and t > 1 else "")
            + f"; logits kept in {'fp32' if model.loss_fp32 else model.dtype} for the loss"
            + "; each term and its source: schedverify plan --formulas")


# --- reading TOML ------------------------------------------------------------------------

#: TOML table -> key -> TransformerModel field.
_KEYS: dict[str, dict[str, str]] = {
    "model": {"name": "name", "layers": "layers", "hidden": "hidden", "heads": "heads", "kv_heads": "kv_heads",
              "ffn": "ffn", "gated": "gated", "vocab": "vocab", "tied_embeddings": "tied_embeddings",
              "dropout": "dropout", "norm": "norm"},
    "training": {"seq_len": "seq_len", "microbatch_size": "microbatch_size", "microbatches": "microbatches",
                 "dtype": "dtype", "recompute": "recompute", "flash_attention": "flash_attention",
                 "causal_attention": "causal_attention", "loss_dtype": "loss_fp32", "grad_dtype": "grad_bytes",
                 "optimizer_bytes": "optimizer_bytes", "backend": "backend"},
    "parallel": {"tensor": "tensor_parallel", "sequence_parallel": "sequence_parallel", "data": "data_parallel",
                 "sharding": "sharding"},
    "layout": {"stages": "layout", "embedding_stage": "embedding_stage", "head_stage": "head_stage"},
}
_WHERE = {field: f"{table}.{key}" for table, keys in _KEYS.items() for key, field in keys.items()}
_WHOLE = {"layers", "hidden", "heads", "kv_heads", "ffn", "vocab", "seq_len", "microbatch_size", "microbatches",
          "tensor_parallel", "data_parallel"}
_BOOL = {"gated", "tied_embeddings", "dropout", "flash_attention", "causal_attention", "sequence_parallel",
         "embedding_stage", "head_stage"}
_CHOICES = {"dtype": tuple(DTYPES), "recompute": RECOMPUTE, "sharding": SHARDING, "norm": NORMS,
            "backend": tuple(BACKENDS)}


def _unknown(key: str, known, *, source: str, where: str | None) -> InputError:
    import difflib

    close = difflib.get_close_matches(key, list(known), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    return InputError(f"unknown key {key!r}{hint} (known: {', '.join(known)})", source=source, where=where)


def _convert(field: str, raw: Any, model_dtype: str, *, source: str, where: str) -> Any:
    def bad(expected: str):
        return InputError(f"expected {expected}, got {raw!r}", source=source, where=where)

    if field in _WHOLE:
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 1:
            raise bad("a whole number >= 1")
        return raw
    if field == "optimizer_bytes":
        if isinstance(raw, bool) or not isinstance(raw, int) or raw < 0:
            raise bad("a whole number >= 0")
        return raw
    if field in _BOOL:
        if not isinstance(raw, bool):
            raise bad("true or false")
        return raw
    if field == "name":
        if not isinstance(raw, str):
            raise bad("a string")
        return raw
    if field in _CHOICES:
        if raw not in _CHOICES[field]:
            import difflib

            close = difflib.get_close_matches(str(raw), _CHOICES[field], n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise bad(f"one of {', '.join(_CHOICES[field])}{hint}")
        return raw
    if field == "loss_fp32":
        if raw not in ("fp32", "same"):
            raise bad("\"fp32\" or \"same\" (the model's dtype)")
        return raw == "fp32"
    if field == "grad_bytes":
        if raw not in ("fp32", "same"):
            raise bad("\"fp32\" or \"same\" (the model's dtype)")
        return 4 if raw == "fp32" else DTYPES.get(model_dtype, 2)
    if field == "layout":
        if raw == "even":
            return None
        if isinstance(raw, list) and raw and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0
                                                 for n in raw):
            return tuple(raw)
        raise bad("\"even\" or a list of layers per stage such as [0, 16, 16, 0]")
    raise AssertionError(field)  # pragma: no cover


def load_model(path_or_text: str | Path, source: str | None = None) -> tuple[TransformerModel, Hardware]:
    """Read a model file (see the module docstring): a :class:`~pathlib.Path`, a path string, or
    the TOML text itself (a string with a newline or an ``=``).  ``source`` names it in errors
    (default: the path, or ``<string>``).

    Errors are :class:`InputError` naming the key (``model.toml: model.hidden: expected a whole
    number >= 1, got -3``); unknown tables and keys are refused with a did-you-mean.  Without a
    ``[hardware]`` table the hardware is H100-SXM.
    """
    if isinstance(path_or_text, Path) or ("\n" not in path_or_text and "=" not in path_or_text):
        path = Path(path_or_text)
        src = source or str(path)
        text = read_text(path, "model file")  # the words `check` uses: "no such file", ...
    else:
        text, src = path_or_text, source or "<string>"
    doc = parse_toml(text, src)
    tables = (*_KEYS, "hardware")
    for name, table in doc.items():
        if name not in tables:
            raise _unknown(name, tables, source=src, where=None)
        if not isinstance(table, dict):
            raise InputError(f"expected a table [{name}], got {table!r}", source=src, where=name)
    if "model" not in doc:
        raise InputError("no [model] table", source=src)
    kwargs: dict[str, Any] = {}
    dtype = doc.get("training", {}).get("dtype", "bf16")
    for name, keys in _KEYS.items():
        for key, raw in doc.get(name, {}).items():
            if key not in keys:
                raise _unknown(key, tuple(keys), source=src, where=name)
            field = keys[key]
            kwargs[field] = _convert(field, raw, dtype, source=src, where=f"{name}.{key}")
    required = ("layers", "hidden", "heads", "ffn", "vocab", "seq_len")
    missing = [k for k in required if k not in kwargs]
    if missing:
        raise InputError(f"missing {', '.join(_WHERE[k] for k in missing)}", source=src)
    try:
        model = TransformerModel(**kwargs)
    except _FieldError as e:
        raise InputError(e.message, source=src, where=_WHERE.get(e.field, e.field)) from None
    if "hardware" in doc:
        return model, hardware_from_table(doc["hardware"], source=src)
    return model, replace(DEVICES["H100-SXM"], name="H100-SXM (the default: the file has no [hardware])")


__all__ = ["DTYPES", "RECOMPUTE", "SHARDING", "SYMBOL_NAMES", "Passes", "StageSpan", "TransformerModel",
           "boundary_bytes", "formula_values", "kept_table", "layer_activation_formula", "load_model", "model_formulas",
           "split", "stage_activations", "stage_flops", "stage_params", "stage_profile", "symbols", "weight_share"]
