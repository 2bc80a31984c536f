"""The model description of ``schedverify plan --model``: the formulas against the papers they
come from, the stage layouts, the TOML reader's refusals, and properties over random models."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import replace
from fractions import Fraction
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from schedverify.errors import InputError, UsageError
from schedverify.plan.hardware import DEVICES, GiB, Hardware, device, hardware, hardware_from_table
from schedverify.plan.stages import StageProfile
from schedverify.plan.transformer import (
    TransformerModel,
    boundary_bytes,
    formula_values,
    layer_activation_formula,
    load_model,
    model_formulas,
    split,
    stage_flops,
    stage_params,
    stage_profile,
    symbols,
    weight_share,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
H100 = DEVICES["H100-SXM"]


def gpt(*, a: int, h: int, layers: int, t: int = 1, s: int = 2048, b: int = 1, V: int = 51200, **kw):
    """A GPT-3-style model as the papers describe it: MHA, 4h GeLU FFN, dropout, 16-bit, and
    the paper's count of what a layer keeps (Megatron's fused kernels)."""
    kw.setdefault("backend", "paper")
    return TransformerModel(layers=layers, hidden=h, heads=a, ffn=4 * h, vocab=V, seq_len=s, microbatch_size=b,
                            tensor_parallel=t, **kw)


# --- Korthikanti et al. 2022, Table 2, symbolically --------------------------------------

def _paper(expr):
    """Substitute the paper's model: k = a (MHA), f = 4h (ungated), e = 2 (16-bit)."""
    x = symbols()
    return expr.subs({x["k"]: x["a"], x["f"]: 4 * x["h"], x["e"]: 2})


def test_activation_reduces_exactly_to_korthikanti_table_2():
    import sympy

    x = symbols()
    s, b, h, a, t = x["s"], x["b"], x["h"], x["a"], x["t"]
    sbh = s * b * h
    rows = [  # (options, t = 1?, the paper's Table 2 entry)
        ({"recompute": "none"}, True, sbh * (34 + 5 * a * s / h)),                      # no parallelism
        ({"recompute": "none"}, False, sbh * (10 + 24 / t + 5 * a * s / (h * t))),      # tensor parallel
        ({"recompute": "none", "sequence_parallel": True}, False, sbh / t * (34 + 5 * a * s / h)),  # + SP
        ({"recompute": "selective"}, False, sbh * (10 + 24 / t)),                       # TP + selective
        ({"recompute": "selective", "sequence_parallel": True}, False, 34 * sbh / t),   # TP + SP + selective
        ({"recompute": "full"}, True, 2 * sbh),                                         # full recompute
        ({"recompute": "full"}, False, 2 * sbh),
    ]
    for opts, no_tp, paper in rows:
        ours = _paper(layer_activation_formula(**opts))
        if no_tp:
            ours = ours.subs(t, 1)
        assert sympy.simplify(ours - paper) == 0, (opts, ours, paper)


def test_the_generalisation_is_not_the_paper_formula_in_disguise():
    # GQA and a gated FFN change the count (a formula that ignored k or gated would pass the
    # reduction test above): Q, K, V are e(1 + 2k/a) sbh and the FFN 3ef/h sbh when gated.
    import sympy

    x = symbols()
    s, b, h, a, k, f, t, e = (x[n] for n in "sbhakfte")
    gqa = layer_activation_formula(recompute="selective", sequence_parallel=True, gated=True, dropout=False)
    expected = s * b * h / t * (4 * e + e * (2 + 2 * k / a) + 3 * e * f / h)
    assert sympy.simplify(gqa - expected) == 0


def test_last_stage_terms_are_korthikanti_section_4_3():
    # Section 4.3: the output layer keeps 4sbh/t (the norm's and the projection's inputs)
    # and the fp32 logits 4sbv/t, i.e. 4sbh/t (1 + v/h), with sequence parallelism.
    import sympy

    x = symbols()
    m = gpt(a=96, h=12288, layers=96, t=8, sequence_parallel=True)
    head = _paper(model_formulas(m)["head_activation"])
    s, b, h, t, V = x["s"], x["b"], x["h"], x["t"], x["V"]
    assert sympy.simplify(head - 4 * s * b * h / t * (1 + V / h)) == 0


