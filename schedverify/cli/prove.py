"""``schedverify prove``: judge a claim about a schedule family, or a whole catalogue.

    schedverify prove --family 1f1b "peak_inflight(0) == Min(p, m)" --domain "p=2..8,m=1..32"
    schedverify prove "optimal_makespan(memory=2) <= 3*(m + p - 1)" --domain "p=2..3,m=1..4"
    schedverify prove proofs/

A claim about the optimum alone (``optimal_makespan(...)`` and no family's metric) needs no
family, in a catalogue or on the command line.

Exit code for one claim: 0 PROVED, 1 REFUTED, 3 UNKNOWN, 2 usage error.  For a catalogue:
0 when every claim gets the verdict its file records, 1 when one differs (3 when the only
differences are UNKNOWN verdicts).
"""

from __future__ import annotations

import json

from . import EXIT_INVALID, EXIT_OK, EXIT_UNKNOWN


def register(sub) -> None:
    p = sub.add_parser(
        "prove", help="prove or refute a claim about a schedule family (or run a catalogue)",
        description="Judge a claim exactly over a finite range of sizes and every cost the "
                    "assumptions allow (docs/spec.md section 7): PROVED (exit 0), REFUTED with the "
                    "smallest counterexample (exit 1) or UNKNOWN with the reason (exit 3). Without "
                    "--family, the arguments are claim files or directories (proofs/), or one "
                    "claim about the optimum alone (optimal_makespan(...), no family's metric).",
    )
    p.add_argument("args", nargs="*", metavar="CLAIM|PATH",
                   help="with --family: the claim, e.g. 'bubble_ratio == (p-1)/m'; "
                        "without: catalogue files or directories, or one claim that reads only "
                        "optimal_makespan(...)")
    p.add_argument("--family", metavar="FAMILY", help="the schedule family the claim is about")
    p.add_argument("--assume", default="", metavar="RELATIONS",
                   help="comma-separated assumptions on costs or sizes, e.g. 't_W <= t_F, c == 0' "
                        "(costs are > 0 and c >= 0 unless said otherwise)")
    p.add_argument("--domain", default="", metavar="RANGES",
                   help="sizes to check, e.g. 'p=2..8,m=1..32,v=2..2' (default p=2..8, m=1..16, "
                        "v=2..3 for families with chunks; d ranges over 0..p-1), or inequalities "
                        "for every size they allow, e.g. 'p >= 2, m >= p' (families with an "
                        "all-sizes certificate: docs/proofs.md)")
    p.add_argument("--all-sizes", action="store_true",
                   help="with --family and a range: judge every size from the range's lower ends up "
                        "(p >= LOW, m >= LOW) when the family has a certificate, else the range")
    p.add_argument("--finite-only", action="store_true",
                   help="for a catalogue: judge each claim on its finite range only (by default a "
                        "claim whose families have certificates is judged for all sizes)")
    p.add_argument("--recheck", action="store_true",
                   help="prove every certificate with Z3 again rather than take the shipped record of "
                        "its proof (certificates/checked.json, kept for the exact obligations)")
    p.add_argument("--check-certificates", action="store_true",
                   help="prove every shipped certificate with Z3 and write the records (-o FILE, default "
                        "the package's checked.json); no claim is judged")
    p.add_argument("-o", "--output", metavar="FILE", help="with --check-certificates: where to write")
    p.add_argument("--timeout", type=float, default=20.0, metavar="SECONDS",
                   help="Z3 time limit per size, and the time the exact search may take on a grid "
                        "inside an all-sizes domain that no certificate decides (default 20)")
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.set_defaults(handler=run)


