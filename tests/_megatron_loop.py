"""Runs megatron-core's own pipeline loops (``forward_backward_pipelining_with_interleaving``
and ``_without_interleaving``, ``pipeline_parallel/schedules.py``) on one rank, on the CPU and
without a process group, and records what they do as schedverify actions: the test-side
patches are a stand-in for ``transformer/moe/ops/paged_stash.py`` (which needs triton),
``torch.distributed.is_initialized``, the loop's CUDA ``torch.zeros``, ``forward_step`` and
``backward_step`` (which record F and B on tagged stand-in tensors), and
``P2PCommunicator._communicate``, which records each call's tensors and flags, and hands back
requests whose ``wait()`` is recorded.  Each ``_communicate`` call is expanded with
schedverify's own rule (:meth:`schedverify.frameworks.megatron._Rank.communicate`); the
receive labels are the microbatch each received tensor is consumed for.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import sys
import types


class _Anything:
    def __call__(self, *a, **k):
        return a[0] if len(a) == 1 and callable(a[0]) and not k else self

    def __getattr__(self, name):
        return self


class _Stub(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything()


@contextlib.contextmanager
def patched(monkeypatch):
    name = "megatron.core.transformer.moe.ops.paged_stash"
    if name not in sys.modules:
        stub = _Stub(name)
        stub.__spec__ = importlib.machinery.ModuleSpec(name, None)
        monkeypatch.setitem(sys.modules, name, stub)
    import torch

    monkeypatch.setattr(torch.distributed, "is_initialized", lambda: True)
    zeros = torch.zeros
    monkeypatch.setattr(torch, "zeros", lambda *a, device=None, **k: zeros(*a, **k))
    yield


class Tag:
    """A stand-in tensor: what it is (an activation or gradient of a stage and microbatch, or
    a received tensor awaiting its label)."""

    def __init__(self, what):
        self.what = what


def run_rank(pp, vpp, m, rank, *, overlap=False, batch=None, group=None, probe=None):
    """The recorded order of ``rank``: a list of ("F"|"B", stage, mb), ("call", dict) and
    ("wait", request-id) events, then resolved into schedverify actions.  ``probe``: called
    as ``probe("F" | "B", chunk)`` at each ``forward_step`` and ``backward_step``, from inside
    the loop's call (it may read the loop's frames)."""
    from megatron.core.model_parallel_config import ModelParallelConfig
    from megatron.core.pipeline_parallel import p2p_communication, schedules

    import torch

    from schedverify.frameworks.megatron import _Rank
    from schedverify.grammar import RECV_B, RECV_F, SEND_B, SEND_F, WAIT_OF, Action, B, F

    config = ModelParallelConfig(pipeline_model_parallel_size=pp,
                                 virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
                                 pipeline_dtype=torch.float32,
                                 batch_p2p_comm=not overlap if batch is None else batch,
                                 overlap_p2p_comm=overlap, microbatch_group_size_per_vp_stage=group)
    config.hidden_size = 4  # a TransformerConfig field the loop reads for its tensor shape
    events: list = []
    recvs: dict[int, Action] = {}

    class Chunk(torch.nn.Module):
        def __init__(self, c):
            super().__init__()
            self.config, self.model_type, self.chunk = config, None, c

    chunks = [Chunk(c) for c in range(vpp)]

    def forward_step(forward_step_func, data_iterator, model, num_microbatches, input_tensor, *a,
                     current_microbatch=None, **k):
        c = model.chunk if isinstance(model, Chunk) else 0
        stage = c * pp + rank
        if isinstance(input_tensor, list):
            input_tensor = input_tensor[0]
        if isinstance(input_tensor, Tag) and isinstance(input_tensor.what, int):
            recvs[input_tensor.what] = Action(stage, RECV_F, current_microbatch)
        events.append(("compute", Action(stage, F, current_microbatch)))
        if probe is not None:
            probe(F, c)
        return Tag((stage, current_microbatch)), 0

    def backward_step(input_tensor, output_tensor, output_tensor_grad, config):
        output_tensor = output_tensor[0] if isinstance(output_tensor, list) else output_tensor
        output_tensor_grad = output_tensor_grad[0] if isinstance(output_tensor_grad, list) else output_tensor_grad
        stage, mb = output_tensor.what
        if isinstance(output_tensor_grad, Tag) and isinstance(output_tensor_grad.what, int):
            recvs[output_tensor_grad.what] = Action(stage, RECV_B, mb)
        events.append(("compute", Action(stage, B, mb)))
        if probe is not None:
            probe(B, stage // pp)
        return Tag((stage, mb))

    class Request:
        def __init__(self, n):
            self.n = n

        def wait(self):
            events.append(("wait", self.n))

    counter = iter(range(10 ** 9))

    def communicate(self, *, tensor_send_next, tensor_send_prev, recv_prev, recv_next, tensor_shape,
                    wait_on_reqs=True):
        got_prev = Tag(next(counter)) if recv_prev else None
        got_next = Tag(next(counter)) if recv_next else None
        reqs = {}
        for name, x in (("send_next", tensor_send_next), ("send_prev", tensor_send_prev),
                        ("recv_prev", got_prev), ("recv_next", got_next)):
            if x is not None:
                reqs[name] = Request(next(counter))
        events.append(("call", dict(send_next=tensor_send_next, send_prev=tensor_send_prev, recv_prev=got_prev,
                                    recv_next=got_next, reqs=dict(reqs), wait=wait_on_reqs)))
        if wait_on_reqs:
            for r in reqs.values():
                r.wait()
            return got_prev, got_next, None
        return got_prev, got_next, (reqs if not config.batch_p2p_comm else [])

    comm = object.__new__(p2p_communication.P2PCommunicator)
    comm.pp_group = types.SimpleNamespace(size=lambda: pp, rank=lambda: rank)
    comm.config, comm.next_rank, comm.prev_rank = config, (rank + 1) % pp, (rank - 1) % pp
    comm.virtual_pipeline_model_parallel_size = config.virtual_pipeline_model_parallel_size
    comm._communicate = types.MethodType(communicate, comm)
    one = types.SimpleNamespace(size=lambda: 1, rank=lambda: 0)
    from megatron.core.process_groups_config import ProcessGroupCollection

    pgs = ProcessGroupCollection(tp=one, cp=one, pp=comm.pp_group)
    saved = schedules.forward_step, schedules.backward_step
    schedules.forward_step, schedules.backward_step = forward_step, backward_step
    try:
        loop = (schedules.forward_backward_pipelining_with_interleaving if vpp > 1 else
                schedules.forward_backward_pipelining_without_interleaving)
        loop(forward_step_func=None, data_iterator=[None] * vpp if vpp > 1 else None,
             model=chunks if vpp > 1 else chunks[0], num_microbatches=m, seq_length=2, micro_batch_size=1,
             p2p_communicator=comm, pg_collection=pgs)
    finally:
        schedules.forward_step, schedules.backward_step = saved

    # resolve: each call expanded by schedverify's rule, each received tensor labelled
    me = _Rank(rank, pp, batched=config.batch_p2p_comm)
    sends_by_req: dict[int, Action] = {}
    for kind, what in events:
        if kind == "compute":
            me.order.append(what)
        elif kind == "call":
            def label(t, send_kind):
                return None if t is None else Action(t.what[0], send_kind, t.what[1])

            ops = dict(send_next=label(what["send_next"], SEND_F), send_prev=label(what["send_prev"], SEND_B),
                       recv_prev=None if what["recv_prev"] is None else recvs[what["recv_prev"].what],
                       recv_next=None if what["recv_next"] is None else recvs[what["recv_next"].what])
            # the loop's own waits are recorded as events: post without waiting here
            me.communicate(**ops, wait=False)
            for name, req in what["reqs"].items():
                if name.startswith("send"):
                    sends_by_req[req.n] = ops[name]
        elif what in sends_by_req and not me.batched:
            s = sends_by_req[what]
            me.order.append(Action(s.stage, WAIT_OF[s.kind], s.microbatch))
    return me.order
