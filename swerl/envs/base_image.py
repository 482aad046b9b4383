"""Base images: `python:X.Y-slim` from a registry when one answers, else bootstrapped from Debian.

Every base carries git, patch, procps and a Python with venv, so the layers above it
never care which way it was made.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Literal

from docker.errors import APIError, ImageNotFound, NotFound
from pydantic import BaseModel, Field

from swerl.envs import labels
from swerl.envs.docker_build import ImageBuildError, build_image
from swerl.envs.docker_client import docker_client

# Debian suites whose own python3 is the wanted version: the bootstrap needs no registry.
DEBIAN_SUITE_FOR_PYTHON = {"3.9": "bullseye", "3.11": "bookworm", "3.13": "trixie"}
BASE_PACKAGES = ("python3", "python3-venv", "python3-pip", "python3-dev", "git", "patch", "procps", "ca-certificates", "build-essential")
BASE_REPO = "swerl-base"
RECIPE_VERSION = "1"  # bump when the recipe below changes, so old tags are not reused


class BaseImageError(RuntimeError):
    """A base image could not be had."""


class BaseImageConfig(BaseModel):
    """Where base images come from."""

    source: Literal["auto", "pull", "bootstrap"] = Field(
        "auto", description="'pull' python:X.Y-slim, 'bootstrap' from Debian, or 'auto': pull if a registry answers, else bootstrap."
    )
    debian_mirror: str = Field("http://deb.debian.org/debian", description="Debian mirror used by debootstrap and apt.")
    pull_timeout_s: int = Field(120, ge=5, le=3600, description="Time allowed for pulling a base image.")


def base_tag(python: str, config: BaseImageConfig) -> str:
    digest = hashlib.sha256(f"{RECIPE_VERSION}|{python}|{config.debian_mirror}|{' '.join(BASE_PACKAGES)}".encode()).hexdigest()[:12]
    return f"{BASE_REPO}:py{python}-{digest}"


def ensure_base_image(python: str, config: BaseImageConfig, log: Path) -> str:
    """Return the tag of a base image for ``python``, building it when it is missing."""
    tag = base_tag(python, config)
    client = docker_client()
    try:
        client.images.get(tag)
        return tag
    except ImageNotFound:
        pass
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("a") as out:
        errors = []
        if config.source in ("auto", "pull"):
            try:
                _from_registry(python, tag, out)
                return tag
            except BaseImageError as e:
                errors.append(str(e))
                if config.source == "pull":
                    raise
                out.write(f"registry unavailable, bootstrapping from Debian instead: {e}\n")
        try:
            _bootstrap(python, tag, config, out)
        except BaseImageError as e:
            errors.append(str(e))
            raise BaseImageError("; ".join(errors)) from e
    return tag


def _from_registry(python: str, tag: str, out) -> None:
    client = docker_client()
    image = f"python:{python}-slim"
    out.write(f"pulling {image}\n")
    try:
        client.images.pull("python", tag=f"{python}-slim")
    except (APIError, NotFound) as e:
        raise BaseImageError(f"cannot pull {image}: {e.explanation if hasattr(e, 'explanation') else e}") from e
    dockerfile = (
        f"FROM {image}\n"
        "RUN apt-get update && apt-get install -y --no-install-recommends git patch procps ca-certificates build-essential "
        "&& rm -rf /var/lib/apt/lists/*\n"
        "RUN ln -sf /usr/local/bin/python3 /usr/bin/python3 || true\n"
    )
    _build(dockerfile, tag, out)


def _bootstrap(python: str, tag: str, config: BaseImageConfig, out) -> None:
    suite = DEBIAN_SUITE_FOR_PYTHON.get(python)
    if suite is None:
        raise BaseImageError(
            f"no registry answered for python:{python}-slim, and no Debian release ships Python {python} "
            f"(bootstrap supports {', '.join(sorted(DEBIAN_SUITE_FOR_PYTHON))}); "
            "set install_config.python to one of those, give the task a prebuilt docker_image, or make a registry reachable"
        )
    if shutil.which("debootstrap") is None:
        raise BaseImageError("debootstrap is not installed: `apt-get install -y debootstrap` (the README's set-up does this)")
    with tempfile.TemporaryDirectory(prefix="swerl-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        cmd = [
            "debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}",
            suite, str(rootfs), config.debian_mirror,
        ]
        out.write(f"$ {' '.join(cmd)}\n")
        out.flush()
        proc = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
        if proc.returncode != 0:
            raise BaseImageError(f"debootstrap {suite} failed with exit code {proc.returncode}; see {out.name}")
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            shutil.rmtree(rootfs / junk, ignore_errors=True)
        imported = f"{BASE_REPO}-rootfs:{suite}-{tag.split('-')[-1]}"
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        imp = subprocess.run(["docker", "import", "-", imported], stdin=tar.stdout, capture_output=True, text=True)
        tar.wait()
        if imp.returncode != 0 or tar.returncode != 0:
            raise BaseImageError(f"docker import of the {suite} rootfs failed: {imp.stderr.strip()}")
    dockerfile = (
        f"FROM {imported}\n"
        "ENV LANG=C.UTF-8 DEBIAN_FRONTEND=noninteractive\n"
        f"RUN test \"$(python3 -c 'import sys; print(\"%d.%d\" % sys.version_info[:2])')\" = {python}\n"
        'CMD ["bash"]\n'
    )
    _build(dockerfile, tag, out)


def _build(dockerfile: str, tag: str, out) -> None:
    out.flush()
    try:
        build_image(dockerfile, tag, Path(out.name), labels={labels.MANAGED: "1", labels.KIND: "base"})
    except ImageBuildError as e:
        raise BaseImageError(str(e)) from e
