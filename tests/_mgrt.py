"""megatron-core's real pipeline loops over a real gloo process group on the CPU
(``python tests/_mgrt.py`` reads a JSON list of cases on stdin and prints one JSON line per
case).  It imports torch and megatron-core once, then forks every rank of every case from
that one process (a fork costs milliseconds, an import of megatron-core seconds), each rank
in a gloo group of its own case: ``torch.distributed.init_process_group("gloo")``,
``parallel_state.initialize_model_parallel(pipeline_model_parallel_size=P,
virtual_pipeline_model_parallel_size=V)``, one ``Linear`` + ``tanh`` per model chunk, and
``forward_backward_pipelining_with_interleaving`` / ``_without_interleaving`` as megatron-core
runs them, with the process groups and ``P2PCommunicator`` they build themselves.

The test-side patches are those of tests/_megatron_loop.py, no more: a stand-in for
``transformer/moe/ops/paged_stash.py`` (it needs triton), ``torch.cuda.current_device`` (the
receive buffers' device: the CPU) and the loop's CUDA ``torch.zeros`` (its token count);
``batch_p2p_sync=False`` (``_communicate`` would call ``torch.cuda.synchronize``).

A case is {"name", "pp", "vpp", "m", "overlap", "batch", "mutation"}; ``mutation`` (or null)
is {"rank", "kind", "at"}: on that rank, the ``at``-th call of ``_batched_p2p_ops`` /
``_p2p_ops`` (counting calls that post something) is changed, through megatron-core's own
functions:

- ``recv_first``: ``_p2p_ops`` posts the call's receives first, then its sends (two calls of
  ``_p2p_ops``, the receives' then the sends');
- ``early_recv_next``: before that call, a batch of its own posts the receive its next
  recv_next call would post, and waits for it; that later call posts the rest and its
  buffer gets the data received early;
- ``drop_send_prev``: the call posts no send_prev;
- ``late_recv_prev``: the call posts no recv_prev (the loop's forward then reads the buffer
  ``_communicate`` made for it, which nothing fills in time); the next call with a recv_prev
  posts it into that buffer, before its own.

Per rank, the child reports ``ready`` once its groups are made, then ``result`` (its chunks'
weight and bias gradients, on the last rank the losses, and on the mutated rank whether the
mutated call was made) or ``error``.  A case is
``done`` when every rank reports a result, ``error`` when one fails, and ``hang`` when a rank
has neither after SV_MG_TIMEOUT seconds (default 10) from the moment all were ready: its
ranks are killed.  A line per case: {"name", "outcome", "ranks": {rank: result}, "detail"}.
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import json
import os
import selectors
import signal
import socket
import sys
import time
import types

H, SEQ = 4, 2  # hidden size, sequence length (micro_batch_size 1): tensors of [SEQ, 1, H]


def _stub_paged_stash() -> None:
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from _megatron_loop import _Stub

    name = "megatron.core.transformer.moe.ops.paged_stash"
    stub = _Stub(name)
    stub.__spec__ = importlib.machinery.ModuleSpec(name, None)
    sys.modules[name] = stub


def weights(stage: int):
    """The initial weight and bias of ``stage``'s Linear (the test's reference makes the same)."""
    import torch

    g = torch.Generator().manual_seed(100 + stage)
    return torch.randn(H, H, generator=g) * 0.5, torch.randn(H, generator=g) * 0.1


def batch(mb: int):
    """Microbatch ``mb``'s input and target, [SEQ, 1, H] each."""
    import torch

    g = torch.Generator().manual_seed(1000 + mb)
    return torch.randn(SEQ, 1, H, generator=g), torch.randn(SEQ, 1, H, generator=g)


