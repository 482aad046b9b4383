"""What one grading writes into its sandbox and the one command it runs there, decided before a
container exists: snapshot, apply, guard, restore the tests, test patch, lock-down, the tests
between SWE-bench's markers as the test user, and pytest's evidence printed back."""

from __future__ import annotations

import json
import re
import secrets
import shlex
import uuid
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from swerl.data.task import Task
from swerl.grading.diffs import DiffParseError, join_diff, split_diff
from swerl.grading.log_parsers import LogParser, UnknownLogParserError, get_log_parser
from swerl.grading.protected import diff_paths, filter_sections, task_scope
from swerl.grading.results import FailureClass, GradeResult
from swerl.grading.sandbox_setup import IN_SANDBOX, STAGE, VIA
from swerl.grading.tamper_flags import tamper_flags
from swerl.grading.test_script import (AssetError, Isolation, TestScript, instrumentation, native_script, pre_tests,
                                      published_script, selects_within_files)
from swerl.grading.test_user import FRAME_LINE

if TYPE_CHECKING:
    from swerl.grading.grader import GradingConfig

WORK = "/tmp/swerl-grade"
GUARD, TEST_USER = (f"{WORK}/{name}.py" for name in IN_SANDBOX)  # the set-up imports them by these names
SETUP = f"{WORK}/swerl_setup.py"
CANARIES, TRIPWIRE = f"{WORK}/swerl_canaries.py", f"{WORK}/swerl_tripwire.py"
SETUP_FAILED = 97
INLINE_REPORT_MAX = 1_000_000  # bytes of report printed with the test output (well inside the kept tail)
Files = dict[str, tuple[bytes | str, int]]  # path in the sandbox -> (content, mode)
Step = tuple[str, dict | str]  # (stage, JSON arguments of sandbox_setup's step or a shell line)


def select_test_files(task: Task) -> list[str]:
    """Test files given to the test command: those of the test patch and of the listed tests."""
    files = {p for p in diff_paths(task.test_patch) if p.endswith(".py")}
    for test in [*task.FAIL_TO_PASS, *task.PASS_TO_PASS]:
        head = test.split("::", 1)[0]
        if "::" in test and head.endswith(".py"):
            files.add(head)
    return sorted(files)


def guard_source() -> bytes:
    return resources.files("swerl.grading").joinpath("path_rules.py").read_bytes()


def plugin_source() -> bytes:
    return resources.files("swerl.grading").joinpath("resources/swerl_pytest_report.py").read_bytes()


def setup_source() -> bytes:
    return resources.files("swerl.grading").joinpath("sandbox_setup.py").read_bytes()


def test_user_source() -> bytes:
    return resources.files("swerl.grading").joinpath("test_user.py").read_bytes()


def canaries_source() -> bytes:
    return resources.files("swerl.grading").joinpath("canaries.py").read_bytes()


def tripwire_source() -> bytes:
    return resources.files("swerl.grading").joinpath("resources/swerl_tripwire.py").read_bytes()


class Logs:
    """Where one grading's patch, script, logs and result are kept (nowhere when ``root`` is None)."""

    def __init__(self, root: Path | None):
        self.root = root
        if root is not None:
            root.mkdir(parents=True, exist_ok=True)

    def write(self, name: str, text: str) -> None:
        if self.root is not None:
            (self.root / name).write_text(text, errors="replace")


@dataclass
class Plan:
    """Everything one grading writes and runs, decided before a container exists."""

    files: dict[str, tuple[bytes | str, int]]
    command: str
    tests_line: str
    frame_prefix: str  # root's answer starts with it: FRAME_LINE and a secret only root can read in the sandbox
    events_path: str
    audited: bool
    script: TestScript
    parser: LogParser
    no_patch: bool
    canaries: bool  # root writes canaries into the test files
    tripwire: bool  # root installs the tripwire into the tests' interpreter
    added_defs: dict[str, list[str]]  # per file the diff applied, the functions and names its added lines define


