"""The memory-truth tier: what PyTorch's autograd keeps for a layer, the head and the embedding,
counted on the model's own code (schedverify.plan.autograd), against the backend formulas
(schedverify.plan.activations) and the calibration (schedverify.plan.calibration).

Every test here needs torch (marked ``torch``: skipped without it).  The CPU tier runs here; the
CUDA tier runs the same configurations where there is a GPU and skips, saying so, elsewhere.
The layer: h = 512, 8 heads, 2 KV heads, ffn 1408 (SwiGLU) or 2048 (GeLU), s = 256 and 1024,
b = 1 and 2 (docs/memory.md's table).
"""

from __future__ import annotations

import io
import json
from dataclasses import replace
from pathlib import Path

import pytest

from schedverify.plan import activations as act

pytestmark = pytest.mark.torch
torch = pytest.importorskip("torch")

from schedverify.plan import autograd  # noqa: E402  (needs torch)
from schedverify.plan.calibration import calibrate, load_calibration  # noqa: E402
from schedverify.plan.transformer import TransformerModel  # noqa: E402

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"

#: (id, options): each a layer of those sizes; s = 256, b = 1 unless given.  With
#: RATIOS below: what autograd keeps over the paper's count, per layer (docs/memory.md's table).
CONFIGS = [
    ("bf16-flash", {}),
    ("bf16-flash-s1024-b2", {"seq_len": 1024, "batch": 2}),
    ("bf16-math", {"flash_attention": False}),
    ("bf16-math-s1024", {"flash_attention": False, "seq_len": 1024}),
    ("fp32-flash", {"dtype": "fp32"}),
    ("fp32-math", {"dtype": "fp32", "flash_attention": False}),
    ("bf16-gelu-flash", {"gated": False, "ffn": 2048}),
    ("bf16-gelu-layernorm-flash", {"gated": False, "ffn": 2048, "norm": "layernorm"}),
    ("bf16-dropout-math", {"dropout": True, "flash_attention": False}),
    ("bf16-dropout-flash-asked", {"dropout": True}),  # no CPU kernel takes dropout: math runs
    ("fp32-dropout-layernorm-gelu", {"dtype": "fp32", "dropout": True, "gated": False, "ffn": 2048,
                                     "norm": "layernorm", "flash_attention": False}),
    ("bf16-mha-flash", {"kv_heads": 8}),
    ("bf16-mha-math", {"kv_heads": 8, "flash_attention": False}),
    ("bf16-selective-math", {"recompute": "selective", "flash_attention": False}),
    ("bf16-selective-flash-dropout", {"recompute": "selective", "dropout": True}),
    ("bf16-full", {"recompute": "full"}),
    ("fp32-full-math", {"recompute": "full", "dtype": "fp32", "flash_attention": False}),
]


RATIOS = {
    "bf16-flash": 1.592, "bf16-flash-s1024-b2": 1.592, "bf16-math": 1.920, "bf16-math-s1024": 1.951,
    "fp32-flash": 1.322, "fp32-math": 1.334, "bf16-gelu-flash": 1.413, "bf16-gelu-layernorm-flash": 1.001,
    "bf16-dropout-math": 2.097, "bf16-dropout-flash-asked": 3.422, "fp32-dropout-layernorm-gelu": 1.250,
    "bf16-mha-flash": 1.538, "bf16-mha-math": 1.778, "bf16-selective-math": 1.594,
    "bf16-selective-flash-dropout": 1.620, "bf16-full": 1.000, "fp32-full-math": 1.000,
}


def shape(**options) -> autograd.Shape:
    base = dict(seq_len=256, batch=1, hidden=512, heads=8, kv_heads=2, ffn=1408, vocab=1000, dtype="bf16",
                norm="rmsnorm", gated=True, flash_attention=True, dropout=False, recompute="none")
    return autograd.Shape(**{**base, **options})


def predicted(sh: autograd.Shape, backend: str) -> dict[str, float]:
    o = act.Options(backend=backend, norm=sh.norm, gated=sh.gated, flash_attention=sh.flash_attention,
                    dropout=sh.dropout, recompute=sh.recompute, loss_fp32=sh.loss_fp32)
    e = {"bf16": 2, "fp32": 4}[sh.dtype]
    u = act.unit_values(sh.seq_len, sh.batch, sh.hidden, sh.ffn, sh.heads, sh.kv_heads, sh.vocab)
    return {part: float(act.total(kept(o, e), u)) for part, kept in
            (("layer", act.layer_kept), ("head", act.head_kept), ("embedding", act.embedding_kept))}


