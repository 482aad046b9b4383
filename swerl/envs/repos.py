"""Repository sources, and the /testbed checkout that hides every commit after base_commit.

A source turns ``owner/name`` into a local git repository: a mirror folder
(``<dir>/<owner>__<name>``, bare or not) or, where GitHub answers, a cached clone.
``export_testbed`` then fetches exactly the history reachable from ``base_commit`` into a
fresh repository: no remote, no tags, no objects newer than the base commit, so the
agent cannot read the fix from git.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, Field

GIT_ENV = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_AUTHOR_NAME": "swerl",
    "GIT_AUTHOR_EMAIL": "swerl@localhost",
    "GIT_COMMITTER_NAME": "swerl",
    "GIT_COMMITTER_EMAIL": "swerl@localhost",
}


class MirrorSettings(BaseModel):
    """Where a task set's repositories are mirrored."""

    repos: Path | None = Field(None, description="Mirror folder holding the repositories as `<owner>__<name>` (bare or "
                               "not). None: the embedded demo's mirror for the demo tasks (a pipeline's curriculum: the "
                               "one it generates); otherwise no mirror (prebuilt images, or GitHub for an image build "
                               "that allows it).")


class RepoNotFoundError(RuntimeError):
    """No source holds the repository or the commit."""


def git(*args: str, cwd: Path | None = None, timeout: float = 600) -> str:
    env = {**os.environ, **GIT_ENV, "GIT_CONFIG_GLOBAL": "/dev/null"}
    proc = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed (exit {proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc.stdout


class RepoSource(Protocol):
    """Finds a local git repository for ``owner/name``."""

    def locate(self, repo: str) -> Path:
        """Return a path git can fetch from; raise RepoNotFoundError when absent."""
        ...


class MirrorRepoSource:
    """Repositories kept under one folder as ``<owner>__<name>`` (or ``.git``), bare or not."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def locate(self, repo: str) -> Path:
        owner, name = repo.split("/", 1)
        candidates = [self.root / f"{owner}__{name}", self.root / f"{owner}__{name}.git"]
        for path in candidates:
            if (path / ".git").exists() or (path / "HEAD").is_file():
                return path
        raise RepoNotFoundError(
            f"repository {repo} is not in the mirror folder {self.root} (looked for {', '.join(c.name for c in candidates)}); "
            f"clone it there with `git clone --mirror https://github.com/{repo} {candidates[1]}`"
        )


class GitHubRepoSource:
    """Bare clones from GitHub, cached under ``cache_dir`` and reused."""

    def __init__(self, cache_dir: Path, base_url: str = "https://github.com", timeout: float = 900):
        self.cache_dir, self.base_url, self.timeout = Path(cache_dir), base_url.rstrip("/"), timeout

    def locate(self, repo: str) -> Path:
        owner, name = repo.split("/", 1)
        dest = self.cache_dir / f"{owner}__{name}.git"
        if (dest / "HEAD").is_file():
            return dest
        self.cache_dir.mkdir(parents=True, exist_ok=True)
        partial = dest.with_suffix(".partial")
        shutil.rmtree(partial, ignore_errors=True)
        try:
            git("clone", "--mirror", "--quiet", f"{self.base_url}/{repo}.git", str(partial), timeout=self.timeout)
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            shutil.rmtree(partial, ignore_errors=True)
            raise RepoNotFoundError(f"cannot clone {repo} from {self.base_url}: {e}") from e
        partial.rename(dest)
        return dest


class ChainRepoSource:
    """Tries each source in turn; the error lists why each one failed."""

    def __init__(self, sources: list[RepoSource]):
        self.sources = sources

    def locate(self, repo: str) -> Path:
        reasons = []
        for source in self.sources:
            try:
                return source.locate(repo)
            except RepoNotFoundError as e:
                reasons.append(str(e))
        raise RepoNotFoundError(f"repository {repo} not found: " + " | ".join(reasons or ["no repository source configured"]))


def repo_source(repos_dir: Path | None, *, github: bool = False, cache_dir: Path | None = None) -> RepoSource:
    """The usual chain: the mirror folder first, then GitHub when allowed."""
    sources: list[RepoSource] = []
    if repos_dir is not None:
        sources.append(MirrorRepoSource(repos_dir))
    if github:
        sources.append(GitHubRepoSource(cache_dir or Path.home() / ".cache" / "swerl" / "repos"))
    return ChainRepoSource(sources)


def export_testbed(source: Path, commit: str, dest: Path) -> str:
    """Check out ``commit`` of ``source`` into a fresh repository at ``dest``; return the full hash.

    Only objects reachable from ``commit`` are fetched, so later commits, tags and
    remotes never reach the sandbox.
    """
    try:  # a short hash cannot be fetched by name: resolve it in the source first
        commit = git("rev-parse", "--verify", "--quiet", f"{commit}^{{commit}}", cwd=source).strip()
    except RuntimeError as e:
        raise RepoNotFoundError(f"commit {commit} is not in {source}; fetch it into the mirror or fix base_commit") from e
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir(parents=True)
    git("init", "--quiet", "--initial-branch=main", cwd=dest)
    upload_pack = "git -c uploadpack.allowAnySHA1InWant=true upload-pack"
    try:
        git("fetch", "--quiet", "--no-tags", "--upload-pack", upload_pack, str(source.resolve()), commit, cwd=dest)
    except RuntimeError as e:
        shutil.rmtree(dest, ignore_errors=True)
        raise RepoNotFoundError(f"commit {commit} could not be fetched from {source}: {e}") from e
    full = git("rev-parse", "FETCH_HEAD^{commit}", cwd=dest).strip()
    git("checkout", "--quiet", "-B", "main", full, cwd=dest)
    (dest / ".git" / "FETCH_HEAD").unlink(missing_ok=True)
    git("reflog", "expire", "--expire=now", "--all", cwd=dest)
    git("gc", "--quiet", "--prune=now", cwd=dest)
    return full