def test_weight_gradient_share_counts_the_linear_layers_inputs_and_output_gradients():
    # The paper's layer: inputs 2 + 2 + 2 + 8 and output gradients 6 + 2 + 8 + 2 = 32 sbh,
    # Zero Bubble's M_W; w = M_W / M_B = 32 / (34 + 5as/h).
    import sympy

    x = symbols()
    m = gpt(a=96, h=12288, layers=96)
    mw = _paper(model_formulas(m)["weight_grad_bytes"]).subs(x["t"], 1)
    s, b, h = x["s"], x["b"], x["h"]
    assert sympy.simplify(mw - 32 * s * b * h) == 0
    assert weight_share(m) == pytest.approx(32 / (34 + 5 * 96 * 2048 / 12288))
    # with selective recomputation the scores are gone and w = 32/34
    assert weight_share(replace(m, recompute="selective")) == pytest.approx(32 / 34)


# --- Korthikanti et al. 2022: the paper's numbers ----------------------------------------

# Table 3 of the paper: (attention heads, hidden size, layers, tensor-parallel size,
# micro-batch size), sequence length 2048, vocabulary 51200.
TABLE_3 = {"22B": (64, 6144, 48, 8, 4), "175B": (96, 12288, 96, 8, 1),
           "530B": (128, 20480, 105, 8, 1), "1T": (160, 25600, 128, 8, 1)}


@pytest.mark.parametrize("size", list(TABLE_3))
def test_table_3_models_per_layer_bytes(size):
    # Bytes per layer and microbatch on one GPU for the Table 3 configurations, the numbers
    # evaluated from Table 2's expressions (the paper prints them as formulas; Figure 7
    # shows them only as a share of 80 GB).
    a, h, layers, t, b = TABLE_3[size]
    s = 2048
    m = gpt(a=a, h=h, layers=layers, t=t, b=b)
    sbh = s * b * h
    expected = {
        ("none", False): sbh * (10 + Fraction(24, t) + Fraction(5 * a * s, h * t)),
        ("none", True): Fraction(sbh, t) * (34 + Fraction(5 * a * s, h)),
        ("selective", True): Fraction(34 * sbh, t),
        ("full", False): 2 * sbh,
    }
    for (recompute, sp), paper in expected.items():
        mm = replace(m, recompute=recompute, sequence_parallel=sp)
        # a stage of exactly one layer, not the first or the last: its activation is the layer's
        p = stage_profile(replace(mm, layers=3), H100, 3)
        assert p.activation[1] == paper, (size, recompute, sp)


def test_section_4_2_selective_recomputation_savings_and_overhead():
    # Section 4.2: for GPT-3 (a = 96, s = 2048, h = 12288) 5as/h = 80 and selective
    # recomputation saves 70% of the activation memory; for MT-NLG 530B (a = 128,
    # h = 20480) 5as/h = 64 and it saves 65%, at a FLOPs overhead of 2.7% and 1.6%: the
    # recomputed attention core against the layer's forward pass.
    for (a, h), saving, overhead in (((96, 12288), 70, 2.7), ((128, 20480), 65, 1.6)):
        m = gpt(a=a, h=h, layers=3, t=8, sequence_parallel=True)
        full = stage_profile(m, H100, 3).activation[1]
        sel = stage_profile(replace(m, recompute="selective"), H100, 3).activation[1]
        assert round(100 * (1 - sel / full)) == saving
        none_f = stage_flops(m, 3)[1]
        sel_f = stage_flops(replace(m, recompute="selective"), 3)[1]
        assert sel_f.F == none_f.F and sel_f.W == none_f.W
        assert round(float(100 * (sel_f.I - none_f.I) / none_f.F), 1) == overhead