def make_plan(task: Task, patch: str, config: GradingConfig, result: GradeResult, logs: Logs) -> Plan | None:
    """The files and the one command of a grading; None when ``result`` is already final (no sandbox needed)."""
    try:
        parser = get_log_parser(task.parser_name)
    except UnknownLogParserError as e:
        result.failure_class, result.reason = FailureClass.TASK_BROKEN, str(e)
        return None
    no_patch = not (patch or "").strip()  # only reached with run_tests_without_patch: grade_prediction answers the rest
    nonce = uuid.uuid4().hex[:16]
    workdir, command_text = config.sandbox.workdir, _test_command_text(task)
    scope = task_scope(task, command_text, config.protected, workdir)
    agent = ({}, [], {}) if no_patch else _agent_patch(task, patch, scope, config, result, logs, nonce)
    if agent is None:
        return None
    agent_files, apply_steps, added_defs = agent
    test_files, test_steps = _test_steps(task, scope)
    # the tests' user may create files in the repository but change none of root's; pytest's events
    # reach a folder only root can open, and so does everything root finds
    isolation = _isolation(config, nonce)
    evidence, wire = isolation.evidence, isolation.wire
    # one interpreter runs every step, each printing its stage line first, so a failure says which step it was
    setup: list[Step] = [*apply_steps, *test_steps, _lockdown_step(workdir, isolation)]
    secret = secrets.token_hex(16)
    files = {**agent_files, **test_files, **_root_files(evidence, secret)}
    plugin_dir = f"{WORK}/plug-{nonce}"
    exports = instrumentation(plugin_dir, f"swerl_report_{nonce}")
    spec = _canary_spec(task, config, command_text, evidence)
    before = pre_tests(TRIPWIRE if wire else None, evidence, CANARIES, spec)
    script = _tests_script(task, exports, isolation, workdir, before, result)
    if script is None:
        return None
    script_path, tests_line = f"{WORK}/eval-{nonce}.sh", f"{STAGE}tests-{nonce}"
    files.update({f"{plugin_dir}/swerl_report_{nonce}.py": (plugin_source(), 0o644), script_path: (script.text, 0o755),
                  **{p: (d, 0o644) for p, d in script.files.items()}})
    logs.write("eval.sh", script.text)
    events = f"{evidence}/events.large"  # read as a file when too large to carry in root's answer
    command = _one_exec(workdir, {"workdir": workdir, "evidence": evidence, "steps": setup}, tests_line, script_path,
                        evidence)
    return Plan(files, command, tests_line, f"{FRAME_LINE}{secret} ", events, isolation.uid is not None, script, parser,
                no_patch, spec is not None, wire is not None, added_defs)


def _agent_patch(task: Task, patch: str, scope: dict, config: GradingConfig, result: GradeResult, logs: Logs,
                 nonce: str) -> tuple[Files, list[Step], dict[str, list[str]]] | None:
    """What the agent's diff adds to a grading: its file, the set-up's snapshot, apply and guard steps, and the
    names its added lines define; None when ``result`` is already final (a bad diff, every file dropped)."""
    try:
        sections = split_diff(patch)
        kept, dropped = filter_sections(sections, scope, config.protected)
    except DiffParseError as e:
        result.failure_class, result.reason = FailureClass.APPLY_FAILED, f"patch is not a valid diff: {e}"
        return None
    result.dropped_files = dropped
    result.tamper_flags = sorted(set(tamper_flags(patch)) | ({"protected_paths"} if dropped else set()))
    if not kept:
        result.failure_class = FailureClass.NO_PATCH
        result.reason = "every file of the patch was dropped: " + "; ".join(f"{p}: {r}" for p, r in dropped.items())
        return ({}, [], {}) if config.run_tests_without_patch else None
    applied = join_diff(kept)
    if config.repair_patches:
        applied, result.repairs = repair_patch(applied, patch)
    elif not patch.endswith("\n") and kept[-1].text == sections[-1].text:
        applied = applied[:-1]  # as published: swebench's commands refuse a patch cut short of its newline
    logs.write("applied.diff", applied)
    guard_args = {"root": config.sandbox.workdir, "before": f"{WORK}/before-{nonce}.json", "base": task.base_commit,
                  "scope": {**scope, "patch_paths": sorted({p for s in sections for p in s.paths})},
                  "rules": config.protected.model_dump(mode="json")}
    steps: list[Step] = [
        ("snapshot", guard_args),
        ("apply", apply_command(f"{WORK}/agent.patch")),
        ("guard", guard_args),  # judge what changed in the container, whatever the diff reader believed
    ]
    return {f"{WORK}/agent.patch": (applied, 0o644)}, steps, added_definitions(kept)


