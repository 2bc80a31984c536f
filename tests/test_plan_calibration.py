"""The calibration file and fit, and the backend formulas, without torch: exact least squares
recovers any terms, a saved calibration reads back equal, a bad one is refused naming the field,
one made for another model is refused naming the difference, and planning with one never imports
torch."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedverify.cli import run
from schedverify.errors import InputError, UsageError
from schedverify.plan import activations as act
from schedverify.plan.calibration import (
    PART_TERMS,
    Calibration,
    Point,
    design,
    fit,
    load_calibration,
    model_fields,
    predict,
)
from schedverify.plan.hardware import DEVICES
from schedverify.plan.transformer import TransformerModel, load_model, stage_profile

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
H100 = DEVICES["H100-SXM"]


def small(**kw) -> TransformerModel:
    base = dict(layers=4, hidden=256, heads=4, kv_heads=2, ffn=512, vocab=1000, seq_len=128, gated=True,
                dropout=False, flash_attention=True, microbatches=4)
    return TransformerModel(**{**base, **kw})


def synthetic(model: TransformerModel, terms: dict[str, dict[str, Fraction]]) -> Calibration:
    """A calibration whose 'measurements' are ``terms`` evaluated at the design's shapes."""
    mha = model.kv_heads == model.heads
    pts, held = design(mha)

    def bytes_at(p: Point) -> Point:
        return replace(p, **{part: int(predict(terms[part], p)) for part in terms})

    return Calibration(model=model_fields(model), device="cpu", device_name="cpu", torch="2.13.0", code="test",
                       terms=terms, points=tuple(bytes_at(p) for p in pts), held_out=bytes_at(held))


@st.composite
def term_sets(draw, mha: bool):
    out = {}
    for part, names in PART_TERMS.items():
        out[part] = {t: Fraction(draw(st.integers(0, 40))) for t in names if not (mha and t == "sbkv")}
    return out


@given(st.booleans(), st.data())
def test_the_fit_recovers_any_terms_exactly(mha, data):
    terms = data.draw(term_sets(mha))
    model = small(kv_heads=4 if mha else 2)
    cal = synthetic(model, terms)
    for part, names in PART_TERMS.items():
        used = tuple(t for t in names if not (mha and t == "sbkv"))
        assert fit(cal.points, part, used) == terms[part]
    assert cal.held_out_error() == {"layer": 0.0, "head": 0.0, "embedding": 0.0} or not any(
        getattr(cal.held_out, p) for p in ("layer", "head", "embedding"))


def cpu_terms(model: TransformerModel) -> dict[str, dict[str, Fraction]]:
    o = act.Options(backend="cpu", norm=model.norm, gated=model.gated, flash_attention=model.flash_attention,
                    dropout=model.dropout, recompute=model.recompute)
    e = model.dtype_bytes
    return {part: {t: Fraction(v) for t, v in act.coefficients(k(o, e)).items()} | {"one": Fraction(0)}
            for part, k in (("layer", act.layer_kept), ("head", act.head_kept), ("embedding", act.embedding_kept))}


def test_a_saved_calibration_reads_back_equal_and_plans_as_its_formula(tmp_path):
    model = small(backend="cpu")
    cal = synthetic(model, cpu_terms(model))
    path = tmp_path / "cal.json"
    cal.save(path)
    back = load_calibration(path, model)
    assert back == cal and back.source == str(path)
    # the calibrated profile is the cpu formula's, byte for byte
    assert stage_profile(model, H100, 2, calibration=back).activation == stage_profile(model, H100, 2).activation
    assert any("activations: calibrated, measured on cpu" in n for n in stage_profile(
        model, H100, 2, calibration=back).notes)


