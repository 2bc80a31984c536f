"""The release tables' types: what a framework release is (:class:`Release`, its
:class:`Switch` es and :class:`RuntimeOptions`), the communicator layouts (:class:`Layout`)
and one resolved choice (:class:`Runtime`).  The tables themselves (:mod:`.pytorch`,
:mod:`.megatron`, :mod:`.deepspeed`) are made of these, and :mod:`schedverify.releases`
looks them up; this module imports neither.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType

from ..errors import UsageError

#: The backends of PyTorch's runtime, by the communication semantics that names them
#: (docs/spec.md 8): ``torch`` is the runtime over gloo, ``torch-nccl`` over NCCL.
GLOO, NCCL = "gloo", "nccl"
#: The name :attr:`Release.framework` gives PyTorch's own runtime.
PYTORCH = "PyTorch"
BACKENDS = MappingProxyType({"torch": GLOO, "torch-nccl": NCCL})

#: How sends are retired: at the end of the step (``step()`` waits for every send it posted),
#: each by its own ``WAIT_SEND_F``/``WAIT_SEND_B`` action (a send without one is refused), or
#: by its handle: a send the loop waits for has its WAIT_SEND, one it never waits for completes
#: on its own and nothing waits for it (Megatron-LM drops some of its isend handles).
STEP_END, BY_WAIT, HANDLE = "step-end", "wait", "handle"


# --------------------------------------------------------------------------- layouts


@dataclass(frozen=True)
class Layout:
    """How a runtime carries pipeline point-to-point traffic: which communicator each message
    goes on.  Messages are matched by posting order per communicator and ordered pair of
    ranks (docs/spec.md 8.2), and over NCCL every communicator runs its operations on a
    stream of its own, in posting order (8.4).

    ``by_direction``: forward traffic (activations, to the next stage) and backward traffic
    (gradients, to the previous stage) on two communicators.  ``by_edge``: one communicator
    per directed pair of ranks (both directions of a pair apart, every pair apart)."""

    name: str
    by_direction: bool
    by_edge: bool
    summary: str

    def communicator(self, sender: int, receiver: int, forward: bool) -> tuple[int, ...]:
        """The communicator a message from ``sender`` to ``receiver`` goes on (``forward``:
        an activation, else a gradient), as a key: equal keys, one communicator."""
        if self.by_edge:
            return (sender, receiver)
        if self.by_direction:
            return (int(forward),)
        return ()

    def stream(self, device: int, peer: int, sending: bool, forward: bool, lazy: bool) -> tuple[int, ...]:
        """Over NCCL, the stream on ``device`` of an operation with ``peer``: one per
        communicator, except that a lazily initialised shared group makes one two-rank
        communicator per pair of ranks for its point-to-point traffic (``lazy``)."""
        if self.by_edge:
            return (device, peer) if sending else (peer, device)
        if self.by_direction:
            return (int(forward),)
        return (min(device, peer), max(device, peer)) if lazy else ()


SHARED = Layout("shared", False, False,
                "one communicator for all pipeline traffic (the pipeline process group)")
DIRECTION = Layout("direction", True, False,
                   "one communicator for forward traffic and one for backward traffic")
EDGE = Layout("edge", False, True, "one communicator per directed pair of ranks")

#: Every layout, by the name ``--p2p`` takes.
LAYOUTS: Mapping[str, Layout] = MappingProxyType({x.name: x for x in (SHARED, DIRECTION, EDGE)})


@dataclass(frozen=True)
class Switch:
    """How a layout is turned on in a release: its config flag, its environment variable
    (read as PyTorch's config module reads it: set to anything but ``""`` or ``"0"``), and
    what else turns it on."""

    config: str
    #: the environment variable that turns it on, or "" when only the run's arguments do
    env: str = ""
    also: str = ""
    #: what the layout needs that gloo on a CPU cannot give, or ""
    needs: str = ""

    def on_in(self, environ: Mapping[str, str]) -> bool:
        if not self.env:
            return False
        value = environ.get(self.env)
        return value is not None and value not in ("", "0")


# --------------------------------------------------------------------------- options


@dataclass(frozen=True)
class RuntimeOptions:
    """The options of ``_PipelineScheduleRuntime`` that change what it runs.

    ``defer_pp_recv``: its lowering moves each RECV to its consumer (``_defer_recv_ops``).
    ``max_active_stages``, ``unshard_lookahead``: how many stages' FSDP parameters stay
    unsharded, and how far ahead UNSHARD is issued (``_add_unshard_reshard``).
    ``defer_reduce_grad_wait``: each WAIT_REDUCE_GRAD runs before the next REDUCE_GRAD (or
    at the end) rather than right after its own.  ``max_outstanding_sends``: at most this
    many sends pending per rank; the runtime moves waits earlier to keep it
    (``_add_wait_send_budget``), and refuses the schedule when it cannot.  None: no bound.
    A release takes only the options its runtime has (:attr:`Release.options`)."""

    defer_pp_recv: bool = False
    max_active_stages: int = 3
    unshard_lookahead: str | tuple[int, ...] = "full"
    defer_reduce_grad_wait: bool = False
    max_outstanding_sends: int | None = None

    def __post_init__(self):
        for name in ("defer_pp_recv", "defer_reduce_grad_wait"):
            if not isinstance(getattr(self, name), bool):
                raise UsageError(f"runtime option {name}: expected True or False, got {getattr(self, name)!r}")
        m = self.max_active_stages
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise UsageError(f"runtime option max_active_stages: expected a whole number >= 1, got {m!r}")
        look = self.unshard_lookahead
        if isinstance(look, list):
            object.__setattr__(self, "unshard_lookahead", look := tuple(look))
        if not (look in ("full", "auto") or isinstance(look, tuple) and look and all(
                type(k) is int and 1 <= k <= m for k in look)):
            raise UsageError(f"runtime option unshard_lookahead: expected 'full', 'auto' or one whole "
                             f"number in 1..max_active_stages={m} per rank, got {look!r}")
        k = self.max_outstanding_sends
        if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 0):
            raise UsageError(f"runtime option max_outstanding_sends: expected a whole number >= 0 or "
                             f"None, got {k!r}")

    def changed(self) -> tuple[str, ...]:
        """The options set to something other than their default."""
        default = RuntimeOptions()
        return tuple(f.name for f in fields(self) if getattr(self, f.name) != getattr(default, f.name))

    def lookahead(self, ranks: int) -> tuple[int, ...]:
        """``_resolve_unshard_lookahead``: the unshard distance of each of ``ranks`` ranks."""
        m, look = self.max_active_stages, self.unshard_lookahead
        if look == "full":
            return (m,) * ranks
        if look == "auto":
            return tuple(min(r + 2, m) for r in range(ranks))
        assert isinstance(look, tuple)  # __post_init__
        if len(look) != ranks:
            raise UsageError(f"runtime option unshard_lookahead: {len(look)} values given, but the "
                             f"schedule has {ranks} ranks (one value per rank)")
        return look


# --------------------------------------------------------------------------- releases


@dataclass(frozen=True)
class Release:
    """One release of a framework's pipeline runtime, as schedverify models it.

    ``kinds``: the action kinds its ``_ComputationType`` has.  ``action_regex``: its
    ``_action_regex``, which ``_Action.from_str`` applies with ``re.match`` (not
    ``fullmatch``), so that a kind it lacks reads as the first alternative that is a prefix
    of it: 2.13 reads ``0WAIT_SEND_F1`` as ``0W`` (:meth:`reads`).
    ``send_retirement``: :data:`STEP_END`, :data:`BY_WAIT` or :data:`HANDLE`.  ``reduce_grad_wait``: each
    REDUCE_GRAD is paired with a later WAIT_REDUCE_GRAD of its stage, at most one reduction
    pending per rank.  ``lowering``: the passes of its ``_prepare_schedule_with_comms``, in
    order, by the names :mod:`schedverify.lowering` implements them under (an optional pass
    runs only with its option).  ``layouts``: the communicator layouts it offers, its
    default first, and ``switches`` how each other one is turned on.  ``options``: the
    :class:`RuntimeOptions` fields its runtime takes."""

    framework: str
    version: str
    kinds: frozenset[str]
    action_regex: str
    send_retirement: str
    reduce_grad_wait: bool
    lowering: tuple[str, ...]
    layouts: tuple[str, ...]
    switches: Mapping[str, Switch]
    options: frozenset[str]
    #: how the runtime's receive buffers live (docs/spec.md 9.6): "preallocated" (one per
    #: microbatch and direction for the whole step, set up with the stage) or "per-receive"
    #: (allocated right before each RECV and handed to the action that consumes it)
    recv_buffers: str = "preallocated"
    #: every SEND and RECV blocks the rank until it completes (``dist.send``/``dist.recv``, as
    #: DeepSpeed's pipeline engine posts them): each is waited for right after it is posted
    blocking_p2p: bool = False
    #: every SEND and RECV is only queued, and posted by the BATCH that holds it (DualPipeV's
    #: CommitP2P): one outside a BATCH is not what the engine runs (SV103)
    p2p_in_batch: bool = False
    #: the gradients are scaled and reduced by a REDUCE_GRAD action of the schedule (PyTorch),
    #: else by the framework after its loop (Megatron-LM's finalize_model_grads, DeepSpeed's
    #: ReduceGrads instruction): a schedule without REDUCE_GRAD is then what it runs
    reduce_grad_action: bool = True
    #: the loss of each microbatch is kept in a list in the order the last stage runs its
    #: forwards, and the backward of microbatch i reads entry i (PyTorch's runtime, SV406);
    #: the frameworks keep each microbatch's with its microbatch
    loss_list: bool = True
    #: what runs the schedule, for the messages: "_PipelineScheduleRuntime", "pipeline loop" ...
    runs: str = "_PipelineScheduleRuntime"
    #: the framework's engine this table is of when it is not the framework's default one
    #: (DeepSpeed's "DualPipeVEngine" beside its PipelineEngine; a schedule's metadata names
    #: it), else "": part of the release's name
    engine: str = ""
    #: where in the framework's source each value above was read
    sources: tuple[str, ...] = ()
    #: what changed from the release before, in words (docs/spec.md section 9)
    changes: tuple[str, ...] = ()

    def __getstate__(self) -> dict[str, object]:
        # a report names its release: it pickles (to a worker process, a cache) with it,
        # its read-only switches as a plain dict
        return {**self.__dict__, "switches": dict(self.switches)}

    def __setstate__(self, state: dict[str, object]) -> None:
        for k, v in state.items():
            object.__setattr__(self, k, MappingProxyType(v) if k == "switches" else v)  # type: ignore[arg-type]

    @property
    def name(self) -> str:
        return f"{self.framework} {self.version}" + (f" {self.engine}" if self.engine else "")

    @property
    def is_pytorch(self) -> bool:
        """PyTorch's own runtime (which loads schedules, CSVs included), not a framework's loop."""
        return self.framework == PYTORCH

    @property
    def default_layout(self) -> Layout:
        return LAYOUTS[self.layouts[0]]

    def key(self) -> tuple[int, ...]:
        return tuple(int(x) for x in self.version.split("."))

    def reads(self, text: str) -> str | None:
        """What this release's ``_Action.from_str`` makes of the plain action ``text``
        (``stage kind microbatch``), written back as PyTorch writes it, or None when it
        raises."""
        m = re.match(self.action_regex, text.strip()) if self.action_regex else None
        if m is None:
            return None
        stage, kind, mb = m.groups()
        return f"{int(stage)}{kind}{int(mb) if mb else ''}"


@dataclass(frozen=True)
class NcclOptions:
    """How NCCL runs point-to-point under ``torch-nccl`` (docs/spec.md 8.4).

    ``streams``: for the shared layout, ``"device"`` (default): one communicator carries all
    of a rank's point-to-point traffic, so one stream per rank (eager initialisation with a
    bound device, as torchtitan does); ``"pair"``: one stream per pair of ranks (a lazily
    initialised group makes a two-rank communicator per pair: PyTorch 2.15's
    ``backend="nccl-lazy"``).  The per-direction and per-edge layouts create their
    communicators eagerly, one stream each, whatever this says.
    ``buffered_sends``: a send completes without its receive (messages small enough for the
    transport's buffers); default False, the rendezvous of large messages.
    """

    streams: str = "device"
    buffered_sends: bool = False

    def __post_init__(self):
        if self.streams not in ("device", "pair"):
            raise UsageError(f"nccl streams must be 'device' or 'pair', got {self.streams!r}")
        if not isinstance(self.buffered_sends, bool):
            raise UsageError(f"nccl buffered_sends must be True or False, got {self.buffered_sends!r}")


@dataclass(frozen=True)
class Runtime:
    """What a schedule runs on: a release's runtime over a backend (:data:`GLOO` or
    :data:`NCCL`) with a communicator layout, NCCL's options and the runtime's options.
    ``why`` says how the release and the layout were chosen, for the report."""

    release: Release
    backend: str
    layout: Layout
    nccl: NcclOptions = field(default_factory=NcclOptions)
    options: RuntimeOptions = field(default_factory=RuntimeOptions)
    why: tuple[str, ...] = ()

    @property
    def semantics(self) -> str:
        """The communication semantics that names this backend (``torch``, ``torch-nccl``)."""
        return "torch-nccl" if self.backend == NCCL else "torch"

    @property
    def on_nccl(self) -> bool:
        return self.backend == NCCL

    @property
    def lazy(self) -> bool:
        """The shared layout's point-to-point traffic on one two-rank communicator per pair."""
        return self.nccl.streams == "pair"

    @property
    def waits_for_sends(self) -> bool:
        """Sends are retired by WAIT_SEND actions (else the step waits for them at its end)."""
        return self.release.send_retirement in (BY_WAIT, HANDLE)

    @property
    def refuses_unwaited_sends(self) -> bool:
        """Every send must have its WAIT_SEND (PyTorch 2.15 refuses the schedule otherwise)."""
        return self.release.send_retirement == BY_WAIT

    def with_(self, **changes) -> Runtime:
        return replace(self, **changes)

    def describe(self) -> str:
        """What a report says it assumed: ``PyTorch 2.15 over NCCL (as asked); shared layout:
        one communicator for all pipeline traffic, one stream per rank (eager init)``."""
        streams = ""
        if self.on_nccl:
            if self.layout is SHARED:
                streams = (", one stream per pair of ranks (lazy init)" if self.lazy
                           else ", one stream per rank (eager init)")
            else:
                streams = ", one stream each"
            if self.nccl.buffered_sends:
                streams += ", buffered sends"
        why_release, why_layout = (self.why + ("", ""))[:2]
        opts = ", ".join(f"{k}={getattr(self.options, k)!r}" for k in self.options.changed())
        return (f"{self.release.name} over {'NCCL' if self.on_nccl else 'gloo'}"
                + (f" ({why_release})" if why_release else "")
                + f"; {self.layout.name} layout" + (f" ({why_layout})" if why_layout else "")
                + f": {self.layout.summary}{streams}" + (f"; {opts}" if opts else ""))

    def to_json(self) -> dict:
        return {"framework": self.release.framework, "release": self.release.version,
                "backend": self.backend, "p2p": self.layout.name,
                "nccl_streams": self.nccl.streams, "nccl_buffered_sends": self.nccl.buffered_sends,
                "options": {k: getattr(self.options, k) for k in self.options.changed()},
                "why": list(self.why)}


# --------------------------------------------------------------------------- resolving