def _test_steps(task: Task, scope: dict) -> tuple[Files, list[Step]]:
    """The test patch's file and the set-up's steps that put the task's test files back to ``base_commit`` and
    apply its test patch."""
    base = shlex.quote(task.base_commit)
    files: Files = {}
    steps: list[Step] = []
    restore = " ".join(shlex.quote(p) for p in sorted(set(scope["test_patch_files"])))
    if restore:
        steps.append(("restore", f"for f in {restore}; do if git cat-file -e {base}:\"$f\" 2>/dev/null; then "
                                 f"git checkout -q {base} -- \"$f\" || exit 1; else rm -rf -- \"$f\" || exit 1; fi; done"))
    if task.test_patch.strip():
        # a published eval_script applies the test patch itself; checking first tells a broken task apart
        files[f"{WORK}/test.patch"] = (task.test_patch, 0o644)
        check = "--check" if task.eval_script else ""
        steps.append(("test_patch", f"git apply --verbose {check} {WORK}/test.patch"))
    return files, steps


def _isolation(config: GradingConfig, nonce: str) -> Isolation:
    """How the test command runs: as the test user when there is one, the tripwire's FIFO only with that user."""
    evidence = f"{WORK}/evidence-{nonce}"
    test_user = config.test_uid if config.test_user else None
    wire = f"{WORK}/wire-{nonce}" if test_user is not None and config.tripwire else None
    return Isolation(TEST_USER, evidence, f"/tmp/swerl-home-{nonce}", test_user, config.test_timeout_s, wire)


def _lockdown_step(workdir: str, isolation: Isolation) -> tuple[str, dict]:
    return ("lockdown", {"root": workdir, "uid": isolation.uid, "home": isolation.home, "evidence": isolation.evidence,
                         "wire": isolation.wire})


def _root_files(evidence: str, secret: str) -> Files:
    """swerl's helpers that root runs in the sandbox, and the secret of root's answer in root's own folder."""
    return {TEST_USER: (test_user_source(), 0o644), SETUP: (setup_source(), 0o644), GUARD: (guard_source(), 0o644),
            TRIPWIRE: (tripwire_source(), 0o644), CANARIES: (canaries_source(), 0o644),
            f"{evidence}/secret": (secret, 0o600)}


def _canary_spec(task: Task, config: GradingConfig, command_text: str, evidence: str) -> dict | None:
    """canaries.build's arguments, or None where no canaries are written: a copy runs only where pytest
    collects the whole test file, not where the command picks tests within it."""
    if not (config.canaries and "pytest" in command_text and not selects_within_files(command_text)):
        return None
    return {"workdir": config.sandbox.workdir, "targets": list(task.FAIL_TO_PASS), "seed": secrets.randbits(32),
            "out": f"{evidence}/canaries.json"}


def _tests_script(task: Task, exports: list[str], isolation: Isolation, workdir: str, before: list[str],
                  result: GradeResult) -> TestScript | None:
    """The script that runs the tests: the record's published ``eval_script`` or one made from its
    ``install_config``; None, with ``result`` final, when an asset it needs is missing."""
    try:
        return (published_script(task, exports, isolation, workdir, before) if task.eval_script
                else native_script(task, select_test_files(task), workdir, exports, isolation, before))
    except AssetError as e:
        result.failure_class, result.reason = FailureClass.INFRA_ERROR, str(e)
        return None


def _one_exec(workdir: str, setup_spec: dict, tests_line: str, script_path: str, evidence: str) -> str:
    """Set-up, tests and root's answer in one exec. The set-up's own output goes to root's folder; the tests
    line is printed once it succeeded, before any code under test runs. Root's answer comes last, once no
    process of the tests' is left, under a secret the tests never could read."""
    wd = shlex.quote(workdir)
    return "\n".join([
        f"( cd {wd} && \"$SWERL_PYTHON\" -I -S {SETUP} {shlex.quote(json.dumps(setup_spec))} ); swerl_setup=$?",
        f"if [ $swerl_setup -eq 0 ]; then echo '{tests_line}'; ( cd {wd} && bash {script_path} ); swerl_rc=$?; "
        f"else swerl_rc={SETUP_FAILED}; fi",
        *root_answer_lines(evidence),
        "exit $swerl_rc",
    ])


# swebench's run_instance: these commands in this order, the tree reset before each retry, then a patch
# already applied counts as applied
APPLY_COMMANDS = ("git apply --verbose", "git apply --verbose --3way", "git apply --verbose --reject",
                  "patch --batch --forward --fuzz=5 -p1 -i")


