"""Trajectories on disk: a folder of Parquet parts, one written atomically per finished run.

A Parquet file cannot be appended to in place, and a writer killed mid-file leaves no
readable footer. So each finished trajectory becomes its own small part
(``part-<time>-<uuid>.parquet``, written to a temp name then renamed): a crash loses at
most the runs still in flight, and a rerun skips every (instance_id, sample_index) that
already has a part, except those that ended in ``error`` or failed for infrastructure
(``Trajectory.infra_failed``): their next part replaces them. ``compact()`` merges parts
when the folder gets crowded.

Schema (one row per trajectory; see swerl.agent.trajectory for the token layout):

==================== ================ ==================================================
column               type             meaning
==================== ================ ==================================================
instance_id          string           task id
sample_index         int32            0..G-1 within the task
trajectory_id        string           "<instance_id>/<sample_index>"
policy_version       string           weights that sampled it
model, engine        string           model path/name, engine name (hf, vllm, openai, scripted)
seed                 int64 (null)     base seed of the run
prompt_ids           list<int32>      chat-template prompt
response_ids         list<int32>      replies and turn suffixes, in order
action_mask          list<int8>       1 = sampled by the policy, 0 = environment/template
logprobs             list<float32>    sampler log-prob on action tokens, 0 elsewhere
exact_ids            bool             false if an HTTP engine forced re-tokenization
exit_reason          string           submitted | max_turns | context_exceeded | timeout | format_errors | sandbox_broken | error | infra_error
error                string (null)    infrastructure error message
patch                string           git diff at the end of the run
num_turns            int32            replies given
generation_s, environment_s, wall_s, sandbox_s, grading_s  float64  time split (sandbox: start + tools + removal; grading: waiting for the verdict)
resolved             bool (null)      grading outcome (null = not graded)
grade_failure        string (null)    the grader's failure class
tamper_flags         list<string>     tamper signature classes in the patch (swerl.grading.tamper_flags)
swebench_log_resolved bool (null)    swebench's grading functions on the same log (before swerl's layers)
fail_to_pass_passed, pass_to_pass_failed  int32 (null)
staleness            int32 (null)     versions behind the update that trains on it (null: none named)
messages_json        string           the conversation as chat messages (JSON)
turns_json           string           per-turn records (JSON)
==================== ================ ==================================================
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from swerl.agent.trajectory import ExitReason, Trajectory, Turn, is_infra_failure

SCHEMA = pa.schema(
    [
        ("instance_id", pa.string()),
        ("sample_index", pa.int32()),
        ("trajectory_id", pa.string()),
        ("policy_version", pa.string()),
        ("model", pa.string()),
        ("engine", pa.string()),
        ("seed", pa.int64()),
        ("prompt_ids", pa.list_(pa.int32())),
        ("response_ids", pa.list_(pa.int32())),
        ("action_mask", pa.list_(pa.int8())),
        ("logprobs", pa.list_(pa.float32())),
        ("exact_ids", pa.bool_()),
        ("exit_reason", pa.string()),
        ("error", pa.string()),
        ("patch", pa.string()),
        ("num_turns", pa.int32()),
        ("generation_s", pa.float64()),
        ("environment_s", pa.float64()),
        ("wall_s", pa.float64()),
        ("sandbox_s", pa.float64()),
        ("grading_s", pa.float64()),
        ("resolved", pa.bool_()),
        ("grade_failure", pa.string()),
        ("tamper_flags", pa.list_(pa.string())),
        ("swebench_log_resolved", pa.bool_()),
        ("fail_to_pass_passed", pa.int32()),
        ("pass_to_pass_failed", pa.int32()),
        ("staleness", pa.int32()),
        ("messages_json", pa.string()),
        ("turns_json", pa.string()),
    ]
)
_PLAIN = [f.name for f in SCHEMA if f.name not in ("messages_json", "turns_json", "exit_reason")]


def to_row(t: Trajectory) -> dict:
    row = {name: getattr(t, name) for name in _PLAIN}
    row["exit_reason"] = t.exit_reason.value
    row["messages_json"] = json.dumps(t.messages, ensure_ascii=False)
    row["turns_json"] = json.dumps([turn.model_dump() for turn in t.turns], ensure_ascii=False)
    return row


def from_row(row: dict) -> Trajectory:
    # a column added after a part was written reads as null there: take the field's default
    data = {k: v for k, v in row.items() if k not in ("messages_json", "turns_json")
            and not (v is None and Trajectory.model_fields.get(k) is not None and Trajectory.model_fields[k].default is not None)}
    data["messages"] = json.loads(row["messages_json"] or "[]")
    data["turns"] = [Turn(**x) for x in json.loads(row["turns_json"] or "[]")]
    return Trajectory(**data)


class TrajectoryStore:
    """The Parquet folder of one rollout run."""

    def __init__(self, directory: Path) -> None:
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)

    def parts(self) -> list[Path]:
        return sorted(self.directory.glob("part-*.parquet"))

    def append(self, trajectory: Trajectory) -> Path:
        table = pa.Table.from_pylist([to_row(trajectory)], schema=SCHEMA)
        name = f"part-{time.time_ns():020d}-{uuid.uuid4().hex[:8]}.parquet"
        tmp = self.directory / f".{name}.tmp"
        pq.write_table(table, tmp)
        tmp.rename(self.directory / name)
        return self.directory / name

    def table(self) -> pa.Table:
        parts = self.parts()
        if not parts:
            return SCHEMA.empty_table()
        return pa.concat_tables([pq.read_table(p, schema=SCHEMA) for p in parts])

    def _outcomes(self) -> dict[tuple[str, int], tuple[str, str | None, str | None]]:
        """(exit_reason, grade_failure, error) of each pair's latest row, reading only those columns."""
        t = self.table().select(["instance_id", "sample_index", "exit_reason", "grade_failure", "error"]).to_pydict()
        return {(i, s): (r, g, e) for i, s, r, g, e in zip(t["instance_id"], t["sample_index"], t["exit_reason"],
                                                             t["grade_failure"], t["error"])}

    def done(self) -> set[tuple[str, int]]:
        """Pairs a rerun keeps: their latest trajectory is neither an ``error`` nor an infrastructure failure."""
        return {pair for pair, (reason, grade_failure, _) in self._outcomes().items()
                if reason != ExitReason.error.value and not is_infra_failure(reason, grade_failure)}

    def infra_failures(self) -> dict[tuple[str, int], str]:
        """Pairs whose latest trajectory failed for infrastructure (``Trajectory.infra_failed``), with why."""
        return {pair: error or f"grading: {grade_failure}" for pair, (reason, grade_failure, error) in self._outcomes().items()
                if is_infra_failure(reason, grade_failure)}

    def latest_rows(self) -> list[dict]:
        """One row per (instance_id, sample_index): the last one written (a retried error is replaced)."""
        rows: dict[tuple[str, int], dict] = {}
        for r in self.table().to_pylist():  # parts are read oldest first
            rows[(r["instance_id"], r["sample_index"])] = r
        return [rows[k] for k in sorted(rows)]

    def trajectories(self) -> list[Trajectory]:
        return [from_row(r) for r in self.latest_rows()]

    def compact(self) -> Path | None:
        """Merge all parts into one, keeping the latest row of each pair; the merged part lands before the old ones go."""
        parts = self.parts()
        if len(parts) < 2:
            return parts[0] if parts else None
        return self._replace(parts, self.latest_rows())

    def restamp_staleness(self, update_start: str) -> int:
        """Count each stamped trajectory's staleness again from ``update_start`` (the update that trains on them
        starts elsewhere than the rollout was told: the iteration before trained nothing, so its policy carried
        forward); the changed rows replace the store's parts in one merged part. Returns how many changed."""
        from swerl.rl.staleness import StalenessError, staleness

        parts = self.parts()
        rows, changed = self.latest_rows(), 0
        for row in rows:
            if row["staleness"] is None:
                continue
            try:
                now = staleness(from_row(row), update_start)
            except StalenessError:  # versions out of the pipeline's order: the update refuses them, saying why
                continue
            changed += now != row["staleness"]
            row["staleness"] = now
        if changed:
            self._replace(parts, rows)
        return changed

    def _replace(self, parts: list[Path], rows: list[dict]) -> Path:
        table = pa.Table.from_pylist(rows, schema=SCHEMA)
        name = f"part-{time.time_ns():020d}-compact.parquet"
        tmp = self.directory / f".{name}.tmp"
        pq.write_table(table, tmp)
        tmp.rename(self.directory / name)
        for p in parts:
            p.unlink()
        return self.directory / name
