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

#: What its engines run: ForwardPass and BackwardPass, SendActivation/RecvActivation/SendGrad/
#: RecvGrad as blocking ``dist.send``/``dist.recv``, and DualPipeV's CommitP2P as one
#: ``batch_isend_irecv`` waited at once (a BATCH).
_KINDS = frozenset({F, B, SEND_F, RECV_F, SEND_B, RECV_B, BATCH})

V0_19_8 = Release(
    framework=FRAMEWORK, version="0.19.8", kinds=_KINDS, action_regex="", send_retirement=STEP_END,
    reduce_grad_wait=False, lowering=(), layouts=("shared",), switches=MappingProxyType({}), options=frozenset(),
    recv_buffers="preallocated", blocking_p2p=True, reduce_grad_action=False, loss_list=False,
    runs="pipeline engine",
    sources=("p2p.py: send and recv (dist.send / dist.recv on the default group: each blocks until it completes)",
             "engine.py: PipelineEngine._exec_schedule runs each instruction in order; pipe_buffers "
             "(num_pipe_buffers per stage, allocated with the engine); ReduceGrads after the last step",
             "dualpipev.py: DualPipeVEngine._exec_commit_p2p (the queued P2POps as one batch_isend_irecv, "
             "waited at once)"),
    changes=("the first DeepSpeed release schedverify models (docs/spec.md section 10)",))

#: Every modelled release, oldest first.
RELEASES = MappingProxyType({r.version: r for r in (V0_19_8,)})
