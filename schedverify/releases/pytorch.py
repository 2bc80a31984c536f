"""PyTorch's pipeline runtime, release by release: the tables :mod:`schedverify.releases`
describes, each value read from that release's ``torch/distributed/pipelining/``
(``schedules.py``, ``stage.py``, ``_p2p.py``) and ``torch/distributed/config.py``.
docs/spec.md section 9 says what changed in each and where.
"""

from __future__ import annotations

from types import MappingProxyType

from ..grammar import ALL_KINDS, BATCH, SEND_WAIT_KINDS, WAIT_REDUCE_GRAD
from .base import BY_WAIT, STEP_END, Release, Switch

#: ``_ComputationType`` of 2.15: every kind of schedverify's grammar but BATCH (the frameworks'
#: batch_isend_irecv, docs/spec.md 10); of 2.13 and 2.14: F, I, W, B, OVERLAP_F_B, the four
#: SEND/RECV, UNSHARD, RESHARD, REDUCE_GRAD.
_KINDS_2_15 = frozenset(ALL_KINDS - {BATCH})
_KINDS_2_13 = frozenset(_KINDS_2_15 - SEND_WAIT_KINDS - {WAIT_REDUCE_GRAD})

#: ``_action_regex`` of 2.13 and 2.14, and of 2.15 (its new kinds first, longest first).
_REGEX_2_13 = r"(\d+)(F|I|B|W|UNSHARD|RESHARD|REDUCE_GRAD|SEND_F|RECV_F|SEND_B|RECV_B)(\d*)"
_REGEX_2_15 = (r"(\d+)(WAIT_REDUCE_GRAD|WAIT_SEND_F|WAIT_SEND_B|REDUCE_GRAD|UNSHARD|RESHARD|SEND_F|RECV_F|SEND_B"
               r"|RECV_B|F|I|B|W)(\d*)")

#: ``_PipelineScheduleRuntime``'s lowering of a compute-only schedule in 2.13 and 2.14
#: (``_prepare_schedule_with_comms``).
_LOWERING_2_13 = ("unshard_reshard", "reduce_grad", "send_recv", "defer_recv")
#: ... in 2.15: the unshard lookahead, a WAIT_REDUCE_GRAD per REDUCE_GRAD, a WAIT_SEND per
#: send (``_add_wait_send``), each send's wait checked (``_validate_send_waits``) and, with
#: ``max_outstanding_sends``, moved to keep the budget (``_add_wait_send_budget``).
_LOWERING_2_15 = ("unshard_reshard_lookahead", "reduce_grad_wait", "send_recv", "wait_send", "defer_recv",
                  "validate_send_waits", "send_budget")

_DIRECTION_2_14 = Switch("torch.distributed.config.pipeline_per_direction_p2p",
                         "TORCH_DISTRIBUTED_PIPELINE_PER_DIRECTION_P2P", "automatic with TorchComms",
                         needs="a device-bound default process group (init_process_group(device_id=<accelerator>)): "
                               "split_group refuses one without ('No device associated with the default pg, not "
                               "safe to split any process groups'), and gloo on a CPU cannot be bound")
_EDGE_2_15 = Switch("torch.distributed.config.pipeline_per_edge_p2p",
                    "TORCH_DISTRIBUTED_PIPELINE_PER_EDGE_P2P", "automatic with TorchComms")

V2_13 = Release(
    framework="PyTorch", version="2.13", kinds=_KINDS_2_13, action_regex=_REGEX_2_13, send_retirement=STEP_END,
    reduce_grad_wait=False, lowering=_LOWERING_2_13, layouts=("shared",), switches=MappingProxyType({}),
    options=frozenset({"defer_pp_recv"}),
    sources=("schedules.py: _ComputationType, _action_regex, _Action.from_str, _add_unshard_reshard, "
             "_add_reduce_grad, _add_send_recv, _defer_recv_ops, _PipelineScheduleRuntime._step_microbatches "
             "(send_ops waited at the end of the step)",
             "stage.py: every P2POp on self.group"),
    changes=("the first release schedverify models (docs/spec.md section 8)",))

V2_14 = Release(
    framework="PyTorch", version="2.14", kinds=_KINDS_2_13, action_regex=_REGEX_2_13, send_retirement=STEP_END,
    reduce_grad_wait=False, lowering=_LOWERING_2_13, layouts=("shared", "direction"),
    switches=MappingProxyType({"direction": _DIRECTION_2_14}), options=frozenset({"defer_pp_recv"}),
    sources=("config.py: pipeline_per_direction_p2p (env TORCH_DISTRIBUTED_PIPELINE_PER_DIRECTION_P2P)",
             "stage.py: _build_p2p_direction_groups, _downstream_group (SEND_F, RECV_F) and "
             "_upstream_group (SEND_B, RECV_B)",
             "schedules.py: _batch_p2p issues each communicator's operations as their own batch"),
    changes=("per-direction communicators: forward and backward traffic on two communicators "
             "(split_group of the pipeline group), off by default",
             "step() and eval() take pre-split arg_mbs, kwarg_mbs and target_mbs"))

V2_15 = Release(
    framework="PyTorch", version="2.15", kinds=_KINDS_2_15, action_regex=_REGEX_2_15, send_retirement=BY_WAIT,
    reduce_grad_wait=True, lowering=_LOWERING_2_15, layouts=("shared", "edge"),
    switches=MappingProxyType({"edge": _EDGE_2_15}),
    options=frozenset({"defer_pp_recv", "max_active_stages", "unshard_lookahead", "defer_reduce_grad_wait",
                       "max_outstanding_sends"}),
    recv_buffers="per-receive",
    sources=("schedules.py: WAIT_SEND_F, WAIT_SEND_B, WAIT_REDUCE_GRAD in _ComputationType; _PendingSendTracker "
             "(a send is retired by its wait, pending sends at the end raise); _add_wait_send; "
             "_validate_send_waits; _add_wait_send_budget; _add_reduce_grad(defer_reduce_grad_wait); "
             "_add_unshard_reshard(unshard_lookahead); the REDUCE_GRAD pairing check of "
             "_prepare_schedule_with_comms(format='compute_comms')",
             "_p2p.py: _build_p2p_edge_groups (one split_group child per directed rank edge)",
             "config.py: pipeline_per_edge_p2p (env TORCH_DISTRIBUTED_PIPELINE_PER_EDGE_P2P), replacing "
             "pipeline_per_direction_p2p",
             "stage.py: _get_p2p_group; release_fwd_send_outputs (a sent activation is freed at its wait)",
             "_recv_buffers.py: _RecvInfo.allocate_buffer right before each receive, take_buffer by its consumer"),
    changes=("three action kinds: WAIT_SEND_F, WAIT_SEND_B, WAIT_REDUCE_GRAD",
             "each send is retired by its own WAIT_SEND; step() no longer waits for sends at its end",
             "each REDUCE_GRAD is paired with a WAIT_REDUCE_GRAD, at most one pending per rank",
             "per-edge communicators replace per-direction ones",
             "runtime options max_active_stages, unshard_lookahead, defer_reduce_grad_wait, "
             "max_outstanding_sends",
             "receive buffers allocated right before each receive, not for every microbatch when the stage is set up",
             "analyze_pipeline_activation_liveness"))

#: Every modelled release, oldest first.
RELEASES = MappingProxyType({r.version: r for r in (V2_13, V2_14, V2_15)})
