"""A sandbox on this machine, without Docker: a copy of a repository in a temp folder.

For tests and laptops without Docker. It is NOT isolated: commands run as the calling user
with the host's programs, network and file system, and a command can read or change
anything that user can. What it does keep from the Docker sandbox is the behaviour the
agent relies on, through the same runner (``resources/swerl_exec.py``, called in-process):
bash, a timeout that kills every process the command started (its session and whatever
carries its tag), output kept head and tail, exit code 124 on timeout.

Its "image" is a repository folder (a work tree or a bare mirror such as
``<repos>/<owner>__<name>``). With a ``base_commit`` that commit is exported the way
images are built (``export_testbed``: no later history, no tags, no remote); without one
a git repository's HEAD is, and a plain folder is copied and committed as the base.

Layout of one sandbox folder ``<parent>/swerl-local-[<run_id>-]<random>/``: the
repository in ``<repo_folder>`` (default ``testbed``), and ``usr/local/bin``, ``opt``, ``tmp``
for what swerl puts at those absolute paths in a container (``root`` is this folder;
``usr/local/bin`` comes first on PATH, TMPDIR is ``tmp``). File reads and writes stay
inside the folder, so ``close`` removes everything the sandbox made by removing it.
"""

from __future__ import annotations

import os
import re
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field

from swerl.envs.docker_config import ExecSettings, RunIdSettings
from swerl.envs.repos import export_testbed, git
from swerl.envs.resources import swerl_exec
from swerl.envs.sandbox import ExecResult, RunnerFailed, SandboxError, exec_result, git_diff

FOLDER_PREFIX = "swerl-local-"


class LocalSandboxConfig(ExecSettings, RunIdSettings):
    """A local sandbox: where its folder goes and how its commands are bounded."""

    model_config = ConfigDict(extra="forbid")

    kind: Literal["local"] = Field("local", description="Selects this backend in a sandbox config.")
    repo_folder: str = Field("testbed", pattern=r"^[A-Za-z0-9_.-]{1,64}$",
                             description="Name of the repository's folder inside the sandbox folder.")
    parent_dir: Path | None = Field(None, description="Where sandbox folders are made; None: the system's temp folder.")


def folder_prefix(run_id: str | None) -> str:
    """The name every sandbox folder of ``run_id`` starts with."""
    return FOLDER_PREFIX + (re.sub(r"[^A-Za-z0-9_.-]", "_", run_id)[:64] + "-" if run_id else "")


def local_sandbox_folders(run_id: str, parent_dir: Path | None = None) -> list[Path]:
    """Folders of ``run_id``'s local sandboxes still on disk (leak checks)."""
    parent = Path(parent_dir or tempfile.gettempdir())
    return sorted(p for p in parent.glob(folder_prefix(run_id) + "*") if p.is_dir())


