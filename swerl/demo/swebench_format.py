"""The demo tasks as SWE-bench 5 publishes its records: prebuilt image, eval script, parser, eval type.

SWE-bench 5 records carry no install recipe: ``image`` is a prebuilt instance image that
keeps the repository in ``/testbed`` and the task's Python in the conda environment
``/opt/miniconda3/envs/testbed``, and ``eval_script`` is the publisher's own bash script,
which activates that environment (``source /opt/miniconda3/bin/activate``, then
``conda activate testbed``), applies the test patch and runs the tests between the
``>>>>> Start Test Output`` / ``>>>>> End Test Output`` markers.

Registry images (and conda itself) cannot always be downloaded, so
:func:`build_swebench_layout_image` builds a local image with the same layout from a task's
repository: a ``/opt/miniconda3`` tree whose ``bin/activate`` defines a ``conda`` shell
function (``conda activate NAME``, ``conda deactivate``) over virtual environments in
``/opt/miniconda3/envs``, one environment ``testbed`` holding pytest and the repository
(installed editable), and nothing of it on the default ``PATH``: the system ``python3``
has no pytest, so a command that forgets to activate fails, as it does in SWE-bench's
images. :func:`swebench_record` writes the task as a SWE-bench 5 record for such an image,
with an eval script of the shape swebench's own generator produced, and
:func:`materialize_swebench_demo` does both for the demo tasks.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import tempfile
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

from swerl.data.task import Task
from swerl.envs import labels
from swerl.envs.base_image import BaseImageConfig, BaseImageError, base_tag, ensure_base_image
from swerl.envs.docker_build import ImageBuildError, build_image
from swerl.envs.images import (
    CA_BUNDLE_LINES, UPGRADE_INSTALLERS, ImageConfig, _ca_blob, _digest, _exists, build_log_path, tag_name,
)
from swerl.envs.repos import RepoNotFoundError, export_testbed, repo_source
from swerl.grading.judge import END_TEST_OUTPUT, START_TEST_OUTPUT

SWEBENCH_REPO = "swerl-swebench"
SWEBENCH_ENV_REPO = "swerl-swebench-env"
CONDA_ROOT = "/opt/miniconda3"
ENV_NAME = "testbed"
ENV_PREFIX = f"{CONDA_ROOT}/envs/{ENV_NAME}"
REPO_DIRECTORY = "/testbed"
RECIPE_VERSION = "1"  # bump when the recipe below changes, so old tags are not reused

# swebench's constants, spelled as its generator spelled them (swebench 4, harness/test_spec/python.py)
HEREDOC_DELIMITER = "EOF_114329324912"
TEST_CMD = "pytest -rA"
EVAL_TYPES = ("pass_and_fail", "fail_only")
EvalType = Literal["pass_and_fail", "fail_only"]

# The SWE-bench field order of a published record, then SWE-bench 5's additions.
RECORD_FIELDS = (
    "repo", "instance_id", "base_commit", "patch", "test_patch", "problem_statement", "hints_text",
    "created_at", "version", "FAIL_TO_PASS", "PASS_TO_PASS", "environment_setup_commit",
    "image", "eval_script", "log_parser", "eval_type", "image_assets",
)  # fmt: skip

# Sourced as `source /opt/miniconda3/bin/activate [ENV]`: defines `conda`, then activates ENV (default
# base), as Miniconda's own bin/activate does. POSIX sh, safe under `set -u`. It works from the
# environment variables alone, so a shell that inherited an activation (without the function) can
# activate again.
ACTIVATE_SCRIPT = r"""# swerl's stand-in for Miniconda's bin/activate, in an image laid out like SWE-bench's.
# Source it: `source /opt/miniconda3/bin/activate [ENV]` defines the `conda` shell function
# (`conda activate NAME|PREFIX`, `conda deactivate`) and activates ENV (default: base).
# Environments are Python virtual environments in /opt/miniconda3/envs/NAME.
_SWERL_CONDA_ROOT=/opt/miniconda3

