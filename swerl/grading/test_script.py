"""The bash script a grading sandbox runs: the task's tests between SWE-bench's markers, instrumented.

Two sources, one shape. A SWE-bench 5 record brings its publisher's ``eval_script``; it runs
as published, with swebench's ``record_test_exit_code`` (the test command's own status after
the end marker). A SWE-rebench style record brings ``install_config`` (``eval_commands``,
``test_cmd``); swerl writes the same markers and exit-code line around its test command, so
both are graded by the same swebench code. Either way the script first exports what puts
swerl's report plugin (random module name) into every pytest session it starts.
"""

from __future__ import annotations

import json
import re
import shlex
import urllib.request
from dataclasses import dataclass

from swerl.data.task import Task
from swerl.grading.judge import END_TEST_OUTPUT, START_TEST_OUTPUT, TEST_EXIT_CODE
from swerl.grading.setup_privilege import split
from swerl.grading.test_user import TRIPWIRE_CONFIG

ASSETS_DIR = "/tmp/swerl-assets"
REPORT_FD = 3
ASSET_FETCH_TIMEOUT_S = 60


class AssetError(RuntimeError):
    """A record's image asset could not be fetched: the task cannot be graded as published."""


@dataclass(frozen=True)
class TestScript:
    """A grading script and what the grader needs to know about it."""

    __test__ = False

    text: str
    runs_pytest: bool
    exit_code_is_tests: bool  # the script's own exit status is the test command's
    files: dict[str, bytes]  # written into the sandbox before it runs (image assets)


@dataclass(frozen=True)
class Isolation:
    """How the test command runs: as the unprivileged ``uid`` (None: as the sandbox's own user), with
    pytest's events down a pipe (file descriptor 3) that a process of root's copies into ``evidence``,
    a folder only root can open. ``helper`` is ``test_user.py`` in the sandbox."""

    helper: str
    evidence: str
    home: str
    uid: int | None
    timeout_s: float | None = None  # the test command's own limit, kept by the helper (with a test user)
    wire: str | None = None  # the tripwire's FIFO, read by the helper while the tests run

    def wrap(self, region: list[str], trace: bool, workdir: str) -> list[str]:
        """The test command's lines, replaced by one command that runs them as the test user; with a user,
        the helper then (as root) kills whatever of theirs is left and audits what they created in
        ``workdir``, its line the last before their status."""
        body = "\n".join((["set -uxo pipefail"] if trace else []) + region)
        wire = f"--wire {shlex.quote(self.wire)} " if self.wire else ""
        run_as = self._run_as(workdir, f"--evidence {shlex.quote(self.evidence)} {wire}") if self.uid is not None else ""
        channel = f"{self.evidence}/channel"
        return [f"cat {channel} > {self.evidence}/events & swerl_collector=$!",
                f"{run_as}bash -c {shlex.quote(body)} {REPORT_FD}>{channel}"]

    def set_up(self, lines: list[str], workdir: str) -> list[str]:
        """A set-up's lines with every command that could start code of the repository (an install running the
        agent's ``setup.py``) run as the test user, within the tests' time limit; root keeps the rest
        (``setup_privilege``). Nothing of the user's outlives its run; what it leaves is audited with the tests'."""
        if self.uid is None:
            return list(lines)
        out: list[str] = []
        folder = f"{self.evidence}/set-up"
        for as_root, run in split(lines, workdir):
            if as_root:
                out += run
                continue
            body = "\n".join(["set -uxo pipefail", *run])
            out += [f"mkdir -p -m 700 {folder}",
                    self._run_as(workdir, f"--evidence {folder} --clear-outside 1 ") + f"bash -c {shlex.quote(body)}"]
        return out

    def _run_as(self, workdir: str, options: str) -> str:
        """The helper's ``run`` as the test user, under the tests' time limit, up to the command it runs."""
        limit = f"--timeout-s {self.timeout_s:g} " if self.timeout_s is not None else ""
        return (f'"$SWERL_PYTHON" -I -S {self.helper} run {shlex.quote(workdir)} {self.uid} {shlex.quote(self.home)} '
                f"{limit}{options}-- ")

    def after(self) -> list[str]:
        """Once the test command's status is printed: nothing of the tests' is left to write (``run`` saw to
        it), so the copy of their events ends."""
        return ["wait $swerl_collector"]


