"""A model's activation bytes calibrated from its own code: run one layer, the head and the
embedding at a few small shapes on a device, count what autograd keeps (:mod:`.autograd`),
fit the bytes per element of each term (:data:`~.activations.UNITS`) and check the fit on a
shape held back.  The file it saves (``schedverify-calibration/1``) is reused by ``plan
--calibration FILE`` anywhere, so a GPU machine's calibration can be made once.

**The shapes.**  The model's structure (dtype, norm, gated FFN, attention kernel, dropout,
recomputation, loss dtype, grouped-query or multi-head attention) is kept; its sizes are made
small and varied one at a time, so that each term is told apart: the sequence length (the
``s^2`` scores against the ``s`` terms), the heads, the KV heads, the head dimension, the FFN
and the vocabulary, and a batch of two.  A term the structure cannot tell apart is folded into
another and said: with ``kv_heads = heads``, ``s*b*k*h/a`` is ``s*b*h``.  A constant (bytes
per microbatch, such as the loss's fp32 ``total_weight``) is fitted too.  The fit is exact
least squares over rationals; :attr:`Calibration.held_out` compares its prediction with the
measurement at a shape it did not see.

**Times**, when asked (``times=True``), are measured at the model's own sequence length,
microbatch size and widths (F, I, W and B of one layer and of the head, as
:func:`.autograd.time_passes` says), and replace the FLOPs model's seconds in the plan: they
are the measuring device's seconds.

A calibration is made without tensor parallelism, for one model: loading it for another
(another width, dtype, norm, attention kernel, ...) is refused naming the difference, and so
is planning it with ``tensor > 1``.  The sequence length and microbatch size may differ: the
terms are in ``s`` and ``b`` (the times may not, and are then left out, with a note).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InputError, UsageError
from . import activations as act

if TYPE_CHECKING:
    from .transformer import TransformerModel

FORMAT = "schedverify-calibration/1"
PARTS = ("layer", "head", "embedding")
#: The terms each part is fitted over ("one": bytes per microbatch).
PART_TERMS = {"layer": ("sbh", "sbf", "sbkv", "s2ba", "sba", "sb", "one"),
              "head": ("sbh", "sbV", "sb", "one"),
              "embedding": ("sbh", "sb", "one")}
#: The fields of a model a calibration is bound to (seq_len and microbatch_size are not).
MODEL_FIELDS = ("hidden", "heads", "kv_heads", "ffn", "vocab", "gated", "norm", "dtype", "flash_attention",
                "dropout", "recompute", "loss_fp32")
TIME_KEYS = ("F", "I", "W", "B")
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class Point:
    """One measured shape: ``s, b, a, k, d, f, V`` and the bytes of each part."""

    s: int
    b: int
    a: int
    k: int
    d: int
    f: int
    V: int
    layer: int = 0
    head: int = 0
    embedding: int = 0

    @property
    def h(self) -> int:
        return self.a * self.d

    def units(self) -> dict[str, int]:
        u = act.unit_values(self.s, self.b, self.h, self.f, self.a, self.k, self.V)
        u = {k: int(v) for k, v in u.items()}
        u["one"] = 1
        return u

    def sizes(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in ("s", "b", "a", "k", "d", "f", "V")}


def design(mha: bool) -> tuple[tuple[Point, ...], Point]:
    """The shapes measured (each varies one size of the first) and the one held back."""
    k0, k1 = (4, 8) if mha else (2, 4)
    base = Point(32, 1, 4, k0, 16, 96, 256)
    fit = [base, replace(base, s=64), replace(base, a=8, k=8 if mha else k0),
           replace(base, d=32), replace(base, f=160), replace(base, V=512), replace(base, s=48, b=2)]
    if not mha:
        fit.append(replace(base, a=8, k=k1))
    held = Point(40, 2, 8, 8 if mha else k1, 24, 128, 384)
    return tuple(fit), held


@dataclass(frozen=True)
class Calibration:
    """Bytes per element of each term, per part, fitted from measurements (module docstring).

    ``model``: the :data:`MODEL_FIELDS` it was made for (and ``name``); ``device``: ``cpu``
    or ``cuda``, ``device_name`` the device's own; ``code``: what ran (torchtitan and its
    version, or the reference block and why); ``terms``: part -> term -> bytes per element;
    ``folded``: what was folded into what; ``points`` and ``held_out``: the measurements;
    ``times``: part -> F, I, W, B seconds at ``times_at`` (``seq_len``, ``microbatch_size``).
    """

    model: dict[str, Any]
    device: str
    device_name: str
    torch: str
    code: str
    terms: dict[str, dict[str, Fraction]]
    points: tuple[Point, ...]
    held_out: Point
    folded: tuple[str, ...] = ()
    times: dict[str, dict[str, float]] | None = None
    times_at: dict[str, int] | None = None
    source: str = field(default="", compare=False)

    def bytes(self, part: str, model: TransformerModel) -> Fraction:
        """The calibrated bytes of ``part`` (layer, head, embedding) for ``model``'s sizes."""
        p = Point(model.seq_len, model.microbatch_size, model.heads, model.kv_heads or model.heads,
                  model.head_dim, model.ffn, model.vocab)
        return predict(self.terms[part], p)

    def held_out_error(self) -> dict[str, float]:
        """Relative error of the fit's prediction at the held-back shape, per part."""
        out = {}
        for part in PARTS:
            measured = getattr(self.held_out, part)
            out[part] = float(abs(predict(self.terms[part], self.held_out) - measured) / measured) if measured else 0.0
        return out

    def describe(self) -> list[str]:
        """The report: what ran, where, and each term."""
        lines = [f"calibration of {self.model.get('name') or 'the model'} on {self.device} ({self.device_name}), "
                 f"torch {self.torch}, {self.code}; {self.model['dtype']}, {self.model['norm']}, "
                 + ("SwiGLU" if self.model["gated"] else "GeLU") + ", "
                 + ("flash" if self.model["flash_attention"] else "math") + " attention, "
                 + ("dropout" if self.model["dropout"] else "no dropout") + f", recompute {self.model['recompute']}"]
        for part in PARTS:
            terms = ", ".join(f"{_num(v)} {('B' if t == 'one' else 'B x ' + act.UNIT_TEXT[t])}"
                              for t, v in self.terms[part].items() if v)
            lines.append(f"  {part}: {terms or '0'}")
        err = self.held_out_error()
        held = self.held_out
        lines.append(f"  held out (s={held.s}, b={held.b}, h={held.h}, a={held.a}, k={held.k}, f={held.f}, "
                     f"V={held.V}): " + ", ".join(f"{p} {getattr(held, p):,} B measured, {100 * err[p]:.2f}% off"
                                                  for p in PARTS))
        lines += [f"  {x}" for x in self.folded]
        if self.times is not None and self.times_at is not None:
            for part in ("layer", "head"):
                t = self.times[part]
                lines.append(f"  {part} time at s={self.times_at['seq_len']}, b={self.times_at['microbatch_size']}: "
                             + ", ".join(f"{k} {1e3 * t[k]:.3g} ms" for k in TIME_KEYS))
        return lines

    def check_model(self, model: TransformerModel, where: str = "") -> None:
        """Refuse a model this calibration was not made for, naming the first difference."""
        mine = model_fields(model)
        src = where or self.source or "the calibration"
        for k in MODEL_FIELDS:
            if mine[k] != self.model.get(k):
                name = self.model.get("name") or "another model"
                raise UsageError(f"{src} was measured for {name} with {k} = {self.model.get(k)!r}, "
                                 f"not this model's {mine[k]!r}: measure this model (--measure)")
        if model.tensor_parallel > 1:
            raise UsageError(f"{src}: a calibration is measured without tensor parallelism; with tensor = "
                             f"{model.tensor_parallel} plan with the formulas (--backend {self.device}, "
                             "without --calibration)")

    def times_for(self, model: TransformerModel) -> dict[str, dict[str, float]] | None:
        """The measured times when they were taken at ``model``'s sequence length and batch."""
        if self.times is None or self.times_at is None:
            return None
        if (self.times_at["seq_len"], self.times_at["microbatch_size"]) != (model.seq_len, model.microbatch_size):
            return None
        return self.times

    def to_json(self) -> dict[str, Any]:
        def point(p: Point) -> dict[str, int]:
            return {**p.sizes(), **{part: getattr(p, part) for part in PARTS}}

        return {"format": FORMAT, "model": dict(self.model), "device": self.device,
                "device_name": self.device_name, "torch": self.torch, "code": self.code,
                "terms": {part: {t: str(v) for t, v in terms.items()} for part, terms in self.terms.items()},
                "folded": list(self.folded), "points": [point(p) for p in self.points],
                "held_out": point(self.held_out), "times": self.times, "times_at": self.times_at}

    def save(self, path: str | os.PathLike, *, inputs: tuple[str, ...] = ()) -> None:
        """Write the calibration to ``path``, whole or not at all, never onto one of ``inputs``."""
        from ..io.files import write_atomic

        target = Path(path)
        for given in inputs:
            if Path(given).exists() and target.exists() and Path(given).resolve() == target.resolve():
                raise UsageError(f"--calibration {path}: is the input file {given}; write the calibration elsewhere")
        if target.is_dir() or not target.resolve().parent.is_dir():
            raise UsageError(f"--calibration {path}: not a file in an existing directory")
        try:
            write_atomic(target, json.dumps(self.to_json(), indent=1) + "\n")
        except OSError as e:
            raise UsageError(f"--calibration {path}: cannot write: {e.strerror or e}") from None


