"""Readers and writers: schedverify/1 JSON, PyTorch's CSV, the action grammar, and the shipped
JSON Schema.  Round trips are Hypothesis properties over random schedules, valid or not: the
files must carry whatever a user wrote, including mistakes the checker will report."""

from __future__ import annotations

import json
from importlib import resources

import pytest
from hypothesis import given
from hypothesis import strategies as st

import schedverify as sv
from schedverify import Action, Costs, MemoryModel, Placement, Schedule, overlap
from schedverify.io import jsonfmt
from schedverify.strategies import mutations, valid_schedules

jsonschema = pytest.importorskip("jsonschema")

SCHEMA = json.loads(resources.files("schedverify").joinpath("io/schema.json").read_text())
VALIDATOR = jsonschema.Draft202012Validator(SCHEMA)

# ------------------------------------------------------------------ a small local strategy
# (the public one in schedverify.strategies generates *valid* schedules; these are any
# schedules the format can hold, so the round trip is tested on mistakes too)

PAIR_KINDS = ("F", "B", "I", "W", "SEND_F", "RECV_F", "SEND_B", "RECV_B")
BOOK_KINDS = ("UNSHARD", "RESHARD", "REDUCE_GRAD")


@st.composite
def actions(draw, stages: int, microbatches: int):
    stage = st.integers(0, stages)  # one past the end sometimes: out of range, still a file
    mb = st.integers(0, microbatches)
    choice = draw(st.sampled_from(("pair", "pair", "pair", "book", "overlap", "idle")))
    if choice == "idle":
        return None
    if choice == "book":
        return Action(draw(stage), draw(st.sampled_from(BOOK_KINDS)))
    if choice == "overlap":
        f = Action(draw(stage), "F", draw(mb))
        b = Action(draw(stage), draw(st.sampled_from(("B", "I", "F"))), draw(mb))
        return overlap(f, b)
    return Action(draw(stage), draw(st.sampled_from(PAIR_KINDS)), draw(mb))


def amounts(stages: int):
    one = st.one_of(st.integers(0, 50), st.floats(0, 50, allow_nan=False, allow_infinity=False))
    return st.one_of(one, st.tuples(*[one] * stages))


@st.composite
def placements(draw, devices: int, stages: int, microbatches: int) -> Placement:
    spec = st.one_of(st.just("loop"), st.just("v"), st.lists(st.integers(0, devices - 1),
                                                             min_size=stages, max_size=stages))
    if draw(st.booleans()):
        return Placement.of(draw(spec), devices, stages)
    routes = draw(st.lists(spec, min_size=2, max_size=2))
    route = draw(st.lists(st.integers(0, 1), min_size=microbatches, max_size=microbatches))
    return Placement.bidirectional(routes, route, devices, stages)


@st.composite
def schedules(draw, *, with_extras: bool = True) -> Schedule:
    devices = draw(st.integers(1, 4))
    stages = devices * draw(st.integers(1, 3))
    microbatches = draw(st.integers(1, 5))
    order = draw(st.lists(st.lists(actions(stages, microbatches), max_size=8),
                          min_size=devices, max_size=devices))
    if not any(a is not None for row in order for a in row):
        order[0].append(Action(0, "F", 0))
    placement = draw(placements(devices, stages, microbatches))
    costs = memory = sem = None
    name = ""
    if with_extras:
        name = draw(st.text(max_size=12))
        if draw(st.booleans()):
            costs = Costs(**draw(st.fixed_dictionaries({}, optional={
                **{k: amounts(stages) for k in ("F", "B", "I", "W", "OVERLAP_F_B", "SEND_F", "RECV_B")},
                "comm": st.integers(0, 5)})))
        if draw(st.booleans()):
            memory = MemoryModel(
                activation=draw(amounts(stages)),
                w=draw(st.sampled_from((0, 0.25, 0.5, 1))),
                static=draw(amounts(stages)),
                limit=draw(st.one_of(st.none(), st.integers(0, 100), st.floats(0, 100))),
            )
        sem = draw(st.sampled_from((None, "eager", "rendezvous")))
    return Schedule(devices, stages, microbatches, tuple(tuple(r) for r in order), placement,
                    name, costs, memory, sem, {"family": "test"} if with_extras else {})


# ------------------------------------------------------------------ JSON


@given(schedules())
def test_json_round_trip_loses_nothing(s):
    text = sv.dumps(s)
    back = sv.loads(text)
    assert back == s
    assert back.metadata == s.metadata
    assert sv.dumps(back) == text  # and the text is stable


@given(schedules())
def test_schema_accepts_every_file_dumps_writes(s):
    errors = sorted(VALIDATOR.iter_errors(json.loads(sv.dumps(s))), key=str)
    assert not errors, [e.message for e in errors]


