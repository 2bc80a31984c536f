"""Generators for the well-known schedule families: pure functions, sizes first.

Each generator is ``f(devices, microbatches, *, <options>) -> Schedule``; its docstring cites
the paper and states the domain, and sizes outside the domain raise
:class:`~schedverify.errors.UnsupportedSize` with a message that states the rule.

``FAMILIES`` maps each CLI name to a :class:`Family`: the generator plus what
``schedverify generate --list`` prints (a one-line summary and the domain) and the family's
options.  To add a family, import its generator below and add one ``Family(...)`` line to
the tuple at the bottom.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from collections.abc import Callable

from ..model import Schedule
from .bidirectional import chimera, dualpipe, dualpipe_v
from .classic import gpipe, one_f_one_b
from .interleaved import interleaved_1f1b, looped_bfs
from .vshape import v_half, v_min, zb_v
from .zero_bubble import zb_h1, zb_h2


@dataclass(frozen=True)
class Option:
    """A keyword option of a generator, exposed on the command line as ``--name-with-dashes``.

    ``name`` is the generator's keyword argument (``group_size``); ``type`` parses the
    command-line text (``int``, ``float``, ``str``); ``default`` is documentation only, the
    generator's own default applies when the option is not given.
    """

    name: str
    type: Callable[[str], Any] = int
    default: Any = None
    help: str = ""
    choices: tuple | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


@dataclass(frozen=True)
class Family:
    """One schedule family: CLI name, generator, one-line summary and domain (for ``--list``).

    ``chunks`` says whether the generator takes ``chunks=V`` (stages per device); families
    with a fixed shape (ZB-V's two chunks) leave it False and set their stage count
    themselves.  ``options`` lists the other keyword options.
    """

    name: str
    generate: Callable[..., Schedule]
    summary: str
    domain: str
    options: tuple[Option, ...] = ()
    chunks: bool = False
    #: the fewest chunks the generator takes (interleaved 1F1B with one chunk is 1F1B)
    min_chunks: int = 1

    @property
    def default_chunks(self) -> int | None:
        """The chunk count the generator builds when none is given (None: the family takes
        no ``chunks``): what ``schedverify generate`` and ``schedverify prove`` use."""
        if not self.chunks:
            return None
        import inspect

        return inspect.signature(self.generate).parameters["chunks"].default

    def __call__(self, devices: int, microbatches: int, **options: Any) -> Schedule:
        """The family's schedule; when an all-sizes certificate covers these sizes, checked
        against it in O(actions) first (a difference is an InternalError: a bug, never a
        schedule other than the one ``schedverify prove`` proves things about)."""
        schedule = self.generate(devices, microbatches, **options)
        from ..certificates import covering

        source = covering(self.name, devices, microbatches, options.get("chunks", self.default_chunks),
                          options.get("group_size"),
                          options.get("max_inflight"))
        if source is not None:
            source.verify(schedule, devices, microbatches)
        return schedule


_GROUP_SIZE = Option("group_size", int, "D",
                     "microbatches per group (Megatron's microbatch_group_size_per_vp_stage)")

FAMILIES: dict[str, Family] = {f.name: f for f in (
    Family("gpipe", gpipe,
           "GPipe (Huang et al. 2019): all forwards, then all backwards",
           "D >= 1, M >= 1"),
    Family("1f1b", one_f_one_b,
           "1F1B / PipeDream-Flush (Narayanan et al. 2021): D-d-1 warm-up forwards, then one F one B",
           "D >= 1, M >= 1; --max-inflight K >= 1",
           options=(Option("max_inflight", int, "D",
                           "at most this many microbatches in flight per device: 1F1B with D-K empty "
                           "slots after every K microbatches, the least makespan with that memory"),)),
    Family("interleaved-1f1b", interleaved_1f1b,
           "Interleaved 1F1B (Megatron-LM, Narayanan et al. 2021): depth-first over chunks in microbatch groups",
           "V >= 2, D <= group size <= M, M % group size is 0 or >= D (Megatron's rules)",
           options=(_GROUP_SIZE,),
           chunks=True, min_chunks=2),
    Family("looped-bfs", looped_bfs,
           "Looped breadth-first (Lamy-Poirier 2023): each chunk's forwards for all microbatches, then backwards",
           "D >= 1, M >= 1, V >= 1", chunks=True),
    Family("zb-h1", zb_h1,
           "ZB-H1 (Qi et al. 2024): 1F1B with split backward, W delayed d steps on device d; 1F1B's peak",
           "D >= 1, M >= 1; with V >= 2 chunks (PyTorch's InterleavedZeroBubble) interleaved-1f1b's group rules",
           options=(_GROUP_SIZE,),
           chunks=True),
    Family("zb-h2", zb_h2,
           "ZB-H2 (Qi et al. 2024): 2(D-1-d) warm-up forwards, W delayed 2d steps; 2D-1 in flight",
           "D >= 1, M >= 1"),
    Family("zb-v", zb_v,
           "ZB-V (Qi et al. 2024): V placement, 2 chunks per device, split backward; zero bubble for M >= 2D-1",
           "D >= 1, M >= 1"),
    Family("v-half", v_half,
           "V-Half (Qi et al. 2024, Controllable Memory): V building block, about 1/2 of 1F1B's activations",
           "D >= 1, M >= 1"),
    Family("v-min", v_min,
           "V-Min (Qi et al. 2024, Controllable Memory): V building block, about 1/3 of 1F1B's activations",
           "D >= 1, M >= 1"),
    Family("dualpipe", dualpipe,
           "DualPipe (DeepSeek-V3 2024): two mirrored routes, overlapped F&B, peak D+1 stage activations",
           "D even, M even, M >= 2D"),
    Family("dualpipe-v", dualpipe_v,
           "DualPipeV (DualPipe repo, PyTorch): DualPipe folded on the V placement, peak 2D+1 chunks",
           "D >= 1, M >= 2D"),
    Family("chimera", chimera,
           "Chimera (Li & Hoefler 2021): down and up pipelines, D/2 microbatches each per unit",
           "D even, M a multiple of D"),
)}



def family(name: str) -> Family:
    """The family registered as ``name``; an unknown name is a :class:`UsageError` that
    suggests the closest known one."""
    import difflib

    from ..errors import UsageError

    found = FAMILIES.get(name) if isinstance(name, str) else None
    if found is None:
        close = difflib.get_close_matches(str(name), list(FAMILIES), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else f"; known: {', '.join(FAMILIES)}"
        raise UsageError(f"unknown family {name!r}{hint}")
    return found


def generate(name: str, devices: int, microbatches: int, **options: Any) -> Schedule:
    """The schedule of the family registered as ``name`` (``"zb-h1"``, ...) at these sizes;
    ``options`` are the family's keyword options (``chunks``, ``group_size``)."""
    return family(name)(devices, microbatches, **options)


__all__ = [
    "FAMILIES", "Family", "Option", "family", "generate", "gpipe", "interleaved_1f1b", "looped_bfs",
    "one_f_one_b", "zb_h1",
    "zb_h2", "chimera", "dualpipe", "dualpipe_v", "v_half", "v_min", "zb_v",
]
