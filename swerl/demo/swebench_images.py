"""Images in SWE-bench's layout, built locally from a task's repository.

A ``/opt/miniconda3`` tree (:mod:`swerl.demo.conda_layout`), one environment ``testbed``
holding pytest and the repository (installed editable), and nothing of it on the default
``PATH``: the system ``python3`` has no pytest, so a command that forgets to activate fails,
as it does in SWE-bench's images. Images are found again by their content-hash tags.
"""

from __future__ import annotations

import hashlib
import shlex
import tempfile
from collections.abc import Sequence
from pathlib import Path

from swerl.data.task import Task
from swerl.demo.conda_layout import ACTIVATE_SCRIPT, CONDA_COMMAND, CONDA_ROOT, ENV_NAME, ENV_PREFIX, REPO_DIRECTORY
from swerl.envs import labels
from swerl.envs.base_image import BaseImageConfig, base_tag, ensure_base_image
from swerl.envs.docker_build import build_image
from swerl.envs.images import (
    CA_BUNDLE_LINES, UPGRADE_INSTALLERS, ImageConfig, ca_blob, content_digest, image_exists, build_log_path, tag_name,
)
from swerl.envs.repos import export_testbed, repo_source

SWEBENCH_REPO = "swerl-swebench"
SWEBENCH_ENV_REPO = "swerl-swebench-env"
RECIPE_VERSION = "1"  # bump when the recipe below changes, so old tags are not reused

_IN_ENV = f". {CONDA_ROOT}/bin/activate && conda activate {ENV_NAME} &&"
# a command that forgets to activate must fail, as in SWE-bench's images
_SYSTEM_HAS_NO_PYTEST = (
    "RUN if python3 -c 'import pytest' 2>/dev/null; then "
    "echo 'the system python3 must not have pytest: it belongs to the testbed environment only' >&2; exit 1; fi"
)


def env_dockerfile(base: str) -> str:
    """The shared layer: CA bundle, the /opt/miniconda3 tree, and the testbed environment with pytest."""
    return "\n".join([
        f"FROM {base}",
        *CA_BUNDLE_LINES,
        # SWE-bench's base images install python-is-python3: `python` is the system one until activation
        "RUN ln -sf /usr/bin/python3 /usr/local/bin/python",
        f"COPY conda-activate {CONDA_ROOT}/bin/activate",
        f"COPY conda-command {CONDA_ROOT}/condabin/conda",
        f"RUN chmod 0644 {CONDA_ROOT}/bin/activate && chmod 0755 {CONDA_ROOT}/condabin/conda "
        f"&& ln -s ../condabin/conda {CONDA_ROOT}/bin/conda "
        # base's python (conda's own, in a real image) is the system one: it has no pytest either
        f"&& ln -s /usr/bin/python3 {CONDA_ROOT}/bin/python3 && ln -s python3 {CONDA_ROOT}/bin/python "
        f"&& mkdir -p {CONDA_ROOT}/envs",
        f"RUN python3 -m venv {ENV_PREFIX}",
        # a distribution's venv carries its own old pip: bring the installers up to date, in the environment only
        f"RUN {_IN_ENV} {UPGRADE_INSTALLERS} && python -m pip install pytest",
        f"RUN {_IN_ENV} test \"$(python -c 'import sys; print(sys.prefix)')\" = {ENV_PREFIX} && python -c 'import pytest'",
        _SYSTEM_HAS_NO_PYTEST,
        'CMD ["bash"]',
    ]) + "\n"


def instance_dockerfile(task: Task, env_tag: str) -> str:
    """The repository at base_commit in /testbed, installed into the testbed environment."""
    cfg = task.install_config
    lines = [f"FROM {env_tag}", f"COPY testbed {REPO_DIRECTORY}", f"WORKDIR {REPO_DIRECTORY}"]
    lines += [f"RUN {_IN_ENV} {cmd}" for cmd in cfg.pre_install]
    if cfg.pip_packages:
        lines.append(f"RUN {_IN_ENV} python -m pip install {' '.join(shlex.quote(p) for p in cfg.pip_packages)}")
    lines += [f"RUN {_IN_ENV} python -m pip install -r {shlex.quote(r)}" for r in cfg.reqs_path]
    lines.append(
        f"RUN {_IN_ENV} if [ -f pyproject.toml ] || [ -f setup.py ] || [ -f setup.cfg ]; "
        "then python -m pip install -e .; fi"
    )
    if cfg.install.strip():
        lines.append(f"RUN {_IN_ENV} {cfg.install}")
    lines += [
        # what the installation left in the tree (egg-info, build/) is not the agent's change: keep
        # it out of `git status` and of every diff, as SWE-bench's repositories' .gitignore does
        "RUN git ls-files --others --exclude-standard --directory >> .git/info/exclude "
        "&& test -z \"$(git status --porcelain)\"",
        _SYSTEM_HAS_NO_PYTEST,
    ]
    return "\n".join(lines) + "\n"