_swerl_conda_path_without() {
    _swerl_conda_ifs=$IFS
    IFS=:
    _swerl_conda_kept=
    for _swerl_conda_dir in $PATH; do
        if [ "$_swerl_conda_dir" != "$1" ]; then
            _swerl_conda_kept=${_swerl_conda_kept:+$_swerl_conda_kept:}$_swerl_conda_dir
        fi
    done
    IFS=$_swerl_conda_ifs
    PATH=$_swerl_conda_kept
}

_swerl_conda_leave() {
    # leave the active environment, whether activated in this shell or inherited from a parent
    if command -v deactivate >/dev/null 2>&1; then
        deactivate
    fi
    if [ -n "${VIRTUAL_ENV:-}" ]; then
        _swerl_conda_path_without "$VIRTUAL_ENV/bin"
    fi
    if [ -n "${CONDA_PREFIX:-}" ]; then
        _swerl_conda_path_without "$CONDA_PREFIX/bin"
    fi
    _swerl_conda_path_without "$_SWERL_CONDA_ROOT/bin"
    _swerl_conda_path_without "$_SWERL_CONDA_ROOT/condabin"
    export PATH
    unset VIRTUAL_ENV VIRTUAL_ENV_PROMPT CONDA_PREFIX CONDA_DEFAULT_ENV CONDA_PROMPT_MODIFIER CONDA_SHLVL
}