def test_dumps_is_diffable_one_device_per_line():
    s = Schedule.build([["0F0", None, "0B0"], ["1F0", "1B0"]], name="tiny")
    text = sv.dumps(s)
    assert '    ["0F0", null, "0B0"],\n    ["1F0", "1B0"]\n' in text
    assert text.startswith('{\n  "format": "schedverify/1",\n  "name": "tiny",')
    assert text.endswith("}\n")


def test_json_fills_in_sizes_and_placement():
    s = sv.loads('{"format": "schedverify/1", "order": [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]]}')
    assert (s.devices, s.stages, s.microbatches) == (2, 2, 2)
    assert s.placement.routes == ((0, 1),)
    assert s.costs is None and s.memory is None and s.comm_semantics is None
    assert sv.check(s).is_valid


def test_json_reader_errors_name_the_source_and_field():
    with pytest.raises(sv.InputError) as e:
        sv.loads('{"format": "schedverify/1", "order": [["0F0", "0Z1"]]}', source="mine.json")
    assert str(e.value).startswith("mine.json: order[0][1]: unknown action type 'Z'")
    assert e.value.source == "mine.json" and e.value.where == "order[0][1]"


def test_load_and_dump_by_extension(tmp_path):
    s = Schedule.build([["0F0", "0B0"], ["1F0", "1B0"]], name="x", costs=Costs(F=2))
    sv.dump(s, tmp_path / "s.json")
    sv.dump(s, tmp_path / "s.csv")
    assert sv.load(tmp_path / "s.json") == s
    assert (tmp_path / "s.csv").read_text() == "0F0,0B0\n1F0,1B0\n"
    assert sv.load(tmp_path / "s.csv").order == s.order
    # no extension: sniffed from the content
    (tmp_path / "noext").write_text(sv.dumps(s))
    assert sv.load(tmp_path / "noext") == s
    (tmp_path / "noext2").write_text("0F0,0B0\n1F0,1B0\n")
    assert sv.load(tmp_path / "noext2").order == s.order


# ------------------------------------------------------------------ PyTorch CSV


@given(schedules(with_extras=False))
def test_csv_round_trip_keeps_the_order_exactly(s):
    text = sv.dumps_csv(s)
    back = sv.loads_csv(text, devices=s.devices, stages=s.stages, microbatches=s.microbatches)
    assert back.order == s.order
    assert (back.devices, back.stages, back.microbatches) == (s.devices, s.stages, s.microbatches)
    assert sv.dumps_csv(back) == text


@given(schedules(with_extras=False))
def test_csv_inference_reads_its_own_output(s):
    # sizes come from the largest indices; the order itself never changes
    back = sv.loads_csv(sv.dumps_csv(s), devices=s.devices)
    assert back.order == s.order
    leaves = [x for row in s.order for a in row if a is not None for x in a.leaves()]
    assert back.stages == max(s.devices, 1 + max(a.stage for a in leaves))
    assert back.microbatches == 1 + max((a.microbatch for a in leaves if a.microbatch is not None), default=0)


@given(st.one_of(schedules(with_extras=False), valid_schedules(placements=["loop", "v", "list"]),
                 valid_schedules(placements=["loop", "v"]).flatmap(mutations).map(lambda m: m.schedule)))
def test_csv_placement_shortcut_concludes_what_the_vote_concludes(s):
    """infer_placement first tries "every action where loop (or v) puts it", in bulk; that
    shortcut must give what the per-action vote gives whenever it answers."""
    from schedverify.io.csvfmt import _uniform_placement, _vote_placement, infer_placement

    args = (s.order, s.devices, s.stages)
    assert infer_placement(*args, s.microbatches) == _vote_placement(*args, s.microbatches)
    if _uniform_placement(*args) is not None:
        assert _vote_placement(*args, s.microbatches).specs == (_uniform_placement(*args),)


def test_csv_as_pytorch_writes_it():
    # csv.writer over str(_Action) lists: ragged rows, '' for None, \r\n line ends
    text = "0F0,0F1,,0B0,0B1,0REDUCE_GRAD\r\n,1F0,1B0,1F1,1B1,1REDUCE_GRAD\r\n"
    s = sv.loads_csv(text)
    assert s.order[0][2] is None and s.order[1][0] is None
    assert s.order[0][5] == Action(0, "REDUCE_GRAD", None)
    assert (s.devices, s.stages, s.microbatches) == (2, 2, 2)
    assert s.metadata == {"source_format": "pytorch-csv"}
    assert sv.check(s).is_valid


