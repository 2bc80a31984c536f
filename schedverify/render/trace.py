"""Chrome / Perfetto trace-event JSON of a schedule's timeline (opens in ui.perfetto.dev and
chrome://tracing).

One process per device (``pid`` = device, one thread: the compute stream, since every
listed action, SEND/RECV included, runs on it in order), one complete event (``"ph": "X"``)
per action at its simulated start with its duration, stage and microbatch in ``args``, and
one flow (``"s"`` -> ``"f"``) per dependency that crosses devices, so the UI draws the
arrow from the producer to the action that waits for it.

Trace timestamps are microseconds; one cost unit is ``time_scale`` microseconds (default
1000, so a cost of 1 reads as 1 ms).  ``otherData`` records the scale.

Categories: ``computation`` for F, B, I, W and overlapped F+B; ``communication`` for
SEND/RECV; ``bookkeeping`` for UNSHARD/RESHARD/REDUCE_GRAD.  PyTorch's
``_dump_chrometrace`` tests ``computation_type in (F, B, W)``, so it files the
input-gradient backward ``I`` (and OVERLAP_F_B) under "communication": here ``I`` is
computation.  PyTorch's dump also uses the step index as the time; this one uses the
timeline.

A schedule that deadlocks has no timing: its trace places each action at its position in
the device's order (one unit per position), says so in ``otherData``, and marks the
actions of the deadlock cycle, with a flow for each wait of the cycle.

Under PyTorch's runtime semantics (docs/spec.md 8) a schedule with SEND/RECV runs on more
than one stream per device, and the trace shows them as threads of the device: ``tid`` 0 the
compute stream (``torch``: the host, which posts the SEND/RECV), then the communication
stream(s) (``torch-nccl``: one per device, or one per peer; ``torch``: one track for gloo's
messages), each SEND/RECV spanning its ready and done times.  Flows go from each SEND to the
RECV it is matched with (``message``: by position on the device pair, so a crossed pair shows
as crossing arrows) and from each RECV to the action that uses its data; a hang marks every
stuck head (``args.stuck``) and draws its cycles' waits.
"""

from __future__ import annotations

from typing import Any

from .view import View, category, microbatch_of, stage_of

DEFAULT_TIME_SCALE = 1000.0  # microseconds per cost unit


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else x


def trace_events(view: View, *, time_scale: float = DEFAULT_TIME_SCALE) -> dict[str, Any]:
    """The trace as a JSON-ready dict ``{"traceEvents": [...], "displayTimeUnit": "ms", ...}``."""
    s, g = view.schedule, view.graph
    start, end = _spans(view)
    tid, names = _threads(view)
    events: list[dict[str, Any]] = []
    for d in range(s.devices):
        events.append({"name": "process_name", "ph": "M", "pid": d, "tid": 0,
                       "args": {"name": f"device {d}"}})
        events.append({"name": "process_sort_index", "ph": "M", "pid": d, "tid": 0,
                       "args": {"sort_index": d}})
        for t, name in names.get(d, {0: "compute stream" if view.timed else "order (no timing)"}).items():
            events.append({"name": "thread_name", "ph": "M", "pid": d, "tid": t, "args": {"name": name}})
    stuck = {w.head for w in view.runtime.stuck} if view.runtime is not None else set()
    critical = set(view.critical)
    cycle_of: dict[int, int] = {}
    for n, cycle in enumerate(view.cycles):
        for head, _ in cycle:
            cycle_of[head] = n
    for i, a in enumerate(g.acts):
        args: dict[str, Any] = {"action": str(a), "device": g.dev[i], "position": g.pos[i],
                                "kind": a.kind}
        st, mb = stage_of(a), microbatch_of(a)
        if a.sub is not None:
            args["stages"] = [x.stage for x in a.sub]
            args["microbatches"] = [x.microbatch for x in a.sub]
        else:
            if st is not None:
                args["stage"] = st
            if mb is not None:
                args["microbatch"] = mb
        if view.timed:
            args["start"] = _num(start[i])
            args["end"] = _num(end[i])
        if i in critical:
            args["critical_path"] = True
        if i in view.marked:
            args["violations"] = list(view.marked[i])
        if i in cycle_of:
            args["deadlock_cycle"] = cycle_of[i]
        if i in stuck:
            args["stuck"] = True
        cat = category(a)
        if i in view.marked:
            cat += ",violation"
        ev = {"name": str(a), "cat": cat, "ph": "X", "pid": g.dev[i], "tid": tid(i),
              "ts": _num(start[i] * time_scale), "dur": _num((end[i] - start[i]) * time_scale),
              "args": args}
        if i in view.marked or i in stuck:
            ev["cname"] = "terrible"
        events.append(ev)
    events += _flows(view, time_scale)
    other = {
        "schedule": s.name, "devices": s.devices, "stages": s.stages,
        "microbatches": s.microbatches, "verdict": view.report.verdict.value,
        "timed": view.timed, "microseconds_per_time_unit": _num(time_scale),
    }
    if view.timed:
        m = view.report.metrics
        other.update({"makespan": _num(m.makespan), "bubble_fraction": m.bubble_fraction,
                      "bubble_ratio": m.bubble_ratio})
    else:
        other["note"] = (f"no timing ({view.untimed_reason}); each action is placed at its "
                         "position in its device's order, one unit per position")
    if view.report.violations:
        other["violations"] = [str(v) for v in view.report.violations[:50]]
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def _spans(view: View) -> tuple[list[float], list[float]]:
    """Each action's start and end on its track: a SEND/RECV of the runtime model spans its
    ready and done times (pictures give it no width: see View)."""
    if view.runtime is not None and view.timed:
        return view.timeline.start, view.timeline.end
    return view.start, view.end