def _num(v: Fraction) -> str:
    return str(v) if v.denominator == 1 else f"{float(v):.4g}"


def predict(terms: dict[str, Fraction], p: Point) -> Fraction:
    u = p.units()
    return sum((Fraction(c) * u[t] for t, c in terms.items()), Fraction(0))


def model_fields(model: TransformerModel) -> dict[str, Any]:
    out: dict[str, Any] = {k: getattr(model, k) for k in MODEL_FIELDS}
    out["name"] = model.name
    return out


# --- fitting -----------------------------------------------------------------------------

def fit(points: tuple[Point, ...], part: str, terms: tuple[str, ...]) -> dict[str, Fraction]:
    """Exact least squares over rationals: the bytes per element of each of ``terms`` that
    best give ``part``'s measured bytes at ``points``."""
    rows = [[Fraction(p.units()[t]) for t in terms] for p in points]
    ys = [Fraction(getattr(p, part)) for p in points]
    n = len(terms)
    # the normal equations A^T A c = A^T y, by Gauss-Jordan elimination
    zero = Fraction(0)
    m = [[sum((r[i] * r[j] for r in rows), zero) for j in range(n)] + [sum((r[i] * y for r, y in zip(rows, ys)), zero)]
         for i in range(n)]
    for col in range(n):
        pivot = next((r for r in range(col, n) if m[r][col] != 0), None)
        if pivot is None:
            raise AssertionError(f"calibration design cannot tell the {terms[col]} term apart")  # a bug
        m[col], m[pivot] = m[pivot], m[col]
        pv = m[col][col]
        m[col] = [x / pv for x in m[col]]
        for r in range(n):
            if r != col and m[r][col] != 0:
                factor = m[r][col]
                m[r] = [a - factor * b for a, b in zip(m[r], m[col])]
    return {t: m[i][n] for i, t in enumerate(terms)}


