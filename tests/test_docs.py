"""The documentation says what the code does today: every option of every command is
documented, the pictures are what docs/make_images.py draws now, the test count is the
suite's, the README is a front page whose links lead somewhere, and product text cites
published work or a docs section, never an issue of this project.  (The ``$`` transcripts of
the README and of docs/ are replayed by tests/test_readme.py.)"""

from __future__ import annotations

import argparse
import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

from schedverify.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
#: the pages docs/gen_reference.py and mkdocstrings generate from the code: they prove nothing here
GENERATED = {ROOT / "docs" / "reference" / n for n in ("cli.md", "codes.md", "api.md")}
#: the hand-written docs
DOCS = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if p not in GENERATED)]


def _docs_text() -> str:
    return "\n".join(p.read_text(encoding="utf-8") for p in DOCS)


def _options() -> list[tuple[str, str]]:
    """(command, option string) for every option of every sub-command and of the top level."""
    parser = build_parser()
    out = [("schedverify", o) for a in parser._actions for o in a.option_strings]
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                out += [(name, o) for a in sub._actions for o in a.option_strings]
    return [(c, o) for c, o in out if o not in ("-h", "--help")]


def test_every_option_of_every_command_is_in_the_docs():
    text = _docs_text()
    options = _options()
    assert len(options) > 100 and ("show", "--dpi") in options  # the parser was read
    missing = [f"{c} {o}" for c, o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])", text)]
    assert not missing, "in --help but in no doc (README.md, docs/): " + ", ".join(missing)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None,
                    reason="the docs count the suite with torch installed (its tier's files skip whole without it)")
def test_the_docs_count_the_tests_there_are():
    text = (ROOT / "docs" / "explanation" / "testing.md").read_text(encoding="utf-8")
    claimed = re.search(r"runs the whole suite \(about ([\d,]+) tests", text)
    assert claimed, "docs/explanation/testing.md no longer says how many tests there are"
    collected = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                str(ROOT / "tests")], capture_output=True, text=True, cwd=ROOT, timeout=600)
    count = re.search(r"^(\d+) tests? collected", collected.stdout, re.M)
    assert count, collected.stdout[-2000:] + collected.stderr[-2000:]
    n, said = int(count.group(1)), int(claimed.group(1).replace(",", ""))
    assert abs(said - n) <= 0.1 * n, f"the docs say about {said:,} tests; pytest collects {n:,}"


def test_the_runtime_table_says_it_needs_torch_for_its_rows():
    text = (ROOT / "docs" / "howto" / "lower.md").read_text(encoding="utf-8")
    paragraphs = [p for p in text.split("\n\n") if "`python bench/runtime_table.py`" in p]
    assert paragraphs
    for p in paragraphs:
        assert "PyTorch 2.13" in p and "without torch" in p, p


# --------------------------------------------------------------------------- the front page

README = ROOT / "README.md"
#: the two set-up lines CI (.ci/run) and users copy: they stay exactly as they are
SETUP = ('pip install . && schedverify check examples/1f1b.json', 'pip install -e ".[test]" && python -m pytest -n auto')


def test_the_readme_is_a_front_page_with_the_set_up_commands():
    text = README.read_text(encoding="utf-8")
    assert text.count("\n") <= 200, f"README.md has {text.count(chr(10))} lines: the rest belongs on the site"
    lines = text.splitlines()
    for command in SETUP:
        assert command in lines, command
    assert 'pip install -e ".[docs]" && mkdocs build --strict' in lines  # how to build the site
    assert "\n$ schedverify check examples/1f1b.json\n" in text  # one example, with its output


_LINK = re.compile(r"\]\(([^)#\s]+)(?:#([^)\s]+))?\)")


def _anchors(page: Path) -> set[str]:
    """The ids MkDocs' toc gives the page's headings (lower case, words joined by '-')."""
    heads = re.findall(r"^#+ (.*)$", page.read_text(encoding="utf-8"), re.M)
    return {re.sub(r"[\s]+", "-", re.sub(r"[^\w\s-]", "", h).strip().lower()) for h in heads}