def apply_command(patch_file: str) -> str:
    """The shell line that applies ``patch_file`` exactly as swebench's harness does; it prints which command
    did (``@@via <command>``) and fails when none did."""
    path = shlex.quote(patch_file)
    tries = []
    for i, command in enumerate(APPLY_COMMANDS):
        reset = "git checkout -- . ; git clean -fd; " if i else ""
        tries.append(f"{reset}if {command} {path}; then echo '{VIA}{command.split(' -i')[0]}'; exit 0; fi")
    return "; ".join([*tries, f"if git apply --check --reverse {path}; then echo '{VIA}already applied'; exit 0; fi",
                      "exit 1"])


def repair_patch(applied: str, original: str) -> tuple[str, list[str]]:
    """``applied`` with what swebench's commands would refuse mended (the opt-in ``repair_patches``), and the
    names of the repairs made: a missing final newline, hunk headers whose line counts disagree with their
    bodies."""
    repairs = []
    if not original.endswith("\n"):
        repairs.append("final newline")
    fixed = recount_hunks(applied)
    if fixed != applied:
        repairs.append("hunk counts")
    return fixed, repairs


def recount_hunks(diff: str) -> str:
    """Every ``@@ -a,b +c,d @@`` header rewritten with the counts its body has (the body runs until the next
    header or file section)."""
    lines = diff.split("\n")
    out, i = [], 0
    header = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@(.*)$")
    while i < len(lines):
        m = header.match(lines[i])
        if not m:
            out.append(lines[i])
            i += 1
            continue
        j, old, new = i + 1, 0, 0
        while j < len(lines) and lines[j][:1] in (" ", "-", "+", "\\", "") and not lines[j].startswith(("--- ", "+++ ")):
            if lines[j] == "" and (j + 1 >= len(lines) or lines[j + 1][:1] not in (" ", "-", "+", "\\")):
                break
            kind = lines[j][:1] or " "
            old += kind in (" ", "-")
            new += kind in (" ", "+")
            j += 1
        out.append(f"@@ -{m.group(1)},{old} +{m.group(2)},{new} @@{m.group(3)}")
        out.extend(lines[i + 1:j])
        i = j
    return "\n".join(out)


_DEFINED = re.compile(r"^\+\s*(?:async\s+def|def|class)\s+(\w+)|^\+\s*(\w+)\s*(?::[^=]*)?=(?!=)")


def added_definitions(sections) -> dict[str, list[str]]:
    """Per file a section creates or changes, the names its added lines define (functions, classes, assignments):
    a hook implementation of one of these names is the patch's."""
    out: dict[str, list[str]] = {}
    for section in sections:
        if section.new_path is None:
            continue
        names = {a or b for line in section.text.split("\n") if (m := _DEFINED.match(line)) for a, b in [m.groups()]}
        if names:
            out[section.new_path] = sorted(names)
    return out


def root_answer_lines(evidence: str) -> list[str]:
    """Root's answer, one line: FRAME_LINE, the secret (read from root's folder by root's shell), then base64 of
    a tar of what root found: the set-up's, the canaries', the pre-test step's and the test user's records,
    the set-up log's tail, and pytest's events unless they are too large to carry (then read as a file)."""
    ev = shlex.quote(evidence)
    return [
        f"cd {ev} && read -r swerl_secret < secret; tail -c 6000 setup.log > setup.tail 2>/dev/null; "
        f"[ \"$(stat -c %s events 2>/dev/null || echo 0)\" -lt {INLINE_REPORT_MAX} ] || mv events events.large; "
        "swerl_found=; for f in setup.json guard.json canaries.json pre_tests.json finish.json setup.tail events; do "
        "[ -f \"$f\" ] && swerl_found=\"$swerl_found $f\"; done; "
        f"printf '\\n%s%s ' '{FRAME_LINE}' \"$swerl_secret\"; tar -cf - $swerl_found | base64 -w0; echo",
    ]


def _test_command_text(task: Task) -> str:
    """The part of the task's script that runs the tests (what decides whether copies in a file run)."""
    if task.eval_script:
        from swerl.grading.judge import END_TEST_OUTPUT, START_TEST_OUTPUT

        text = task.eval_script
        if START_TEST_OUTPUT in text and END_TEST_OUTPUT in text:
            return text.split(START_TEST_OUTPUT, 1)[1].split(END_TEST_OUTPUT, 1)[0]
        return text
    if not task.install_config:
        return ""
    return " ".join([task.install_config.test_cmd, *(shlex.quote(f) for f in select_test_files(task))])
