"""The derived forms that ship with the package: ``forms.json``, made by the derivation itself.

``schedverify formula --rebuild [-o PATH]`` (:func:`.rebuild.rebuild`) derives every metric of every
family and writes them (atomically, sorted keys, one stable text per form), so a cold
``formula FAMILY --metric M`` reads its form instead of deriving the whole family; CI
(``.ci/formulas``) derives them again and fails if the file differs.  Per family and metric
key (``makespan``, ``peak_inflight(d)``, ...) an entry holds either

- the form as :class:`~.closed.Formula` gives it (``srepr``: ``sympy.srepr`` of the
  expression, read back by :func:`parse_srepr` with a fixed symbol table, never ``eval``;
  ``expression``: its text, for readers and diffs; ``conditions``, ``confirmed``, ``notes``,
  ``restricted``, ``cost_slice``) and ``raw``: the :class:`~.closed.Raw` it was assembled
  from, so a form for one device number is assembled from it exactly as when derived; or
- ``not_derived``: the message of the NotDerived error the derivation raised.

Reading needs no sympy: :func:`json_doc` gives a form's JSON (``Formula.to_json()``, with the
LaTeX stored too) straight from the file, which is how ``schedverify formula`` answers a
shipped form in a fraction of a second; sympy is imported only to build the expression.

Whether a form is proved for all sizes is not derived data: proof records live beside it in
``proofs.json`` (:func:`proof_record`), so that a proof is kept across rebuilds and counts
only for the very form it proved.
"""

from __future__ import annotations

import ast
import json
from functools import lru_cache
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: The shipped forms, and the proof records (both package data, see pyproject.toml).
FORMS = HERE / "forms.json"
PROOFS = HERE / "proofs.json"
FORMAT = 1
#: The names of the formula symbols (sizes, then costs): the only symbols a shipped form may
#: hold.  :mod:`.closed` makes its sympy symbols from them, so the two always agree.
SYMBOL_NAMES = ("p", "m", "v", "d", "t_F", "t_B", "t_I", "t_W", "c")


def shipped_keys() -> tuple[tuple[str, str | None], ...]:
    """(metric, device) shipped per family: every metric, and DEVICE_METRICS per device."""
    from .derive import DEVICE_METRICS, METRICS

    out: list[tuple[str, str | None]] = [(metric, None) for metric in METRICS]
    out += [(metric, "d") for metric in DEVICE_METRICS]
    return tuple(out)


def key_of(metric: str, device) -> str:
    return metric + ("(d)" if device is not None or metric == "busy" else "")


# --------------------------------------------------------------------------- reading


@lru_cache(maxsize=4)
def load(path: str | None = None) -> dict:
    """The parsed forms file (``{}`` when it is absent: everything is then derived).  Callers
    must not modify it: it is cached, parsed once per process."""
    target = Path(path) if path else FORMS
    try:
        text = target.read_text(encoding="utf-8")
    except FileNotFoundError:
        return {}
    doc = json.loads(text)
    if doc.get("format") != FORMAT:
        return {}  # a file of another format: derive rather than misread it
    return doc


def entry(family: str, metric: str, device=None) -> dict | None:
    return load().get("families", {}).get(family, {}).get(key_of(metric, device))


#: sympy names an srepr of a derived form may use (anything else is refused).
_NAMES = ("Add", "Mul", "Pow", "Integer", "Rational", "Max", "Min", "Piecewise", "ExprCondPair",
          "floor", "ceiling", "Mod", "StrictLessThan", "LessThan", "StrictGreaterThan",
          "GreaterThan", "Equality", "Unequality", "And", "Or", "Not", "Abs")
def _constructor(name: str):
    import sympy
    from sympy.functions.elementary.piecewise import ExprCondPair

    return ExprCondPair if name == "ExprCondPair" else getattr(sympy, name)


def _constant(name: str):
    import sympy

    return {"true": sympy.true, "false": sympy.false, "oo": sympy.oo, "nan": sympy.nan,
            "zoo": sympy.zoo}.get(name)


def parse_srepr(text: str):
    """The expression ``sympy.srepr`` wrote, rebuilt from the syntax tree: calls of the
    sympy constructors in _NAMES, ``Symbol('x')`` of the formula symbols only, integers.
    Nothing is evaluated as Python code."""
    import sympy

    SYMBOLS = {n: sympy.Symbol(n) for n in SYMBOL_NAMES}

    def build(node):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, str)):
            return node.value
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            val = build(node.operand)
            if isinstance(val, int):
                return -val
        if isinstance(node, ast.Tuple):
            return tuple(build(x) for x in node.elts)
        if isinstance(node, ast.Name) and _constant(node.id) is not None:
            return _constant(node.id)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            name, args = node.func.id, [build(a) for a in node.args]
            if name == "Symbol" and len(args) == 1 and args[0] in SYMBOLS:
                return SYMBOLS[args[0]]
            if name in ("Integer", "Rational") and all(isinstance(a, int) for a in args):
                return getattr(sympy, name)(*args)
            if name in _NAMES and name not in ("Integer", "Rational"):
                ctor = _constructor(name)
                if name == "ExprCondPair":
                    return ctor(*args)
                if name not in ("Add", "Mul"):
                    # written as evaluated: rebuilding it as is gives the same object
                    # (evaluating a Max again would compare its terms pairwise: seconds)
                    return ctor(*args, evaluate=False)
                # a sum or product: evaluated where that gives what was written (its terms in
                # sympy's own order), else as written (factor left 2*(x + 1) unexpanded)
                out = ctor(*args)
                if not (out.func is ctor and len(out.args) == len(args)
                        and set(out.args) == set(args)) and \
                        sympy.srepr(out) != ast.get_source_segment(text, node):
                    out = ctor(*args, evaluate=False)
                return out
        raise ValueError(f"not a derived form's srepr: {ast.dump(node)[:80]}")

    return build(ast.parse(text, mode="eval").body)