def _mutate(p2p, case, rank):
    """Wrap ``_batched_p2p_ops`` and ``_p2p_ops`` on this rank as the case's mutation says;
    the state it keeps (``applied``: the mutated call was made), or None on another rank."""
    mutation = case.get("mutation")
    if not mutation or mutation["rank"] != rank:
        return None
    import torch

    kind, at = mutation["kind"], mutation["at"]
    name = "_p2p_ops" if kind == "recv_first" else "_batched_p2p_ops"
    own = getattr(p2p, name)
    state = {"calls": 0, "early": None, "late": None, "applied": False}

    def wrapped(*, tensor_send_prev, tensor_recv_prev, tensor_send_next, tensor_recv_next, group,
                prev_pipeline_rank, next_pipeline_rank):
        args = dict(tensor_send_prev=tensor_send_prev, tensor_recv_prev=tensor_recv_prev,
                    tensor_send_next=tensor_send_next, tensor_recv_next=tensor_recv_next)
        where = dict(group=group, prev_pipeline_rank=prev_pipeline_rank, next_pipeline_rank=next_pipeline_rank)
        if all(t is None for t in args.values()):
            return own(**args, **where)
        k = state["calls"]
        state["calls"] = k + 1
        if k == at:
            state["applied"] = True
        if kind == "recv_first" and k == at:
            sends_some = tensor_send_next is not None or tensor_send_prev is not None
            assert sends_some and (tensor_recv_prev is not None or tensor_recv_next is not None), \
                "the mutated call is not a send and a recv"
            recvs = own(**{n: (t if "recv" in n else None) for n, t in args.items()}, **where)
            sends = own(**{n: (t if "send" in n else None) for n, t in args.items()}, **where)
            return {**recvs, **sends}
        if kind == "drop_send_prev" and k == at:
            assert tensor_send_prev is not None, "the mutated call has no send_prev"
            return own(**dict(args, tensor_send_prev=None), **where)
        if kind == "late_recv_prev":
            if k == at:
                assert tensor_recv_prev is not None, "the mutated call has no recv_prev"
                state["late"] = tensor_recv_prev
                return own(**dict(args, tensor_recv_prev=None), **where)
            if state["late"] is not None and tensor_recv_prev is not None:
                late, state["late"] = state["late"], None
                first = own(**dict(args, tensor_recv_prev=late, tensor_send_next=None, tensor_recv_next=None),
                            **where)  # send_prev, then the late recv_prev: _batched_p2p_ops' own order
                return first + own(**dict(args, tensor_send_prev=None), **where)
        if kind == "early_recv_next":
            if k == at:
                buf = torch.empty((SEQ, 1, H), dtype=torch.float32)
                for req in own(tensor_send_prev=None, tensor_recv_prev=None, tensor_send_next=None,
                               tensor_recv_next=buf, **where):
                    req.wait()
                state["early"] = buf
            elif state["early"] is not None and tensor_recv_next is not None:
                tensor_recv_next.data.copy_(state["early"])
                state["early"] = None
                return own(**dict(args, tensor_recv_next=None), **where)
        return own(**args, **where)

    setattr(p2p, name, wrapped)
    return state


def _rank(case, rank: int, port: int, out) -> None:
    """One rank of ``case``, in a forked child: report to ``out`` (a pipe's write end)."""
    def say(kind, payload=None):
        os.write(out, (json.dumps([kind, payload]) + "\n").encode())

    try:
        import torch
        import torch.distributed as dist
        from megatron.core import parallel_state
        from megatron.core.model_parallel_config import ModelParallelConfig
        from megatron.core.pipeline_parallel import p2p_communication, schedules

        torch.set_num_threads(1)
        pp, vpp, m = case["pp"], case["vpp"], case["m"]
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=pp)
        parallel_state.initialize_model_parallel(pipeline_model_parallel_size=pp,
                                                 virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None)
        control = dist.new_group(backend="gloo")  # for the last barrier only: no pipeline traffic
        config = ModelParallelConfig(pipeline_model_parallel_size=pp,
                                     virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
                                     pipeline_dtype=torch.float32, batch_p2p_comm=case["batch"],
                                     batch_p2p_sync=False, overlap_p2p_comm=case["overlap"])
        config.hidden_size = H  # a TransformerConfig field the loops read for the tensor shape

        class Chunk(torch.nn.Module):
            def __init__(self, c):
                super().__init__()
                self.stage, self.config, self.model_type = c * pp + rank, config, None
                self.linear = torch.nn.Linear(H, H)
                w, b = weights(self.stage)
                with torch.no_grad():
                    self.linear.weight.copy_(w)
                    self.linear.bias.copy_(b)
                self.input = None

            def set_input_tensor(self, tensors):
                self.input = tensors[0] if isinstance(tensors, list) else tensors

            def forward(self, x):
                return torch.tanh(self.linear(x))

        chunks = [Chunk(c) for c in range(vpp)]
        last_stage = pp * vpp - 1

        def forward_step_func(data_iterator, model):
            x, y = next(data_iterator)
            out = model(x if model.stage == 0 else model.input)

            def loss_func(output):
                loss = torch.nn.functional.mse_loss(output, y)
                return loss, {"loss": loss.detach().clone()}

            return out, (loss_func if model.stage == last_stage else None)

        mutated = _mutate(p2p_communication, case, rank)
        say("ready")
        dist.barrier(group=control)
        data = [iter([batch(i) for i in range(m)]) for _ in range(vpp)]
        if vpp > 1:
            losses = schedules.forward_backward_pipelining_with_interleaving(
                forward_step_func=forward_step_func, data_iterator=data, model=chunks, num_microbatches=m,
                seq_length=SEQ, micro_batch_size=1)
        else:
            losses = schedules.forward_backward_pipelining_without_interleaving(
                forward_step_func=forward_step_func, data_iterator=data[0], model=chunks[0], num_microbatches=m,
                seq_length=SEQ, micro_batch_size=1)
        grads = {str(c.stage): [c.linear.weight.grad.flatten().tolist(), c.linear.bias.grad.tolist()]
                 for c in chunks}
        say("result", {"grads": grads, "losses": [float(x["loss"]) for x in losses],
                       "mutated": None if mutated is None else mutated["applied"]})
        dist.barrier(group=control)  # every rank's sends are taken before any rank exits
    except BaseException as e:  # noqa: BLE001 - reported to the parent, whatever it is
        say("error", f"{type(e).__name__}: {e}")
    finally:
        os._exit(0)


