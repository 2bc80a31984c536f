"""What an all-sizes certificate is, and the three arithmetic backends it is read in.

A certificate describes one family's schedule at *every* size (``p`` devices, ``m``
microbatches; one stage per device here) in closed form, piecewise:

- ``pos(o, K, p, m, d, i)``: the position of action ``K`` of microbatch ``i`` in device
  ``d``'s order (what the generator emits);
- ``pred(o, K, p, m, d, i)``: the action just before it on the device, as disjoint cases
  ``(condition, (K', i'))`` (no case holds for the device's first action);
- ``start(o, K, p, m, d, i)``: its start time as the coefficient of each cost symbol (a
  linear form in the costs whose coefficients are piecewise linear in ``p, m, d, i``);
- ``last``, ``critical``: the device's last action, and the device whose last action ends
  last;
- ``freed(o, K, p, m, d, i)``: how many actions of kind ``K`` precede ``F(d, i)``;
- ``peak_inflight``, ``peak_memory2`` (twice the peak, so it stays a whole number):
  ``(value, i*)`` with ``i*`` the forward at whose start the peak is reached;
- ``warmup``: forwards before the device's first backward;
- ``top``: for each per-device metric, the device that holds the pipeline's maximum.

Every function takes the backend ``o`` first, so one text is read as plain Python
integers (to compare with the generator), as Z3 terms (to prove it for all sizes) and as
sympy expressions (to show the closed forms and to judge claims).  What is checked and how
is in :mod:`.check` and docs/proofs.md.  Nothing here imports z3 or sympy itself.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from functools import cached_property
from types import MappingProxyType

from ..model import B, F, I, W

KINDS_FULL = (F, B)
KINDS_SPLIT = (F, I, W)


class PyOps:
    """Plain integers and booleans."""

    name = "python"

    @staticmethod
    def If(c, a, b):
        return a if c else b

    @staticmethod
    def And(*xs):
        return all(xs)

    @staticmethod
    def Or(*xs):
        return any(xs)

    @staticmethod
    def Not(x):
        return not x

    # the builtins themselves: the generators evaluate positions once per action
    Min = staticmethod(min)
    Max = staticmethod(max)

    @staticmethod
    def Eq(a, b):
        return a == b

    @staticmethod
    def Div(a, k: int):
        return a // k

    @staticmethod
    def DivV(a, b):
        return a // b

    @staticmethod
    def cost(name: str):
        raise TypeError(f"the Python backend has no cost symbols ({name}): sizes only")

    @staticmethod
    def size(name: str):
        raise TypeError(f"the Python backend has no size symbols ({name}): give the number")


class Code:
    """A Python expression in the index ``q``, as text: what :class:`CodeOps` builds (the
    sizes are plain integers then, so everything but ``q`` folds to a number)."""

    __slots__ = ("s",)
    __hash__ = None  # type: ignore[assignment]  # == builds an expression

    def __init__(self, s: str):
        self.s = s

    @staticmethod
    def text(x) -> str:
        return x.s if isinstance(x, Code) else repr(x)

    def _op(self, op: str, other, swap: bool = False):
        a, b = (other, self) if swap else (self, other)
        return Code(f"({Code.text(a)} {op} {Code.text(b)})")

    def __add__(self, o): return self._op("+", o)  # noqa: E704
    def __radd__(self, o): return self._op("+", o, True)  # noqa: E704
    def __sub__(self, o): return self._op("-", o)  # noqa: E704
    def __rsub__(self, o): return self._op("-", o, True)  # noqa: E704
    def __mul__(self, o): return self._op("*", o)  # noqa: E704
    def __rmul__(self, o): return self._op("*", o, True)  # noqa: E704
    def __neg__(self): return Code(f"(-{self.s})")  # noqa: E704

    def __bool__(self):
        raise TypeError(f"a certificate branches in Python on {self.s}, which is a variable of the compiled "
                        f"function: write the case split with o.If")
    def __lt__(self, o): return self._op("<", o)  # noqa: E704
    def __le__(self, o): return self._op("<=", o)  # noqa: E704
    def __gt__(self, o): return self._op(">", o)  # noqa: E704
    def __ge__(self, o): return self._op(">=", o)  # noqa: E704
    def __eq__(self, o): return self._op("==", o)  # noqa: E704
    def __ne__(self, o): return self._op("!=", o)  # noqa: E704


class CodeOps:
    """Plain Python again, but with the index as a :class:`Code`: one certificate function
    at fixed sizes becomes the text of a Python function of ``q``, which
    :func:`compiled` turns into one (the generators evaluate positions once per action:
    this makes that as cheap as the loops they replaced)."""

    name = "code"

    @staticmethod
    def If(c, a, b):
        if isinstance(c, bool):
            return a if c else b
        return Code(f"({Code.text(a)} if {Code.text(c)} else {Code.text(b)})")

    @staticmethod
    def And(*xs):
        if all(isinstance(x, bool) for x in xs):
            return all(xs)
        if any(x is False for x in xs):
            return False
        return Code("(" + " and ".join(Code.text(x) for x in xs if x is not True) + ")")

    @staticmethod
    def Or(*xs):
        if all(isinstance(x, bool) for x in xs):
            return any(xs)
        if any(x is True for x in xs):
            return True
        return Code("(" + " or ".join(Code.text(x) for x in xs if x is not False) + ")")

    @staticmethod
    def Not(x):
        return (not x) if isinstance(x, bool) else Code(f"(not {x.s})")

    @staticmethod
    def Min(a, b):
        if not isinstance(a, Code) and not isinstance(b, Code):
            return min(a, b)
        return Code(f"min({Code.text(a)}, {Code.text(b)})")

    @staticmethod
    def Max(a, b):
        if not isinstance(a, Code) and not isinstance(b, Code):
            return max(a, b)
        return Code(f"max({Code.text(a)}, {Code.text(b)})")

    @staticmethod
    def Eq(a, b):
        return a == b

    @staticmethod
    def Div(a, k: int):
        return a // k if not isinstance(a, Code) else Code(f"({a.s} // {k})")

    @staticmethod
    def DivV(a, b):
        if not isinstance(a, Code) and not isinstance(b, Code):
            return a // b
        return Code(f"({Code.text(a)} // {Code.text(b)})")

    @staticmethod
    def cost(name: str):
        raise TypeError(f"the Python backend has no cost symbols ({name}): sizes only")

    @staticmethod
    def size(name: str):
        raise TypeError(f"the Python backend has no size symbols ({name}): give the number")


def compiled(make, names: tuple[str, ...] = ("q",)):
    """``make(o, *args)`` (a certificate function at fixed sizes, in the backend ``o``) as a
    Python function of ``names``: its text built with :class:`CodeOps`, compiled once."""
    value = make(CodeOps, *[Code(n) for n in names])
    parts = value if isinstance(value, tuple) else (value,)
    body = ", ".join(Code.text(x) for x in parts)
    return eval(f"lambda {', '.join(names)}: ({body}{',' if isinstance(value, tuple) else ''})",  # noqa: S307
                {"__builtins__": {}, "min": min, "max": max})


class Z3Ops:
    """Z3 integer terms (sizes and indices are ``Int``).  The z3 module comes from the one
    package that imports it (``schedverify.smt.solver``)."""

    name = "z3"

    def __init__(self):
        from ..smt.solver import z3

        self.z3 = z3

    def If(self, c, a, b):
        if isinstance(c, bool):
            return a if c else b
        return self.z3.If(c, a, b)

    def And(self, *xs):
        return self.z3.And(*xs)

    def Or(self, *xs):
        return self.z3.Or(*xs)

    def Not(self, x):
        return self.z3.Not(x)

    def Min(self, a, b):
        return self.z3.If(a <= b, a, b)

    def Max(self, a, b):
        return self.z3.If(a >= b, a, b)

    def Eq(self, a, b):
        return a == b

    def Div(self, a, k: int):
        """floor(a / k) for a constant k > 0 (Z3's integer division rounds down then)."""
        return a / k

    def DivV(self, a, b):
        """floor(a / b) for a size b > 0 (nonlinear: Z3's nonlinear integer arithmetic)."""
        return a / b

    def cost(self, name: str):
        """The cost symbol ``name`` as a Z3 real: the constant the claims' formulas use for
        it too (Z3 identifies constants by name and sort)."""
        return self.z3.Real(name)

    def size(self, name: str):
        """A size parameter other than p and m (``k``) as a Z3 integer, the claims' too."""
        return self.z3.Int(name)


class SymOps:
    """sympy expressions (``Piecewise`` for a case split); ``sympy`` is handed over by the
    caller (the claims package, which reads claims with it)."""

    name = "sympy"

    def __init__(self, sympy):
        self.sp = sympy

    def If(self, c, a, b):
        if c is True or c is self.sp.true:
            return a
        if c is False or c is self.sp.false:
            return b
        return self.sp.Piecewise((a, c), (b, True))

    def And(self, *xs):
        return self.sp.And(*xs)

    def Or(self, *xs):
        return self.sp.Or(*xs)

    def Not(self, x):
        return self.sp.Not(x)

    def Min(self, a, b):
        return self.sp.Min(a, b)

    def Max(self, a, b):
        return self.sp.Max(a, b)

    def Eq(self, a, b):
        return self.sp.Eq(a, b)

    def Div(self, a, k: int):
        return self.sp.floor(a / k)

    def DivV(self, a, b):
        return self.sp.floor(a / b)

    def cost(self, name: str):
        return self.sp.Symbol(name)

    def size(self, name: str):
        return self.sp.Symbol(name, integer=True)


#: ``top`` of a family whose every per-device maximum is on device 0 (the deepest warm-up).
DEVICE_0_TOPS: Mapping[str, Callable] = MappingProxyType(
    {"peak_inflight": lambda o, p, m: 0, "peak_memory": lambda o, p, m: 0,
     "fwd_before_bwd": lambda o, p, m: 0})


def run_facts(o, pos, n, dev, lo, hi, kinds):
    """Z3 facts: device ``dev``'s positions lo..hi hold exactly, of each kind K, the
    actions K(dev, j0..j0+c-1) for ``kinds[K] = (j0, c)`` (positions increase with the
    index, an order obligation) and nothing else (the counts fill the range).  ``pos(k,
    dev, j)``: the position; ``n``: actions of each kind per device."""
    facts = []
    for k, (j0, c) in kinds.items():
        at = lambda j, k=k: pos(k, dev, j)  # noqa: E731
        facts.append(o.And(j0 >= 0, c >= 0, j0 + c <= n,
                           o.Or(j0 == 0, at(j0 - 1) < lo),
                           o.Or(c == 0, o.And(at(j0) >= lo, at(j0 + c - 1) <= hi)),
                           o.Or(j0 + c == n, at(j0 + c) > hi)))
    facts.append(sum(c for _, c in kinds.values()) == hi - lo + 1)
    return o.And(*facts)


#: the condition the families on Megatron-LM's table add to a claim's domain, and why
GROUP_RULE = ("m % p == 0", "the family is generated for m a multiple of p only: its default group "
              "size is p, and Megatron-LM needs m % group to be 0 or at least p")


@dataclass(frozen=True)
class Cone:
    """A closed cone of the costs, on which ``cert`` (a bound certificate) holds.

    ``coords[x]``: the cone's coordinate ``x`` as a linear form of the costs; the cone is
    where every coordinate is >= 0.  ``costs[c]``: each cost as a linear form of the
    coordinates (the inverse map).  ``cert`` writes its start times, durations and chain in
    the coordinates, so "every coefficient >= 0" means ">= 0 on the cone": the
    coefficient-wise check of docs/proofs.md section 3 holds there unchanged.
    """

    name: str
    coords: Mapping[str, Mapping[str, int]]
    costs: Mapping[str, Mapping[str, int]]
    cert: Certificate

    def to_costs(self, form: Mapping) -> dict:
        """A linear form in the coordinates, as a linear form in the costs."""
        out: dict = {}
        for x, a in form.items():
            for c, k in self.coords[x].items():
                out[c] = out.get(c, 0) + k * a
        return out

    def to_coords(self, form: Mapping) -> dict:
        """A linear form in the costs, as a linear form in the coordinates."""
        out: dict = {}
        for c, a in form.items():
            for x, k in self.costs[c].items():
                out[x] = out.get(x, 0) + k * a
        return out

    def contains(self, o):
        """Whether the costs (backend ``o``'s cost symbols) lie in the cone."""
        return o.And(*[sum((k * o.cost(c) for c, k in lin.items()), 0) >= 0
                       for lin in self.coords.values()])


@dataclass(frozen=True)
class Certificate:
    """One family's schedule at every size in ``domain`` (see the module docstring).

    ``costs``: the cost symbols the start times are written in; ``fixed``: the equalities of
    the cost slice the timing holds on (``(("c", "0"),)``: latency 0; ``(("t_I", "t_F"),)``:
    an input-gradient pass costs a forward), each as it must appear among a claim's
    assumptions; ``duration[K]``: the cost of action ``K`` in those symbols.  ``latency``:
    whether ``c`` is one of the symbols (then every cross-device dependency adds ``c``).
    ``domain``: the sizes the certificate is proved for (text, and ``in_domain(o, p, m)``).
    ``merge``: the same slice as a projection of :mod:`schedverify.formulas.tropical`, to
    compare the start times with the symbolic timeline.
    """

    family: str
    kinds: tuple[str, ...]
    costs: tuple[str, ...]
    fixed: tuple[tuple[str, str], ...]
    duration: dict
    domain: str
    in_domain: Callable
    pos: Callable
    pred: Callable
    start: Callable | None  # None: an order-only certificate (peaks, no timing)
    last: Callable | None
    critical: Callable | None
    freed: Callable
    peak_inflight: Callable
    peak_memory2: Callable
    warmup: Callable
    top: Mapping
    merge: tuple = (0, 1, 2, 3, 4)
    #: actions of each kind per device (the index i runs over 0..count-1): m, or m*v
    count: Callable = staticmethod(lambda o, m: m)
    #: chunks per device the certificate is for (None: the family has one stage per device)
    chunks: int | None = None
    #: extra conditions the family's generator puts on the sizes (Z3 backend), for claims,
    #: and their text with the reason (printed with every verdict that adds them)
    family_domain: Callable | None = None
    family_domain_text: tuple[str, str] | None = None
    #: the placement of the chunks: ``"loop"`` (chunk c of device d is stage c*p + d) or
    #: ``"v"`` (two chunks: stage d, and stage 2p-1-d on the way back); see :mod:`.needs`
    placement: str = "loop"
    #: ``action(o, K, p, m, d, q) -> (c, i)``: the chunk (0..v-1) and microbatch of the
    #: q-th action of kind K on device d (default: chunk 0, microbatch q).  With ``pos``
    #: this *is* the schedule: :func:`.order.rows` builds it, the generators return it.
    action: Callable | None = None
    #: ``index_of(o, K, p, m, d, c, i) -> q``: the inverse of ``action`` (default: i)
    index_of: Callable | None = None
    #: the data dependencies in the certificate's indices, a simpler form of those read
    #: from deps.NEEDS through the placement (:func:`.needs.derived`), which Z3 proves equal;
    #: None: the derived ones are used as they are
    deps: Callable | None = None
    #: None: ``start`` is exact (the ASAP solution itself).  Otherwise ``start`` is only an
    #: upper bound (a solution of the ASAP *inequalities*, exact at ``last(critical)``) and
    #: ``lower(o, p, m, d, i)`` gives ``(obligations, length)``: formulas saying that a chain
    #: of waits exists, and its length in the costs, which must equal the end of
    #: ``last(critical)`` (docs/proofs.md section 2, "a bound certificate")
    lower: Callable | None = None
    #: composite actions (docs/proofs.md section 2, "composite actions"): positions are then
    #: *leaves*, and ``fused(o, K, p, m, d, q)`` gives ``(condition, (K', q'))``, the leaf at
    #: the next position that K(q) runs in one action with (None: K never does).  An I fused
    #: with its own W is a full ``B``; an F fused with such an I is one ``OVERLAP_F_B``.
    #: None: every leaf is an action of its own
    fused: Callable | None = None
    #: the functions never branch in Python on the sizes or the device (only through
    #: ``o.If``), so :mod:`.order` compiles each once per kind for every p, m and d (all
    #: variables of the compiled function), kept with the certificate (:meth:`once`)
    compile_once: bool = False
    #: the Z3 route: False, linear arithmetic first, then Z3's general solver for what is
    #: not linear (1F1B's ceil(i/p)); True, first the nonlinear tactic of
    #: ``check._nia_solver`` (interleaved 1F1B: its domain m % p == 0 and its table chunks
    #: ``q mod vp`` are nonlinear everywhere, and the general solver times out on them)
    nia_tactic: bool = False
    #: every obligation is linear integer arithmetic (no division by a size): Z3 checks them
    #: on one incremental solver, the domain asserted once (1F1B with latency: False)
    linear: bool = True
    #: a certificate by cost cones (docs/proofs.md section 2, "cones"): ``start`` is None in
    #: ``self`` (which gives the order and the peaks), each cone's bound certificate gives
    #: the timing on its cone, and the cones cover every cost; the makespan is then the
    #: cone's chain on each cone, a case split on the costs
    cones: tuple = ()
    #: ``truncates(o, p) -> m0`` for a family whose order below ``m0`` microbatches (outside
    #: ``domain``) is this certificate's order at ``m0`` with the actions of microbatches
    #: >= m dropped (ZB-V: 2p - 1, as the paper's and PyTorch's builders do): the family's
    #: generator returns that order (:class:`.order.Source`), and the peaks there are bounded
    #: by those at ``m0`` (docs/proofs.md section 2, "below the certificate: truncation").
    #: None: the family has no such sizes
    truncates: Callable | None = None
    truncated_below: str = ""  # m0 as text ("2*p - 1")
    summary: str = ""
    order_argument: str = ""
    notes: tuple[str, ...] = field(default=())

    @cached_property
    def _once(self) -> dict:
        return {}

    def once(self, key, make):
        """``make()``, computed once per certificate and ``key`` (the compiled functions of
        ``compile_once``)."""
        if key not in self._once:
            self._once[key] = make()
        return self._once[key]

    @property
    def chunks_per_device(self) -> int:
        """Chunks per device: ``chunks``, or 1; the mirror placement (DualPipe) has two on
        each device, one per route, though its p stages make no chunk option."""
        if self.placement == "mirror":
            return 2
        return 1 if self.chunks is None else self.chunks

    def action_at(self, o, kind, p, m, d, q):
        """(chunk, microbatch) of the q-th action of ``kind`` on device d."""
        if self.action is None:
            return 0, q
        return self.action(o, kind, p, m, d, q)

    def index_at(self, o, kind, p, m, d, c, i):
        """The index q of the action of ``kind`` of chunk c, microbatch i on device d."""
        if self.index_of is None:
            return i
        return self.index_of(o, kind, p, m, d, c, i)

    @property
    def timing(self) -> bool:
        return self.start is not None or bool(self.cones)

    @property
    def exact(self) -> bool:
        """Whether ``start`` is every action's start time (else an upper bound on it)."""
        return self.lower is None

    @property
    def latency(self) -> bool:
        return "c" in self.costs

    @property
    def split(self) -> bool:
        return I in self.kinds

    @property
    def last_backward(self) -> str:
        return W if self.split else B

    @property
    def first_backward(self) -> str:
        return I if self.split else B

    def slice_text(self) -> str:
        return ", ".join(f"{a} == {b}" for a, b in self.fixed) or "all costs"
