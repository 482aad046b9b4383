"""What grading says about one prediction."""

from __future__ import annotations

from enum import Enum

from pydantic import BaseModel, Field, field_validator


class FailureClass(str, Enum):
    """Why a prediction is not resolved. ``infra_error`` is never the agent's fault."""

    NO_PATCH = "no_patch"
    APPLY_FAILED = "apply_failed"
    TIMEOUT = "timeout"
    TESTS_FAILED = "tests_failed"
    TAMPERED = "tampered"  # the run's evidence was forged, broken or contradicts itself: never a reward
    INFRA_ERROR = "infra_error"
    # the task itself cannot be graded (its test patch does not apply, its log parser is unknown):
    # a verdict about the task, not the agent's failure and not the infrastructure's, so never retried
    TASK_BROKEN = "task_broken"


class TestDetail(BaseModel):
    """One FAIL_TO_PASS or PASS_TO_PASS test after grading."""

    __test__ = False  # not a pytest test class

    expected: str = Field(description="FAIL_TO_PASS or PASS_TO_PASS.")
    status: str = Field(description="PASSED, FAILED, ERROR, SKIPPED, XFAIL, or MISSING when absent from the log.")
    passed: bool


class Prediction(BaseModel):
    """SWE-bench's predictions format."""

    instance_id: str = Field(min_length=1)
    model_name_or_path: str = ""
    model_patch: str | None = Field(description="The diff to grade; null (SWE-bench's patch_is_None) grades as no patch.")

    @field_validator("model_name_or_path", mode="before")
    @classmethod
    def _no_name(cls, v: object) -> object:
        return "" if v is None else v


class GradeResult(BaseModel):
    """The graded outcome of one prediction (one JSON line of RESULTS.jsonl)."""

    instance_id: str
    model_name_or_path: str = ""
    resolved: bool
    failure_class: FailureClass | None = Field(None, description="None exactly when resolved.")
    reason: str = ""
    tests: dict[str, TestDetail] = Field(default_factory=dict)
    dropped_files: dict[str, str] = Field(default_factory=dict, description="Diff sections not applied, with why.")
    tamper_flags: list[str] = Field(default_factory=list, description="Tamper signature classes in the lines the patch "
                                    "adds (swerl.grading.tamper_flags): evidence of probing, never a verdict.")
    canaries_not_built: dict[str, str] = Field(default_factory=dict, description="FAIL_TO_PASS tests root could not "
                                               "copy as canaries, with why (decided before any code under test ran; "
                                               "their outcomes rest on the other layers).")
    applied_with: str | None = Field(None, description="The command that applied the patch (swebench's order: "
                                     "git apply, --3way, --reject, patch --fuzz=5; or 'already applied').")
    repairs: list[str] = Field(default_factory=list, description="What swerl mended in the patch before applying it "
                               "(GradingConfig.repair_patches, off by default): 'final newline', 'hunk counts'.")
    test_exit_code: int | None = None
    log_valid: bool = True
    swebench_log_resolved: bool | None = Field(None, description="What swebench's grading functions (get_logs_eval, "
                                               "get_resolution_status) say of swerl's kept log, before swerl's evidence "
                                               "checks: the plain reading of the same run, not swebench's harness run on "
                                               "the prediction (None when no tests ran).")
    image: str | None = None
    duration_s: float = 0.0
    attempts: int = 1
    log_dir: str | None = None

    @property
    def is_infra_error(self) -> bool:
        return self.failure_class is FailureClass.INFRA_ERROR
