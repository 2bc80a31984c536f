"""DeepSpeed's pipeline engine, release by release: how ``PipelineEngine`` (``TrainSchedule``)
and ``DualPipeVEngine`` run their point-to-point instructions, as the tables
:mod:`schedverify.releases` describes.  Each value is read from that release's
``deepspeed/runtime/pipe/`` (``engine.py``, ``p2p.py``, ``dualpipev.py``);
:mod:`schedverify.frameworks.deepspeed` reads the schedule itself.  docs/spec.md section 10
says what each means.
"""

from __future__ import annotations

from types import MappingProxyType

from ..grammar import BATCH, RECV_B, RECV_F, SEND_B, SEND_F, B, F
from .base import STEP_END, Release

FRAMEWORK = "deepspeed"

#: What PipelineEngine runs (its _INSTRUCTION_MAP): ForwardPass and BackwardPass, and
#: SendActivation/RecvActivation/SendGrad/RecvGrad as blocking ``dist.send``/``dist.recv``;
#: a CommitP2P (a BATCH) it does not understand (``_exec_schedule`` raises RuntimeError).
_KINDS = frozenset({F, B, SEND_F, RECV_F, SEND_B, RECV_B})
#: What DualPipeVEngine runs: the same instructions, each send and receive only queued, and
#: CommitP2P, the queue as one ``batch_isend_irecv`` waited at once (a BATCH).
_DUALPIPEV_KINDS = _KINDS | {BATCH}

V0_19_8 = Release(
    framework=FRAMEWORK, version="0.19.8", kinds=_KINDS, action_regex="", send_retirement=STEP_END,
    reduce_grad_wait=False, lowering=(), layouts=("shared",), switches=MappingProxyType({}), options=frozenset(),
    recv_buffers="preallocated", blocking_p2p=True, reduce_grad_action=False, loss_list=False,
    runs="pipeline engine",
    sources=("p2p.py: send and recv (dist.send / dist.recv on the default group: each blocks until it completes)",
             "engine.py: PipelineEngine._exec_schedule runs each instruction in order (an instruction outside "
             "_INSTRUCTION_MAP, CommitP2P among them, raises); pipe_buffers (num_pipe_buffers per stage); "
             "ReduceGrads after the last step"),
    changes=("the first DeepSpeed release schedverify models (docs/spec.md section 10)",))

V0_19_8_DUALPIPEV = Release(
    framework=FRAMEWORK, version="0.19.8", kinds=_DUALPIPEV_KINDS, action_regex="", send_retirement=STEP_END,
    reduce_grad_wait=False, lowering=(), layouts=("shared",), switches=MappingProxyType({}), options=frozenset(),
    recv_buffers="per-receive", blocking_p2p=False, p2p_in_batch=True, reduce_grad_action=False, loss_list=False,
    runs="DualPipeVEngine", engine="DualPipeVEngine",
    sources=("dualpipev.py: DualPipeVEngine._queue_p2p (each SendActivation/RecvActivation/SendGrad/RecvGrad "
             "appends one dist.P2POp per tensor, no tag, to the peer's global rank on the default group)",
             "dualpipev.py: DualPipeVEngine._exec_commit_p2p (the queue as one batch_isend_irecv in queue "
             "order, each request waited before the next instruction; an empty queue posts nothing)",
             "dualpipev.py: _exec_recv_activations / _exec_recv_grads (torch.empty per receive)",
             "engine.py: _send_tensor_meta / _recv_tensor_meta (blocking p2p.send/recv, outside the batches)"),
    changes=("DualPipeVEngine (dualpipev.py), new beside PipelineEngine in this release: "
             "DualPipeVSchedule's batched commits",))

#: Every modelled release of PipelineEngine, oldest first.
RELEASES = MappingProxyType({r.version: r for r in (V0_19_8,)})
#: Every engine's modelled releases, the default engine (PipelineEngine) first: a schedule's
#: metadata names its engine (``"engine"``).
ENGINES = MappingProxyType({"PipelineEngine": RELEASES,
                            "DualPipeVEngine": MappingProxyType({r.version: r for r in (V0_19_8_DUALPIPEV,)})})