def _device(name: str):
    if name == "cuda" and not torch.cuda.is_available():
        pytest.skip("no CUDA device here: the cuda formulas come from PyTorch's sources "
                    "(schedverify/plan/activations.py) and are measured only where there is a GPU")
    return torch.device(name)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name,options", CONFIGS, ids=[c[0] for c in CONFIGS])
def test_the_formula_is_what_autograd_keeps(name, options, device):
    dev = _device(device)
    sh = shape(**options)
    measured = autograd.measure(sh, dev, "reference")
    want = predicted(sh, device)
    for part in ("layer", "head", "embedding"):
        got = getattr(measured, part)
        assert abs(got - want[part]) <= 0.03 * got, (name, part, got, want[part], measured.tensors[part])
    # the paper's count is what Megatron's fused kernels keep, not PyTorch's eager autograd
    # (equal for a GPT layer with LayerNorm, GeLU and flash attention, and with full recomputation)
    if device == "cpu":
        assert measured.layer / predicted(sh, "paper")["layer"] == pytest.approx(RATIOS[name], abs=1e-3), name


def test_every_byte_of_the_bf16_flash_layer_is_explained():
    # 47.078 bytes per s*b*h token-element against the paper's 29.5625 (1.592x): RMSNorm's fp32
    # copies (8 + 8), four SwiGLU tensors (8 f/h = 22), and the rest as the paper counts it.
    sh = shape()
    measured = autograd.measure(sh, torch.device("cpu"), "reference")
    sbh = 256 * 512
    assert measured.layer == 6170624 and measured.layer / sbh == pytest.approx(47.078, abs=1e-3)
    kinds = sorted((t.dtype, t.nbytes) for t in measured.tensors["layer"])
    assert kinds.count(("float32", 4 * sbh)) == 4          # two norms: fp32 input, fp32 x * rstd
    assert kinds.count(("bfloat16", 2 * 256 * 1408)) == 4  # SwiGLU's four
    assert ("float32", 4 * 8 * 256) in kinds                # the flash kernel's log-sum-exp
    assert predicted(sh, "paper")["layer"] / sbh == 29.5625


def test_the_head_and_the_embedding():
    # the head: fp32 log-softmax of a 32000 vocabulary, the final norm's fp32 copies, the LM
    # head's input, the int64 labels; the embedding: the int64 token ids
    sh = shape(vocab=32000)
    measured = autograd.measure(sh, torch.device("cpu"), "reference")
    assert measured.head == 10 * 256 * 512 + 4 * 256 * 32000 + 12 * 256 + 4   # + nll_loss's fp32 total_weight
    assert measured.embedding == 8 * 256
    paper = predicted(sh, "paper")["head"]
    assert measured.head / paper == pytest.approx(1.024, abs=1e-3)


def test_torchtitan_keeps_what_the_reference_block_keeps():
    if autograd.torchtitan_version() is None:
        pytest.skip("torchtitan's Llama-3 model does not import here (torchtitan 0.3.0 imports triton and "
                    "spmd_types); the reference block runs instead")
    for name, options in CONFIGS:
        sh = shape(**options)
        if autograd.torchtitan_fits(sh) is not None:
            continue
        ours = autograd.measure(sh, torch.device("cpu"), "reference")
        theirs = autograd.measure(sh, torch.device("cpu"), "torchtitan")
        assert (theirs.layer, theirs.head, theirs.embedding) == (ours.layer, ours.head, ours.embedding), name


def _model(**kw) -> TransformerModel:
    base = dict(layers=4, hidden=512, heads=8, kv_heads=2, ffn=1408, vocab=1000, seq_len=256, gated=True,
                dropout=False, flash_attention=True, backend="cpu")
    return TransformerModel(**{**base, **kw})


CALIBRATED = [("bf16-flash", {}), ("bf16-math-dropout-gelu-layernorm", {"flash_attention": False, "dropout": True,
                                                                       "gated": False, "ffn": 2048}),
              ("fp32-mha-selective", {"dtype": "fp32", "kv_heads": 8, "recompute": "selective"})]