def instrumentation(plugin_dir: str, plugin_module: str) -> list[str]:
    return [
        "export PYTHONDONTWRITEBYTECODE=1 PYTHONNOUSERSITE=1",
        f"export SWERL_REPORT_FD={REPORT_FD}",
        f"export PYTHONPATH={shlex.quote(plugin_dir)}${{PYTHONPATH:+:$PYTHONPATH}}",
        f'export PYTEST_ADDOPTS="-p {plugin_module} ${{PYTEST_ADDOPTS:-}}"',
    ]


# Root's step just before the tests, in one interpreter of the tests' environment (run isolated, -I, so no
# module of the repository can answer): the canaries written into the test files (canaries.py, parsed by the
# tests' own Python), and the tripwire (resources/swerl_tripwire.py) into this interpreter's site-packages: a
# module and a .pth that imports it, so every interpreter of this environment starts with the hook in.
# pytest's plugins load as they do under swebench's harness (entry points autoloaded, inner sessions too):
# the metadata that registers them is root's, the patch's is put back and the tests' is audited.
_PRE_TESTS = """\
import json, os, sys
args = json.loads(sys.argv[2]) if sys.argv[1:2] == ["--swerl-pre-tests"] else {}
status = {"python": sys.version.split()[0], "tripwire": False}
if args.get("canaries"):
    spec = args["canaries"]
    if sys.version_info >= (3, 8):
        import importlib.util
        loader = importlib.util.spec_from_file_location("swerl_canaries", args["canaries_src"])
        module = importlib.util.module_from_spec(loader)
        loader.loader.exec_module(module)
        built = module.build(spec["workdir"], spec["targets"], spec["seed"])
    else:
        built = {"built": [], "not_built": dict.fromkeys(spec["targets"], "Python before 3.8 has no end lines")}
    with open(spec["out"], "w") as f:
        json.dump(built, f)
if sys.version_info >= (3, 8) and args.get("tripwire_src"):
    try:
        import shutil, site as _site
        found = [d for d in getattr(_site, "getsitepackages", lambda: [])() if os.path.isdir(d)]
        if found:
            site = found[0]
        else:  # an old virtualenv's site module has no getsitepackages
            import sysconfig
            site = sysconfig.get_paths()["purelib"]
        shutil.copyfile(args["tripwire_src"], os.path.join(site, "swerl_tripwire.py"))
        with open(os.path.join(site, "000-swerl-tripwire.pth"), "w") as f:
            f.write("import sys, swerl_tripwire; sys.modules.pop('swerl_tripwire', None)\\n")
        for name in ("swerl_tripwire.py", "000-swerl-tripwire.pth"):
            os.chmod(os.path.join(site, name), 0o644)
        # the runner's own packages, located without running them: where the repository is the runner
        # (pytest-dev/pytest, pluggy) its files are the runner's, not evidence against the patch that changed them
        import importlib.util
        runner = []
        for name in ("_pytest", "pytest", "pluggy"):
            try:
                found_spec = importlib.util.find_spec(name)
            except Exception:
                found_spec = None
            for folder in (found_spec and found_spec.submodule_search_locations) or []:
                runner += sorted({os.path.abspath(folder) + "/", os.path.realpath(folder) + "/"})
        with open(args["tripwire_conf"], "a") as f:
            f.write("".join("runner " + folder + "\\n" for folder in runner))
        status.update(tripwire=True, site=site, runner=runner)
    except Exception as e:
        status["error"] = repr(e)
if args.get("out"):
    with open(args["out"], "w") as f:
        json.dump(status, f)
"""


def pre_tests(tripwire_src: str | None, evidence: str, canaries_src: str, canaries: dict | None) -> list[str]:
    """Root's lines just before the test command, once the environment is active and the test patch is in, in
    one interpreter of the tests' environment: the canaries (``canaries``: canaries.build's arguments) and the
    tripwire installed into it."""
    args = "--swerl-pre-tests " + shlex.quote(json.dumps({"tripwire_src": tripwire_src, "out": evidence + "/pre_tests.json",
                                                           "tripwire_conf": TRIPWIRE_CONFIG,
                                                           "canaries_src": canaries_src, "canaries": canaries}))
    return [
        'swerl_py="$(command -v python || command -v python3)"',
        f"\"$swerl_py\" -I -c {shlex.quote(_PRE_TESTS)} {args} >/dev/null 2>&1 || true",
        'export PYTEST_ADDOPTS="-p no:cacheprovider ${PYTEST_ADDOPTS:-}"',
    ]