def same(a, b) -> bool:
    """Do two expressions print the same (srepr, text, LaTeX)?"""
    import sympy

    return (sympy.srepr(a) == sympy.srepr(b) and sympy.sstr(a) == sympy.sstr(b)
            and sympy.latex(a) == sympy.latex(b))


def _copy(confirmed: dict) -> dict:
    """A copy of a ``confirmed`` mapping (the loaded file is cached: never handed out)."""
    return {k: list(x) if isinstance(x, list) else x for k, x in confirmed.items()}


def validate(family: str, metric: str, device) -> None:
    """UsageError for an unknown family or metric, or a device given to a whole-schedule one."""
    from ..errors import UsageError
    from .derive import DEVICE_METRICS, METRICS
    from .sizes import family as _family

    _family(family)
    if metric not in METRICS and metric != "busy":
        raise UsageError(f"unknown metric {metric!r}; known: {', '.join(METRICS + ('busy',))}")
    if device is not None and metric not in DEVICE_METRICS:
        raise UsageError(f"metric {metric!r} is not per device; --device applies to "
                         f"{', '.join(DEVICE_METRICS)}")
    if device is not None and device != "d":
        try:
            int(device)
        except (TypeError, ValueError):
            raise UsageError(f"--device: expected a device index or 'd', got {device!r}") from None


def range_text(confirmed: dict, conditions) -> str:
    """``p=2..8, m=1..24`` (and ``v=1..3`` for a family with a chunks option)."""
    out = f"p={confirmed['p'][0]}..{confirmed['p'][1]}, m={confirmed['m'][0]}..{confirmed['m'][1]}"
    if len(confirmed["v"]) == 2 and any("<= v <=" in c for c in conditions):
        out += f", v={confirmed['v'][0]}..{confirmed['v'][1]}"
    return out


def status_text(proved: bool, confirmed: dict, conditions) -> str:
    if proved:
        return "proved for every size in its domain"
    return "confirmed on " + range_text(confirmed, conditions)


def json_doc(family: str, metric: str, device=None) -> dict | None:
    """``formula(family, metric, device).to_json()`` read from the file, without sympy; None
    when the form is not shipped (or is for one device number: that is assembled); raises
    NotDerived when the derivation that made the file found no form."""
    from .derive import NotDerived
    from .sizes import family as _family

    validate(family, metric, device)
    if device not in (None, "d"):
        return None
    doc = entry(family, metric, device)
    if doc is None:
        return None
    if "not_derived" in doc:
        raise NotDerived(doc["not_derived"])
    rec = proof_record(family, metric, device)
    proved = rec is not None and rec.get("expression") == doc["expression"]
    return {"family": family, "metric": metric, "device": doc["device"],
            "expression": doc["expression"], "latex": doc["latex"],
            "domain": {"conditions": list(doc["conditions"]), "confirmed": _copy(doc["confirmed"]),
                       "generator_domain": getattr(_family(family), "domain", ""),
                       "proved": proved,
                       "status": status_text(proved, doc["confirmed"], doc["conditions"])},
            "notes": list(doc["notes"])}


# --------------------------------------------------------------------------- proof records


@lru_cache(maxsize=4)
def _proofs(path: str | None = None) -> dict:
    target = Path(path) if path else PROOFS
    try:
        return json.loads(target.read_text(encoding="utf-8")).get("forms", {})
    except FileNotFoundError:
        return {}


def proof_records(path: str | None = None) -> dict:
    """Every proof record kept in ``proofs.json`` (or at ``path``)."""
    return dict(_proofs(path))


def proof_record(family: str, metric: str, device=None) -> dict | None:
    """The record of an all-sizes proof of this form, if one is kept in ``proofs.json``:
    ``{"family/metric key": {"expression": the proved form's text (it counts only while the
    shipped form's text is the same), "by": what proved it (a claim, a command)}}``."""
    return _proofs().get(f"{family}/{key_of(metric, device)}")


# --------------------------------------------------------------------------- the file's text (written by .rebuild)


def dumps(families: dict) -> str:
    """The file's text: sorted keys, one entry per line group, stable across runs."""
    doc = {"format": FORMAT,
           "about": "closed forms derived by schedverify from the schedules themselves; made by "
                    "`schedverify formula --rebuild`, checked by .ci/formulas; do not edit",
           "families": families}
    return json.dumps(doc, sort_keys=True, indent=1, ensure_ascii=False) + "\n"
