"""The torch tier for the planner: the CSV ``plan -o`` writes loads with PyTorch's own
``_load_csv`` and runs one ``step()`` of ``_PipelineScheduleRuntime`` over gloo with the right
numbers (gradients equal the unsplit model's), for a winner of each placement and for the
search engine's own schedule."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.torch

from _realrt import run_schedule  # noqa: E402
from schedverify.plan import planner, torchtitan  # noqa: E402
from schedverify.plan.stages import StageProfile  # noqa: E402

GiB = 2**30


def _profile(stages: int, split: bool) -> StageProfile:
    return StageProfile(F=(0.010,) * stages, I=(0.010,) * stages, W=(0.008,) * stages,
                        activation=(GiB,) * stages, w=0.5, static=(GiB,) * stages, comm=1e-4)


@pytest.mark.parametrize("families, search, placement", [
    (["1f1b", "zb-h1", "zb-h2"], None, "loop"),
    (["zb-v", "v-half"], None, "v"),
    (["interleaved-1f1b"], None, "loop"),
    ([], 3.0, None),
])
def test_the_exported_csv_runs_on_pytorch(tmp_path, families, search, placement):
    p = planner.plan(_profile, 2, 4, memory_limit=None, families=families, search_time=search)
    win = p.winner
    assert win is not None
    if placement is not None:
        assert win.placement == placement
    path = tmp_path / "plan.csv"
    back = torchtitan.export(win, str(path))
    outcome = run_schedule(path.read_text(), fmt="compute_only", ranks=2,
                           stages_per_rank=back.stages // 2, microbatches=4, placement=win.placement,
                           timeout_s=60)
    assert outcome.status == "ok", (win.label, outcome.detail)
