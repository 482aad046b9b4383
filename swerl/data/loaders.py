"""Read and write task files: JSONL (optionally gzipped), JSON, Parquet, Hugging Face datasets.

Every record is validated as a :class:`~swerl.data.task.Task`. A bad record never stops
the reading: each problem becomes a :class:`RecordError` that says which file, which
record (``line 7`` / ``record 3`` / ``row 12``, counted from 1), which instance and which
field, so a whole file's problems are reported at once instead of one per attempt.
"""

from __future__ import annotations

import gzip
import json
import os
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from swerl.data.task import Task


class SkipInvalidSettings(BaseModel):
    """What a run does with bad input records."""

    skip_invalid: bool = Field(False, description="Go on without the invalid task records (and, when grading "
                               "predictions, the bad prediction lines: missing instance_id or model_patch, unknown "
                               "instance), each one reported. Otherwise an invalid task record fails the run before it "
                               "starts, and a bad prediction line fails it after the valid predictions are graded.")


SUPPORTED_FORMATS = (
    ".jsonl",
    ".jsonl.gz",
    ".json",
    ".parquet",
    "a directory written by datasets' save_to_disk",
)
JSON_LIST_KEYS = ("data", "instances", "tasks")
MAX_LISTED_ERRORS = 50
SKIP_INVALID_HINT = "fix the records or pass --skip-invalid to load the valid ones"


@dataclass(frozen=True)
class RecordError:
    """One problem with one record of a task file."""

    source: str  # the file (or dataset directory) as given
    location: str  # "line 7", "record 3" or "row 12", counted from 1
    instance_id: str | None  # None when the record has no usable instance_id
    field: str | None  # dotted path such as "install_config.python"; None for the whole record
    message: str

    def __str__(self) -> str:
        where = f"{self.source} {self.location}"
        if self.instance_id is not None:
            where += f" (instance_id={self.instance_id})"
        what = f"{self.field}: {self.message}" if self.field else self.message
        return f"{where}: {what}"


@dataclass
class TaskSet:
    """The valid tasks of one source, and the problems found in the others."""

    tasks: list[Task]
    errors: list[RecordError] = field(default_factory=list)
    source: str = ""

    def by_id(self) -> dict[str, Task]:
        return {task.instance_id: task for task in self.tasks}

    def __len__(self) -> int:
        return len(self.tasks)


class TaskLoadError(Exception):
    """A task file could not be read, or holds invalid records (listed in ``errors``)."""

    def __init__(self, errors: Sequence[RecordError] = (), *, message: str | None = None) -> None:
        self.errors = list(errors)
        super().__init__(message if message is not None else _describe(self.errors))


def _describe(errors: list[RecordError]) -> str:
    shown = [f"  {error}" for error in errors[:MAX_LISTED_ERRORS]]
    if len(errors) > MAX_LISTED_ERRORS:
        shown.append(f"  ... and {len(errors) - MAX_LISTED_ERRORS} more")
    noun = "problem" if len(errors) == 1 else "problems"
    sources = sorted({error.source for error in errors})
    head = f"{len(errors)} {noun} in {', '.join(sources)}:"
    return "\n".join([head, *shown, SKIP_INVALID_HINT])


# --- reading ------------------------------------------------------------------------

# A raw record: where it sits, and the parsed object (or the reason it could not be parsed).
_Raw = tuple[str, Any, str | None]


def load_tasks(path: str | Path, *, skip_invalid: bool = False, split: str | None = None) -> TaskSet:
    """Read and validate every task in ``path``.

    ``split`` picks one split of a Hugging Face ``DatasetDict`` directory; a directory with
    a single split needs none. With ``skip_invalid`` the valid tasks are returned with the
    errors of the others (possibly no tasks at all: the caller decides whether that is
    fatal); without it any invalid record raises :class:`TaskLoadError` listing them all.
    """
    path = Path(path)
    source = str(path)
    if not path.exists():
        raise TaskLoadError(message=f"task file not found: {source} (check the path and the working directory)")
    fmt = _format_of(path)
    if split is not None and fmt != "hf":
        raise TaskLoadError(
            message=f"split={split!r} was given, but {source} is not a Hugging Face DatasetDict directory; "
            "splits only exist there, so drop the split"
        )
    try:
        if fmt == "jsonl":
            raws: Iterable[_Raw] = _read_jsonl(path)
        elif fmt == "json":
            raws = _read_json(path)
        elif fmt == "parquet":
            raws = _read_parquet(path)
        else:
            raws = _read_hf(path, split)
        task_set = _validate(raws, source)
    except TaskLoadError:
        raise
    except (OSError, EOFError, ValueError) as e:  # corrupt gzip / Parquet / Arrow files
        raise TaskLoadError(message=f"cannot read {source} as {fmt}: {type(e).__name__}: {e}") from e
    if task_set.errors and not skip_invalid:
        raise TaskLoadError(task_set.errors)
    return task_set