def _free_ports(n: int) -> list[int]:
    """``n`` distinct free ports (each held until all are chosen)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def main() -> int:
    cases = json.load(sys.stdin)
    timeout = float(os.environ.get("SV_MG_TIMEOUT", "10"))
    init_timeout = float(os.environ.get("SV_MG_INIT_TIMEOUT", "120"))
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    _stub_paged_stash()
    import torch

    torch.cuda.current_device = lambda: "cpu"
    zeros = torch.zeros
    torch.zeros = lambda *a, device=None, **k: zeros(*a, **k)
    from megatron.core import parallel_state  # noqa: F401 - imported once, before the forks
    from megatron.core.pipeline_parallel import schedules  # noqa: F401

    sel = selectors.DefaultSelector()
    state = {}
    for case, port in zip(cases, _free_ports(len(cases))):
        st = state[case["name"]] = types.SimpleNamespace(
            case=case, pids={}, ready=set(), results={}, error=None, started=time.monotonic(), all_ready=None,
            outcome=None)
        for r in range(case["pp"]):
            rd, wr = os.pipe()
            pid = os.fork()
            if pid == 0:
                os.close(rd)
                _rank(case, r, port, wr)
            os.close(wr)
            st.pids[r] = pid
            sel.register(rd, selectors.EVENT_READ, (st, r, [b""]))

    def finish(st, outcome):
        st.outcome = outcome
        for pid in st.pids.values():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    while any(st.outcome is None for st in state.values()):
        for key, _ in sel.select(timeout=0.2):
            st, r, buf = key.data
            chunk = os.read(key.fd, 1 << 20)
            if not chunk:
                sel.unregister(key.fd)
                os.close(key.fd)
                if st.outcome is None and r not in st.results and st.error is None:
                    st.error = f"rank {r} exited without a result"
                    finish(st, "error")
                continue
            buf[0] += chunk
            *lines, buf[0] = buf[0].split(b"\n")
            for line in lines:
                kind, payload = json.loads(line)
                if kind == "ready":
                    st.ready.add(r)
                    if len(st.ready) == st.case["pp"]:
                        st.all_ready = time.monotonic()
                elif kind == "result":
                    st.results[r] = payload
                elif kind == "error" and st.error is None:
                    st.error = f"rank {r}: {payload}"
            if st.outcome is None:
                if st.error is not None:
                    finish(st, "error")
                elif len(st.results) == st.case["pp"]:
                    finish(st, "done")
        now = time.monotonic()
        for st in state.values():
            if st.outcome is None:
                if st.all_ready is not None and now - st.all_ready > timeout:
                    finish(st, "hang")
                elif st.all_ready is None and now - st.started > init_timeout:
                    st.error = "the process groups were not made in time"
                    finish(st, "error")
    for st in state.values():
        for pid in st.pids.values():
            os.waitpid(pid, 0)
        print(json.dumps({"name": st.case["name"], "outcome": st.outcome, "ranks": st.results,
                          "detail": st.error}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
