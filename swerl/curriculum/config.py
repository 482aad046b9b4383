"""The curriculum's one configuration."""

from __future__ import annotations

from typing import Optional

from pydantic import ConfigDict, Field, field_validator, model_validator

from swerl.curriculum.bugs import BUG_KINDS, BugKindName
from swerl.curriculum.names import PACKAGE_PREFIXES, PACKAGE_SUFFIXES
from swerl.util.settings import SeedSettings

SPLITS = ("warmup", "train", "heldout")
# Every task is its own repository named after its package, so the package names bound the total.
MAX_TASKS = len(PACKAGE_PREFIXES) * len(PACKAGE_SUFFIXES)
MAX_PER_SPLIT = MAX_TASKS


class CurriculumConfig(SeedSettings):
    """How many tasks per split, which bugs, and the seed that makes it all reproducible (the same seed writes
    byte-identical files)."""

    model_config = ConfigDict(extra="forbid")

    warmup: int = Field(60, ge=0, le=MAX_PER_SPLIT, description="Tasks in warmup.jsonl (e.g. for a first RFT round on scripted or sampled successes).")
    train: int = Field(60, ge=0, le=MAX_PER_SPLIT, description="Tasks in train.jsonl (the RL iterations' task set).")
    heldout: int = Field(40, ge=0, le=MAX_PER_SPLIT, description="Tasks in heldout.jsonl: repositories, names and (bug kind, template, names) combinations seen in no other split.")
    owner: str = Field("swerl-curriculum", min_length=1, max_length=39, pattern=r"^[a-z0-9][a-z0-9-]*$",
                       description="GitHub-style owner of every generated repository: repo `<owner>/<package>`, mirror `<owner>__<package>`.")
    bug_kinds: Optional[list[BugKindName]] = Field(None, min_length=1, max_length=len(BUG_KINDS),
                                                   description="Bug kinds to draw from, cycled evenly within each split; None: all of them.")

    name_file: bool = Field(False, description="The issue text names the file defining the function, as a traceback or a "
                                               "careful reporter would (a localisation hint for very small policies).")

    @field_validator("bug_kinds")
    @classmethod
    def _distinct(cls, v: list[str] | None) -> list[str] | None:
        if v is not None and len(set(v)) != len(v):
            raise ValueError(f"bug_kinds lists a kind twice: {v}; name each kind once")
        return v

    @model_validator(mode="after")
    def _total(self) -> "CurriculumConfig":
        total = self.warmup + self.train + self.heldout
        if not 1 <= total <= MAX_TASKS:
            raise ValueError(f"warmup + train + heldout = {total}; it must be between 1 and {MAX_TASKS} "
                             "(each task needs its own package name)")
        return self

    @property
    def kinds(self) -> tuple[str, ...]:
        """The bug kinds in use, in the canonical order of :data:`swerl.curriculum.bugs.BUG_KINDS`."""
        chosen = set(self.bug_kinds or BUG_KINDS)
        return tuple(k for k in BUG_KINDS if k in chosen)

    def counts(self) -> dict[str, int]:
        return {split: getattr(self, split) for split in SPLITS}