# --- Narayanan et al. 2021 ---------------------------------------------------------------

@pytest.mark.parametrize("layers,h,a,V,s", [(96, 12288, 96, 51200, 2048),   # GPT-3 175B (their Table 1)
                                            (128, 25600, 160, 51200, 2048),  # 1T
                                            (6, 64, 4, 1000, 128)])
def test_narayanan_equation_3_total_flops(layers, h, a, V, s):
    # Eq. (3): F = 96 B s l h^2 (1 + s/(6h) + V/(16 l h)) per batch of B sequences, with
    # full activation recomputation.  Summed over stages, for any cut, exactly.
    B, b = 8, 2
    m = TransformerModel(layers=layers, hidden=h, heads=a, ffn=4 * h, vocab=V, seq_len=s, microbatch_size=b,
                         recompute="full", backend="paper")
    paper = 96 * B * s * layers * h * h * (1 + Fraction(s, 6 * h) + Fraction(V, 16 * layers * h))
    for S in (1, 2, 3, layers):
        total = sum(p.F + p.I + p.W for p in stage_flops(m, S)) * B // b
        assert total == paper
    # without recomputation one forward less: 72 B s l h^2 (1 + s/(6h)) + 6 B s h V
    m0 = replace(m, recompute="none")
    total0 = sum(p.F + p.I + p.W for p in stage_flops(m0, 1)) * B // b
    assert total0 == 72 * B * s * layers * h * h * (1 + Fraction(s, 6 * h)) + 6 * B * s * h * V


def test_llama3_parameter_counts():
    # Meta's released checkpoints: 8,030,261,248 and 70,553,706,496 parameters.
    for name, count in (("llama3-8b.toml", 8_030_261_248), ("llama3-70b.toml", 70_553_706_496)):
        m, _ = load_model(EXAMPLES / name)
        m1 = replace(m, tensor_parallel=1, sequence_parallel=False)
        assert sum(stage_params(m1, 1)) == count
        # per tensor-parallel rank: everything but the norm weights is divided by t
        assert sum(stage_params(m, 1)) * m.tensor_parallel == pytest.approx(count, rel=1e-3)


# --- symbolic and numeric agree ----------------------------------------------------------

@st.composite
def models(draw, *, layouts=True):
    head_dim = draw(st.sampled_from([8, 16, 64]))
    t = draw(st.sampled_from([1, 2, 4]))
    kv = t * draw(st.integers(1, 2))
    heads = kv * draw(st.integers(1, 3))
    layers = draw(st.integers(1, 10))
    options = dict(
        layers=layers, hidden=heads * head_dim, heads=heads, kv_heads=kv,
        ffn=t * draw(st.integers(1, 64)), gated=draw(st.booleans()), vocab=draw(st.integers(2, 5000)),
        seq_len=draw(st.integers(1, 4096)), microbatch_size=draw(st.integers(1, 4)),
        tensor_parallel=t,
        sequence_parallel=draw(st.booleans()), recompute=draw(st.sampled_from(["none", "selective", "full"])),
        flash_attention=draw(st.booleans()), causal_attention=draw(st.booleans()), dropout=draw(st.booleans()),
        loss_fp32=draw(st.booleans()), data_parallel=draw(st.integers(1, 8)),
        sharding=draw(st.sampled_from(["none", "zero1", "zero2", "fsdp"])),
        microbatches=draw(st.none() | st.integers(1, 64)),
        backend=draw(st.sampled_from(["paper", "cpu", "cuda"])), norm=draw(st.sampled_from(["rmsnorm", "layernorm"])),
    )
    options["dtype"] = draw(st.sampled_from(["bf16", "fp32"] + (["fp8"] if options["backend"] == "paper" else [])))
    if layouts:
        options["embedding_stage"] = draw(st.booleans())
        options["head_stage"] = draw(st.booleans())
    return TransformerModel(**options)


