"""The torchtitan release rules of ``schedverify lint`` (SV720, SV721).

Each rule fires exactly where torchtitan 0.3.0's source has it (``Trainer.Config.
_validate_cuda_graphs``: pipeline_parallel_degree > 1 without training.disable_cuda_graphs;
``Trainer.pp_forward_backward_step``: ``step(arg_mbs=..., kwarg_mbs=..., target_mbs=...)``,
which PyTorch's ``step`` takes from 2.14), never for 0.2.2, and the release is read from the
option, else the installed torchtitan.  The torch tier holds SV721's release line against the
installed PyTorch's own ``step`` signature.
"""

from __future__ import annotations

import inspect
import io

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import schedverify.lint as lint_module
import schedverify.releases as releases_module
from schedverify import UsageError
from schedverify.cli import run
from schedverify.generators import generate
from schedverify.io import dumps_csv
from schedverify.lint import LINT_CODES, TORCHTITAN_RELEASES, lint, torchtitan_release


def codes(findings) -> list[str]:
    return [f.code.code for f in findings]


@pytest.fixture(autouse=True)
def nothing_installed(monkeypatch):
    """Neither torch nor torchtitan installed, unless a test says otherwise: the rules read
    the options, not this machine."""
    monkeypatch.setattr(releases_module, "installed_version", lambda package: None)


def test_the_codes_are_registered_with_slugs_for_torchtitan():
    assert LINT_CODES["SV720"].slug == "torchtitan-cuda-graphs"
    assert LINT_CODES["SV721"].slug == "torchtitan-torch-release"
    assert {LINT_CODES[c].rule for c in ("SV720", "SV721")} == {"lint: torchtitan"}


@settings(max_examples=30, deadline=None)
@given(D=st.integers(1, 5), extra=st.integers(0, 4), titan=st.sampled_from(sorted(TORCHTITAN_RELEASES)),
       disabled=st.booleans(), torch=st.sampled_from(["2.13", "2.14", "2.15"]))
def test_the_release_rules_fire_exactly_where_torchtitan_refuses(D, extra, titan, disabled, torch):
    s = generate("1f1b", D, D + extra)
    found = set(codes(lint(s, "torchtitan", torchtitan=titan, disable_cuda_graphs=disabled, torch=torch)))
    pipelined = D > 1  # torchtitan builds a pipeline schedule only for pipeline_parallel_degree > 1
    assert ("SV720" in found) == (titan == "0.3.0" and pipelined and not disabled)
    assert ("SV721" in found) == (titan == "0.3.0" and pipelined and torch == "2.13")


def test_sv720_quotes_torchtitan_and_names_the_flag():
    (f,) = lint(generate("1f1b", 2, 4), "torchtitan", torchtitan="0.3.0", torch="2.14")
    assert f.rule == "torchtitan-cuda-graphs" and f.severity == "error"
    assert "pipeline_parallel_degree = 2" in f.message
    assert "CUDA graphs do not support pipeline parallelism yet. Set --training.disable_cuda_graphs." in f.message
    assert "--training.disable_cuda_graphs" in f.fix


def test_sv721_names_the_torch_and_the_call():
    (f,) = lint(generate("1f1b", 2, 4), "torchtitan", torchtitan="0.3.0", torch="2.13", disable_cuda_graphs=True)
    assert f.rule == "torchtitan-torch-release"
    assert "PyTorch 2.13 (--torch 2.13)" in f.message and "target_mbs" in f.message
    assert "PyTorch 2.14 or later" in f.fix and "torchtitan 0.2.2" in f.fix


def test_other_targets_never_get_them():
    s = generate("1f1b", 4, 8)
    for target in ("pytorch", "megatron"):
        assert not {"SV720", "SV721"} & set(codes(lint(s, target, torchtitan="0.3.0", torch="2.13")))


def test_the_release_is_the_installed_torchtitans_by_default(monkeypatch):
    s = generate("1f1b", 2, 4)
    assert lint(s, "torchtitan") == []  # not installed, not named: no release assumed
    versions = {"torchtitan": "0.3.0", "torch": "2.13.0+cpu"}
    monkeypatch.setattr(releases_module, "installed_version", versions.get)
    f = codes(lint(s, "torchtitan"))
    assert f == ["SV720", "SV721"]  # the installed torch is the one that runs it
    assert codes(lint(s, "torchtitan", torch="2.15")) == ["SV720"]
    versions["torchtitan"] = "0.1.0"  # installed but not modelled: no release rule
    assert lint(s, "torchtitan") == []
    assert torchtitan_release(None, installed="0.3.0+git1234") is TORCHTITAN_RELEASES["0.3.0"]


def test_an_unmodelled_release_asked_for_is_a_usage_error():
    with pytest.raises(UsageError,
                       match=r"--torchtitan '0.1.0': not a modelled torchtitan release; modelled: 0.2.2, 0.3.0"):
        lint(generate("1f1b", 2, 4), "torchtitan", torchtitan="0.1.0")
    with pytest.raises(UsageError, match="disable_cuda_graphs must be True or False"):
        lint(generate("1f1b", 2, 4), "torchtitan", disable_cuda_graphs="yes")


def cli(*argv: str, stdin: str = "") -> tuple[int, str, str]:
    import sys

    out, err = io.StringIO(), io.StringIO()
    old, sys.stdin = sys.stdin, io.StringIO(stdin)
    try:
        return run(list(argv), out, err), out.getvalue(), err.getvalue()
    finally:
        sys.stdin = old


def test_cli_lint_torchtitan_options():
    text = dumps_csv(generate("1f1b", 2, 4))
    code, out, _ = cli("lint", "-", "--torchtitan", "0.3.0", "--torch", "2.13", stdin=text)
    assert code == 1 and "SV720 torchtitan-cuda-graphs (error)" in out and "SV721 torchtitan-torch-release" in out
    code, out, _ = cli("lint", "-", "--torchtitan", "0.3.0", "--torch", "2.14", "--disable-cuda-graphs", stdin=text)
    assert code == 0 and "nothing found" in out
    code, _, err = cli("lint", "-", "--torchtitan", "9.9", stdin=text)
    assert code == 2 and "not a modelled torchtitan release" in err and "Traceback" not in err


@pytest.mark.torch
def test_sv721s_release_line_is_the_installed_torchs_step_signature():
    """PyTorch 2.13's step() has no arg_mbs/kwarg_mbs/target_mbs (they fall into **kwargs);
    2.14's names them: the installed torch is on the side of the line SV721 says."""
    schedules = pytest.importorskip("torch.distributed.pipelining.schedules")
    import torch

    wanted = {"arg_mbs", "kwarg_mbs", "target_mbs"}
    for cls in (schedules.PipelineScheduleSingle, schedules.PipelineScheduleMulti, schedules._PipelineScheduleRuntime):
        has = wanted <= set(inspect.signature(cls.step).parameters)
        major, minor = (int(x) for x in torch.__version__.split(".")[:2])
        assert has == ((major, minor) >= lint_module._release_tuple(TORCHTITAN_RELEASES["0.3.0"].step_needs_torch))
