"""Laws about the optimum over wide finite ranges: the claims of proofs/optimum.toml (and a few
companions), judged with the search engine's proven optima at every size.

``schedverify prove proofs/`` judges these claims on small ranges (it must stay fast); this
script judges them on the ranges below (p <= 6, m <= 18 by default) and prints, per claim,
the verdict, the sizes judged, how many optima the search proved, the search's seconds and
the claim's.  For a REFUTED claim it then judges every size of the range on its own and
lists each size where the claim fails, so a law that is false somewhere says exactly where.
For an UNKNOWN claim each undecided size is judged again on its own with a longer search
(``--retry-time-limit``): the search's first phase, randomised list schedules, gets a share
of the time limit, and the schedule that meets the lower bound is sometimes found only with
more; the claim counts as PROVED when every retried size is.

    python3 bench/optimum_laws.py                       # every claim, p <= 6, m <= 18
    python3 bench/optimum_laws.py --p 2..4 --m 1..8     # a smaller range
    python3 bench/optimum_laws.py --only opt-k-in-flight-1-2 --time-limit 10
    python3 bench/optimum_laws.py --only opt-law-6-2-2-1 --only opt-law-6-1-1-3   # law (6)
    python3 bench/optimum_laws.py --json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from dataclasses import replace

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from schedverify.claims import Claim, prove  # noqa: E402
from schedverify.claims.catalogue import load  # noqa: E402
from schedverify.claims.optimum import UnpinnedCosts  # noqa: E402

K_LAW = "optimal_makespan(memory=k) == (t_F + t_B)*((m + p - 1) + (ceiling(m/k) - 1)*(p - k))"

#: the split-backward lower bounds of docs/proofs.md, Laws (5) and (6), as claims (>=): held
#: against the search's proven optimum at every size, since the all-sizes prover relies on them
LAW_5 = "optimal_makespan(split) >= (m + p - 1)*(t_F + t_I) + t_W"
LAW_6 = ("optimal_makespan(memory=k, split) >= Max(0, (p - k)*t_F + (p - 1)*t_I) + (m - 1)*t_F"
         " + (m - k)*Min(t_I + t_W, 2*t_I) + p*(t_F + t_I) + t_W")

#: companions of the catalogue's claims, judged here only: the K law with a backward cheaper
#: than the forward, where ZB-H2 is optimal, and the split-backward laws at two cost ratios
#: (t_W the cheapest, and t_W the dearest, where law (6) reads 2 t_I per freed activation)
EXTRA = [
    Claim(K_LAW, "", "t_F == 1, t_B == 3, c == 0, k <= p", "k=1..1", id="opt-k-in-flight-1-3",
          source="bench"),
    Claim(K_LAW, "", "t_F == 2, t_B == 1, c == 0, k <= p", "k=1..1", id="opt-k-in-flight-2-1",
          source="bench"),
    Claim("makespan == optimal_makespan(memory=2*p - 1, split)", "zb-h2",
          "t_F == 2, t_I == 2, t_W == 1, c == 0, m >= 2*p", "", id="opt-zb-h2-optimal-2-2-1-m-ge-2p",
          source="bench"),
    *[Claim(law, "", f"{costs}, c == 0{extra}", dom, id=f"opt-law-{n}-{ratio}", source="bench")
      for n, law, extra, dom in (("5", LAW_5, "", ""), ("6", LAW_6, ", m >= k + 1", "k=1..1"))
      for ratio, costs in (("2-2-1", "t_F == 2, t_I == 2, t_W == 1"), ("1-1-3", "t_F == 1, t_I == 1, t_W == 3"))],
]


def _range(text: str) -> tuple[int, int]:
    lo, _, hi = text.partition("..")
    return int(lo), int(hi or lo)


def wide_domain(claim: Claim, p: tuple[int, int], m: tuple[int, int]) -> str:
    from schedverify.claims.statement import parse_domain

    dom = f"p={p[0]}..{p[1]},m={m[0]}..{m[1]}"
    if "k" in parse_domain(claim.domain):
        dom += f",k=1..{p[1]}"
    if claim.family in ("zb-h1",):
        dom += ",v=1..1"
    return dom


def failures(claim: Claim, timeout: float) -> list[dict]:
    """Every size of the claim's domain where it fails (each size judged on its own)."""
    from schedverify.claims.statement import parse_domain

    dom = parse_domain(claim.domain)
    out = []
    ks = range(dom["k"][0], dom["k"][1] + 1) if "k" in dom else [None]
    for p in range(dom["p"][0], dom["p"][1] + 1):
        for m in range(dom["m"][0], dom["m"][1] + 1):
            for k in ks:
                one = f"p={p}..{p},m={m}..{m}" + (f",k={k}..{k}" if k is not None else "")
                if "v" in dom:
                    one += f",v={dom['v'][0]}..{dom['v'][1]}"
                r = prove(replace(claim, domain=one), timeout_s=timeout)
                if r.verdict == "REFUTED":
                    ce = r.counterexample
                    out.append({"sizes": ce["sizes"], "lhs": ce["lhs"], "rhs": ce["rhs"]})
    return out


