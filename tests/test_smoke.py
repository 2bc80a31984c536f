import subprocess
import sys


def test_import_does_not_load_heavy_dependencies():
    code = ("import sys, schedverify, schedverify.cli, schedverify.check;"
            "print(' '.join(m for m in ('z3', 'sympy', 'matplotlib', 'torch', 'hypothesis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_public_api_is_curated():
    import schedverify

    exported = {n for n in dir(schedverify) if not n.startswith("_")}
    modules = {"check", "cost", "diagnostics", "errors", "graph", "io", "model", "deps", "render", "cli",
               "generators", "smt", "formulas", "claims", "strategies"}
    assert exported - modules - {"annotations"} == set(schedverify.__all__) - {"__version__"}
