"""Claims: what they say, parsed (docs/spec.md section 7).

A claim relates metrics and expressions in the size symbols ``p, m, v, d`` and the cost
symbols ``t_F, t_B, t_I, t_W, c`` with one of ``==, !=, <=, >=, <, >``::

    peak_inflight(0) == Min(p, m)
    bubble_fraction == (p - 1)/(m + p - 1)
    1 - peak_inflight@1f1b(0)/peak_inflight@gpipe(0) == 1/4

A metric without parentheses is the whole pipeline's (peaks: the largest over devices); with
a device index it is that device's.  ``metric@family`` reads another family's metric, so a
claim can compare schedules.  ``d`` in a claim ranges over every device ``0..p-1``.

``optimal_makespan(memory=EXPR, split, chunks=EXPR, placement=v)`` is not a family's metric
but the least makespan over every schedule of the size under those limits (the memory limit
an expression in the sizes, e.g. ``k``, ``p``, ``2*p - 1``; ``split`` for split backward),
judged with the search engine's proven optima (:mod:`.optimum`)::

    optimal_makespan(memory=k) == (t_F + t_B)*((m + p - 1) + (ceiling(m/k) - 1)*(p - k))
    makespan@zb-h1 == optimal_makespan(memory=p, split)

``k`` is a free whole-number parameter of a claim (for instance a memory limit): the domain
gives its range (``k=1..6``) and the assumptions can tie it to the sizes (``k <= p``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import sympy
from sympy.parsing.sympy_parser import (
    convert_xor,
    parse_expr,
    standard_transformations,
)

from ..errors import UsageError

#: Metric -> what it means; each takes a device index or ALL (the whole pipeline).
METRICS = {
    "makespan": "end of the last action (docs/spec.md 4)",
    "bubble_time": "makespan minus the busiest device's busy time; per device: makespan - busy(d)",
    "bubble_fraction": "1 - sum(busy) / (p * makespan); per device: idle(d) / makespan",
    "bubble_ratio": "(makespan - T_ideal) / T_ideal with T_ideal the busiest device's busy time",
    "peak_inflight": "most microbatches in flight (largest over devices, or on device d)",
    "peak_memory": "peak activation memory (activation 1 per stage, w = 1/2)",
    "busy": "sum of the device's action costs (the busiest device's without an index)",
    "fwd_before_bwd": "forwards a device runs before its first backward (largest without an index)",
}
SIZE_SYMBOLS = ("p", "m", "v", "d", "k")
OPTIMUM = "optimal_makespan"
#: the options of ``optimal_makespan(...)``: name -> what it sets in the search
OPTIMUM_OPTIONS = {
    "memory": "activation memory limit per device (an expression in the sizes; none: unlimited)",
    "split": "split backward (I + W, costs t_I, t_W) instead of full B (t_B)",
    "chunks": "stages per device (an expression in the sizes; default 1)",
    "placement": "loop or v (with chunks > 1)",
}
COST_SYMBOLS = ("t_F", "t_B", "t_I", "t_W", "c")
RELATIONS = ("==", "!=", "<=", ">=", "<", ">")

ALL = sympy.Symbol("ALL")
_SYMS = {n: sympy.Symbol(n) for n in SIZE_SYMBOLS + COST_SYMBOLS}


@dataclass(frozen=True)
class MetricRef:
    """One metric application in a parsed claim: a sympy Function name <-> what it reads."""

    metric: str
    family: str | None  # None: the claim's family


@dataclass(frozen=True)
class OptimumRef:
    """``optimal_makespan(...)`` in a parsed claim: the least makespan over every schedule of
    the size under these limits (``memory``, ``chunks``: sympy expressions in the sizes)."""

    memory: Any = None  # None: no memory limit
    split: bool = False
    chunks: Any = None  # None: one stage per device
    placement: str = "loop"
    metric: str = OPTIMUM
    family: None = None  # not a family's metric (the attribute MetricRef readers look at)

    def text(self) -> str:
        args = []
        if self.memory is not None:
            args.append(f"memory={sympy.sstr(self.memory)}")
        if self.split:
            args.append("split")
        if self.chunks is not None:
            args.append(f"chunks={sympy.sstr(self.chunks)}")
        if self.placement != "loop":
            args.append(f"placement={self.placement}")
        return f"{OPTIMUM}({', '.join(args)})"


@dataclass
class Parsed:
    op: str
    lhs: Any  # a sympy expression (sympy has no stubs)
    rhs: Any
    refs: dict = field(default_factory=dict)  # sympy Function name -> MetricRef

    @property
    def symbols(self) -> set[str]:
        return {s.name for s in (self.lhs - self.rhs).free_symbols} - {"ALL"}


def _split_relation(text: str, where: str) -> tuple[str, str, str]:
    depth = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif depth == 0:
            for op in RELATIONS:
                if text.startswith(op, i):
                    if op in ("<", ">") and text.startswith("=", i + 1):
                        continue
                    rest = text[i + len(op):]
                    if any(r in _strip_parens(rest) for r in RELATIONS):
                        raise UsageError(f"{where}: one relation per claim, got {text!r}")
                    return text[:i], op, rest
        i += 1
    raise UsageError(f"{where}: no relation (one of {' '.join(RELATIONS)}) in {text!r}")


def _strip_parens(text: str) -> str:
    out, depth = [], 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif depth == 0:
            out.append(ch)
    return "".join(out)


_REF = re.compile(r"\b(" + "|".join(METRICS) + r")\b(?:@([A-Za-z0-9][A-Za-z0-9_-]*))?(\s*\()?")


def _functions(text: str, refs: dict) -> str:
    """Rewrite ``metric[@family][(arg)]`` to sympy functions ``M<k>(arg | ALL)``."""
    def sub(mo):
        metric, fam, paren = mo.group(1), mo.group(2), mo.group(3)
        key = MetricRef(metric, fam)
        name = next((n for n, r in refs.items() if r == key), None)
        if name is None:
            name = f"M{len(refs)}_{metric}"
            refs[name] = key
        return f"{name}(" if paren else f"{name}(ALL)"

    return _REF.sub(sub, text)


_OPT = re.compile(r"\b" + OPTIMUM + r"\b(\s*\()?")


def _optima(text: str, refs: dict, where: str) -> str:
    """Rewrite ``optimal_makespan[(options)]`` to sympy functions ``M<k>_optimal_makespan(ALL)``
    with an :class:`OptimumRef` in ``refs`` (before the metrics: its options may not name one)."""
    out: list[str] = []
    pos = 0
    for mo in _OPT.finditer(text):
        if mo.start() < pos:
            continue  # inside the options of an earlier one
        out.append(text[pos:mo.start()])
        if mo.group(1):
            depth, i = 1, mo.end()
            while i < len(text) and depth:
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            if depth:
                raise UsageError(f"{where}: unbalanced parentheses after {OPTIMUM} in {text.strip()!r}")
            ref = _optimum_options(text[mo.end():i - 1], where)
            pos = i
        else:
            ref, pos = OptimumRef(), mo.end()
        name = next((n for n, r in refs.items() if r == ref), None)
        if name is None:
            name = f"M{len(refs)}_{OPTIMUM}"
            refs[name] = ref
        out.append(f"{name}(ALL)")
    out.append(text[pos:])
    return "".join(out)


def _optimum_options(text: str, where: str) -> OptimumRef:
    opts: dict[str, Any] = {}
    for item in (t.strip() for t in split_top(text)):
        if not item:
            continue
        name, eq, value = (x.strip() for x in item.partition("="))
        if name not in OPTIMUM_OPTIONS:
            raise UsageError(f"{where}: unknown option {name!r} of {OPTIMUM}(...); known: "
                             f"{', '.join(OPTIMUM_OPTIONS)}")
        if name in opts:
            raise UsageError(f"{where}: option {name!r} of {OPTIMUM}(...) given twice")
        if name == "split":
            if eq:
                raise UsageError(f"{where}: {OPTIMUM}(split) is a flag, got {item!r}")
            opts["split"] = True
            continue
        if not eq or not value:
            raise UsageError(f"{where}: option {name!r} of {OPTIMUM}(...) needs a value "
                             f"({name}=...), got {item!r}")
        if name == "placement":
            if value not in ("loop", "v"):
                raise UsageError(f"{where}: placement of {OPTIMUM}(...) is loop or v, got {value!r}")
            opts[name] = value
            continue
        sub: dict = {}
        expr = parse_expression(value, where, sub)
        if sub or expr.free_symbols - {_SYMS[n] for n in SIZE_SYMBOLS}:
            raise UsageError(f"{where}: the {name} of {OPTIMUM}(...) is an expression in the sizes "
                             f"{', '.join(SIZE_SYMBOLS)}, got {value!r}")
        opts[name] = expr
    return OptimumRef(**opts)


def optimum_refs(parsed: Parsed) -> dict:
    """The ``optimal_makespan`` applications of a parsed claim: function name -> OptimumRef."""
    return {n: r for n, r in parsed.refs.items() if isinstance(r, OptimumRef)}


def parse_expression(text: str, where: str, refs: dict | None = None):
    refs = {} if refs is None else refs
    rewritten = _functions(_optima(text.replace("%", " % "), refs, where), refs)
    local = dict(_SYMS)
    local.update({"ALL": ALL, "Min": sympy.Min, "Max": sympy.Max, "min": sympy.Min,
                  "max": sympy.Max, "floor": sympy.floor, "ceiling": sympy.ceiling,
                  "ceil": sympy.ceiling, "Mod": sympy.Mod})
    for name in refs:
        local[name] = sympy.Function(name)
    try:
        expr = parse_expr(rewritten, local_dict=local, evaluate=True,
                          transformations=standard_transformations + (convert_xor,))
    except Exception as e:  # sympy raises many types for bad text
        raise UsageError(f"{where}: cannot parse {text.strip()!r}: {e}") from None
    from sympy.core.function import AppliedUndef

    unknown = {s.name for s in expr.free_symbols} - set(_SYMS) - {"ALL"}
    unknown |= {f.func.__name__ + "()" for f in expr.atoms(AppliedUndef)} - {n + "()" for n in refs}
    if unknown:
        raise UsageError(f"{where}: unknown name(s) {', '.join(sorted(unknown))} in {text.strip()!r}; "
                         f"sizes are {', '.join(SIZE_SYMBOLS)}, costs {', '.join(COST_SYMBOLS)}, "
                         f"metrics {', '.join(METRICS)}, {OPTIMUM}(...)")
    return expr


def parse_claim(text: str, where: str = "claim") -> Parsed:
    parsed = _parse_claim(text, where)
    return Parsed(parsed.op, parsed.lhs, parsed.rhs, dict(parsed.refs))  # sympy's are immutable


@lru_cache(maxsize=1024)
def _parse_claim(text: str, where: str) -> Parsed:
    """Parsing is sympy's slow part of judging a claim at each size; a claim's text is
    parsed once (an error is not cached: it is raised again)."""
    lhs, op, rhs = _split_relation(text.strip(), where)
    refs: dict = {}
    return Parsed(op, parse_expression(lhs, where, refs), parse_expression(rhs, where, refs), refs)


def parse_assumptions(text: str | list | None, where: str = "--assume") -> list[Parsed]:
    """``"t_W <= t_F, c == 0"`` (or a list of such strings): relations without metrics."""
    if not text:
        return []
    items = text if isinstance(text, list) else split_top(text)
    out = []
    for item in items:
        item = item.strip()
        if not item:
            continue
        pa = parse_claim(item, where)
        if pa.refs:
            raise UsageError(f"{where}: assumptions are about sizes and costs, not metrics: {item!r}")
        out.append(pa)
    return out


def split_top(text: str) -> list[str]:
    out: list[str] = []
    cur: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append("".join(cur))
            cur = []
        else:
            cur.append(ch)
    out.append("".join(cur))
    return out


_RANGE = re.compile(r"^\s*([pmvdk])\s*=\s*(-?\d+)\s*(?:\.\.\s*(-?\d+))?\s*$")


def parse_domain(text: str | dict | None, where: str = "--domain") -> dict[str, tuple[int, int]]:
    """``"p=2..8,m=1..32,v=2..2"`` (or a mapping) -> {"p": (2, 8), ...}; ``k=1..6`` ranges
    a claim's free parameter ``k``."""
    if not text:
        return {}
    if isinstance(text, dict):
        items = [f"{k}={v}" for k, v in text.items()]
    else:
        items = [t for t in text.split(",") if t.strip()]
    out = {}
    for item in items:
        mo = _RANGE.match(item)
        if not mo:
            raise UsageError(f"{where}: expected NAME=LOW..HIGH with NAME one of p, m, v, d, k, got "
                             f"{item.strip()!r}")
        name, lo = mo.group(1), int(mo.group(2))
        hi = int(mo.group(3)) if mo.group(3) is not None else lo
        if hi < lo:
            raise UsageError(f"{where}: empty range {item.strip()!r} ({hi} < {lo})")
        if name in ("p", "m", "v") and lo < 1:
            raise UsageError(f"{where}: {name} must be >= 1, got {item.strip()!r}")
        if name in out:
            raise UsageError(f"{where}: {name} given twice")
        out[name] = (lo, hi)
    return out


@dataclass(frozen=True)
class Claim:
    """A claim about a family, with its assumptions, domain and where it comes from."""

    text: str
    family: str
    assume: str = ""
    domain: str = ""
    source: str = ""
    id: str = ""
    note: str = ""
    recorded: str | None = None  # the verdict the catalogue records, if any
    #: seconds the search may take at each size for ``optimal_makespan`` (None: the prover's
    #: per-size timeout)
    time_limit: float | None = None