def run(args, out, err) -> int:
    from ..claims import Claim, prove
    from ..errors import UsageError

    if args.check_certificates:
        return _check_certificates(args, out, err)
    if args.output:
        raise UsageError("-o applies to --check-certificates")
    if not args.args:
        raise UsageError("give a claim (with --family) or catalogue files or directories (proofs/)")
    if args.family or _an_optimum_claim(args.args):
        if len(args.args) != 1:
            raise UsageError(f"with --family give exactly one claim (quote it), got {len(args.args)} "
                             f"arguments: {args.args!r}")
        claim = Claim(args.args[0], args.family or "", args.assume, args.domain, source="command line")
        from ..claims.allsizes import CertificateStore

        res = prove(claim, timeout_s=args.timeout, all_sizes=getattr(args, "all_sizes", False),
                    store=CertificateStore(recheck=args.recheck))
        if args.format == "json":
            print(json.dumps(res.to_json(), ensure_ascii=False), file=out)
        else:
            print(_result_text(res), file=out)
        return {"PROVED": EXIT_OK, "REFUTED": EXIT_INVALID}.get(res.verdict, EXIT_UNKNOWN)
    if args.assume or args.domain:
        raise UsageError("--assume and --domain apply to one claim (with --family); a catalogue's "
                         "claims carry their own")
    from ..claims.catalogue import load

    from ..claims.allsizes import CertificateStore

    claims = load(args.args)
    store = CertificateStore(recheck=args.recheck)
    extend = not getattr(args, "finite_only", False)
    results = [_judged(c, args.timeout, extend, store) for c in claims]
    if args.format == "json":
        print(json.dumps([r.to_json() for r in results], ensure_ascii=False, indent=1), file=out)
    else:
        print(table(results), file=out)
    changed = [r for r in results if r.claim.recorded and r.claim.recorded != r.verdict]
    if not changed:
        return EXIT_OK
    return EXIT_UNKNOWN if all(r.verdict == "UNKNOWN" for r in changed) else EXIT_INVALID


def _judged(claim, timeout_s: float, all_sizes: bool, store):
    """One catalogue claim's verdict; a claim about the optimum at free costs has none on a
    finite range (the search solves one size at given costs): UNKNOWN there, saying so."""
    from ..claims import prove
    from ..claims.finite import UNKNOWN, Result
    from ..claims.optimum import UnpinnedCosts
    from ..claims.statement import parse_domain

    try:
        return prove(claim, timeout_s=timeout_s, all_sizes=all_sizes, store=store)
    except UnpinnedCosts as e:
        grid = {k: list(range(lo, hi + 1)) for k, (lo, hi) in parse_domain(claim.domain).items()}
        return Result(claim, UNKNOWN, grid, kind=f"finite range {claim.domain}",
                      reason=f"{e}: judged for all sizes only (without --finite-only)")


def _check_certificates(args, out, err) -> int:
    from ..certificates.check import RECORDS, write_records
    from ..errors import UsageError

    if args.args or args.family or args.assume or args.domain:
        raise UsageError("--check-certificates takes no claim, file or --family: it proves the shipped certificates")
    target = args.output or str(RECORDS)
    n, bad = write_records(target, log=lambda line: print(f"prove --check-certificates: {line}", file=err))
    print(f"{n} certificates proved, records written to {target}"
          + (f"; did not check: {', '.join(bad)}" if bad else ""), file=out)
    return EXIT_INVALID if bad else EXIT_OK


def _an_optimum_claim(args: list[str]) -> bool:
    """Whether the arguments are one claim about the optimum alone rather than paths: it names
    optimal_makespan, is no existing path, and reads no family's metric (a family's metric
    without --family is a UsageError that says to give one)."""
    from pathlib import Path

    from ..claims.catalogue import reads_only_the_optimum
    from ..errors import UsageError

    if len(args) != 1 or "optimal_makespan" not in args[0] or Path(args[0]).exists():
        return False
    if not reads_only_the_optimum(args[0], "the claim"):
        raise UsageError("the claim reads a family's metric: give the family with --family "
                         "(only a claim about optimal_makespan alone needs none)")
    return True


