"""The claim catalogue: ``proofs/*.toml``, one file per source or family.

A file names its ``source`` (and optionally a default ``family``, ``assume``, ``domain``)
and lists ``[[claim]]`` tables with ``text`` and optionally ``id``, ``family``, ``assume``,
``domain``, ``quote`` (what the source says, verbatim), ``note`` and ``verdict`` (the verdict
recorded when the claim was last judged, so a run can say when one changes).  A claim about
the optimum alone (``optimal_makespan(...)`` and no family metric) needs no family;
``time_limit`` (seconds) bounds its search at each size.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import InputError, UsageError
from ..io.files import parse_toml
from .statement import Claim, optimum_refs, parse_claim

_CLAIM_KEYS = {"id", "text", "family", "assume", "domain", "quote", "note", "verdict", "source",
               "time_limit"}
_FILE_KEYS = {"source", "family", "assume", "domain", "claim", "description", "time_limit"}
VERDICTS = ("PROVED", "REFUTED", "UNKNOWN")


def catalogue_files(paths) -> list[Path]:
    out: list[Path] = []
    for p in map(Path, paths):
        if p.is_dir():
            out.extend(sorted(p.glob("*.toml")))
        elif p.is_file():
            out.append(p)
        else:
            raise InputError("no such file or directory", source=str(p))
    if not out:
        raise InputError("no claim files (*.toml) found", source=", ".join(map(str, paths)))
    return out


def load_file(path: Path) -> list[Claim]:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(str(e), source=str(path)) from None
    doc = parse_toml(text, str(path))
    extra = set(doc) - _FILE_KEYS
    if extra:
        raise InputError(f"unknown key(s) {', '.join(sorted(extra))}; known: "
                         f"{', '.join(sorted(_FILE_KEYS))}", source=str(path))
    claims = []
    for k, item in enumerate(doc.get("claim", [])):
        where = f"claim[{k}]"
        extra = set(item) - _CLAIM_KEYS
        if extra:
            raise InputError(f"unknown key(s) {', '.join(sorted(extra))}; known: "
                             f"{', '.join(sorted(_CLAIM_KEYS))}", source=str(path), where=where)
        if "text" not in item:
            raise InputError("a claim needs text", source=str(path), where=where)
        fam = item.get("family", doc.get("family"))
        if not fam and not _optimum_only(item["text"], path, where):
            raise InputError("no family (give family = ... in the claim or the file)",
                             source=str(path), where=where)
        limit = item.get("time_limit", doc.get("time_limit"))
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, (int, float))
                                  or limit <= 0):
            raise InputError(f"time_limit must be a number of seconds > 0, got {limit!r}",
                             source=str(path), where=where)
        verdict = item.get("verdict")
        if verdict is not None and verdict not in VERDICTS:
            raise InputError(f"verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}",
                             source=str(path), where=where)
        assume = ", ".join(filter(None, [doc.get("assume", ""), item.get("assume", "")]))
        claims.append(Claim(
            text=item["text"], family=fam or "", assume=assume,
            domain=item.get("domain", doc.get("domain", "")),
            source=item.get("source", doc.get("source", path.name)),
            id=item.get("id", f"{path.stem}#{k + 1}"), note=item.get("note", ""),
            recorded=verdict, time_limit=None if limit is None else float(limit),
        ))
    return claims


def reads_only_the_optimum(text: str, where: str = "claim") -> bool:
    """Whether the claim reads the optimum and no family's metric (then it needs no family).
    A claim that does not parse is a :class:`UsageError` naming ``where``."""
    parsed = parse_claim(text, where)
    optima = optimum_refs(parsed)
    return bool(optima) and len(optima) == len(parsed.refs)


def _optimum_only(text: str, path: Path, where: str) -> bool:
    try:
        return reads_only_the_optimum(text, where)
    except UsageError as e:
        raise InputError(str(e), source=str(path), where=where) from None


def load(paths) -> list[Claim]:
    return [c for f in catalogue_files(paths) for c in load_file(f)]
