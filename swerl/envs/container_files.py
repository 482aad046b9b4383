"""What swerl puts into a container: its runner's source, files as a tar, and a shell line that
finds a python3 to run the runner with."""

from __future__ import annotations

import io
import tarfile
import time
from importlib import resources

from swerl.envs.docker_config import PYTHON_CANDIDATES


def runner_source() -> bytes:
    return resources.files("swerl.envs").joinpath("resources/swerl_exec.py").read_bytes()


def tar_of(files: dict[str, tuple[bytes, int]]) -> bytes:
    """A tar of ``{path relative to /: (data, mode)}``; unpacked at ``/`` it creates missing parents too."""
    buf = io.BytesIO()
    now = int(time.time())
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, (data, mode) in files.items():
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, now
            tf.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def exec_any_python(args: str) -> str:
    """A shell line that runs the first python3 of PYTHON_CANDIDATES with ``args`` (exit 127: none)."""
    found = "; ".join(f'[ -x {p} ] && exec {p} -I -S {args}' for p in PYTHON_CANDIDATES)
    return f"{found}; command -v python3 >/dev/null && exec python3 -I -S {args}; exit 127"
