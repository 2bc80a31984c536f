"""The transcripts of the README and of the site's pages (docs/**/*.md) are what the commands
print today.

Every fenced block of README.md and docs/**/*.md that starts with ``$ schedverify`` is replayed: each
``$ schedverify ...`` line is run in process (in a scratch directory holding a copy of
``examples/``, so that files a page writes land there), and the lines under it up to the
next command are its expected output, stdout then stderr or stderr then stdout.  A line that
is only ``...`` stands for any number of lines; ``[exit N]`` is the exit code.  A command
piped into another is left out (the shell is not replayed), and so is ``plan``, whose table
depends on how far the search gets in its time limit (tests/test_plan.py checks it), unless it
plans for Megatron-LM or DeepSpeed (``--framework megatron|deepspeed``: their own schedules, no
search).
"""

from __future__ import annotations

import io
import re
import shlex
import shutil
from pathlib import Path

import pytest

from schedverify.cli import run

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
SKIPPED = ("plan",)


def _blocks() -> list[tuple[str, list[tuple[str, list[str]]]]]:
    """("FILE:line", [(command, expected lines), ...]) per block, replayable commands only."""
    out = []
    for page in PAGES:
        out += [(f"{page.relative_to(ROOT)}:{n}", c) for n, c in _page_blocks(page)]
    return out


def _page_blocks(page: Path) -> list[tuple[int, list[tuple[str, list[str]]]]]:
    text = page.read_text(encoding="utf-8")
    out = []
    for block in re.finditer(r"^```\n(\$ schedverify .*?)^```", text, re.S | re.M):
        first = text.count("\n", 0, block.start(1)) + 1
        lines = block.group(1).splitlines()
        starts = [k for k, line in enumerate(lines) if line.startswith("$ schedverify ")]
        commands = []
        for k, nxt in zip(starts, starts[1:] + [len(lines)]):
            argv = shlex.split(lines[k][2:])
            if "|" not in argv and (argv[1] not in SKIPPED or _searchless(argv)):
                commands.append((lines[k][2:], lines[k + 1:nxt]))
        if commands:
            out.append((first, commands))
    return out


def _searchless(argv: list[str]) -> bool:
    """A ``plan`` for a framework that runs only its own schedules: the same table every time."""
    return argv[1] == "plan" and any(f"--framework {f}" in " ".join(argv) for f in ("megatron", "deepspeed"))


def _matches(expected: list[str], got: list[str]) -> bool:
    """``expected`` with each ``...`` line standing for any run of lines equals ``got``."""
    pattern = "".join(r"(?:[^\n]*\n)*?" if line.strip() == "..." else re.escape(line) + r"\n"
                      for line in expected)
    return re.fullmatch(pattern, "".join(line + "\n" for line in got)) is not None


BLOCKS = _blocks()


def test_the_readme_and_the_site_have_transcripts():
    assert any(w.startswith("README.md:") for w, _ in BLOCKS), BLOCKS  # the front page's example
    assert any(w.startswith("docs/index.md:") for w, _ in BLOCKS), BLOCKS
    assert sum(len(c) for _, c in BLOCKS) >= 30, BLOCKS  # the tutorials' and how-tos' are read too
    for page in ("tutorials/first-check.md", "tutorials/pytorch.md", "howto/lower.md", "howto/pytorch.md",
                 "howto/prove.md", "howto/lint.md"):
        assert any(w.startswith(f"docs/{page}:") for w, _ in BLOCKS), page


@pytest.mark.parametrize("line, commands", BLOCKS, ids=[w for w, _ in BLOCKS])
def test_a_readme_transcript_is_what_the_commands_print(line, commands, tmp_path, monkeypatch):
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    monkeypatch.chdir(tmp_path)
    for command, expected in commands:  # in order: a command may read what one before wrote
        out, err = io.StringIO(), io.StringIO()
        code = run(shlex.split(command)[1:], out, err)
        want = [x for x in expected if not x.startswith("[exit ")]
        exits = [x for x in expected if x.startswith("[exit ")]
        printed = (out.getvalue(), err.getvalue())
        assert (_matches(want, "".join(printed).splitlines())
                or _matches(want, "".join(printed[::-1]).splitlines())), (
            f"{line}: {command}\n--- written\n" + "\n".join(want)
            + "\n--- today\n" + "".join(printed))
        assert exits in ([], [f"[exit {code}]"]), f"{line}: {command} exits {code}"