def _format_of(path: Path) -> str:
    if path.is_dir():
        if (path / "dataset_dict.json").is_file() or (path / "state.json").is_file():
            return "hf"
        raise TaskLoadError(
            message=f"{path} is a directory but not a Hugging Face dataset written by save_to_disk "
            "(it has neither dataset_dict.json nor state.json); pass a task file or a saved dataset"
        )
    name = path.name.lower()
    if name.endswith((".jsonl", ".jsonl.gz")):
        return "jsonl"
    if name.endswith(".json"):
        return "json"
    if name.endswith(".parquet"):
        return "parquet"
    raise TaskLoadError(
        message=f"cannot tell the format of {path} from its name; supported formats: {', '.join(SUPPORTED_FORMATS)}"
    )


def _read_jsonl(path: Path) -> Iterator[_Raw]:
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    # Bytes, decoded line by line: one badly encoded line is one error, not a lost file.
    with opener(path, "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            where = f"line {number}"
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                yield where, None, f"not valid UTF-8 (byte {e.start + 1})"
                continue
            if not text.strip():
                continue
            try:
                yield where, json.loads(text), None
            except json.JSONDecodeError as e:
                # pos, not colno: a record is one line, and its newline would make colno 1.
                # A line cut short (a writer killed mid-record) fails at its very end.
                at = "the end of the line" if e.pos >= len(text.rstrip()) else f"column {e.pos + 1}"
                yield where, None, f"not valid JSON: {e.msg} at {at}"


def _read_json(path: Path) -> Iterator[_Raw]:
    try:
        with path.open("rb") as handle:
            document = json.load(handle)
    except json.JSONDecodeError as e:
        raise TaskLoadError(message=f"{path} is not valid JSON: {e.msg} at line {e.lineno} column {e.colno}") from e
    except UnicodeDecodeError as e:
        raise TaskLoadError(message=f"{path} is not valid UTF-8 text: {e}") from e
    if isinstance(document, dict):
        key = next((k for k in JSON_LIST_KEYS if isinstance(document.get(k), list)), None)
        if key is None:
            raise TaskLoadError(
                message=f"{path} holds a JSON object without a list of tasks under any of "
                f"{', '.join(repr(k) for k in JSON_LIST_KEYS)} (its keys: {', '.join(sorted(document)[:10]) or 'none'}); "
                "write a list of task records, or one of those keys"
            )
        document = document[key]
    if not isinstance(document, list):
        raise TaskLoadError(message=f"{path} must hold a JSON list of task records, not a {_json_type(document)}")
    for number, record in enumerate(document, start=1):
        yield f"record {number}", record, None


def _read_parquet(path: Path) -> Iterator[_Raw]:
    import pyarrow.parquet as pq

    number = 0
    # Batches keep memory flat on the multi-GB SWE-rebench exports; to_pylist gives plain
    # Python values (no numpy), which pydantic and json both take as they are.
    for batch in pq.ParquetFile(path).iter_batches(batch_size=1024):
        for record in batch.to_pylist():
            number += 1
            yield f"row {number}", _drop_null_extras(record), None


def _read_hf(path: Path, split: str | None) -> Iterator[_Raw]:
    import datasets

    loaded = datasets.load_from_disk(str(path))
    if isinstance(loaded, datasets.DatasetDict):
        names = sorted(loaded.keys())
        if split is None:
            if len(names) != 1:
                raise TaskLoadError(
                    message=f"{path} holds several splits ({', '.join(names)}); choose one with split= (--split)"
                )
            split = names[0]
        if split not in loaded:
            raise TaskLoadError(message=f"{path} has no split {split!r}; its splits are: {', '.join(names)}")
        loaded = loaded[split]
    elif split is not None:
        raise TaskLoadError(
            message=f"split={split!r} was given, but {path} holds a single Dataset, not a DatasetDict; drop the split"
        )
    for number, record in enumerate(loaded, start=1):
        yield f"row {number}", _drop_null_extras(record), None


def _drop_null_extras(record: dict[str, Any]) -> dict[str, Any]:
    """Remove null extra fields, which a columnar file adds to rows that never had them.

    Parquet and Arrow give every row every column, so an extra field present in one
    record reads back as null in all the others; without this, saving and loading would
    add fields to tasks.
    """
    return {k: v for k, v in record.items() if v is not None or k in Task.model_fields}


def _validate(raws: Iterable[_Raw], source: str) -> TaskSet:
    tasks: list[Task] = []
    errors: list[RecordError] = []
    first_seen: dict[str, str] = {}
    for where, record, problem in raws:
        if problem is not None:
            errors.append(RecordError(source, where, None, None, problem))
            continue
        if not isinstance(record, dict):
            errors.append(RecordError(source, where, None, None, f"expected a JSON object (a task record), got a {_json_type(record)}"))
            continue
        instance_id = record.get("instance_id")
        instance_id = instance_id if isinstance(instance_id, str) and instance_id else None
        try:
            task = Task.model_validate(record)
        except ValidationError as e:
            errors.extend(RecordError(source, where, instance_id, _field_path(d["loc"]), _short_message(d)) for d in e.errors())
            continue
        if task.instance_id in first_seen:
            errors.append(
                RecordError(source, where, task.instance_id, "instance_id", f"duplicate instance_id: first seen at {first_seen[task.instance_id]}")
            )
            continue
        first_seen[task.instance_id] = where
        tasks.append(task)
    return TaskSet(tasks=tasks, errors=errors, source=source)


def _field_path(loc: tuple[Any, ...]) -> str | None:
    path = ""
    for part in loc:
        path += f"[{part}]" if isinstance(part, int) else (f".{part}" if path else str(part))
    return path or None


def _short_message(error: Any) -> str:
    """pydantic's message without its 'Value error, ' prefix, with the offending value for type errors."""
    kind, message = error["type"], error["msg"]
    if kind == "missing":
        return "required field is missing"
    if kind == "value_error":
        return message.removeprefix("Value error, ")
    return f"{message}, got {error['input']!r:.80}"


def _json_type(value: Any) -> str:
    names = {dict: "object", list: "list", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


# --- writing ------------------------------------------------------------------------


def save_tasks(tasks: Iterable[Task], path: str | Path) -> Path:
    """Write ``tasks`` to ``path`` as JSONL (``.jsonl``, ``.jsonl.gz``) or Parquet (``.parquet``).

    The file is written next to its destination and renamed into place, so a reader never
    sees half a file. In Parquet, nested values (``install_config``, dict-valued extra
    fields) are stored as JSON text: Parquet cannot hold an empty struct and pads sparse
    ones with nulls. :func:`load_tasks` reads ``install_config`` back from that text.
    """
    path = Path(path)
    name = path.name.lower()
    if not name.endswith((".jsonl", ".jsonl.gz", ".parquet")):
        raise ValueError(f"cannot save tasks to {path}: use a name ending in .jsonl, .jsonl.gz or .parquet")
    records = [task.to_record() for task in tasks]
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        if name.endswith(".parquet"):
            _write_parquet(records, tmp)
        else:
            lines = "".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records).encode("utf-8")
            # mtime=0: the same tasks give the same bytes, so saved files can be compared by hash
            tmp.write_bytes(gzip.compress(lines, mtime=0) if name.endswith(".gz") else lines)
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)
    return path


def _write_parquet(records: list[dict[str, Any]], target: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    # Columns from every record's keys, not pa.Table.from_pylist: it keeps only the first record's.
    names = list(dict.fromkeys(key for record in records for key in record))
    columns = {}
    for key in names:
        values = [record.get(key) for record in records]
        if all(_is_flat(v) for v in values):
            try:
                columns[key] = pa.array(values)
                continue
            except (pa.ArrowInvalid, pa.ArrowTypeError):
                pass  # mixed types across records: fall back to JSON text
        columns[key] = pa.array([None if v is None else json.dumps(v, ensure_ascii=False) for v in values], type=pa.string())
    pq.write_table(pa.table(columns) if columns else pa.table({}), target)


def _is_flat(value: Any) -> bool:
    if isinstance(value, list):
        return all(isinstance(item, str) for item in value)
    return value is None or isinstance(value, (str, int, float, bool))
