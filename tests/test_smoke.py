import subprocess
import sys


def test_import_does_not_load_heavy_dependencies():
    code = ("import sys, schedverify, schedverify.cli, schedverify.check;"
            "print(' '.join(m for m in ('z3', 'sympy', 'matplotlib', 'torch', 'hypothesis') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""


def test_public_api_is_curated():
    import types

    import schedverify

    exported = {n for n in dir(schedverify)
                if not n.startswith("_") and not isinstance(getattr(schedverify, n), types.ModuleType)}
    assert exported - {"annotations"} == set(schedverify.__all__) - {"__version__"}
