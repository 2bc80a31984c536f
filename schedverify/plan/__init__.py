"""Planning a real training run: costs in seconds, memory in bytes, from a model description
(:mod:`.transformer`, :mod:`.hardware`) or a measurement (:mod:`.profile`); every family and
the search engine's optimum ranked under them (:mod:`.planner`); the winner exported as the
CSV torchtitan runs (:mod:`.torchtitan`).

    >>> from schedverify import plan
    >>> source = plan.from_model("examples/llama3-8b.toml")          # doctest: +SKIP
    >>> result = plan.plan(source.stages, 4, 32, memory_limit=source.memory_limit)  # doctest: +SKIP
    >>> plan.export(result.winner, "zb.csv")                         # doctest: +SKIP

Activation bytes come from per-backend formulas (:mod:`.activations`) or a calibration of the
model's own code (:mod:`.calibration`, which runs it through :mod:`.autograd`, the one module
that imports torch).

Nothing here imports sympy, z3 or torch until it is used (the search loads z3, a measurement
torch).
"""

from .calibration import Calibration, calibrate, load_calibration
from .torchtitan import export, flags
from .planner import Candidate, Plan, plan
from .profile import dump_profile, load_chrome_trace, load_profile
from .sources import Source, from_args, from_model, from_profile, from_trace
from .stages import StageProfile
from .transformer import TransformerModel, load_model, stage_profile

__all__ = [
    "Calibration", "Candidate", "Plan", "Source", "StageProfile", "TransformerModel", "calibrate", "dump_profile",
    "export", "from_args", "from_model", "from_profile", "from_trace", "load_calibration", "load_chrome_trace",
    "load_model", "load_profile", "plan", "flags", "stage_profile",
]