def test_every_link_of_the_readme_leads_to_a_file_that_is_there():
    links = _LINK.findall(README.read_text(encoding="utf-8"))
    assert len(links) >= 20, links
    broken = [t for t, _ in links if not (ROOT / t).exists()]
    assert not broken, broken
    missing = [f"{t}#{a}" for t, a in links if a and a not in _anchors(ROOT / t)]
    assert not missing, missing
    # the site's pages: every one is linked from the front page (mkdocs checks the links between them)
    pages = {p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md") if p.name != "index.md"}
    assert not pages - {t for t, _ in links}, sorted(pages - {t for t, _ in links})


def test_the_anchor_reader_reads_headings_as_mkdocs_does():
    page = ROOT / "docs" / "tutorials" / "first-check.md"
    assert {"installing", "checking-a-schedule", "what-check-finds"} <= _anchors(page)
    assert not _LINK.findall("no link here") and _LINK.findall("[a](b.md#c)") == [("b.md", "c")]


#: "issue 16", "issue #12", "the issue's ...": this project's issues, which a user cannot see.
#: Another project's issue, named as such ("PyTorch issue #172668"), is a published source.
_ISSUE = re.compile(r"(?<!PyTorch )(?<!torchtitan )(?<!Megatron-LM )(?<!DeepSpeed )\bissue(?:'s)?\s+#?\d+"
                    r"|\bthe issue's\b|\bissue note\b", re.I)


def _product_files() -> list[Path]:
    files = [ROOT / "README.md", *(ROOT / "docs").rglob("*.md"), *(ROOT / "proofs").iterdir(),
             *(ROOT / "bench").rglob("*.py"), *(ROOT / "examples").rglob("*.py"),
             *(ROOT / "examples").rglob("*.toml"), *(ROOT / "schedverify").rglob("*.py"),
             *(ROOT / "schedverify").rglob("*.json"), *(ROOT / "schedverify").rglob("*.toml")]
    return [f for f in files if f.is_file()]


def test_product_text_never_cites_an_issue_of_this_project():
    files = _product_files()
    assert any(f.name == "optimum.toml" for f in files) and any(f.name == "spec.md" for f in files)
    found = []
    for f in files:
        for n, line in enumerate(f.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            if _ISSUE.search(line):
                found.append(f"{f.relative_to(ROOT)}:{n}: {line.strip()}")
    assert not found, "cite the published work or the docs section instead:\n" + "\n".join(found)


def test_the_issue_pattern_catches_what_it_is_for():
    assert _ISSUE.search('source = "issue 16 item 4"') and _ISSUE.search("see issue #12")
    assert _ISSUE.search("the issue's 20-byte CSV")
    assert not _ISSUE.search("hang (PyTorch issue #172668).") and not _ISSUE.search("lowering issues UNSHARD")


# --------------------------------------------------------------------------- the pictures

_TEXT = re.compile(r"<text\b[^>]*>([^<]*)</text>")
_MATPLOTLIB = re.compile(r"Matplotlib v([\w.]+),")


def test_no_committed_picture_names_a_file_that_is_gone():
    images = sorted((ROOT / "docs" / "images").glob("*.svg"))
    assert len(images) >= 12
    for svg in images:
        text = svg.read_text(encoding="utf-8")
        assert "SPEC.md" not in text, svg.name  # the contract is docs/spec.md
        for label in _TEXT.findall(text):
            for named in re.findall(r"\b[\w/.-]+\.md\b", label):
                assert (ROOT / named).is_file(), f"{svg.name} names {named}, which does not exist"


@pytest.mark.skipif(importlib.util.find_spec("matplotlib") is None, reason="needs matplotlib")
def test_the_committed_pictures_are_what_make_images_draws_today(tmp_path):
    import matplotlib

    done = subprocess.run([sys.executable, str(ROOT / "docs" / "make_images.py"), "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    committed = sorted(p.name for p in (ROOT / "docs" / "images").glob("*.svg"))
    assert sorted(p.name for p in tmp_path.glob("*.svg")) == committed
    for name in committed:
        old = (ROOT / "docs" / "images" / name).read_text(encoding="utf-8")
        new = (tmp_path / name).read_text(encoding="utf-8")
        # every word drawn, whichever matplotlib draws it
        assert _TEXT.findall(new) == _TEXT.findall(old), f"{name}: run python3 docs/make_images.py"
        drawn_by = _MATPLOTLIB.search(old)
        if drawn_by and drawn_by.group(1) == matplotlib.__version__:  # and byte for byte, by the same one
            assert new == old, f"{name} differs from what docs/make_images.py draws: regenerate it"


# --------------------------------------------------------------------------- the site


def _gen_reference():
    spec = importlib.util.spec_from_file_location("gen_reference", ROOT / "docs" / "gen_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_generated_reference_pages_are_the_code_today():
    pages = _gen_reference().pages()
    assert len(pages) == 2
    for path, text in pages.items():
        assert path.read_text(encoding="utf-8") == text, f"{path.name} is stale: run python3 docs/gen_reference.py"
    cli = pages[ROOT / "docs" / "reference" / "cli.md"]
    for command, option in _options():  # every option of every command is on the page
        if command != "schedverify":
            assert f"`{option}" in cli, (command, option)
    codes = pages[ROOT / "docs" / "reference" / "codes.md"]
    assert "| SV402 | `deadlock` |" in codes and "| SV701 |" in codes


def test_every_docs_page_is_in_the_sites_navigation():
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8")
    pages = [p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")]
    assert pages and not [p for p in pages if f" {p}" not in nav], nav


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None,
                    reason='needs pip install -e ".[docs]"')
def test_the_site_builds_in_strict_mode(tmp_path):
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
                          capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**__import__("os").environ, "NO_MKDOCS_2_WARNING": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert (tmp_path / "site" / "reference" / "cli" / "index.html").is_file()
    api = (tmp_path / "site" / "reference" / "api" / "index.html").read_text(encoding="utf-8")
    assert 'id="schedverify.check.check"' in api and 'id="schedverify.Schedule"' in api  # from the docstrings


_NOTEBOOK = ROOT / "docs" / "tutorials" / "notebook.ipynb"


@pytest.mark.skipif(any(importlib.util.find_spec(m) is None for m in ("nbclient", "nbformat", "ipykernel")),
                    reason='needs pip install -e ".[docs]"')
def test_the_notebook_tutorial_runs_and_shows_each_view():
    import nbformat
    from nbclient import NotebookClient

    nb = nbformat.read(_NOTEBOOK, as_version=4)
    assert all(not c.get("outputs") for c in nb.cells if c.cell_type == "code"), "commit it without outputs"
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}).execute()
    html = ["".join(o.get("data", {}).get("text/html", "")) for c in nb.cells if c.cell_type == "code"
            for o in c.outputs]
    assert any('class="sv-timeline"' in h and "sv-action" in h for h in html)  # the schedule's view
    assert any('class="sv-cycle"' in h for h in html)  # the deadlocked report draws its cycle
    assert any('class="schedverify-plan"' in h for h in html)  # the plan's table
