"""Published claims and the prover that judges them (docs/spec.md section 7).

``prove(Claim(...))`` returns PROVED / REFUTED / UNKNOWN with the range, the counterexample
or the reason; :mod:`.catalogue` reads the claim files of ``proofs/``.
"""

from .prover import PROVED, REFUTED, UNKNOWN, Result, prove
from .statement import METRICS, Claim, parse_claim

__all__ = ["METRICS", "PROVED", "REFUTED", "UNKNOWN", "Claim", "Result", "parse_claim", "prove"]