def _threads(view: View):
    """(tid of each action, {device: {tid: name}}): one thread unless the runtime model ran."""
    r = view.runtime
    if r is None:
        return (lambda i: 0), {}
    g = view.graph
    first: dict[int, int] = {}
    names: dict[int, dict[int, str]] = {}
    for k, (d, stream, peer) in enumerate(r.lanes):
        first.setdefault(d, k)
        if stream == "host":
            names[d] = {0: "host (compute; posts its SEND/RECV)", 1: "messages (gloo)"}
        elif stream == "compute":
            names.setdefault(d, {})[0] = "compute stream"
        else:
            names[d][k - first[d]] = r.labels[k] if r.labels else (
                "communication stream" if peer < 0 else f"communication stream with device {peer}")
    host = {d for d, stream, _ in r.lanes if stream == "host"}

    def tid(i: int) -> int:
        d = g.dev[i]
        if d in host:
            return 1 if r.is_comm[i] else 0
        return r.lane_of[i] - first[d]

    return tid, names


def _flows(view: View, time_scale: float) -> list[dict[str, Any]]:
    """Flow events for cross-device waits: data dependencies (``dependency``), rendezvous
    waits (``rendezvous``) and, when untimed, the waits of the deadlock cycles; under the
    runtime model, messages (``message``: each SEND to its matched RECV) and each RECV to its
    consumer, or a hang's cycle waits."""
    g = view.graph
    start, end = _spans(view)
    tid, _ = _threads(view)
    out: list[dict[str, Any]] = []
    n = 0

    def inside(i: int) -> float:
        # A flow binds to the slice enclosing its timestamp: use the slice's middle so that a
        # neighbour starting or ending at the same instant is never picked instead.
        return (start[i] + end[i]) / 2 * time_scale

    def add(src: int, dst: int, cat: str, name: str) -> None:
        nonlocal n
        n += 1
        out.append({"name": name, "cat": cat, "ph": "s", "id": n, "pid": g.dev[src], "tid": tid(src),
                    "ts": _num(inside(src))})
        out.append({"name": name, "cat": cat, "ph": "f", "bp": "e", "id": n, "pid": g.dev[dst],
                    "tid": tid(dst), "ts": _num(inside(dst))})

    r = view.runtime
    if r is not None:
        from ..runtime import blocker, data_deps

        if view.timed:
            for s, p in enumerate(r.matching.partner):
                if p >= 0 and r.is_comm[s] and g.acts[s].kind.startswith("SEND"):
                    add(s, p, "message", f"{g.acts[s]} -> {g.acts[p]}")
            for i, deps in enumerate(data_deps(g, r.is_comm)):
                for j in deps:
                    add(j, i, "dependency", f"{g.acts[j]} -> {g.acts[i]}")
        else:
            for cycle in r.cycles:
                for w in cycle:
                    j = blocker(r, w)
                    if j >= 0:
                        add(j, w.head, "deadlock", f"{g.acts[w.head]} waits for {g.acts[j]}")
        return out
    if view.timed:
        for i, ws in enumerate(g.waits):
            for j in ws:
                if j >= 0:
                    add(j, i, "dependency", f"{g.acts[j]} -> {g.acts[i]}")
                else:
                    add(~j, i, "rendezvous", f"{g.acts[i]} waits for {g.acts[~j]}")
    else:
        for cycle in view.cycles:
            for head, awaited in cycle:
                k = awaited if awaited >= 0 else ~awaited
                add(k, head, "deadlock", f"{g.acts[head]} waits for {g.acts[k]}")
    return out