@given(models())
def test_symbolic_formulas_evaluate_to_the_numbers(m):
    forms = model_formulas(m)
    at = formula_values(m)
    spans = split(m, 1 + m.embedding_stage + m.head_stage)
    middle = replace(m, layers=m.layers + 2, embedding_stage=False, head_stage=False)
    p = stage_flops(middle, 3)[1]  # one stage of layers only
    n = split(middle, 3)[1].layers
    assert forms["F"].subs(at) * n == p.F
    assert forms["I"].subs(at) * n == p.I
    assert forms["W"].subs(at) * n == p.W
    act = stage_profile(middle, H100, 3).activation[1]
    assert act == -(-forms["activation"].subs(at) * n // 1)
    assert forms["boundary"].subs(at) == boundary_bytes(m)
    assert spans[0].embedding and spans[-1].head


# --- layouts -----------------------------------------------------------------------------

BASE = dict(layers=32, hidden=256, heads=4, ffn=1024, vocab=1000, seq_len=128, backend="paper")


def test_even_split_puts_the_remainder_first_and_the_ends_on_the_ends():
    m = TransformerModel(**{**BASE, "layers": 10})
    spans = split(m, 4)
    assert [s.layers for s in spans] == [3, 3, 2, 2]
    assert [s.first_layer for s in spans] == [0, 3, 6, 8]
    assert [(s.embedding, s.head) for s in spans] == [(True, False), (False, False), (False, False), (False, True)]
    one = split(m, 1)
    assert len(one) == 1 and one[0].embedding and one[0].head and one[0].layers == 10


def test_embedding_and_head_stages():
    m = TransformerModel(**BASE, embedding_stage=True, head_stage=True)
    spans = split(m, 4)
    assert [s.layers for s in spans] == [0, 16, 16, 0]
    p = stage_profile(m, H100, 4)
    assert p.F[0] == 0 and p.I[0] == 0 and p.W[0] == 0          # the embedding lookup: no FLOPs
    assert p.F[3] > 0 and p.F[3] < p.F[1]                     # the head: 2sbhV, less than 16 layers here
    head_only = p.activation[3]
    assert head_only == 2 * 2 * 128 * 256 + 4 * 128 * 1000       # two inputs in bf16 + fp32 logits
    with pytest.raises(UsageError, match="at least one stage must hold layers"):
        split(m, 2)


def test_explicit_layout():
    m = TransformerModel(**BASE, layout=(0, 20, 12, 0))
    assert [s.layers for s in split(m, 4)] == [0, 20, 12, 0]
    with pytest.raises(UsageError, match=r"has 4 stages, not 8"):
        stage_profile(m, H100, 8)
    with pytest.raises(UsageError, match="layout: the stages hold 31 layers, the model has 32"):
        TransformerModel(**BASE, layout=(0, 20, 11, 0))
    with pytest.raises(UsageError, match="stage 1 holds no layers"):
        TransformerModel(**BASE, layout=(16, 0, 16))


def test_more_stages_than_layers_is_refused_naming_the_rule():
    m = TransformerModel(**{**BASE, "layers": 4})
    with pytest.raises(UsageError, match="cannot cut 4 layers into 5 layer-holding stages"):
        stage_profile(m, H100, 5)
    with pytest.raises(UsageError, match="stages: expected a whole number >= 1, got 0"):
        stage_profile(m, H100, 0)


def test_receive_buffers_follow_torch_pipelining():
    # one forward buffer per microbatch on every stage but the first, one gradient buffer per
    # microbatch on every stage but the last
    m = TransformerModel(**BASE, microbatches=6)
    p = stage_profile(m, H100, 4)
    one = 2 * 128 * 256
    assert boundary_bytes(m) == one
    assert p.recv_buffers == (6 * one, 12 * one, 12 * one, 6 * one)
    assert stage_profile(m, H100, 1).recv_buffers == (0,)
    assert stage_profile(m, H100, 4, microbatches=2).recv_buffers == (2 * one, 4 * one, 4 * one, 2 * one)
    split_bw = stage_profile(m, H100, 4, split_backward=True)
    assert split_bw.recv_buffers == (6 * one, 18 * one, 18 * one, 12 * one)
    assert any("also each input gradient" in n for n in split_bw.notes)
    unknown = stage_profile(replace(m, microbatches=None), H100, 4)
    assert unknown.recv_buffers == ()
    assert any("receive buffers not counted" in n for n in unknown.notes)
    sp = replace(m, tensor_parallel=4, sequence_parallel=True)
    assert boundary_bytes(sp) == one // 4
    assert p.comm == pytest.approx(H100.link_latency + one / H100.link_bandwidth)


def test_static_bytes_and_sharding():
    m = TransformerModel(**BASE, data_parallel=4)
    params = stage_params(m, 1)[0]
    per = {"none": 2 + 4 + 12, "zero1": 2 + 4 + Fraction(12, 4), "zero2": 2 + Fraction(16, 4),
           "fsdp": Fraction(18, 4)}
    for sharding, bytes_per_param in per.items():
        p = stage_profile(replace(m, sharding=sharding), H100, 1)
        assert p.static == (-(-params * bytes_per_param // 1),)
    # 16 bytes per parameter with 16-bit gradients (Rajbhandari et al., ZeRO)
    assert stage_profile(replace(m, grad_bytes=2), H100, 1).static == (params * 16,)


def test_tied_embeddings_are_one_copy_on_one_stage_and_two_across_stages():
    m = TransformerModel(**BASE)
    tied = replace(m, tied_embeddings=True)
    table = 1000 * 256
    assert stage_params(m, 1)[0] - stage_params(tied, 1)[0] == table
    assert sum(stage_params(tied, 4)) == sum(stage_params(m, 4))
    assert any("each keep a copy" in n for n in stage_profile(tied, H100, 4).notes)


# --- properties --------------------------------------------------------------------------

@given(models(layouts=False), st.data())
def test_per_stage_sums_are_the_whole_model(m, data):
    S = data.draw(st.integers(1, m.layers))
    whole = stage_profile(m, H100, 1)
    cut = stage_profile(m, H100, S)
    for name in ("F", "I", "W"):
        assert sum(getattr(cut, name)) == pytest.approx(getattr(whole, name)[0], rel=1e-9)
    assert abs(sum(cut.activation) - whole.activation[0]) <= S        # each stage rounds up once
    assert abs(sum(cut.static) - whole.static[0]) <= S
    assert sum(stage_params(m, S)) == stage_params(m, 1)[0]
    assert sum(s.layers for s in split(m, S)) == m.layers
    assert isinstance(cut, StageProfile) and cut.stages == S and 0 <= cut.w <= 1


@given(models(), st.data())
def test_more_recomputation_keeps_less_and_costs_more(m, data):
    S = data.draw(st.integers(1 + m.embedding_stage + m.head_stage, m.layers + m.embedding_stage + m.head_stage))
    profiles = [stage_profile(replace(m, recompute=r), H100, S) for r in ("none", "selective", "full")]
    for less, more in zip(profiles, profiles[1:]):
        assert all(x >= y for x, y in zip(less.activation, more.activation))
        assert all(x <= y for x, y in zip(less.I, more.I))
        assert less.F == more.F and less.W == more.W and less.static == more.static
    body = [i for i, s in enumerate(split(m, S)) if s.layers]
    assert all(profiles[0].activation[i] > profiles[2].activation[i] for i in body)
    assert all(profiles[0].I[i] < profiles[2].I[i] for i in body)


# --- the TOML reader ---------------------------------------------------------------------

GOOD = """
[model]
layers = 4
hidden = 256
heads = 4
ffn = 1024
vocab = 1000

[training]
seq_len = 128
"""


def test_load_model_reads_the_examples():
    m, hw = load_model(EXAMPLES / "llama3-8b.toml")
    assert (m.layers, m.hidden, m.heads, m.kv_heads, m.ffn, m.gated, m.vocab) == (32, 4096, 32, 8, 14336, True, 128256)
    assert (m.seq_len, m.microbatch_size, m.dtype_bytes, m.recompute) == (8192, 1, 2, "none")
    assert hw == replace(H100, name=hw.name) and hw.name == "H100-SXM"
    m70, hw70 = load_model(str(EXAMPLES / "llama3-70b.toml"))
    assert (m70.layers, m70.hidden, m70.heads, m70.kv_heads, m70.ffn) == (80, 8192, 64, 8, 28672)
    assert (m70.tensor_parallel, m70.sequence_parallel) == (8, True)
    assert hw70.link_bandwidth == 50e9 and "link_bandwidth overridden" in hw70.name
    m0, hw0 = load_model(GOOD)
    assert m0.kv_heads == 4 and m0.layout is None and hw0 == replace(H100, name=hw0.name)
    assert "default" in hw0.name


def test_the_8b_example_makes_the_plan_choose():
    # On 8 devices, about p microbatches in flight on the first stage (1F1B) fit in 80 GiB and
    # about 2p (the schedules that hold twice as many) do not.  On 4 they fitted under the
    # paper's count (3 fused-SwiGLU tensors, 8.5 GiB per stage and microbatch) and no longer
    # do under what CUDA's autograd keeps (4 tensors: 10.3 GiB).
    m, hw = load_model(EXAMPLES / "llama3-8b.toml")
    assert m.backend == "cuda"
    prof = stage_profile(m, hw, 8)
    base = prof.static_total[0]
    assert base + 8 * prof.activation[0] < hw.memory < base + 16 * prof.activation[0]
    for backend, fits in (("paper", True), ("cuda", False)):
        prof = stage_profile(replace(m, backend=backend), hw, 4)
        assert (prof.static_total[0] + 4 * prof.activation[0] < hw.memory) is fits


BAD = [
    ("[model]\nlayers = 4\nhidden = -3\nheads = 4\nffn = 8\nvocab = 9\n[training]\nseq_len = 8\n",
     "model.toml: model.hidden: expected a whole number >= 1, got -3"),
    (GOOD.replace("hidden", "hiden"), "model.toml: model: unknown key 'hiden'; did you mean 'hidden'?"),
    (GOOD + "[paralel]\ntensor = 2\n", "model.toml: unknown key 'paralel'; did you mean 'parallel'?"),
    (GOOD + "dtype = 'bf61'\n", "model.toml: training.dtype: expected one of"),
    (GOOD + "recompute = 'selctive'\n", "did you mean 'selective'?"),
    (GOOD + "microbatch_size = 1.5\n", "training.microbatch_size: expected a whole number >= 1, got 1.5"),
    (GOOD + "flash_attention = 'yes'\n", "training.flash_attention: expected true or false, got 'yes'"),
    (GOOD + "loss_dtype = 'bf16'\n", "training.loss_dtype: expected \"fp32\" or \"same\""),
    (GOOD.replace("heads = 4", "heads = 4\nkv_heads = 3"), "model.kv_heads: 4 heads do not form groups of 3"),
    (GOOD.replace("heads = 4", "heads = 3"), "model.heads: the hidden size 256 is not a multiple of 3 heads"),
    (GOOD + "[parallel]\ntensor = 8\n", "parallel.tensor: heads = 4 is not divisible by the tensor-parallel degree 8"),
    (GOOD + "[parallel]\nsharding = 'zero3'\n", "parallel.sharding: expected one of none, zero1, zero2, fsdp"),
    (GOOD + "[layout]\nstages = [1, 1]\n", "layout.stages: the stages hold 2 layers, the model has 4"),
    (GOOD + "[layout]\nstages = 'uneven'\n", "layout.stages: expected \"even\" or a list"),
    (GOOD + "[layout]\nstages = [2, 2]\nhead_stage = true\n", "layout.stages: embedding_stage and head_stage go"),
    (GOOD + "[hardware]\ndevice = 'H100-SMX'\n",
     "hardware.device: unknown device 'H100-SMX'; did you mean 'H100-SXM'?"),
    (GOOD + "[hardware]\ndevice = 'A100-80GB'\nefficiency = 2\n", "hardware.efficiency: expected a share in (0, 1]"),
    (GOOD + "[hardware]\ndevice = 'A100-80GB'\nspeed = 2\n", "hardware: unknown key 'speed'"),
    (GOOD + "[hardware]\nname = 'x'\nmemory = '80GiB'\n", "hardware: name a device"),
    (GOOD + "[hardware]\ndevice = 'L40S'\nmemory = 'lots'\n", "hardware.memory: not a memory size"),
    (GOOD.replace("layers = 4\n", ""), "model.toml: missing model.layers"),
    ("[model\nlayers = 4\n", "model.toml: not valid TOML"),
    ("[training]\nseq_len = 4\n", "model.toml: no [model] table"),
    ("model = 3\n", "model.toml: model: expected a table [model], got 3"),
]


@pytest.mark.parametrize("text,message", BAD, ids=[m for _, m in BAD])
def test_bad_model_files_name_the_key(text, message):
    with pytest.raises(InputError) as e:
        load_model(text, source="model.toml")
    assert str(e.value).startswith(message) or message in str(e.value)
    assert str(e.value).startswith("model.toml")


def test_a_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no-such.toml: no such file$"):
        load_model(str(tmp_path / "no-such.toml"))
    path = tmp_path / "m.toml"
    path.write_text(GOOD.replace("= 4\nhidden", "= 0\nhidden"), encoding="utf-8")
    with pytest.raises(InputError, match=r"m\.toml: model\.layers: expected a whole number >= 1, got 0"):
        load_model(path)


def test_the_python_api_refuses_bad_fields_naming_them():
    with pytest.raises(UsageError, match="recompute: expected one of none, selective, full"):
        TransformerModel(**BASE, recompute="some")
    with pytest.raises(UsageError, match="layers: expected a whole number >= 1, got True"):
        TransformerModel(**{**BASE, "layers": True})


# --- hardware ----------------------------------------------------------------------------

def test_devices_by_name_alias_and_typo():
    assert device("h100_sxm") is DEVICES["H100-SXM"] and device("H100") is DEVICES["H100-SXM"]
    assert device("mi300x").memory == 192 * GiB and device("B200").peak_flops == 2250e12
    with pytest.raises(UsageError, match="did you mean 'A100-80GB'"):
        device("A100-80G")
    h = hardware("H200", efficiency=0.5)
    assert h.flops == pytest.approx(989.4e12 * 0.5) and h.memory == 141 * GiB
    with pytest.raises(UsageError, match="unknown field"):
        hardware("H200", speed=1)
    # every device: dense peak, so none above the B200's 2.25 PFLOP/s
    assert all(0 < d.peak_flops <= 2250e12 and d.efficiency == 0.4 for d in DEVICES.values())


def test_hardware_tables():
    full = hardware_from_table({"name": "mine", "memory": "24GiB", "peak_flops": 1e14, "link_bandwidth": 1e10,
                                "link_latency": 0})
    assert full == Hardware("mine", 24 * GiB, 1e14, 1e10, 0.0)
    assert full.send_seconds(1e10) == 1.0 and full.seconds(4e13) == 1.0
    assert hardware_from_table({"device": "A100-40GB"}) is not None
    assert hardware_from_table({"device": "A100-40GB", "memory": "96 GB"}).memory == 96 * 10**9
    for bad in ("-1GB", "12 parsecs", True, 0):
        with pytest.raises(InputError, match="hardware.memory"):
            hardware_from_table({"device": "A100-40GB", "memory": bad})


def test_importing_the_model_loads_no_sympy():
    code = ("import sys; from schedverify.plan.transformer import load_model, stage_profile;"
            f"m, hw = load_model({str(EXAMPLES / 'llama3-8b.toml')!r}); stage_profile(m, hw, 4);"
            "print('sympy' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


_RECV_PROBE = """
import sys, torch, torch.distributed as dist
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining._utils import InferenceMode
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
b, s, h, M, S = 1, 16, 8, 5, 3
out = []
for idx in range(S):
    x = torch.empty(b, s, h, dtype=torch.bfloat16)
    stage = PipelineStage(torch.nn.Linear(h, h).to(torch.bfloat16), idx, S, torch.device("cpu"),
                          input_args=x, output_args=x.clone().requires_grad_(True))
    stage._inference_mode = InferenceMode.STATIC  # what the warm-up vote decides for static shapes
    stage._prepare_forward_infra(M, (x,) if idx == 0 else None, {}, has_backward=True)
    stage._prepare_backward_infra(M)
    held = [i.buffer for infos in (stage.args_recv_info, stage.grad_recv_info)
            for r in infos.values() for i in r if i.buffer is not None]
    out.append(sum(t.numel() * t.element_size() for t in held))
print(out)
dist.destroy_process_group()
"""


def torch_release() -> str:
    """The installed torch's version (the torch tests run with the installed release)."""
    import torch

    return torch.__version__


def preallocates() -> bool:
    from schedverify.releases import release

    return release(torch_release())[0].recv_buffers == "preallocated"


@pytest.mark.torch
def test_receive_buffers_are_what_torch_pipelining_allocates(tmp_path):
    # PipelineStage._prepare_forward_infra / _prepare_backward_infra, run for real: the bytes of
    # the receive buffers each of three stages holds for 5 microbatches of (1, 16, 8) bf16.
    pytest.importorskip("torch")
    probe = subprocess.run([sys.executable, "-c", _RECV_PROBE, str(tmp_path / "store")], capture_output=True,
                           text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-2000:]
    measured = tuple(int(x) for x in probe.stdout.strip().strip("[]").split(","))
    m = TransformerModel(layers=3, hidden=8, heads=2, ffn=16, vocab=10, seq_len=16, microbatches=5)
    # the installed release's (docs/spec.md 9.6): 2.13 and 2.14 preallocate them, 2.15 does not
    assert stage_profile(m, H100, 3, torch=torch_release()).recv_buffers == measured
    assert measured == ((1280, 2560, 1280) if preallocates() else (0, 0, 0))


_SPLIT_PROBE = """
import sys, torch, torch.distributed as dist
from torch.distributed.pipelining import PipelineStage
from torch.distributed.pipelining.schedules import ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble
dist.init_process_group("gloo", init_method="file://" + sys.argv[1], rank=0, world_size=1)
h, M = 8, 4
torch.manual_seed(0)
out = []
for cls in (ScheduleInterleaved1F1B, ScheduleInterleavedZeroBubble):
    mods = [torch.nn.Sequential(torch.nn.Linear(h, h), torch.nn.Tanh()) for _ in range(2)]
    stages = [PipelineStage(m, i, 2, torch.device("cpu")) for i, m in enumerate(mods)]
    schedule = cls(stages, n_microbatches=M, loss_fn=lambda y, t: ((y - t) ** 2).mean())
    schedule.step(torch.randn(2 * M, h), target=torch.randn(2 * M, h))
    held = [i.buffer.grad for r in stages[1].args_recv_info.values() for i in r if i.buffer is not None]
    out.append(sum(g is not None for g in held))
print(out)
dist.destroy_process_group()
"""


@pytest.mark.torch
def test_a_split_backward_leaves_the_input_gradients_on_the_buffers(tmp_path):
    # After one step, the second stage still holds each microbatch's input gradient on its
    # receive buffer's .grad when I and W are split (InterleavedZeroBubble), not otherwise:
    # what split_backward=True adds to recv_buffers.
    pytest.importorskip("torch")
    probe = subprocess.run([sys.executable, "-c", _SPLIT_PROBE, str(tmp_path / "store")], capture_output=True,
                           text=True, timeout=300)
    assert probe.returncode == 0, probe.stderr[-2000:]
    assert probe.stdout.strip() == ("[0, 4]" if preallocates() else "[0, 0]")  # 2.15: no buffer outlives its use