def test_a_calibration_of_another_model_is_refused_naming_the_difference(tmp_path):
    model = small()
    cal = synthetic(model, cpu_terms(model))
    path = tmp_path / "cal.json"
    cal.save(path)
    for other, field in ((replace(model, hidden=512), "hidden = 256, not this model's 512"),
                         (replace(model, dtype="fp32"), "dtype = 'bf16', not this model's 'fp32'"),
                         (replace(model, flash_attention=False), "flash_attention = True"),
                         (replace(model, norm="layernorm"), "norm = 'rmsnorm'")):
        with pytest.raises(UsageError, match=field):
            load_calibration(path, other)
    # sequence length and microbatch size may differ: the terms are in s and b
    longer = replace(model, seq_len=4096, microbatch_size=2)
    assert load_calibration(path, longer).bytes("layer", longer) == predict(cal.terms["layer"], Point(
        4096, 2, 4, 2, 64, 512, 1000))
    with pytest.raises(UsageError, match="without tensor parallelism; with tensor = 2 plan with the formulas"):
        load_calibration(path, replace(model, tensor_parallel=2))


def _doc(tmp_path) -> dict:
    model = small()
    return synthetic(model, cpu_terms(model)).to_json()


BAD = [
    (lambda d: "not json", "not JSON"),
    (lambda d: {**d, "format": "schedverify-profile/1"}, "format: expected 'schedverify-calibration/1'"),
    (lambda d: {**d, "model": {"hidden": 3}}, "model: expected the model's fields, missing heads"),
    (lambda d: {**d, "device": "tpu"}, "device: expected one of cpu, cuda, got 'tpu'"),
    (lambda d: {**d, "terms": {**d["terms"], "layer": {"sbx": "1"}}}, "terms.layer.sbx: unknown term"),
    (lambda d: {**d, "terms": {**d["terms"], "head": {"sbV": "four"}}}, "terms.head.sbV: expected bytes per element"),
    (lambda d: {**d, "terms": {**d["terms"], "head": {"sbV": True}}}, "terms.head.sbV: expected bytes per element"),
    (lambda d: {**d, "points": []}, "points: expected the measured shapes"),
    (lambda d: {**d, "held_out": {"s": 1}}, "held_out: expected a shape with s, b"),
    (lambda d: {**d, "times": {"layer": {"F": -1}}, "times_at": None}, "times: expected layer and head times"),
]


@pytest.mark.parametrize("edit,message", BAD, ids=[m for _, m in BAD])
def test_a_bad_calibration_file_is_refused_naming_the_field(tmp_path, edit, message):
    doc = edit(_doc(tmp_path))
    path = tmp_path / "bad.json"
    path.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    with pytest.raises(InputError) as e:
        load_calibration(path)
    assert str(e.value).startswith(str(path)) and message in str(e.value)
    # and on the command line: one line, exit 2
    out, err = io.StringIO(), io.StringIO()
    model = tmp_path / "m.toml"
    model.write_text("[model]\nlayers = 4\nhidden = 256\nheads = 4\nkv_heads = 2\nffn = 512\nvocab = 1000\n"
                     "gated = true\ndropout = false\n[training]\nseq_len = 128\nflash_attention = true\n")
    assert run(["plan", "--model", str(model), "--calibration", str(path), "--devices", "2"], out, err) == 2
    assert len(err.getvalue().strip().splitlines()) == 1 and message in err.getvalue()


def _plan(*args) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    code = run(["plan", *args], out, err)
    return code, out.getvalue(), err.getvalue()


def test_misused_memory_options_are_refused_in_one_line(tmp_path):
    model = str(EXAMPLES / "llama3-8b.toml")
    cases = [
        (("--model", model, "--measure-time", "--devices", "4"), "--measure-time: goes with --measure"),
        (("--profile", "x.csv", "--backend", "cpu", "--devices", "4"), "are a model's: give --model"),
        (("--model", model, "--calibration", "cal.txt"), "a calibration is a .json file"),
        (("--model", model, "--calibration", str(tmp_path / "missing.json")), "missing.json: no such file"),
        (("--model", model, "--backend", "tpu"), "invalid choice: 'tpu'"),
        (("--model", str(EXAMPLES / "llama3-70b.toml"), "--measure"), "the model has tensor = 8"),
    ]
    for args, message in cases:
        code, out, err = _plan(*args)
        assert code == 2, (args, err)
        assert message in err, (args, err)


