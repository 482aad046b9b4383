"""swebench's own harness run beside swerl's grader: the predictions' variants and swebench's verdicts."""

from __future__ import annotations

import subprocess
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path


def variant(repo: Path, commit: str, gold: str, edit: dict, tmp: Path) -> str:
    """The diff of ``commit`` after the gold patch and ``edit`` ({path: new text, or a function of the old text,
    "" for a new file})."""
    work = tmp / f"work-{uuid.uuid4().hex[:6]}"
    subprocess.run(["git", "clone", "-q", str(repo), str(work)], check=True)
    subprocess.run(["git", "checkout", "-q", commit], cwd=work, check=True)
    if gold:
        subprocess.run(["git", "apply", "-"], input=gold, text=True, cwd=work, check=True)
    for path, change in edit.items():
        target = work / path
        target.parent.mkdir(parents=True, exist_ok=True)
        before = target.read_text() if target.exists() else None
        after = change(before or "") if callable(change) else change
        if after == before:  # an anchor that moved: the variant would silently be the gold patch
            raise ValueError(f"the edit of {path} changes nothing")
        target.write_text(after)
    subprocess.run(["git", "add", "-A"], cwd=work, check=True)
    return subprocess.run(["git", "diff", "--cached", commit], cwd=work, check=True, capture_output=True, text=True).stdout


def swebench_verdicts(records: dict, preds: list, run_id: str) -> list[bool]:
    import docker
    from swebench.harness.run_evaluation import run_instance
    from swebench.harness.utils import make_test_spec

    client = docker.from_env()

    def one(index_pred):
        index, (iid, name, patch, _) = index_pred
        pred = {"instance_id": iid, "model_name_or_path": f"{name}-{index}", "model_patch": patch}
        # one run id a prediction: swebench names its container by instance and run, one prediction per instance
        got = run_instance(make_test_spec(records[iid]), pred, client, f"{run_id}-{index}", timeout=600)
        return bool(got and got[1][iid]["resolved"])

    with ThreadPoolExecutor(2) as pool:
        return list(pool.map(one, enumerate(preds)))