def selects_within_files(command: str) -> bool:
    """Whether a test command picks tests inside files (node ids, -k): then copies added to a file would not run."""
    return "::" in command or re.search(r"(^|\s)-k(\s|$|\S)", command) is not None


def native_script(task: Task, test_files: list[str], workdir: str, exports: list[str],
                  isolation: Isolation, before_tests: list[str]) -> TestScript:
    """``install_config``'s eval commands and test command, between swebench's markers."""
    cfg = task.install_config
    lines = [
        *exports,
        *isolation.set_up(list(cfg.eval_commands), workdir),
        *before_tests,
        f"cd {shlex.quote(workdir)}",
        f"echo '{START_TEST_OUTPUT}'",
        *isolation.wrap([f"{cfg.test_cmd} {' '.join(shlex.quote(t) for t in test_files)}"], trace=False, workdir=workdir),
        "swerl_test_rc=$?",
        f"echo '{END_TEST_OUTPUT}'",
        f'echo "{TEST_EXIT_CODE}: $swerl_test_rc"',
        *isolation.after(),
        "exit $swerl_test_rc",
    ]
    return TestScript("\n".join(lines) + "\n", "pytest" in cfg.test_cmd, True, {})


def published_script(task: Task, exports: list[str], isolation: Isolation, workdir: str,
                     before_tests: list[str]) -> TestScript:
    """The record's ``eval_script`` as swebench runs it, with the exit-code line and image assets;
    its test command runs as the test user, and so does each set-up command that could start code of the
    repository (its install); the rest of its set-up and its reset run as root."""
    from swebench.harness.constants import TEST_EXIT_CODE_VAR
    from swebench.harness.utils import parse_eval_script, record_test_exit_code

    body = record_test_exit_code(parse_eval_script(task.eval_script or ""))
    files, restore = stage_assets(task)
    # assets after the script's own `git apply` of the test patch, as swebench stages them; the plugin
    # list once the script has activated its environment
    at = next((i for i, line in enumerate(body) if START_TEST_OUTPUT in line), len(body))
    taken = next((i for i, line in enumerate(body) if line.startswith(f"{TEST_EXIT_CODE_VAR}=")), None)
    if taken is not None and taken > at:  # the test command: between the start marker and its status
        printed = taken + 3  # the status, the end marker and the status line: then the tests are over
        body = [*body[:at + 1], *isolation.wrap(body[at + 1:taken], trace=True, workdir=workdir), *body[taken:printed],
                *isolation.after(), *body[printed:]]
    body = [*isolation.set_up(body[:at], workdir), *restore, *before_tests, *body[at:]]
    text = "\n".join(["#!/bin/bash", "set -uxo pipefail", *exports, *body]) + "\n"
    return TestScript(text, "pytest" in _test_region(body), False, files)


def _test_region(lines: list[str]) -> str:
    text = "\n".join(lines)
    if START_TEST_OUTPUT in text and END_TEST_OUTPUT in text:
        return text.split(START_TEST_OUTPUT, 1)[1].split(END_TEST_OUTPUT, 1)[0]
    return text


def stage_assets(task: Task) -> tuple[dict[str, bytes], list[str]]:
    """Binary files a record lists in ``image_assets``: ``{container path: bytes}`` and the copy commands."""
    files, restore = {}, []
    for key in ("test_patch", "patch"):
        for entry in (task.image_assets or {}).get(key) or []:
            path = entry.get("path") if isinstance(entry, dict) else None
            if not path:
                continue
            url = entry.get("url")
            if not url:
                raise AssetError(f"image_assets.{key} lists {path!r} with no url; the task cannot be graded as published")
            try:
                with urllib.request.urlopen(url, timeout=ASSET_FETCH_TIMEOUT_S) as resp:
                    data = resp.read()
            except (OSError, ValueError) as e:
                raise AssetError(f"image asset {path!r} could not be fetched from {url}: {e}") from e
            flat = re.sub(r"[^\w.-]", "__", path)
            files[f"{ASSETS_DIR}/{flat}"] = data
            # --remove-destination: a link the tests' user left at the path (its set-up commands ran before) is
            # replaced, never written through
            restore.append(f"mkdir -p \"$(dirname {shlex.quote(path)})\" && "
                           f"cp --remove-destination {ASSETS_DIR}/{flat} {shlex.quote(path)}")
    return files, restore