@pytest.mark.parametrize("name,kw", CALIBRATED, ids=[c[0] for c in CALIBRATED])
def test_calibration_finds_the_formula_and_reproduces_the_measurement(name, kw):
    m = _model(**kw)
    cal = calibrate(m, device="cpu", code="reference")
    # the fit recovers each term's bytes per element exactly, as the cpu formula writes them
    o = act.Options(backend="cpu", norm=m.norm, gated=m.gated, flash_attention=m.flash_attention,
                    dropout=m.dropout, recompute=m.recompute)
    for part, kept in (("layer", act.layer_kept), ("head", act.head_kept), ("embedding", act.embedding_kept)):
        formula = act.coefficients(kept(o, m.dtype_bytes))
        if m.kv_heads == m.heads and "sbkv" in formula:
            formula["sbh"] = formula.get("sbh", 0) + formula.pop("sbkv")
        fitted = {t: v for t, v in cal.terms[part].items() if v and t != "one"}
        assert fitted == {t: v for t, v in formula.items() if v}, (name, part)
    assert max(cal.held_out_error().values()) < 1e-3
    # and predicts the tier's sizes, which it did not measure, within 3%
    measured = autograd.measure(autograd.Shape(256, 1, 512, 8, m.kv_heads or 8, m.ffn, 1000, m.dtype, m.norm or "",
                                               m.gated, m.flash_attention, m.dropout, m.recompute),
                                torch.device("cpu"), "reference")
    for part in ("layer", "head", "embedding"):
        got = getattr(measured, part)
        assert abs(float(cal.bytes(part, m)) - got) <= 0.03 * got, (name, part)


def _cli(*args):
    from schedverify.cli import run

    out, err = io.StringIO(), io.StringIO()
    code = run(["plan", *args], out, err)
    return code, out.getvalue(), err.getvalue()


def test_measure_saves_a_calibration_that_plan_reuses_and_refuses_for_another_model(tmp_path):
    model = tmp_path / "small.toml"
    model.write_text((EXAMPLES / "llama3-8b.toml").read_text().replace("layers = 32", "layers = 4")
                     .replace("hidden = 4096", "hidden = 256").replace("ffn = 14336", "ffn = 512")
                     .replace("vocab = 128256", "vocab = 1000").replace("seq_len = 8192", "seq_len = 128"))
    cal = tmp_path / "cal.json"
    code, out, err = _cli("--model", str(model), "--measure", "cpu", "--measure-time", "--calibration", str(cal),
                          "--devices", "2", "--search-time", "0")
    assert code == 0, err
    assert "calibration of llama3-8b on cpu" in out and "layer time at s=128, b=1" in out
    assert "seconds measured on cpu" in out and "activations: calibrated, measured on cpu" in out
    doc = json.loads(cal.read_text())
    assert doc["format"] == "schedverify-calibration/1" and doc["device"] == "cpu" and doc["times"]["layer"]["F"] > 0
    loaded = load_calibration(cal)
    assert loaded.terms["layer"]["sbf"] == 8                 # four bf16 SwiGLU tensors
    code, out2, err = _cli("--model", str(model), "--calibration", str(cal), "--devices", "2", "--search-time", "0")
    assert code == 0 and "activations calibrated on cpu" in out2, err
    # another model: refused in one line, naming the difference
    other = tmp_path / "other.toml"
    other.write_text(model.read_text().replace("hidden = 256", "hidden = 512"))
    code, out3, err = _cli("--model", str(other), "--calibration", str(cal), "--devices", "2")
    assert code == 2 and out3 == ""
    assert err.strip().splitlines() == [
        f"schedverify plan: error: {cal} was measured for llama3-8b with hidden = 256, not this model's 512: "
        "measure this model (--measure)"]
    # never written onto the model file
    code, _, err = _cli("--model", str(model), "--measure", "cpu", "--calibration", str(model))
    assert code == 2 and "a calibration is a .json file" in err
    # a device that is not here
    if not torch.cuda.is_available():
        code, _, err = _cli("--model", str(model), "--measure", "cuda")
        assert code == 2 and len(err.strip().splitlines()) == 1 and "no CUDA device here" in err


def test_torchtitan_code_refuses_a_model_it_is_not():
    from schedverify.errors import UsageError

    m = _model(gated=False, ffn=2048, norm="rmsnorm")
    with pytest.raises(UsageError, match="not torchtitan's Llama-3 .torchtitan's Llama-3 has a SwiGLU FFN.|"
                                         "torchtitan's Llama-3 model does not import here"):
        calibrate(m, device="cpu", code="torchtitan")


def test_the_8b_example_calibrates_as_its_cpu_formula_says():
    # docs/howto/plan.md's model, calibrated on this CPU, gives the cpu formula's bytes at its own size
    from schedverify.plan.transformer import load_model, stage_profile

    m, hw = load_model(EXAMPLES / "llama3-8b.toml")
    cpu = replace(m, backend="cpu")
    cal = calibrate(cpu, device="cpu")
    a = stage_profile(cpu, hw, 8).activation
    b = stage_profile(cpu, hw, 8, calibration=cal).activation
    assert all(abs(x - y) <= 8 for x, y in zip(a, b))  # the loss's 4-byte total_weight, rounded up per stage
    assert a[-1] != a[0]  # the head's stage differs: the comparison covers the head too
