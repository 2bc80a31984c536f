"""The Z3 engine: the only package that imports z3.

Import it explicitly (``import schedverify.smt``); ``import schedverify`` never loads z3.
"""