def test_csv_overlap_cells_are_quoted_and_read_back():
    s = Schedule.build([["0F0", overlap(Action(0, "F", 1), Action(0, "B", 0)), "0B1"],
                        ["1F0", "1B0", "1F1", "1B1"]])
    text = sv.dumps_csv(s)
    assert text.splitlines()[0] == '0F0,(0F1;0B0)OVERLAP_F_B,0B1'
    assert sv.loads_csv(text).order == s.order


@pytest.mark.parametrize("placement, rows, expected", [
    ("loop", [["0F0", "2F0", "2B0", "0B0"], ["1F0", "3F0", "3B0", "1B0"]], ((0, 1, 0, 1),)),
    ("v", [["0F0", "3F0", "3B0", "0B0"], ["1F0", "2F0", "2B0", "1B0"]], ((0, 1, 1, 0),)),
])
def test_csv_infers_loop_and_v(placement, rows, expected):
    text = "\n".join(",".join(r) for r in rows) + "\n"
    s = sv.loads_csv(text)
    assert s.placement.routes == expected
    assert s.placement.specs == (placement,)
    # ... and the placement can be given instead
    other = "v" if placement == "loop" else "loop"
    forced = sv.loads_csv(text, placement=other)
    assert forced.placement.specs == (other,)
    assert not sv.check(forced).is_valid


def test_csv_infers_bidirectional_routes():
    # microbatch 0 down (stage s on device s), microbatch 1 up (mirrored): DualPipe's shape
    text = "0F0,1F1,1B1,0B0\n0F1,1F0,1B0,0B1\n"
    s = sv.loads_csv(text)
    assert s.placement.is_bidirectional
    assert s.placement.routes == ((0, 1), (1, 0))
    assert s.placement.microbatch_route == (0, 1)
    assert sv.check(s).is_valid


def test_csv_options_and_their_errors():
    text = "0F0,0B0\n1F0,1B0\n"
    s = sv.loads_csv(text, devices=3, stages=4, microbatches=2)
    assert (s.devices, s.stages, s.microbatches) == (3, 4, 2)
    assert s.order[2] == ()
    with pytest.raises(sv.InputError, match="the file has 2 rows .* but devices is 1"):
        sv.loads_csv(text, devices=1)
    with pytest.raises(sv.InputError, match="placement: unknown placement 'ring'"):
        sv.loads_csv(text, placement="ring")
    with pytest.raises(sv.InputError, match="apply to CSV input only"):
        sv.loads('{"format": "schedverify/1", "order": [["0F0"]]}', devices=2)


# ------------------------------------------------------------------ action grammar


@given(st.integers(0, 10).flatmap(lambda s: actions(s, 10)))
def test_action_text_round_trip(a):
    if a is not None:
        assert sv.parse_action(str(a)) == a


@pytest.mark.parametrize("text, action", [
    ("12F345", Action(12, "F", 345)),
    ("0SEND_B1", Action(0, "SEND_B", 1)),
    ("3RECV_F0", Action(3, "RECV_F", 0)),
    ("1REDUCE_GRAD", Action(1, "REDUCE_GRAD", None)),
    ("2UNSHARD", Action(2, "UNSHARD", None)),
    (" 0W1 ", Action(0, "W", 1)),
    ("(0F3; 0I1)OVERLAP_F_B", overlap(Action(0, "F", 3), Action(0, "I", 1))),
])
def test_parse_action(text, action):
    assert sv.parse_action(text) == action


@pytest.mark.parametrize("text, message", [
    ("", "empty action"),
    ("F1", "starts with its stage index"),
    ("0X1", "unknown action type 'X'"),
    ("0F", "F needs a microbatch index, as in '0F0'"),
    ("0RESHARD1", "RESHARD takes no microbatch index"),
    ("0F1x", "unexpected 'x' after 0F1"),
    ("(0F1;0B0)", "expected '(<forward>;<backward>)OVERLAP_F_B'"),
    ("(0F1)OVERLAP_F_B", "exactly two sub-actions, got 1"),
    ("0\n0", "unknown action type ''"),  # regression: a newline in a CSV cell crashed the parser
    ("0F0\n1", "unexpected '.n1' after 0F0 in"),
])
def test_parse_action_errors(text, message):
    with pytest.raises(sv.io.ActionSyntaxError, match=message.replace("(", r"\(").replace(")", r"\)")):
        sv.parse_action(text)


# ------------------------------------------------------------------ the schema and the reader agree

GOOD = {"format": "schedverify/1", "devices": 2, "stages": 2, "microbatches": 2,
        "order": [["0F0", "0F1", "0B0", "0B1"], ["1F0", "1B0", "1F1", "1B1"]]}


