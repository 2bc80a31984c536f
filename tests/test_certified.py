"""One source of truth: the schedule ``schedverify generate`` returns is its family's all-sizes
certificate (docs/proofs.md section 4).

The generators of the certified families build their orders from the certificate's
positions (certificates/order.py), Z3 proves those positions a bijection and the
dependencies the ones of deps.NEEDS, and every generation of a certified size is checked
against the certificate in O(actions).  So a change of a generator that alters its order at
some size either changes what is proved (the claim fails there) or raises at generation,
as the plants below show at large sizes only; and the certified orders are the published
loops (Megatron-LM's 1F1B phases, Zero Bubble's), transcribed here as the reference."""

from __future__ import annotations

import dataclasses
import io
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from schedverify.certificates import certificate, covering, families
from schedverify.certificates import classic as classic_cert
from schedverify.certificates.base import PyOps
from schedverify.certificates.check import index_of_action, prove_certificate
from schedverify.certificates.needs import derived
from schedverify.certificates.order import rows, verify
from schedverify.claims import Claim, prove
from schedverify.claims.allsizes import CertificateStore
from schedverify.cli import run
from schedverify.deps import needs
from schedverify.errors import InternalError
from schedverify.generators import FAMILIES, generate
from schedverify.generators._build import assemble, looped_rows, phases, positive
from schedverify.model import B, F, I, W, Action


def _cli(argv):
    out, err = io.StringIO(), io.StringIO()
    return run(argv, out, err), out.getvalue(), err.getvalue()


def reference(family: str, p: int, m: int, v: int | None = None) -> list[list[Action]]:
    """The published loops, as the papers and frameworks write them: GPipe's two sweeps,
    Megatron-LM's 1F1B phases, Zero Bubble's ZB-H1/ZB-H2 (warm-up k(p-1-d), W lag kd),
    looped BFS, and Megatron's interleaved table (_build.looped_rows, group size p)."""
    work = lambda d: [(d, i) for i in range(m)]  # noqa: E731
    if family == "gpipe":
        return [[Action(d, F, i) for i in range(m)] + [Action(d, B, i) for i in range(m)] for d in range(p)]
    if family == "1f1b":
        return [phases(work(d), work(d), p - d - 1) for d in range(p)]
    if family == "zb-h1" and (v or 1) == 1:
        return [phases(work(d), work(d), p - 1 - d, w_lag=d) for d in range(p)]
    if family == "zb-h2":
        return [phases(work(d), work(d), 2 * (p - 1 - d), w_lag=2 * d) for d in range(p)]
    if family == "looped-bfs":
        out = []
        for d in range(p):
            stages = [c * p + d for c in range(v)]
            out.append([Action(s, F, i) for s in stages for i in range(m)]
                       + [Action(s, B, i) for s in reversed(stages) for i in reversed(range(m))])
        return out
    if family == "interleaved-1f1b":
        return looped_rows(p, m, v, p, warmup=lambda d: 2 * (p - d - 1) + (v - 1) * p)
    if family == "zb-h1":
        return looped_rows(p, m, v, p, warmup=lambda d: (v - 1) * p + p - 1 - d, w_lag=lambda d: d)
    if family == "zb-v":
        return _zb_v_phases(p, m)
    if family in ("dualpipe", "dualpipe-v"):  # the repository's step() read as actions
        from schedverify.generators.bidirectional import dualpipe_rows, dualpipe_v_rows

        return (dualpipe_rows if family == "dualpipe" else dualpipe_v_rows)(p, m)
    raise AssertionError(family)


