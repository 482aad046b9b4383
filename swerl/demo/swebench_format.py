"""The demo tasks as SWE-bench 5 publishes its records, over locally built images in SWE-bench's layout.

SWE-bench 5 records carry no install recipe: ``image`` is a prebuilt instance image (the
repository in ``/testbed``, the task's Python in the conda environment
``/opt/miniconda3/envs/testbed``) and ``eval_script`` is the publisher's own bash script.
Registry images cannot always be downloaded, so :mod:`swerl.demo.swebench_images` builds
images with the same layout (:mod:`swerl.demo.conda_layout`), :mod:`swerl.demo.swebench_records`
writes the records, and :func:`materialize_swebench_demo` does both for the demo tasks.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from swerl.data.task import Task
from swerl.demo.swebench_images import ensure_swebench_env_image, ensure_swebench_instance_image
from swerl.demo.swebench_records import EVAL_TYPES, EvalType, swebench_record
from swerl.envs.base_image import BaseImageError
from swerl.envs.docker_build import ImageBuildError
from swerl.envs.repos import RepoNotFoundError


def materialize_swebench_demo(out: Path, *, eval_type: EvalType = "pass_and_fail", log_parser: str = "parse_log_pytest",
                              slugs: Sequence[str] | None = None, log_dir: Path | None = None,
                              ca_certs: Sequence[Path] | None = None, builds: int = 2, force: bool = False) -> Path:
    """Write the demo tasks as SWE-bench 5 records, ``out/swebench.jsonl``, building their images; return its path.

    The demo repositories and the install_config tasks file are materialised under ``out`` too
    (``out/repos``, ``out/tasks.jsonl``). Images are found by their content-hash tags, so a
    second call builds nothing. Build logs go to ``log_dir`` (default ``out/build-logs``). Raises
    RuntimeError naming every task whose image failed, with its log's tail.
    """
    from swerl.data.loaders import load_tasks
    from swerl.demo.materialize import materialize_demo

    if eval_type not in EVAL_TYPES:
        raise ValueError(f"eval_type must be one of {EVAL_TYPES}, got {eval_type!r}")
    out = Path(out).absolute()
    demo = materialize_demo(out, list(slugs) if slugs is not None else None)
    tasks = load_tasks(demo.tasks_file).tasks
    log_dir = Path(log_dir) if log_dir is not None else out / "build-logs"

    env_tags = {py: ensure_swebench_env_image(py, log_dir=log_dir, ca_certs=ca_certs, force=force)
                for py in sorted({t.install_config.python for t in tasks})}

    def one(task: Task) -> str | BaseException:
        try:
            return ensure_swebench_instance_image(task, demo.repos_dir, env_tags[task.install_config.python], log_dir, force)
        except (ImageBuildError, RepoNotFoundError, BaseImageError, RuntimeError, OSError) as e:
            return e

    with ThreadPoolExecutor(max(1, builds)) as pool:
        built = list(pool.map(one, tasks))
    failed = [f"{t.instance_id}: {r}" for t, r in zip(tasks, built) if isinstance(r, BaseException)]
    if failed:
        raise RuntimeError(f"{len(failed)} SWE-bench layout image(s) failed:\n" + "\n".join(failed))

    records = [swebench_record(t, str(image), eval_type=eval_type, log_parser=log_parser) for t, image in zip(tasks, built)]
    path = out / "swebench.jsonl"
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    os.replace(tmp, path)
    return path
