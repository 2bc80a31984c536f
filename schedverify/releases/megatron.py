"""Megatron-LM's pipeline loops (megatron-core), release by release: how its
``forward_backward_pipelining_with_interleaving`` / ``_without_interleaving`` run their
point-to-point operations, as the tables :mod:`schedverify.releases` describes.  Each value
is read from that release's ``megatron/core/pipeline_parallel/`` (``schedules.py``,
``p2p_communication.py``); :mod:`schedverify.frameworks.megatron` reads the schedule itself.
docs/spec.md section 10 says what each means.
"""

from __future__ import annotations

from types import MappingProxyType

from ..grammar import (BATCH, OVERLAP_F_B, RECV_B, RECV_F, SEND_B, SEND_F, WAIT_SEND_B, WAIT_SEND_F, B, F)
from .base import HANDLE, Release, Switch

FRAMEWORK = "megatron-core"

#: What its loops run: forwards and backwards (a combined 1F1B step of MoE expert-parallel
#: overlap as one OVERLAP_F_B), the four point-to-point operations alone (``_p2p_ops``) or
#: as one ``batch_isend_irecv`` waited at once (``_batched_p2p_ops``: a BATCH), and the
#: waits of the sends whose handles it keeps (``overlap_p2p_comm``).
_KINDS = frozenset({F, B, OVERLAP_F_B, SEND_F, RECV_F, SEND_B, RECV_B, WAIT_SEND_F, WAIT_SEND_B, BATCH})

#: ``_p2p_ops`` at pipeline_model_parallel_size 2: an even rank's sends and an odd rank's
#: receives on the pipeline group, the other direction on the WORLD group: one communicator
#: per directed pair of the two ranks.
_EDGE_PP2 = Switch("batch_p2p_comm=False with pipeline_model_parallel_size=2 (p2p_communication._p2p_ops: "
                   "even_recv_odd_send_group = torch.distributed.group.WORLD)")

V0_19_2 = Release(
    framework=FRAMEWORK, version="0.19.2", kinds=_KINDS, action_regex="", send_retirement=HANDLE,
    reduce_grad_wait=False, lowering=(), layouts=("shared", "edge"), switches=MappingProxyType({"edge": _EDGE_PP2}),
    options=frozenset(), recv_buffers="per-receive", reduce_grad_action=False, loss_list=False,
    runs="pipeline loop",
    sources=("p2p_communication.py: P2PCommunicator._communicate (tensor_recv_prev/next = torch.empty right "
             "before each receive; wait_on_reqs waits every request before it returns), _batched_p2p_ops "
             "(one batch_isend_irecv of send_prev, recv_prev, send_next, recv_next), _p2p_ops (isend/irecv "
             "in the even/odd rank order, the WORLD group for one direction at PP = 2)",
             "schedules.py: send_next_wait_handle / send_prev_wait_handle (a send waited for later, or "
             "never: its handle dropped), recv_prev_wait_handles waited before the forward that reads them; "
             "finalize_model_grads_func after the loop"),
    changes=("the first megatron-core release schedverify models (docs/spec.md section 10)",))

#: Every modelled release, oldest first.
RELEASES = MappingProxyType({r.version: r for r in (V0_19_2,)})