def _zb_v_phases(p: int, m: int) -> list[list[Action]]:
    """ZB-V for m >= 2p - 1 (Qi et al. 2024, section 6; PyTorch's ScheduleZBVZeroBubble) as
    its phases, written out: on device d, with f/i/w the chunk's F/I/W (chunk 0 = stage d,
    chunk 1 = stage 2p-1-d), 2(p-d)-1 f0; d pairs f1 f0; p-d triples f1 i1 w1; m-p rounds
    [f0] i0 w0 f1 i1 w1 (f0 while chunk 0 has forwards left); d pairs i0 i1; p-d pairs
    i0 w0; the deferred w1, then w0."""
    out = []
    for d in range(p):
        s0, s1 = d, 2 * p - 1 - d

        def f(c, i, kind=F, s0=s0, s1=s1):
            return Action(s1 if c else s0, kind, i)

        a = 2 * (p - d) - 1
        row = [f(0, i) for i in range(a)]
        for j in range(d):
            row += [f(1, j), f(0, a + j)]
        for j in range(p - d):
            row += [f(1, d + j), f(1, j, I), f(1, j, W)]
        for k in range(m - p):
            row += [f(0, 2 * p - d - 1 + k)] if 2 * p - d - 1 + k < m else []
            row += [f(0, k, I), f(0, k, W), f(1, p + k), f(1, p - d + k, I), f(1, p - d + k, W)]
        for j in range(d):
            row += [f(0, m - p + j, I), f(1, m - d + j, I)]
        for j in range(p - d):
            row += [f(0, m - p + d + j, I), f(0, m - p + j, W)]
        row += [f(1, m - d + j, W) for j in range(d)] + [f(0, m - d + j, W) for j in range(d)]
        out.append(row)
    return out


