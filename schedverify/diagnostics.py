"""Findings as data: violation codes, violations, verdicts and reports.

Every code is registered once here with a stable number and slug (as mypy does in
``errorcodes.py``); ``docs`` and ``schedverify check --list-codes`` are generated from this
table.  No heavy imports.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Iterable, Iterator


@dataclass(frozen=True)
class Code:
    code: str
    slug: str
    rule: str
    description: str

    def __str__(self) -> str:
        return f"{self.code} {self.slug}"


CODES: dict[str, Code] = {}


def register(table: dict[str, Code], code: str, slug: str, rule: str, description: str) -> Code:
    """Add a code to ``table`` (:data:`CODES`, or the lint's), refusing a code or a slug that
    is there already: codes are stable, so two meanings for one would be a bug."""
    c = Code(code, slug, rule, description)
    if code in table or any(x.slug == slug for x in table.values()):
        raise AssertionError(f"duplicate code {code} {slug}")
    table[code] = c
    return c


def _register(code: str, slug: str, rule: str, description: str) -> Code:
    return register(CODES, code, slug, rule, description)


MALFORMED_ACTION = _register(
    "SV101", "malformed-action", "3.1 well-formed",
    "An action has an unknown type, a negative index, a missing or extra microbatch index, "
    "or an OVERLAP_F_B whose sub-actions are not one forward and one backward.")
INDEX_OUT_OF_RANGE = _register(
    "SV102", "index-out-of-range", "3.1 well-formed",
    "A stage index is not below the number of stages, or a microbatch index not below the "
    "number of microbatches.")
NOT_IN_RELEASE = _register(
    "SV103", "kind-not-in-release", "9.1 grammar",
    "Under torch and torch-nccl: an action kind the chosen runtime does not have. A PyTorch "
    "release before 2.15 has no WAIT_SEND_F, WAIT_SEND_B or WAIT_REDUCE_GRAD: its "
    "_Action.from_str reads each as a prefix it knows (2.13 and 2.14 read 0WAIT_SEND_F1 as 0W) "
    "and its runtime fails on it; no PyTorch release has BATCH. A framework's loop runs its "
    "own kinds only (docs/spec.md 10: no I, W or REDUCE_GRAD in Megatron-LM's or DeepSpeed's).")
MISSING_ACTION = _register(
    "SV201", "missing-action", "3.2 complete",
    "A (stage, microbatch) pair lacks its forward, its backward, or one half of a split "
    "backward (I without W, or W without I).")
DUPLICATE_ACTION = _register(
    "SV202", "duplicate-action", "3.2 complete",
    "The same action appears more than once (on one device or on several).")
MIXED_BACKWARD = _register(
    "SV203", "mixed-backward", "3.2 complete",
    "A (stage, microbatch) pair has both a full backward B and a split backward I/W.")
WRONG_DEVICE = _register(
    "SV301", "wrong-device", "3.3 placed",
    "An action sits on a device other than the one its stage's placement (and its "
    "microbatch's route) names.")
RUNS_BEFORE_DEPENDENCY = _register(
    "SV401", "runs-before-dependency", "3.4 ordered",
    "An action comes before, on the same device, an action it depends on, so the device "
    "waits for itself forever (for example 3B1 before 3F1).")
DEADLOCK = _register(
    "SV402", "deadlock", "3.4 ordered",
    "Device order and data dependencies form a cycle across devices; the witness is the "
    "cycle, each wait explained.")
RENDEZVOUS_DEADLOCK = _register(
    "SV403", "rendezvous-deadlock", "3.5 communication",
    "A cycle that exists only because sends wait for their receives to be posted: the "
    "schedule hangs under rendezvous semantics (NCCL point-to-point) but not under eager.")
REDUCE_GRAD_TOO_EARLY = _register(
    "SV404", "reduce-grad-too-early", "2 actions",
    "A REDUCE_GRAD does not follow every backward action of its stage on its device.")
COMM_STREAM_DEADLOCK = _register(
    "SV405", "comm-stream-deadlock", "8.5 hangs",
    "Under torch-nccl: a cycle that needs NCCL's communication stream order (operations run in "
    "posting order) or a send's rendezvous with its receive; the schedule hangs on NCCL but "
    "runs on gloo.")
LOSS_OUT_OF_ORDER = _register(
    "SV406", "loss-out-of-order", "8.3 runtime rules",
    "Under torch and torch-nccl: the last stage runs its forwards out of microbatch order; "
    "PyTorch's runtime reads microbatch i's loss from the i-th forward's, so it raises or "
    "back-propagates another microbatch's loss.")
REDUCE_GRAD_UNPAIRED = _register(
    "SV407", "reduce-grad-unpaired", "9.3 gradient reduction",
    "Under torch and torch-nccl from PyTorch 2.15: REDUCE_GRAD and WAIT_REDUCE_GRAD do not pair "
    "on a rank (a REDUCE_GRAD while another stage's reduction is pending, a WAIT_REDUCE_GRAD "
    "with none pending or for another stage, a REDUCE_GRAD never waited for): the runtime "
    "refuses the schedule when it loads it.")
UNMATCHED_SEND = _register(
    "SV501", "unmatched-send", "3.5 communication",
    "A SEND has no matching RECV: under eager and rendezvous one of the same stage pair, "
    "microbatch and direction; under torch and torch-nccl none at its position on its device "
    "pair (docs/spec.md 8.2), so the step's final wait hangs.")
UNMATCHED_RECV = _register(
    "SV502", "unmatched-recv", "3.5 communication",
    "A RECV has no matching SEND (by label under eager and rendezvous, by position on its "
    "device pair under torch and torch-nccl), so it never completes.")
MISSING_RECV = _register(
    "SV503", "missing-recv", "3.5 communication",
    "With explicit communication, an action whose input comes from another device has no "
    "RECV for it on its own device.")
CROSSED_MESSAGES = _register(
    "SV504", "crossed-messages", "8.2 matching",
    "Under torch and torch-nccl: on a pair of devices the k-th send posted is received by the "
    "k-th receive posted, and their labels differ: one microbatch's data lands in another's "
    "buffer (wrong numbers when the shapes agree, an abort when they do not).")
SEND_WITHOUT_WAIT = _register(
    "SV505", "send-without-wait", "9.2 send retirement",
    "Under torch and torch-nccl from PyTorch 2.15: a SEND_F or SEND_B with no later "
    "WAIT_SEND_F or WAIT_SEND_B of its stage and microbatch on its rank: the runtime refuses "
    "the schedule when it loads it ('Pipeline sends at rank r have no matching wait').")
WAIT_WITHOUT_SEND = _register(
    "SV506", "wait-without-send", "9.2 send retirement",
    "Under torch and torch-nccl from PyTorch 2.15: a WAIT_SEND_F or WAIT_SEND_B with no pending "
    "send of its stage and microbatch before it on its rank (none posted, or that one already "
    "waited for): the runtime refuses the schedule when it loads it ('Pipeline wait ... has no "
    "pending send').")
SEND_BUDGET = _register(
    "SV507", "send-budget", "9.2 send retirement",
    "Under torch and torch-nccl with max_outstanding_sends (PyTorch 2.15): no wait can be moved "
    "early enough to keep the sends pending on a rank within the budget without a cycle, or a "
    "send has no receive: the runtime refuses the schedule when it loads it "
    "(_add_wait_send_budget).")
MEMORY_LIMIT = _register(
    "SV601", "memory-limit-exceeded", "3.6 memory",
    "Peak memory on a device exceeds the limit.")


def device_cycle(devices: Iterable[int]) -> str:
    """A deadlock's devices as the message names them, ``0 -> 2 -> 1 -> 0``: the cycle closed
    on its first device, a device that waits on itself (two of its own waits in a row) once."""
    path: list[int] = []
    for d in devices:
        if not path or path[-1] != d:
            path.append(d)
    while len(path) > 1 and path[-1] == path[0]:
        path.pop()
    return " -> ".join(map(str, path + path[:1]))


class Verdict(str, enum.Enum):
    VALID = "valid"
    INVALID = "invalid"
    UNKNOWN = "unknown"

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True)
class Location:
    """An action's place: ``device`` and its ``position`` in that device's list (nulls count)."""

    device: int
    position: int | None  # None: the action is missing, ``device`` is where it belongs
    action: str

    def __str__(self) -> str:
        if self.position is None:
            return f"device {self.device}: {self.action} (missing)"
        return f"device {self.device}, position {self.position}: {self.action}"

    def to_json(self) -> dict[str, Any]:
        return {"device": self.device, "position": self.position, "action": self.action}


@dataclass(frozen=True)
class Violation:
    """One broken rule.  ``locations`` are the offending actions (the first is the primary
    one); ``witness`` holds extra evidence, such as a deadlock cycle's steps."""

    code: Code
    message: str
    locations: tuple[Location, ...] = ()
    witness: tuple[str, ...] = ()

    @property
    def device(self) -> int | None:
        return self.locations[0].device if self.locations else None

    @property
    def position(self) -> int | None:
        return self.locations[0].position if self.locations else None

    def __str__(self) -> str:
        where = f"{self.locations[0]}: " if self.locations else ""
        return f"{self.code}: {where}{self.message}"

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "code": self.code.code,
            "slug": self.code.slug,
            "message": self.message,
            "device": self.device,
            "position": self.position,
            "actions": [loc.to_json() for loc in self.locations],
        }
        if self.witness:
            out["witness"] = list(self.witness)
        return out