_swerl_conda_activate() {
    case "$1" in
        base|"$_SWERL_CONDA_ROOT") _swerl_conda_name=base; _swerl_conda_prefix=$_SWERL_CONDA_ROOT ;;
        */*) _swerl_conda_name=$1; _swerl_conda_prefix=$1 ;;
        *) _swerl_conda_name=$1; _swerl_conda_prefix=$_SWERL_CONDA_ROOT/envs/$1 ;;
    esac
    if [ "$_swerl_conda_prefix" != "$_SWERL_CONDA_ROOT" ] && [ ! -f "$_swerl_conda_prefix/bin/activate" ]; then
        echo "EnvironmentNameNotFound: Could not find conda environment: $1" >&2
        echo "You can list all discoverable environments with \`conda info --envs\`." >&2
        return 1
    fi
    _swerl_conda_leave
    PATH=$_SWERL_CONDA_ROOT/condabin:$PATH
    if [ "$_swerl_conda_prefix" = "$_SWERL_CONDA_ROOT" ]; then
        PATH=$_SWERL_CONDA_ROOT/bin:$PATH
        export PATH
        CONDA_SHLVL=1
    else
        export PATH
        VIRTUAL_ENV_DISABLE_PROMPT=1 . "$_swerl_conda_prefix/bin/activate"
        CONDA_SHLVL=2
    fi
    CONDA_PREFIX=$_swerl_conda_prefix
    CONDA_DEFAULT_ENV=$_swerl_conda_name
    CONDA_PROMPT_MODIFIER="($_swerl_conda_name) "
    CONDA_EXE=$_SWERL_CONDA_ROOT/bin/conda
    export CONDA_PREFIX CONDA_DEFAULT_ENV CONDA_PROMPT_MODIFIER CONDA_SHLVL CONDA_EXE
    hash -r 2>/dev/null || true
}

_swerl_conda_deactivate() {
    if [ -z "${CONDA_PREFIX:-}" ]; then
        return 0
    fi
    if [ "$CONDA_PREFIX" != "$_SWERL_CONDA_ROOT" ]; then
        _swerl_conda_activate base  # an environment activated over base goes back to base
    else
        _swerl_conda_leave
        hash -r 2>/dev/null || true
    fi
}

conda() {
    case "${1:-}" in
        activate) _swerl_conda_activate "${2:-base}" ;;
        deactivate) _swerl_conda_deactivate ;;
        *) "$_SWERL_CONDA_ROOT/condabin/conda" "$@" ;;
    esac
}

_swerl_conda_activate "${1:-base}"
"""

# The `conda` command itself: lists environments; activation needs the shell function above.
CONDA_COMMAND = r"""#!/bin/sh
# swerl's stand-in for the conda command, in an image laid out like SWE-bench's.
root=/opt/miniconda3
list_envs() {
    echo "# conda environments:"
    echo "#"
    mark=" "; [ "${CONDA_PREFIX:-}" = "$root" ] && mark="*"
    printf '%-25s %s %s\n' base "$mark" "$root"
    for env in "$root"/envs/*; do
        [ -f "$env/bin/activate" ] || continue
        mark=" "; [ "${CONDA_PREFIX:-}" = "$env" ] && mark="*"
        printf '%-25s %s %s\n' "$(basename "$env")" "$mark" "$env"
    done
}
case "${1:-}" in
    activate|deactivate)
        echo "CondaError: Run 'source $root/bin/activate' before 'conda $1': this shell has no conda function." >&2
        exit 1 ;;
    info)
        case "${2:-}" in --envs|-e) list_envs; exit 0 ;; esac
        echo "     active environment : ${CONDA_DEFAULT_ENV:-None}"
        echo "    active env location : ${CONDA_PREFIX:-None}"
        echo "       base environment : $root"
        echo "          envs directories : $root/envs" ;;
    env)
        case "${2:-}" in list) list_envs; exit 0 ;; esac
        echo "conda env ${2:-}: not available in this image (only 'conda env list')" >&2
        exit 1 ;;
    *)
        echo "conda ${1:-}: not available in this image; it supports activate, deactivate, info --envs, env list" >&2
        exit 1 ;;
esac
"""

_IN_ENV = f". {CONDA_ROOT}/bin/activate && conda activate {ENV_NAME} &&"
# a command that forgets to activate must fail, as in SWE-bench's images
_SYSTEM_HAS_NO_PYTEST = (
    "RUN if python3 -c 'import pytest' 2>/dev/null; then "
    "echo 'the system python3 must not have pytest: it belongs to the testbed environment only' >&2; exit 1; fi"
)


# ---------------------------------------------------------------------------- images


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
    digest = _digest(RECIPE_VERSION, env_dockerfile(base_image), ACTIVATE_SCRIPT, CONDA_COMMAND,
                     hashlib.sha256(ca).hexdigest())
    return f"{SWEBENCH_ENV_REPO}:py{python}-{digest[:16]}"


def swebench_instance_tag(task: Task, env_tag: str) -> str:
    digest = _digest(RECIPE_VERSION, instance_dockerfile(task, env_tag), task.repo, task.base_commit)
    return f"{SWEBENCH_REPO}:{tag_name(task.instance_id)}-{digest[:12]}"


def ensure_swebench_env_image(python: str, *, log_dir: Path, ca_certs: Sequence[Path] | None = None,
                              base: BaseImageConfig | None = None, force: bool = False) -> str:
    """The shared conda-layout layer for ``python``: built once, then found by its content-hash tag."""
    base = base or BaseImageConfig()
    ca = _ca_blob(ImageConfig(extra_ca_certs=list(ca_certs) if ca_certs is not None else None))
    tag = swebench_env_tag(python, ca, base)
    if _exists(tag) and not force:
        return tag
    base_image = ensure_base_image(python, base, build_log_path(log_dir, base_tag(python, base)))
    build_image(
        env_dockerfile(base_image), tag, build_log_path(log_dir, tag), files=_env_files(ca),
        labels={labels.MANAGED: "1", labels.KIND: "env", labels.CONTENT_HASH: tag.rsplit("-", 1)[-1]},
    )
    return tag


def _ensure_instance(task: Task, repos_dir: Path, env_tag: str, log_dir: Path, force: bool) -> str:
    tag = swebench_instance_tag(task, env_tag)
    if _exists(tag) and not force:
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
    return _ensure_instance(task, repos_dir, env_tag, log_dir, force)


# ---------------------------------------------------------------------------- records


def _modified_files(patch: str) -> list[str]:
    """Files the patch changes that exist before it (swebench.utils.get_modified_files)."""
    from swebench.utils import get_modified_files

    return get_modified_files(patch)


def _test_directives(test_patch: str) -> list[str]:
    """The test patch's files minus data files (swebench's get_test_directives, for pytest repositories)."""
    from swebench.harness.constants import NON_TEST_EXTS

    return [d for d in re.findall(r"diff --git a/.* b/(.*)", test_patch) if not any(d.endswith(e) for e in NON_TEST_EXTS)]


def eval_script(task: Task, *, test_cmd: str = TEST_CMD) -> str:
    """The bash script swebench's generator wrote for a pytest repository (make_eval_script_list_py)."""
    base = task.base_commit
    reset_tests = f"git checkout {base} {' '.join(_modified_files(task.test_patch))}"
    lines = [
        f"source {CONDA_ROOT}/bin/activate",
        f"conda activate {ENV_NAME}",
        f"cd {REPO_DIRECTORY}",
        f"git config --global --add safe.directory {REPO_DIRECTORY}",
        f"cd {REPO_DIRECTORY}",
        "git status",
        "git show",
        f"git -c core.fileMode=false diff {base}",
        f"source {CONDA_ROOT}/bin/activate",
        f"conda activate {ENV_NAME}",
        reset_tests,
        f"git apply -v - <<'{HEREDOC_DELIMITER}'\n{task.test_patch}\n{HEREDOC_DELIMITER}",
        f": '{START_TEST_OUTPUT}'",
        " ".join([test_cmd, *_test_directives(task.test_patch)]),
        f": '{END_TEST_OUTPUT}'",
        reset_tests,
    ]
    return "\n".join(["#!/bin/bash", "set -uxo pipefail", *lines]) + "\n"


def _published_ids(tests: list[str], log_parser: str) -> list[str]:
    """Test ids as the parser prints them: parse_log_pytest keeps a line's second word only."""
    if log_parser not in ("parse_log_pytest", "parse_log_pytest_options", "parse_log_pytest_v2"):
        return list(tests)
    return list(dict.fromkeys(t.split()[0] if t.split() else t for t in tests))


def swebench_record(task: Task, image: str, *, eval_type: EvalType = "pass_and_fail",
                    log_parser: str = "parse_log_pytest") -> dict[str, Any]:
    """``task`` as a SWE-bench 5 record for ``image``: no install_config, the publisher's eval script instead.

    FAIL_TO_PASS / PASS_TO_PASS are JSON-encoded strings and image_assets is ``"{}"``, as the
    Hugging Face datasets ship them.
    """
    from swebench.harness.log_parsers import PARSER_REGISTRY

    if eval_type not in EVAL_TYPES:
        raise ValueError(f"eval_type must be one of {EVAL_TYPES}, got {eval_type!r}")
    if log_parser not in PARSER_REGISTRY:
        raise ValueError(f"log_parser {log_parser!r} is not in swebench's PARSER_REGISTRY")
    if not task.test_patch.strip():
        raise ValueError(f"task {task.instance_id} has no test patch: its eval script would run no test")
    f2p = _published_ids(task.FAIL_TO_PASS, log_parser)
    p2p = [t for t in _published_ids(task.PASS_TO_PASS, log_parser) if t not in f2p]
    values = {
        "repo": task.repo,
        "instance_id": task.instance_id,
        "base_commit": task.base_commit,
        "patch": task.patch,
        "test_patch": task.test_patch,
        "problem_statement": task.problem_statement,
        "hints_text": task.hints_text,
        "created_at": task.created_at or "",
        "version": task.version or "",
        "FAIL_TO_PASS": json.dumps(f2p),
        "PASS_TO_PASS": json.dumps(p2p),
        "environment_setup_commit": task.environment_setup_commit or task.base_commit,
        "image": image,
        "eval_script": eval_script(task),
        "log_parser": log_parser,
        "eval_type": eval_type,
        "image_assets": "{}",
    }
    return {key: values[key] for key in RECORD_FIELDS}


# ---------------------------------------------------------------------------- the demo set


def materialize_swebench_demo(out: Path, *, eval_type: EvalType = "pass_and_fail", log_parser: str = "parse_log_pytest",
                              slugs: Sequence[str] | None = None, log_dir: Path | None = None,
                              ca_certs: Sequence[Path] | None = None, max_parallel: int = 2, force: bool = False) -> Path:
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
            return _ensure_instance(task, demo.repos_dir, env_tags[task.install_config.python], log_dir, force)
        except (ImageBuildError, RepoNotFoundError, BaseImageError, RuntimeError, OSError) as e:
            return e

    with ThreadPoolExecutor(max(1, max_parallel)) as pool:
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
