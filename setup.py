"""Build configuration beyond pyproject.toml: the optional compiled kernel.

``schedverify._kernel`` (schedverify/_kernel.c) speeds up `check` on large schedules.  It is
optional: when no C compiler is available the build warns and the package installs without
it, running the same checks in pure Python (tests/test_kernel.py holds the two equal).
"""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension("schedverify._kernel", ["schedverify/_kernel.c"], optional=True,
                  extra_compile_args=["-O2"]),
    ],
)