def _size(family, chunks, p, n):
    """A size the family's certificate covers: m = n, or n groups of p for the table ones."""
    if family == "interleaved-1f1b" or (family == "zb-h1" and chunks not in (None, 1)):
        return p, n * p
    if family == "zb-v":  # m >= 2p - 1: no microbatch dropped
        return p, 2 * p - 2 + n
    if family == "dualpipe":  # p, m even, m >= 2p
        p = 2 * ((p + 1) // 2)
        return p, 2 * p + 2 * (n - 1)
    if family == "dualpipe-v":  # m >= 2p
        return p, 2 * p - 1 + n
    return p, n


def _leaves(row):
    """A device's actions as a certificate's leaves: a full B is I then W, an OVERLAP_F_B
    its forward's leaves, then its backward's."""
    out = []
    for a in row:
        for x in a.leaves():
            out += [Action(x.stage, I, x.microbatch), Action(x.stage, W, x.microbatch)] if x.kind == B else [x]
    return out


@settings(max_examples=40, deadline=None)
@given(which=st.sampled_from(families()), p=st.integers(1, 32), n=st.integers(1, 60))
def test_the_generated_schedule_is_the_certificate_and_the_published_loop(which, p, n):
    family, chunks = which
    p, m = _size(family, chunks, p, n if chunks in (None, 1) else max(1, n // 8))
    kw = {} if chunks is None else {"chunks": chunks}
    sched = generate(family, p, m, **kw)
    source = covering(family, p, m, chunks)
    assert source is not None and source.gap is None
    assert [list(r) for r in sched.order] == rows(source.cert, p, m)
    assert [list(r) for r in sched.order] == reference(family, p, m, chunks)


@settings(max_examples=40, deadline=None)
@given(p=st.integers(2, 40), data=st.data())
def test_zb_v_below_2p_minus_1_is_the_certificates_order_there_truncated_and_the_published_loop(p, data):
    """Below m = 2p - 1 the generated ZB-V is the certificate's order at 2p - 1 with the
    microbatches >= m dropped (what the prover's truncation bounds are about), and the
    published loop's."""
    m = data.draw(st.integers(1, 2 * p - 2), label="m")
    source = covering("zb-v", p, m, None)
    assert source is not None and source.truncated == 2 * p - 1
    from schedverify.generators.vshape import zb_v_rows

    cut = lambda order: [[a for a in row if a.microbatch < m] for row in order]  # noqa: E731
    got = [list(r) for r in generate("zb-v", p, m).order]
    assert got == cut(rows(source.cert, p, 2 * p - 1)) == cut(_zb_v_phases(p, 2 * p - 1)) == zb_v_rows(p, m)


@pytest.mark.parametrize("family", ["zb-v", "dualpipe", "dualpipe-v"])
def test_a_certificate_compiled_once_or_at_the_sizes_gives_the_published_loop(family):
    """A ``compile_once`` certificate is evaluated from its one compile for every size at a
    few actions per device, and compiled at the sizes from order._FOLD_FROM on: both give
    the published loop's order, just below and at the threshold."""
    from schedverify.certificates import order

    p, counts = 4, set()
    for m in range(2 * p, 4 * order._FOLD_FROM):
        source = covering(family, p, m, None)
        if source is None:  # DualPipe: m even
            continue
        N = source.cert.count(PyOps(), m)
        if abs(N - order._FOLD_FROM) <= 2:
            assert rows(source.cert, p, m) == reference(family, p, m, None), (family, m, N)
            assert order._once(source.cert, m) == (N < order._FOLD_FROM)
            counts.add(N)
    assert min(counts) < order._FOLD_FROM <= max(counts)


def _planted_1f1b(devices, microbatches):
    """The issue's plant: 1F1B with one extra warm-up forward on device 0 when p >= 25, as a
    generator of its own (Megatron's loop, changed)."""
    positive("1f1b", devices=devices, microbatches=microbatches)
    order = []
    for d in range(devices):
        work = [(d, i) for i in range(microbatches)]
        order.append(phases(work, work, devices - d - 1 + (d == 0 and devices >= 25)))
    return assemble("1f1b", order, stages=devices, microbatches=microbatches, metadata={"family": "1f1b"})


def test_a_generator_changed_at_a_large_size_raises_at_generation(monkeypatch):
    monkeypatch.setitem(FAMILIES, "1f1b", dataclasses.replace(FAMILIES["1f1b"], generate=_planted_1f1b))
    assert generate("1f1b", 24, 26).devices == 24  # unchanged below p = 25: accepted
    with pytest.raises(InternalError, match="device 0, position 25: 0F25, the certificate's is 0B0"):
        generate("1f1b", 25, 26)
    code, out, err = _cli(["generate", "1f1b", "-D", "25", "-M", "26"])
    assert code == 70 and out == "" and "internal error" in err and "Traceback" not in err
    # the finite prover builds its schedules through the same door: no verdict on a wrong one
    code, out, err = _cli(["prove", "--family", "1f1b", "peak_inflight(0) == Min(p, m)",
                           "--domain", "p=25..25,m=25..26"])
    assert code == 70 and "internal error" in err


def test_the_certificate_changed_at_a_large_size_is_refused_by_z3(monkeypatch):
    """The same plant in the one source the generator reads (1F1B's warm-up w on device 0,
    for p >= 25): the generator returns the changed order, and the certificate no longer
    checks, at p = 25, so the all-sizes claim is not PROVED."""
    w = classic_cert._w
    monkeypatch.setattr(classic_cert, "_w", lambda o, p, m, d: o.If(o.And(p >= 25, d == 0),
                                                                   o.Min(p - d, m), w(o, p, m, d)))
    assert generate("1f1b", 25, 26).order[0][25] == Action(0, F, 25)
    chk = prove_certificate(certificate("1f1b"))
    assert not chk.ok
    assert all("p=25" in o.detail or "p=" not in o.detail for o in chk.failures()), chk.failures()
    res = prove(Claim("peak_inflight(0) == Min(p, m)", "1f1b", "", "p >= 2, m >= 1"), store=CertificateStore())
    assert res.verdict != "PROVED" and "did not check" in res.reason, res.to_json()


def _planted_zb_v(devices, microbatches):
    """ZB-V's loop with device 0's first chunk-1 W run before its I when p >= 25 (the two
    actions of phase 3's first triple swapped), as a generator of its own."""
    from schedverify.generators.vshape import zb_v_rows

    order = zb_v_rows(devices, microbatches)
    if devices >= 25:
        row = order[0]
        t = 2 * devices  # f1(0) is at 2p - 1, i1(0) right after it
        row[t], row[t + 1] = row[t + 1], row[t]
    return assemble("zb-v", order, stages=2 * devices, microbatches=microbatches, placement="v",
                    metadata={"family": "zb-v"})


def test_a_zb_v_generator_changed_at_a_large_size_raises_at_generation(monkeypatch):
    monkeypatch.setitem(FAMILIES, "zb-v", dataclasses.replace(FAMILIES["zb-v"], generate=_planted_zb_v))
    assert generate("zb-v", 24, 47).devices == 24  # unchanged below p = 25: accepted
    with pytest.raises(InternalError, match="device 0, position 50: 49W0, the certificate's is 49I0"):
        generate("zb-v", 25, 49)
    # below m = 2p - 1 too: there the order is the certificate's at 2p - 1, truncated
    with pytest.raises(InternalError, match=r"zb-v at 25 devices, 48 microbatches, 2 chunks \(its order at "
                                            r"m = 49, microbatches >= 48 dropped\) differs from its certificate"):
        generate("zb-v", 25, 48)
    code, out, err = _cli(["prove", "--family", "zb-v", "peak_memory/2 <= peak_memory@1f1b",
                           "--domain", "p=25..25,m=49..49"])
    assert code == 70 and out == "" and "internal error" in err and "Traceback" not in err


def test_the_zb_v_certificate_changed_at_a_large_size_is_refused_by_z3(monkeypatch):
    """The same swap written into the certificate (I and W of device 0's first chunk-1
    triple, for p >= 25): Z3 finds it at some p >= 25 only, and the all-sizes claim that
    read the certificate is no longer PROVED."""
    import re

    from schedverify.certificates import vshape as vshape_cert

    good = vshape_cert.ZB_V
    pos = good.pos

    def swapped(o, k, p, m, d, q):
        at = pos(o, k, p, m, d, q)
        big = o.And(p >= 25, d == 0, q == 0)
        return o.If(big, at + (1 if k == I else -1), at) if k in (I, W) else at

    monkeypatch.setattr(vshape_cert, "ZB_V", dataclasses.replace(good, pos=swapped))
    chk = prove_certificate(certificate("zb-v"))
    assert not chk.ok
    sizes = [int(x) for o in chk.failures() for x in re.findall(r"\bp=(\d+)", o.detail)]
    assert sizes and min(sizes) >= 25, chk.failures()
    res = prove(Claim("peak_memory/2 == peak_memory@1f1b", "zb-v", "m >= 2*p", "p >= 2, m >= 1"),
                store=CertificateStore())
    assert res.verdict != "PROVED" and "did not check" in res.reason, res.to_json()


def test_positions_that_collide_are_refused_by_z3_and_by_the_builder():
    """GPipe's backwards moved onto its forwards' positions for p >= 30 (each kind's own
    chain still consistent): only the bijection obligations see it, and the builder."""
    cert = certificate("gpipe")
    pos, pred = cert.pos, cert.pred

    def bad_pos(o, k, p, m, d, i):
        return o.If(o.And(p >= 30, k == B), i, pos(o, k, p, m, d, i))

    def bad_pred(o, k, p, m, d, i):
        cases = pred(o, k, p, m, d, i)
        return [(o.And(p < 30, c), t) for c, t in cases] + (
            [(o.And(p >= 30, i > 0), (B, i - 1))] if k == B else [])

    bad = dataclasses.replace(cert, pos=bad_pos, pred=bad_pred)
    names = [o.name for o in prove_certificate(bad).failures()]
    assert "bijection: pos(F, d, i) != pos(B, d, j)" in names, names
    assert rows(bad, 29, 3)  # below p = 30 it is GPipe
    with pytest.raises(InternalError, match="not a bijection"):
        rows(bad, 30, 3)


def test_hand_dependencies_must_be_the_ones_of_deps_needs():
    """Interleaved 1F1B keeps its dependencies in table indices as a simpler form; Z3
    proves them equal to deps.NEEDS read through the placement, so one that is off by one
    for p >= 20 only is refused."""
    cert = certificate("interleaved-1f1b", 2)
    good = cert.deps

    def off(o, k, p, m, d, q):
        return [(c, (t[0], t[1], o.If(o.And(p >= 20, k == F, t[1] == p - 1, d == 0), t[2] + 1, t[2])), x)
                for c, t, x in good(o, k, p, m, d, q)]

    chk = prove_certificate(dataclasses.replace(cert, deps=off))
    names = [o.name for o in chk.failures()]
    assert "deps F: the certificate's are deps.NEEDS's through the placement" in names, names


@pytest.mark.parametrize("family,chunks", families())
def test_derived_dependencies_are_the_schedules_needs(family, chunks):
    """The needs read from deps.NEEDS through the placement and the index maps
    (certificates/needs.py) name, at each size, exactly the producers the generated
    schedule's actions need by deps.needs (the checker's rule)."""
    o = PyOps()
    for p, n in [(1, 2), (2, 1), (2, 3), (3, 2), (4, 5), (5, 2)]:
        p, m = _size(family, chunks, p, n)
        cert = covering(family, p, m, chunks).cert
        sched = generate(family, p, m, **({} if chunks is None else {"chunks": chunks}))
        index = index_of_action(cert, p, m)
        lv = (lambda row: row) if cert.fused is None else _leaves  # noqa: E731
        where = {(a.kind, a.stage, a.microbatch): (a.kind, d, index(a))
                 for d, row in enumerate(sched.order) for a in lv(row)}
        for d, row in enumerate(sched.order):
            for a in lv(row):
                want = sorted(where[(k, s, a.microbatch)] for need, s in needs(a, sched.stages)
                              for k in need.kinds if (k, s, a.microbatch) in where)
                got = sorted(t for c, t, _ in derived(cert, o, a.kind, p, m, d, index(a)) if c)
                assert got == want, (p, m, a)


def test_every_generation_of_a_certified_size_is_checked(monkeypatch):
    """Family.__call__ (generate, the CLI, the finite prover) checks the schedule against its
    certificate; a schedule that is not it, at any position, is an InternalError."""
    sched = generate("zb-h1", 4, 8, chunks=2)
    cert = covering("zb-h1", 4, 8, 2).cert
    verify(sched, cert, 4, 8)
    row = list(sched.order[1])
    row[3], row[4] = row[4], row[3]
    swapped = sched.with_(order=tuple(tuple(r) for r in (sched.order[0], row) + tuple(sched.order[2:])))
    with pytest.raises(InternalError, match="device 1, position 3"):
        verify(swapped, cert, 4, 8)
    # a group size other than the devices has no certificate: the generator's loop, unchecked
    assert covering("interleaved-1f1b", 4, 10, 2, group_size=5) is None
    assert generate("interleaved-1f1b", 4, 10, chunks=2, group_size=5).microbatches == 10


@settings(max_examples=40, deadline=None)
@given(p=st.integers(1, 12), k=st.integers(1, 12), m=st.integers(1, 40))
def test_1f1b_with_k_in_flight_is_1f1b_over_the_virtual_index(p, k, m):
    """--max-inflight K: 1F1B's certified order at nu(0..m-1), nu(i) = (i div K) p + i mod K,
    the empty virtual microbatches left out; at most min(K, p) in flight on every device."""
    from schedverify.formulas.tropical import order_metrics

    sched = generate("1f1b", p, m, max_inflight=k)
    if k >= p:
        assert sched.order == generate("1f1b", p, m).order
        return
    nu = [(i // k) * p + i % k for i in range(m)]
    real = {x: i for i, x in enumerate(nu)}
    loop = [[Action(a.stage, a.kind, real[a.microbatch]) for a in row if a.microbatch in real]
            for row in reference("1f1b", p, nu[-1] + 1)]
    assert [list(r) for r in sched.order] == loop
    assert max(order_metrics(sched).peak_inflight) == min(k, p, m)


def test_1f1b_with_k_in_flight_is_checked_at_generation(monkeypatch):
    """A generator that swaps two actions of the gapped order (at p >= 6 only) is refused by
    the check every generation of a certified size gets."""
    from schedverify.generators import classic

    real = classic.certified

    def swapped(*args, **kw):
        out = real(*args, **kw)
        if args[1] >= 6:
            out[0][2], out[0][3] = out[0][3], out[0][2]
        return out

    monkeypatch.setattr(classic, "certified", swapped)
    assert generate("1f1b", 5, 9, max_inflight=2).devices == 5
    with pytest.raises(InternalError, match="with at most 2 in flight differs from its certificate on device 0"):
        generate("1f1b", 6, 9, max_inflight=2)


def test_a_recorded_proof_counts_only_for_the_very_obligations_it_proved():
    """certificates/checked.json keeps the digest of each shipped certificate's obligations:
    the same obligations take the record, a changed certificate is proved again (and here
    fails), and without records (--recheck) Z3 is asked every time."""
    from schedverify.certificates.check import load_records

    records = load_records()
    cert = certificate("gpipe")
    chk = prove_certificate(cert, records=records)
    assert chk.ok and chk.recorded and chk.digest in records
    assert not prove_certificate(cert).recorded  # no records given: Z3 is asked
    start = cert.start

    def late(o, k, p, m, d, i):  # one t_F later for p >= 30 only
        s = dict(start(o, k, p, m, d, i))
        s["t_F"] = o.If(p >= 30, s["t_F"] + 1, s["t_F"])
        return s

    bad = prove_certificate(dataclasses.replace(cert, start=late), records=records)
    assert not bad.recorded and not bad.ok and bad.digest not in records
    code, out, _ = _cli(["prove", "--family", "gpipe", "peak_inflight == m", "--domain", "p >= 2, m >= 1"])
    assert code == 0 and "proof recorded for these exact obligations (--recheck proves it again)" in out
    code, out, _ = _cli(["prove", "--family", "gpipe", "peak_inflight == m", "--domain", "p >= 2, m >= 1",
                         "--recheck"])
    assert code == 0 and "certificate checked in" in out


def test_check_certificates_writes_the_records_whole(tmp_path, monkeypatch):
    """--check-certificates proves every shipped certificate and writes the digests (here for
    two certificates, to keep the test short); arguments it does not take are refused."""
    from schedverify.certificates import check

    monkeypatch.setattr(check, "shipped_certificates", lambda: [certificate("gpipe"), certificate("1f1b")])
    target = tmp_path / "checked.json"
    code, out, _ = _cli(["prove", "--check-certificates", "-o", str(target)])
    assert code == 0 and "2 certificates proved" in out
    assert set(json.loads(target.read_text())["certificates"]) <= check.load_records()
    code, _, err = _cli(["prove", "--check-certificates", "proofs/"])
    assert code == 2 and "takes no claim" in err
    code, _, err = _cli(["prove", "-o", str(target), "proofs/"])
    assert code == 2 and "-o applies to --check-certificates" in err


@settings(max_examples=30, deadline=None)
@given(which=st.sampled_from(families()), p=st.integers(1, 12), n=st.integers(1, 20))
def test_compiled_positions_are_the_certificates(which, p, n):
    """The generators evaluate each certificate function compiled at the sizes (CodeOps):
    at every index it gives what the plain Python backend gives."""
    from schedverify.certificates.base import compiled

    family, chunks = which
    p, m = _size(family, chunks, p, n if chunks in (None, 1) else max(1, n // 5))
    cert = covering(family, p, m, chunks).cert
    o = PyOps()
    for d in range(p):
        for kind in cert.kinds:
            pos = compiled(lambda oo, q, kind=kind, d=d: cert.pos(oo, kind, p, m, d, q))
            act = compiled(lambda oo, q, kind=kind, d=d: cert.action_at(oo, kind, p, m, d, q))
            for q in range(cert.count(o, m)):
                assert pos(q) == cert.pos(o, kind, p, m, d, q)
                assert tuple(act(q)) == tuple(cert.action_at(o, kind, p, m, d, q))


def _planted_dualpipe_v(devices, microbatches):
    """DualPipeV's loop with device 0's first OVERLAP_F_B of step 4 run as its two actions
    apart (the repository's rule for the last rank, applied to the first) when p >= 25."""
    from schedverify.generators.bidirectional import dualpipe_v_rows

    order = dualpipe_v_rows(devices, microbatches)
    if devices >= 25:
        row = order[0]
        t = 2 * devices + 3 * (devices - 1)  # steps 1-3: 2p actions, then p-1 triples
        assert row[t].sub is not None
        row[t:t + 1] = list(row[t].sub)
    return assemble("dualpipe-v", order, stages=2 * devices, microbatches=microbatches, placement="v",
                    metadata={"family": "dualpipe-v"})


def test_a_dualpipe_v_generator_changed_at_a_large_size_raises_at_generation(monkeypatch):
    monkeypatch.setitem(FAMILIES, "dualpipe-v",
                        dataclasses.replace(FAMILIES["dualpipe-v"], generate=_planted_dualpipe_v))
    assert generate("dualpipe-v", 24, 48).devices == 24  # unchanged below p = 25: accepted
    with pytest.raises(InternalError, match="device 0, position 122"):
        generate("dualpipe-v", 25, 50)
    code, out, err = _cli(["prove", "--family", "dualpipe-v", "peak_memory/2 <= p + 1",
                           "--domain", "p=25..25,m=50..50"])
    assert code == 70 and out == "" and "internal error" in err and "Traceback" not in err


def _planted_dualpipe(devices, microbatches):
    """DualPipe's loop with the last W of device 0 run one place earlier when p >= 26."""
    from schedverify.generators.bidirectional import dualpipe_rows

    order = dualpipe_rows(devices, microbatches)
    if devices >= 26:
        row = order[0]
        row[-1], row[-2] = row[-2], row[-1]
    from schedverify.model import Placement

    half = microbatches // 2
    placement = Placement.bidirectional(["loop", list(range(devices - 1, -1, -1))], [0] * half + [1] * half,
                                        devices, devices)
    return assemble("dualpipe", order, stages=devices, microbatches=microbatches, placement=placement,
                    metadata={"family": "dualpipe"})


def test_a_dualpipe_generator_changed_at_a_large_size_raises_at_generation(monkeypatch):
    monkeypatch.setitem(FAMILIES, "dualpipe", dataclasses.replace(FAMILIES["dualpipe"], generate=_planted_dualpipe))
    assert generate("dualpipe", 24, 48).devices == 24
    with pytest.raises(InternalError, match="dualpipe at 26 devices, 52 microbatches differs"):
        generate("dualpipe", 26, 52)


@pytest.mark.parametrize("family", ["dualpipe-v", "dualpipe"])
def test_the_dualpipe_certificates_changed_at_a_large_size_are_refused_by_z3(monkeypatch, family):
    """Device 0's first split backward (step 3) with its W before its I for p >= 25, in the
    certificate: Z3 finds it at p >= 25 only, and the all-sizes peak claim is not PROVED."""
    import re

    from schedverify.certificates import bidirectional as bidi

    name = "DUALPIPE_V" if family == "dualpipe-v" else "DUALPIPE"
    good = getattr(bidi, name)
    pos = good.pos

    def swapped(o, k, p, m, d, q):
        at = pos(o, k, p, m, d, q)
        big = o.And(p >= 25, d == 0, q == 0)
        return o.If(big, at + (1 if k == I else -1), at) if k in (I, W) else at

    monkeypatch.setattr(bidi, name, dataclasses.replace(good, pos=swapped))
    chk = prove_certificate(certificate(family))
    assert not chk.ok
    sizes = [int(x) for o in chk.failures() for x in re.findall(r"\bp=(\d+)", o.detail)]
    assert sizes and min(sizes) >= 25, chk.failures()
    res = prove(Claim("peak_inflight == peak_inflight@1f1b + " + ("p + 1" if family == "dualpipe-v" else "1"),
                      family, "m >= 2*p", "p >= 2, m >= 1"), store=CertificateStore())
    assert res.verdict != "PROVED" and "did not check" in res.reason, res.to_json()


def test_composite_actions_are_built_and_checked():
    """A full B is its I and W leaves, an OVERLAP_F_B its F, I, W; a certificate that joins
    a leaf with one not at the next position, or an F with a split I, is refused by Z3 and
    by the builder."""
    from schedverify.certificates import bidirectional as bidi
    from schedverify.model import OVERLAP_F_B

    good = bidi.DUALPIPE_V
    row = rows(good, 3, 6)[0]
    assert [a.kind for a in row[:12]] == [F] * 6 + [I, W, F] * 2  # steps 1-3 of device 0
    assert row[12].kind == OVERLAP_F_B and [x.kind for x in row[12].sub] == [F, B]
    fused = good.fused

    def split_overlap(o, k, p, m, d, q):  # an F joined with the I after it, that I left split
        f = fused(o, k, p, m, d, q)
        if k == I:
            return (o.And(f[0], o.Not(o.And(p >= 20, d == 0, q == p - 1))), f[1])
        return f

    bad = dataclasses.replace(good, fused=split_overlap)
    names = [o.name for o in prove_certificate(bad).failures()]
    assert names == ["composite F: a joined leaf's partner is the next leaf, of a B or an OVERLAP_F_B"], names
    assert rows(bad, 19, 38)
    with pytest.raises(InternalError, match="only I W"):
        rows(bad, 20, 40)