def _env_files(ca: bytes) -> dict[str, bytes]:
    return {"extra-ca.pem": ca, "conda-activate": ACTIVATE_SCRIPT.encode(), "conda-command": CONDA_COMMAND.encode()}


def swebench_env_tag(python: str, ca: bytes, base: BaseImageConfig | None = None) -> str:
    base_image = base_tag(python, base or BaseImageConfig())
    digest = content_digest(RECIPE_VERSION, env_dockerfile(base_image), ACTIVATE_SCRIPT, CONDA_COMMAND,
                     hashlib.sha256(ca).hexdigest())
    return f"{SWEBENCH_ENV_REPO}:py{python}-{digest[:16]}"


def swebench_instance_tag(task: Task, env_tag: str) -> str:
    digest = content_digest(RECIPE_VERSION, instance_dockerfile(task, env_tag), task.repo, task.base_commit)
    return f"{SWEBENCH_REPO}:{tag_name(task.instance_id)}-{digest[:12]}"


def ensure_swebench_env_image(python: str, *, log_dir: Path, ca_certs: Sequence[Path] | None = None,
                              base: BaseImageConfig | None = None, force: bool = False) -> str:
    """The shared conda-layout layer for ``python``: built once, then found by its content-hash tag."""
    base = base or BaseImageConfig()
    ca = ca_blob(ImageConfig(ca_certs=list(ca_certs) if ca_certs is not None else None))
    tag = swebench_env_tag(python, ca, base)
    if image_exists(tag) and not force:
        return tag
    base_image = ensure_base_image(python, base, build_log_path(log_dir, base_tag(python, base)))
    build_image(
        env_dockerfile(base_image), tag, build_log_path(log_dir, tag), files=_env_files(ca),
        labels={labels.MANAGED: "1", labels.KIND: "env", labels.CONTENT_HASH: tag.rsplit("-", 1)[-1]},
    )
    return tag


def ensure_swebench_instance_image(task: Task, repos_dir: Path, env_tag: str, log_dir: Path, force: bool) -> str:
    """``task``'s image over the layer ``env_tag``: built once, then found by its content-hash tag."""
    tag = swebench_instance_tag(task, env_tag)
    if image_exists(tag) and not force:
        return tag
    with tempfile.TemporaryDirectory(prefix="swerl-ctx-") as ctx:
        export_testbed(repo_source(Path(repos_dir)).locate(task.repo), task.base_commit, Path(ctx) / "testbed")
        build_image(
            instance_dockerfile(task, env_tag), tag, build_log_path(log_dir, tag), context=Path(ctx),
            labels={labels.MANAGED: "1", labels.KIND: "instance", labels.INSTANCE_ID: task.instance_id,
                    labels.CONTENT_HASH: tag.rsplit("-", 1)[-1]},
        )
    return tag


def build_swebench_layout_image(task: Task, repos_dir: Path, *, log_dir: Path, ca_certs: Sequence[Path] | None = None,
                                force: bool = False) -> str:
    """Build (or find by its content-hash tag) ``task``'s image in SWE-bench's layout; return its tag.

    The repository at ``base_commit`` (from the mirror folder ``repos_dir``) is in /testbed and
    installed, editable, into the environment /opt/miniconda3/envs/testbed with pytest, then
    ``install_config``'s pre_install, pip_packages, reqs_path and install run there. ``ca_certs``:
    PEM files appended to the image's CA bundle (None: the host's bundle). Raises
    :class:`~swerl.envs.docker_build.ImageBuildError` (with the log's tail) or
    :class:`~swerl.envs.repos.RepoNotFoundError`.
    """
    env_tag = ensure_swebench_env_image(task.install_config.python, log_dir=log_dir, ca_certs=ca_certs, force=force)
    return ensure_swebench_instance_image(task, repos_dir, env_tag, log_dir, force)