def _shape(model: TransformerModel, p: Point):
    from .autograd import Shape

    return Shape(seq_len=p.s, batch=p.b, hidden=p.h, heads=p.a, kv_heads=p.k, ffn=p.f, vocab=p.V,
                 dtype=model.dtype, norm=model.norm or "rmsnorm", gated=model.gated,
                 flash_attention=model.flash_attention, dropout=model.dropout, recompute=model.recompute,
                 loss_fp32=model.loss_fp32)


def calibrate(model: TransformerModel, *, device: str = "cpu", times: bool = False,
              code: str | None = None) -> Calibration:
    """Measure ``model``'s own code on ``device`` (``cpu``, or ``cuda`` where there is one;
    ``auto``: cuda where there is one, else cpu) and
    fit its terms (module docstring).  ``code``: ``torchtitan`` or ``reference`` (default:
    torchtitan when it imports here and the model is its Llama-3's shape).  Imports torch;
    raises :class:`UsageError` when torch is missing or the device is not here."""
    if device not in (*DEVICES, "auto"):
        raise UsageError(f"--measure: expected a device, cpu or cuda, got {device!r}")
    if model.tensor_parallel > 1:
        raise UsageError(f"--measure: the model has tensor = {model.tensor_parallel}; a calibration is measured on "
                         "one device without tensor parallelism: plan this model with the formulas "
                         "(--backend cuda or cpu)")
    if model.dtype == "fp8":
        raise UsageError("--measure: dtype fp8: PyTorch's autograd keeps no fp8 activations; "
                         "measure the bf16 model float8 training runs")
    try:
        from . import autograd
    except ImportError as e:
        raise UsageError(f"--measure needs PyTorch ({e}): pip install torch==2.13.0") from None
    if device == "auto":
        device = autograd.default_device()
    dev = autograd.device(device)
    probe = _shape(model, Point(model.seq_len, model.microbatch_size, model.heads, model.kv_heads or model.heads,
                                model.head_dim, model.ffn, model.vocab))
    tt = autograd.torchtitan_version()
    why = autograd.torchtitan_fits(probe)
    if code is None:
        code = "torchtitan" if tt is not None and why is None else "reference"
    if code == "torchtitan":
        if tt is None:
            raise UsageError("--measure with torchtitan's code: torchtitan's Llama-3 model does not import here")
        if why is not None:
            raise UsageError(f"--measure with torchtitan's code: this model is not torchtitan's Llama-3 ({why})")
        label = f"torchtitan {tt} Llama-3 modules (SDPA inner attention)"
    elif code == "reference":
        reason = "torchtitan is not importable here" if tt is None else (why or "asked for")
        label = f"the reference block ({reason})"
    else:
        raise UsageError(f"--measure: code must be torchtitan or reference, got {code!r}")
    mha = (model.kv_heads or model.heads) == model.heads
    fit_points, held = design(mha)

    def measured(p: Point) -> Point:
        try:
            parts = autograd.measure(_shape(model, p), dev, code)
        except (RuntimeError, ValueError, AssertionError, TypeError, NotImplementedError) as e:
            what = "torchtitan's code" if code == "torchtitan" else "the reference block"
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise UsageError(f"--measure: {what} cannot run this model at s={p.s}, b={p.b}, h={p.h}, "
                             f"heads={p.a}, kv_heads={p.k}, ffn={p.f}: {first}") from None
        return replace(p, layer=parts.layer, head=parts.head, embedding=parts.embedding)

    pts = tuple(measured(p) for p in fit_points)
    held = measured(held)
    folded: list[str] = []
    terms: dict[str, dict[str, Fraction]] = {}
    for part, names in PART_TERMS.items():
        names_used = tuple(t for t in names if not (mha and t == "sbkv"))
        terms[part] = fit(pts, part, names_used)
    if mha:
        folded.append("kv_heads = heads: the K and V term (s*b*k*h/a) is part of s*b*h")
    t_out = t_at = None
    if times:
        full = _shape(model, Point(model.seq_len, model.microbatch_size, model.heads, model.kv_heads or model.heads,
                                   model.head_dim, model.ffn, model.vocab))
        t_out = autograd.time_passes(full, dev, code)
        t_at = {"seq_len": model.seq_len, "microbatch_size": model.microbatch_size}
    return Calibration(model=model_fields(model), device=device, device_name=autograd.device_name(dev),
                       torch=autograd.torch_version(), code=label, terms=terms, points=pts, held_out=held,
                       folded=tuple(folded), times=t_out, times_at=t_at)