def variant(**changes):
    d = json.loads(json.dumps(GOOD))
    for k, v in changes.items():
        if v is None:
            d.pop(k, None)
        else:
            d[k] = v
    return d


# Documents the reader rejects for reasons a JSON Schema can state: the schema rejects them too.
BOTH_REJECT = {
    "no format": variant(format=None),
    "wrong format": variant(format="schedverify/2"),
    "no order": variant(order=None),
    "unknown field": variant(microbatchs=2),
    "devices string": variant(devices="2"),
    "devices float": variant(devices=2.5),
    "devices zero": variant(devices=0),
    "stages negative": variant(stages=-1),
    "absurd size": variant(microbatches=10**8),
    "order not a list": variant(order={"0": ["0F0"]}),
    "row not a list": variant(order=["0F0"]),
    "cell not a string": variant(order=[["0F0", 1], []]),
    "unknown action": variant(order=[["0X0"], []]),
    "missing microbatch": variant(order=[["0F"], []]),
    "bookkeeping with microbatch": variant(order=[["0REDUCE_GRAD1"], []]),
    "unknown cost": variant(costs={"X": 1}),
    "negative cost": variant(costs={"F": -1}),
    "cost string": variant(costs={"F": "1"}),
    "unknown memory field": variant(memory={"limt": 1}),
    "w above 1": variant(memory={"w": 2}),
    "negative limit": variant(memory={"limit": -1}),
    "bad semantics": variant(comm_semantics="lazy"),
    "bad placement name": variant(placement="ring"),
    "negative placement device": variant(placement=[0, -1]),
    "name not a string": variant(name=1),
    "metadata not an object": variant(metadata=[]),
    "top level not an object": [GOOD],
    "empty order": variant(order=[]),
}

# Cross-field rules the reader enforces and a JSON Schema cannot state (they need the values
# of other fields).  The schema accepts these; the reader says exactly what is wrong.
READER_ONLY = {
    "rows vs devices": (variant(devices=3), "order: has 2 device lists but devices is 3"),
    "placement length": (variant(placement=[0]), "placement: a placement list needs one device per stage (2)"),
    "placement device range": (variant(placement=[0, 2]), "placement[1]: stage 1's device must be in 0..1"),
    "per-stage cost length": (variant(costs={"F": [1, 2, 3]}), "costs.F: a per-stage list needs 2 values"),
    "route count": (variant(routes=[[0, 1], [1, 0]], microbatch_route=[0]),
                    "microbatch_route: expected a list with one route index per microbatch (2)"),
    "route index": (variant(routes=[[0, 1], [1, 0]], microbatch_route=[0, 2]),
                    "microbatch_route[1]: expected a route index in 0..1"),
    "placement and routes": (variant(placement="loop", routes=[[0, 1]], microbatch_route=[0, 0]),
                             "placement: give either placement or routes"),
}


@pytest.mark.parametrize("name", sorted(BOTH_REJECT))
def test_schema_rejects_what_the_reader_rejects(name):
    doc = BOTH_REJECT[name]
    with pytest.raises(sv.InputError):
        jsonfmt.from_document(doc)
    assert not VALIDATOR.is_valid(doc)


@pytest.mark.parametrize("name", sorted(READER_ONLY))
def test_cross_field_rules_are_the_readers(name):
    doc, message = READER_ONLY[name]
    with pytest.raises(sv.InputError, match=message.replace("(", r"\(").replace(")", r"\)")
                       .replace("[", r"\[").replace("]", r"\]").replace(".", r"\.")):
        jsonfmt.from_document(doc)
    assert VALIDATOR.is_valid(doc)


def test_schema_itself_is_valid_and_accepts_the_examples():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    from pathlib import Path

    for path in sorted(Path(__file__).parent.parent.glob("examples/*.json")):
        doc = json.loads(path.read_text())
        assert VALIDATOR.is_valid(doc), path
        sv.load(path)  # and the reader reads them


@pytest.mark.parametrize("kernel", [True, False], ids=["kernel", "pure-python"])
def test_interleaved_digits_are_an_input_error_not_other_actions(kernel, monkeypatch):
    """The bulk row parser once read ["0SE1ND_F2", "F1"] as 0SEND_F1 and 2F1: with the digits
    deleted both cells name a kind, and the row still had two numbers per cell."""
    from schedverify import _accel

    if not kernel:
        monkeypatch.setattr(_accel, "kernel", None)
    elif _accel.kernel is None:
        pytest.skip("the compiled kernel is not built")
    doc = {"format": "schedverify/1", "order": [["0SE1ND_F2", "F1"]]}
    with pytest.raises(sv.InputError, match=r"order\[0\]\[[01]\]"):
        sv.loads(json.dumps(doc))