def test_backend_flag_and_the_report_name_the_formula_set():
    model = str(EXAMPLES / "llama3-8b.toml")
    code, out, _ = _plan("--model", model, "--devices", "8", "--search-time", "0", "--backend", "cpu")
    assert "activations: backend cpu" in out and "activations: backend cpu, PyTorch 2.13 eager autograd on CPU" in out
    code, out, _ = _plan("--model", model, "--formulas", "--backend", "paper")
    assert code == 0 and "backend paper, Korthikanti et al. 2022" in out and "SwiGLU: 3 tensors of ffn" in out
    code, out, _ = _plan("--model", model, "--formulas")
    assert "backend cuda" in out and "SwiGLU: 4 tensors of ffn" in out and "FusedRmsNormBackward0" in out


def test_planning_with_a_calibration_never_imports_torch(tmp_path):
    m, _ = load_model(EXAMPLES / "llama3-8b.toml")
    cal = synthetic(m, cpu_terms(replace(m, backend="cpu")))
    path = tmp_path / "cal.json"
    cal.save(path)
    code = ("import sys; from schedverify.cli import run; "
            f"rc = run(['plan', '--model', {str(EXAMPLES / 'llama3-8b.toml')!r}, '--calibration', {str(path)!r}, "
            "'--devices', '8', '--search-time', '0']); print(rc, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.stdout.strip().splitlines()[-1] == "0 False", out.stderr[-2000:]


def test_measure_without_torch_says_how_to_get_it():
    code = ("import sys; sys.modules['torch'] = None; from schedverify.cli import run; "
            f"sys.exit(run(['plan', '--model', {str(EXAMPLES / 'llama3-8b.toml')!r}, '--measure']))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        "schedverify plan: error: --measure needs PyTorch (import of torch halted; None in sys.modules): "
        "pip install torch==2.13.0"]


@st.composite
def models(draw):
    heads = draw(st.sampled_from([2, 4, 8]))
    kv = draw(st.sampled_from([k for k in (1, 2, 4, 8) if k <= heads and heads % k == 0]))
    return TransformerModel(
        layers=2, hidden=heads * draw(st.sampled_from([8, 64])), heads=heads, kv_heads=kv,
        ffn=draw(st.integers(1, 512)), vocab=draw(st.integers(2, 5000)), seq_len=draw(st.integers(1, 4096)),
        microbatch_size=draw(st.integers(1, 4)), dtype=draw(st.sampled_from(["bf16", "fp32"])),
        gated=draw(st.booleans()), norm=draw(st.sampled_from(["rmsnorm", "layernorm"])),
        flash_attention=draw(st.booleans()), dropout=draw(st.booleans()),
        recompute=draw(st.sampled_from(["none", "selective", "full"])), loss_fp32=draw(st.booleans()))


@given(models())
def test_cuda_keeps_at_least_what_the_paper_counts(m):
    # every cuda fact keeps as much as the paper's (fused kernels, 16-bit scores), or more
    paper = stage_profile(replace(m, backend="paper"), H100, 1).activation[0]
    cuda = stage_profile(replace(m, backend="cuda"), H100, 1).activation[0]
    assert cuda >= paper
    # and each backend's kept tensors sum to its stage's bytes
    for backend in ("paper", "cpu", "cuda"):
        mm = replace(m, backend=backend)
        o = act.Options(backend=backend, norm=mm.norm, gated=mm.gated, flash_attention=mm.flash_attention,
                        dropout=mm.dropout, recompute=mm.recompute, loss_fp32=mm.loss_fp32)
        u = act.unit_values(m.seq_len, m.microbatch_size, m.hidden, m.ffn, m.heads, m.kv_heads, m.vocab)
        total = sum(act.total(k(o, m.dtype_bytes), u) for k in (act.layer_kept, act.head_kept, act.embedding_kept))
        total += act.total(act.layer_kept(o, m.dtype_bytes), u)  # two layers
        assert stage_profile(mm, H100, 1).activation[0] == -(-total // 1)


def test_fp8_is_refused_with_the_eager_backends():
    with pytest.raises(UsageError, match="fp8: PyTorch's autograd keeps no fp8 activations"):
        small(dtype="fp8")
    assert small(dtype="fp8", backend="paper").dtype_bytes == 1
