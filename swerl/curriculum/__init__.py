"""A curriculum of small procedurally generated SWE tasks, for proving that a tiny policy learns.

Each task is a stdlib-only package with one module of a few small functions, one of them
carrying a one-line bug of a known kind (:mod:`swerl.curriculum.bugs`), its tests, a gold
patch, and a short bug report computed by running the code. See
:func:`swerl.curriculum.generate.generate_curriculum` for the files written.
"""

from swerl.curriculum.bugs import BUG_KINDS
from swerl.curriculum.config import SPLITS, CurriculumConfig
from swerl.curriculum.generate import CurriculumSet, generate_curriculum

__all__ = ["BUG_KINDS", "SPLITS", "CurriculumConfig", "CurriculumSet", "generate_curriculum"]