def _result_text(res) -> str:
    c = res.claim
    dom = ", ".join(v if k == "all sizes" else f"{k}={v[0]}..{v[1]}" if isinstance(v, list)
                    else f"{k}={v}" for k, v in res.domain.items())
    lines = [f"{res.verdict}: {c.text}  [{c.family or 'the optimum'}]",
             f"  domain: {dom}" + (f"; assuming {c.assume}" if c.assume else "")
             + "; costs t_* > 0, c >= 0 unless assumed otherwise"]
    if res.kind:
        lines.append(f"  kind: {res.kind}")
    for cond, why in res.conditions:
        lines.append(f"  added to the domain: {cond}: {why}")
    if res.verdict == "PROVED" and res.kind.startswith("all sizes"):
        slices = "; ".join(f"{f}: cost slice {x['slice']}, certificate "
                           + ("proof recorded for these exact obligations (--recheck proves it again)"
                              if x.get("checked", "").startswith("Z3's proof") else
                              f"checked in {x['check_seconds']} s")
                           for f, x in res.certificates.items())
        what = [f"of the schedules `schedverify generate` builds ({slices})"] if slices else []
        what += ["by the laws about the optimum below"] if res.laws else []
        every = "every size in the domain" if not res.below else (
            f"every size of the all-sizes part ({res.kind[len('all sizes in '):].split(';')[0]})")
        lines.append(f"  proved for {every} and every cost allowed, {' and '.join(what)}; "
                     f"docs/proofs.md")
        if res.below:
            lines.append(f"  and exactly at all {res.checked} sizes of the finite range {res.below} "
                         f"(below the closed forms of the certificate)")
        lines += [f"  {f} below the certificate, {x['below']}" for f, x in res.certificates.items() if "below" in x]
    elif res.verdict == "PROVED":
        lines.append(f"  exactly, at all {res.checked} sizes in the domain, for every cost allowed")
    for opt, bounds in res.laws.items():
        lines.append(f"  {opt}: " + "; ".join(f"{b['bound']} bound {b['law']}" for b in bounds))
    if res.counterexample:
        ce = res.counterexample
        sizes = ", ".join(f"{k}={v}" for k, v in ce["sizes"].items())
        costs = ", ".join(f"{k}={v}" for k, v in ce["costs"].items()) or "any costs"
        lines.append(f"  counterexample: {sizes}; {costs}")
        lines.append(f"  left side = {ce['lhs']}, right side = {ce['rhs']}")
        lines.append(f"  reproduce: {ce['command']}")
        if ce.get("check_command"):
            lines.append(f"  see it:    {ce['check_command']}")
    if res.minimal:
        # a claim about the optimum is refuted by what the search proved there (its counterexample
        # says which), a family's claim by simulating the generated schedule
        how = (res.counterexample or {}).get("refuted_by") or "simulating the schedule"
        confirmed = f"; confirmed by {how} there" if res.verdict == "REFUTED" else ""
        lines.append(f"  smallest: {res.minimal}{confirmed}")
    if res.reason:
        lines.append(f"  reason: {res.reason}")
    if res.all_sizes_reason and res.verdict == "REFUTED" and res.kind.startswith("all sizes"):
        lines.append(f"  the certificate did not decide it ({res.all_sizes_reason}): the exact search's "
                     f"counterexample did")  # refuted on a grid, for all sizes
    elif res.all_sizes_reason and not res.reason:
        lines.append(f"  no all-sizes verdict: {res.all_sizes_reason}")
    if res.skipped:
        shown = ", ".join("(" + ",".join(map(str, s)) + ")" for s in res.skipped[:8])
        more = f" and {len(res.skipped) - 8} more" if len(res.skipped) > 8 else ""
        lines.append(f"  skipped (the family does not support them): {shown}{more}")
    if res.excluded:
        lines.append(f"  {res.excluded} size(s) excluded by the assumptions")
    lines.append(f"  {res.seconds:.2f} s")
    return "\n".join(lines)


def why(res) -> str:
    if res.counterexample:
        ce = res.counterexample
        sizes = ",".join(f"{k}={v}" for k, v in ce["sizes"].items() if k != "v" or "v" in res.domain)
        costs = ",".join(f"{k}={v}" for k, v in ce["costs"].items())
        return f"at {sizes}{' ' + costs if costs else ''}: {ce['lhs']} vs {ce['rhs']}"
    return res.reason


def table(results) -> str:
    rows = [("id", "family", "verdict", "recorded", "sizes", "why (counterexample)")]
    for r in results:
        rec = r.claim.recorded or "-"
        mark = "" if rec in ("-", r.verdict) else " CHANGED"
        sizes = ("all " + r.kind[len("all sizes in "):]) if r.kind.startswith("all sizes") else str(r.checked)
        rows.append((r.claim.id, r.claim.family, r.verdict, rec + mark, sizes, why(r)))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    out = ["  ".join(x.ljust(w) for x, w in zip(row[:5], widths)) + "  " + row[5] for row in rows]
    n = {v: sum(1 for r in results if r.verdict == v) for v in ("PROVED", "REFUTED", "UNKNOWN")}
    total = sum(r.seconds for r in results)
    n_all = sum(1 for r in results if r.kind.startswith("all sizes") and r.verdict != "UNKNOWN" and not r.below)
    n_split = sum(1 for r in results if r.below)
    split = f", {n_split} for all sizes above a bound and a finite range below" if n_split else ""
    out.append(f"{len(results)} claims: {n['PROVED']} proved, {n['REFUTED']} refuted, "
               f"{n['UNKNOWN']} unknown ({total:.1f} s); {n_all} judged for all sizes{split}")
    return "\n".join(out)