# --- reading -----------------------------------------------------------------------------

def load_calibration(path: str | os.PathLike, model: TransformerModel | None = None) -> Calibration:
    """Read a calibration file; with ``model``, refuse it when it was made for another model
    (:meth:`Calibration.check_model`).  Errors are :class:`InputError` naming the field."""
    from ..io.files import read_text

    src = str(path)
    try:
        text = read_text(Path(path), "calibration")
    except OSError as e:
        raise InputError(f"cannot read: {e.strerror or e}", source=src) from None
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise InputError(f"not JSON: {e.msg} at line {e.lineno}", source=src) from None
    cal = _from_json(doc, src)
    if model is not None:
        cal.check_model(model, src)
    return cal


def _from_json(doc: Any, src: str) -> Calibration:
    def bad(where: str, message: str) -> InputError:
        return InputError(message, source=src, where=where)

    if not isinstance(doc, dict):
        raise bad("", f"expected a {FORMAT} object, got {type(doc).__name__}")
    if doc.get("format") != FORMAT:
        raise bad("format", f"expected {FORMAT!r}, got {doc.get('format')!r} (is this a calibration file?)")
    model = doc.get("model")
    if not isinstance(model, dict) or any(k not in model for k in MODEL_FIELDS):
        missing = [k for k in MODEL_FIELDS if not isinstance(model, dict) or k not in model]
        raise bad("model", f"expected the model's fields, missing {', '.join(missing)}")
    for key in ("device", "device_name", "torch", "code"):
        if not isinstance(doc.get(key), str):
            raise bad(key, f"expected a string, got {doc.get(key)!r}")
    if doc["device"] not in DEVICES:
        raise bad("device", f"expected one of {', '.join(DEVICES)}, got {doc['device']!r}")
    raw_terms = doc.get("terms")
    if not isinstance(raw_terms, dict):
        raise bad("terms", f"expected an object of {', '.join(PARTS)}, got {raw_terms!r}")
    terms: dict[str, dict[str, Fraction]] = {}
    for part in PARTS:
        got = raw_terms.get(part)
        if not isinstance(got, dict):
            raise bad(f"terms.{part}", f"expected an object of terms, got {got!r}")
        terms[part] = {}
        for t, v in got.items():
            if t not in PART_TERMS[part]:
                raise bad(f"terms.{part}.{t}", f"unknown term (known: {', '.join(PART_TERMS[part])})")
            try:
                if isinstance(v, bool) or not isinstance(v, (str, int)):
                    raise ValueError
                terms[part][t] = Fraction(v)
            except (ValueError, ZeroDivisionError):
                raise bad(f"terms.{part}.{t}", f"expected bytes per element as a number or fraction, got {v!r}") \
                    from None

    def point(where: str, raw: Any) -> Point:
        names = ("s", "b", "a", "k", "d", "f", "V", *PARTS)
        if not isinstance(raw, dict) or any(type(raw.get(n)) is not int or raw[n] < 0 for n in names):
            raise bad(where, f"expected a shape with {', '.join(names)} (whole numbers), got {raw!r}")
        return Point(**{n: raw[n] for n in names})

    pts = doc.get("points")
    if not isinstance(pts, list) or not pts:
        raise bad("points", "expected the measured shapes")
    points = tuple(point(f"points[{i}]", p) for i, p in enumerate(pts))
    held = point("held_out", doc.get("held_out"))
    folded = doc.get("folded", [])
    if not isinstance(folded, list) or not all(isinstance(x, str) for x in folded):
        raise bad("folded", f"expected a list of strings, got {folded!r}")
    times, times_at = doc.get("times"), doc.get("times_at")
    if times is not None:
        ok = isinstance(times, dict) and all(
            isinstance(times.get(p), dict) and all(isinstance(times[p].get(k), (int, float))
                                                   and not isinstance(times[p].get(k), bool)
                                                   and times[p][k] >= 0 for k in TIME_KEYS)
            for p in ("layer", "head"))
        if not ok:
            raise bad("times", f"expected layer and head times ({', '.join(TIME_KEYS)}, seconds >= 0), got {times!r}")
        if not (isinstance(times_at, dict) and all(type(times_at.get(k)) is int and times_at[k] >= 1
                                                   for k in ("seq_len", "microbatch_size"))):
            raise bad("times_at", f"expected seq_len and microbatch_size, got {times_at!r}")
        times = {p: {k: float(times[p][k]) for k in TIME_KEYS} for p in ("layer", "head")}
    return Calibration(model=dict(model), device=doc["device"], device_name=doc["device_name"], torch=doc["torch"],
                       code=doc["code"], terms=terms, points=points, held_out=held, folded=tuple(folded),
                       times=times, times_at=times_at if times is not None else None, source=src)


__all__ = ["FORMAT", "MODEL_FIELDS", "PARTS", "PART_TERMS", "Calibration", "Point", "calibrate", "design", "fit",
           "load_calibration", "model_fields", "predict"]
