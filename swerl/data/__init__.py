"""SWE tasks: the record, reading and writing task files, and the curation filters."""

from swerl.data.filters import (
    CurationConfig,
    FilterVerdict,
    PatchSize,
    apply_filters,
    flaky_tests,
    gold_patch_within_limits,
    import_or_attribute_failure,
    no_flaky_tests,
    no_import_or_attribute_failures,
    patch_size,
)
from swerl.data.loaders import RecordError, TaskLoadError, TaskSet, load_tasks, save_tasks
from swerl.data.task import InstallConfig, Task

__all__ = [
    "CurationConfig",
    "FilterVerdict",
    "InstallConfig",
    "PatchSize",
    "RecordError",
    "Task",
    "TaskLoadError",
    "TaskSet",
    "apply_filters",
    "flaky_tests",
    "gold_patch_within_limits",
    "import_or_attribute_failure",
    "load_tasks",
    "no_flaky_tests",
    "no_import_or_attribute_failures",
    "patch_size",
    "save_tasks",
]
