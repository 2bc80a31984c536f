"""The Z3 engine: the only package that imports z3.

Import it explicitly (``import schedverify.smt``); ``import schedverify`` never loads z3, and
neither does importing this package: z3 is loaded when a check or search first runs.

- :func:`check_z3`: an independent SMT encoding of docs/spec.md section 3, returning the same
  :class:`~schedverify.diagnostics.Report` (codes, actions) as :func:`schedverify.check`.
- :func:`run_engine`: ``"graph"``, ``"z3"`` or ``"both"`` (raises
  :class:`EngineDisagreement` when the two engines differ).
- :func:`search`: the makespan-optimal (or memory-optimal) schedule of a given shape, as a
  :class:`SearchResult` with its lower bound and proof.  :mod:`.search` holds the Z3
  encoding and the search around it; the shape (:func:`make_problem`), the lower bounds and
  the heuristics it starts from are plain Python, in :mod:`schedverify.search`.
"""

from ..engines import disagreements, run_engine
from .check import EngineDisagreement, check_z3
from ..search.bounds import lower_bound
from ..search.problem import Problem, make_problem
from .search import SearchResult, search

__all__ = ["EngineDisagreement", "Problem", "SearchResult", "check_z3", "disagreements",
           "lower_bound", "make_problem", "run_engine", "search"]
