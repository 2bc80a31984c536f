"""The search's plain-Python half: the problem a search solves (:mod:`.problem`: sizes,
placement, split backward, costs and memory, in whole-number units), every lower bound
(:mod:`.bounds`) and the heuristics that find good schedules fast (:mod:`.heuristics`).
None of it imports z3; :mod:`schedverify.smt.search` adds the Z3 encoding that proves
optimality and closes the gap.
"""