class LocalSandbox:
    """One copy of a repository in a temp folder; use as a context manager. See the module docstring."""

    def __init__(self, image: str, config: LocalSandboxConfig | None = None, *,
                 slots: threading.BoundedSemaphore | None = None, base_commit: str | None = None,
                 preload: dict[str, tuple[bytes | str, int]] | None = None):
        """``image``: the repository folder; ``preload``: ``{path: (data, mode)}`` written as the sandbox starts."""
        self.image = image
        self.config = config or LocalSandboxConfig()
        self.base_commit = base_commit
        self._slots = slots
        self._holds_slot = False
        self._preload = dict(preload or {})
        self._root: str | None = None
        self._closed = False

    # -- lifecycle ---------------------------------------------------------------
    def start(self) -> LocalSandbox:
        if self._slots is not None:
            self._slots.acquire()
            self._holds_slot = True
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        source = Path(self.image)
        if not source.is_dir():
            raise SandboxError(f"{source} is not a folder: a local sandbox starts from a repository folder "
                               "(a work tree, or a bare mirror <repos>/<owner>__<name>)")
        parent = self.config.parent_dir
        try:
            if parent is not None:
                parent.mkdir(parents=True, exist_ok=True)
            self._root = tempfile.mkdtemp(prefix=folder_prefix(self.config.run_id), dir=parent)
            for sub in ("tmp", "opt", "usr/local/bin"):
                os.makedirs(os.path.join(self._root, sub))
            repo = Path(self.workdir)
            if self.base_commit is not None or _is_git_repo(source):
                self.base_commit = export_testbed(source, self.base_commit or "HEAD", repo)
            else:
                self.base_commit = _commit_copy(source, repo)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as e:  # RepoNotFoundError is a RuntimeError
            raise SandboxError(f"cannot make a local sandbox from {source}: {e}") from e
        if self._preload:
            self.write_files(self._preload)

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            if self._root is not None:
                shutil.rmtree(self._root, onerror=_force_remove)
        finally:
            if self._holds_slot:
                self._holds_slot = False
                self._slots.release()

    def __enter__(self) -> LocalSandbox:
        return self if self._root is not None else self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def root(self) -> str:
        if self._root is None:
            raise SandboxError("the local sandbox has not started; use it inside `with`")
        return self._root

    @property
    def workdir(self) -> str:
        return os.path.join(self.root, self.config.repo_folder)

    @property
    def python(self) -> str:
        return sys.executable  # swerl's own interpreter: its helpers need only the standard library

    # -- commands ------------------------------------------------------------------
    def exec(self, cmd: str, timeout: float | None = None, *, cwd: str | None = None,
             env: dict[str, str] | None = None) -> ExecResult:
        if self._root is None or self._closed:
            raise SandboxError("exec on a sandbox that is not running; use it inside `with`")
        cwd = os.path.join(self.workdir, cwd) if cwd else self.workdir
        own = {
            "PATH": os.path.join(self._root, "usr/local/bin") + os.pathsep + os.environ.get("PATH", os.defpath),
            "TMPDIR": os.path.join(self._root, "tmp"),
            "PWD": cwd,  # else bash keeps the caller's PWD in $PWD when it names another folder
        }
        request = {"cmd": cmd, "timeout": self.config.default_timeout_s if timeout is None else timeout,
                   "limit": self.config.output_limit_bytes, "tag": uuid.uuid4().hex, "cwd": cwd,
                   "env": {**own, **(env or {})}}
        try:
            answer = swerl_exec.run(request)
        except Exception as e:  # a missing cwd, no bash: the runner's failure, as a container's would be
            raise RunnerFailed(f"sandbox runner failed: {type(e).__name__}: {e}") from e
        return exec_result(cmd, answer)

    # -- files ---------------------------------------------------------------------
    def _inside(self, path: str) -> str:
        """``path`` (relative: to the workdir) on the host; refused when it leaves the sandbox folder."""
        if self._root is None or self._closed:
            raise SandboxError("file access on a sandbox that is not running; use it inside `with`")
        full = os.path.normpath(os.path.join(self.workdir, path))
        if os.path.commonpath([self._root, full]) != self._root:
            raise SandboxError(f"{path} is outside this local sandbox's folder {self._root}: it reads and writes only "
                               "there (it is not isolated, so nothing else may be touched); use a path under "
                               "sandbox.root or sandbox.workdir")
        return full

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        self.write_files({path: (data, mode)})

    def write_files(self, files: dict[str, tuple[bytes | str, int]]) -> None:
        """Write several files; missing parent folders are created."""
        for path, (data, mode) in files.items():
            full = self._inside(path)
            try:
                os.makedirs(os.path.dirname(full), exist_ok=True)
                with open(full, "wb") as f:
                    f.write(data.encode() if isinstance(data, str) else data)
                os.chmod(full, mode)
            except OSError as e:
                raise SandboxError(f"cannot write {path} in the sandbox: {e}") from e

    def read_file(self, path: str, max_bytes: int = 64_000_000) -> bytes:
        full = self._inside(path)
        try:
            info = os.stat(full)
        except FileNotFoundError:
            raise FileNotFoundError(f"{full} does not exist in the sandbox") from None
        if not stat.S_ISREG(info.st_mode):
            raise IsADirectoryError(f"{full} is not a regular file")
        if info.st_size > max_bytes:
            raise SandboxError(f"{full} is {info.st_size} bytes, over the {max_bytes}-byte read limit")
        with open(full, "rb") as f:
            return f.read()

    def diff(self) -> str:
        """Tracked and untracked changes against base_commit, through a throw-away index."""
        return git_diff(self, self.base_commit or "HEAD", os.path.join(self.root, "tmp", ".swerl-diff.patch"))


def _is_git_repo(path: Path) -> bool:
    return (path / ".git").exists() or (path / "HEAD").is_file()


def _commit_copy(source: Path, dest: Path) -> str:
    """Copy a plain folder to ``dest`` and commit it as the base; returns the commit."""
    shutil.copytree(source, dest, symlinks=True)
    git("init", "--quiet", "--initial-branch=main", cwd=dest)
    git("add", "-A", ".", cwd=dest)
    git("commit", "--quiet", "--allow-empty", "-m", "swerl base", cwd=dest)
    return git("rev-parse", "HEAD", cwd=dest).strip()


def _force_remove(func, path, _exc_info) -> None:
    """rmtree's error handler: a command may leave read-only folders; make them writable and retry once."""
    try:
        os.chmod(os.path.dirname(path), 0o700)
        if os.path.isdir(path) and not os.path.islink(path):
            os.chmod(path, 0o700)
        func(path)
    except OSError:
        pass


__all__ = ["LocalSandbox", "LocalSandboxConfig", "local_sandbox_folders"]