@dataclass
class Report:
    """What a check found: the verdict, every violation (up to ``cap``) and the metrics.

    ``metrics`` is a :class:`schedverify.cost.Metrics` or None when the timeline could not be
    computed (a deadlock has no makespan).
    """

    verdict: Verdict
    violations: list[Violation] = field(default_factory=list)
    metrics: Any = None
    truncated: int = 0
    engine: str = "graph"
    reason: str | None = None
    timeline: Any = None
    #: False when counting stopped early: there are at least ``truncated`` more violations
    truncated_exact: bool = True
    #: the communication semantics the check used (docs/spec.md 3.5 and 8)
    comm_semantics: str | None = None
    #: things worth knowing that are not violations (the schedule runs), in words
    warnings: list[str] = field(default_factory=list)
    #: the runtime model's run (:class:`schedverify.runtime.RuntimeResult`) when the schedule
    #: lists its communication and the semantics is torch or torch-nccl (docs/spec.md 8)
    runtime: Any = None
    #: under torch and torch-nccl, what the check assumed PyTorch runs (the release, the
    #: backend, the communicator layout, the options): a :class:`schedverify.releases.Runtime`
    profile: Any = None
    #: the schedule checked, so that a report with no timeline (a deadlock) can still be drawn
    schedule: Any = field(default=None, repr=False, compare=False)

    @property
    def is_valid(self) -> bool:
        return self.verdict is Verdict.VALID

    def __iter__(self) -> Iterator[Violation]:
        return iter(self.violations)

    def codes(self) -> list[str]:
        return sorted({v.code.code for v in self.violations})

    # Jupyter's view, ``_repr_html_`` (the violations first, then the timeline), is given to
    # this class by schedverify/render/notebook.py, which draws it.

    def to_json(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict.value,
            "engine": self.engine,
            "reason": self.reason,
            "comm_semantics": self.comm_semantics,
            "runtime": self.profile.to_json() if self.profile is not None else None,
            "warnings": list(self.warnings),
            "violations": [v.to_json() for v in self.violations],
            "violations_not_shown": self.truncated,
            "violations_not_shown_exact": self.truncated_exact,
            "metrics": self.metrics.to_json() if self.metrics is not None else None,
        }