def retry(claim: Claim, res, limit: float) -> tuple[str, list[dict]]:
    """Judge each size the search left undecided again, alone, with ``limit`` seconds:
    (the verdict over the whole range, what each retry gave)."""
    undecided = [o["sizes"] for o in res.optima if o["status"] == "bounded"]
    out = []
    for sz in undecided:
        one = ",".join(f"{k}={v}..{v}" for k, v in sz.items() if k != "v" or "v=" in claim.domain)
        r = prove(replace(claim, domain=one, time_limit=limit), timeout_s=limit)
        out.append({"sizes": sz, "verdict": r.verdict, "seconds": round(r.seconds, 2),
                    "counterexample": None if not r.counterexample else
                    {k: r.counterexample[k] for k in ("sizes", "lhs", "rhs")}})
    verdicts = {o["verdict"] for o in out}
    verdict = ("REFUTED" if "REFUTED" in verdicts else "UNKNOWN" if "UNKNOWN" in verdicts
               else "PROVED")
    return verdict, out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--p", default="2..6", help="devices, LOW..HIGH (default 2..6)")
    ap.add_argument("--m", default="1..18", help="microbatches, LOW..HIGH (default 1..18)")
    ap.add_argument("--time-limit", type=float, default=4.0,
                    help="the search's seconds per size (default 4)")
    ap.add_argument("--retry-time-limit", type=float, default=60.0,
                    help="the search's seconds for each size an UNKNOWN claim left undecided "
                         "(default 60; 0: no retry)")
    ap.add_argument("--only", action="append", default=[], help="claim id (repeatable)")
    ap.add_argument("--no-failures", action="store_true",
                    help="do not list every failing size of a REFUTED claim")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    p, m = _range(args.p), _range(args.m)
    claims = [c for c in load([os.path.join(ROOT, "proofs", "optimum.toml")]) + EXTRA
              if not args.only or c.id in args.only]
    rows = []
    print(f"# laws about the optimum, p={p[0]}..{p[1]}, m={m[0]}..{m[1]}, search time limit "
          f"{args.time_limit:g} s per size, load {os.getloadavg()[0]:.2f}", file=sys.stderr)
    for c in claims:
        wide = replace(c, domain=wide_domain(c, p, m), time_limit=args.time_limit)
        t0 = time.perf_counter()
        try:
            r = prove(wide, timeout_s=args.time_limit)
        except UnpinnedCosts as e:  # an optimum at free costs: no size to search
            print(f"{c.id}: skipped, {e} (`schedverify prove proofs/` judges it for all sizes)", file=sys.stderr)
            continue
        js = r.to_json()
        opt = js.get("optima", {})
        row = {"id": c.id, "claim": c.text, "family": c.family, "assume": c.assume,
               "domain": wide.domain, "verdict": r.verdict, "sizes": r.checked,
               "excluded": r.excluded, "proven": opt.get("proven", 0),
               "search_s": opt.get("search_seconds", 0.0),
               "seconds": round(time.perf_counter() - t0, 2), "reason": r.reason,
               "counterexample": None if not r.counterexample else
               {k: r.counterexample[k] for k in ("sizes", "lhs", "rhs")}}
        if r.verdict == "REFUTED" and not args.no_failures:
            row["failures"] = failures(wide, args.time_limit)
        print(f"{c.id}: {r.verdict} over {wide.domain}, {r.checked} sizes, {row['proven']} optima "
              f"proven, search {row['search_s']:.1f} s, claim {row['seconds']:.1f} s", file=sys.stderr)
        if r.verdict == "UNKNOWN" and args.retry_time_limit > 0:
            row["first_verdict"] = r.verdict
            row["verdict"], row["retried"] = retry(wide, r, args.retry_time_limit)
            row["seconds"] = round(time.perf_counter() - t0, 2)
            print(f"  retried {len(row['retried'])} undecided size(s) at {args.retry_time_limit:g} s: "
                  f"{row['verdict']}", file=sys.stderr)
        rows.append(row)
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    print("| claim | assumptions | range | verdict | sizes | optima proven | search s | s | counterexample, retries |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ce = r["counterexample"]
        why = "" if not ce else (", ".join(f"{k}={v}" for k, v in ce["sizes"].items() if k != "v")
                                 + f": {ce['lhs']} vs {ce['rhs']}")
        if r.get("retried"):
            n = sum(1 for x in r["retried"] if x["verdict"] == "PROVED")
            why = (f"{len(r['retried'])} size(s) undecided at {args.time_limit:g} s; {n} proved "
                   f"alone at {args.retry_time_limit:g} s") + (f"; {why}" if why else "")
        elif r["verdict"] == "UNKNOWN":
            why = r["reason"][:160]
        print(f"| {r['id']} | {r['assume']} | {r['domain']} | {r['verdict']} | {r['sizes']} | "
              f"{r['proven']} | {r['search_s']:.1f} | {r['seconds']:.1f} | {why} |")
    for r in rows:
        if r.get("failures"):
            shown = "; ".join(", ".join(f"{k}={v}" for k, v in f["sizes"].items() if k != "v")
                              + f" ({f['lhs']} vs {f['rhs']})" for f in r["failures"])
            print(f"\n{r['id']} fails at {len(r['failures'])} size(s): {shown}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
