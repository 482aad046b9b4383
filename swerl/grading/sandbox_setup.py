"""A grading's set-up inside its sandbox, in ONE interpreter: snapshot, apply, guard, restore the
tests, test patch, lock-down.

Standard library only, on purpose: copied into every grading sandbox next to the path guard and the
test-user helper (``path_rules.py`` and ``test_user.py``, whose functions it calls) and run there as
root (``python3 -I -S``) before any code under test. One interpreter start instead of one per Python
step saves ~25 ms each on every grading. The steps and their order are the host's (``plan.py``): a
step is either one of these functions with its JSON arguments or a shell line (applying a patch,
restoring files with git), run with ``bash -c`` in the repository. Each step prints its stage line
first, so a failure says which step it was; the first failing step ends the set-up with its status.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

STAGE = "@@swerl-stage "
VIA = "@@via "  # the apply step's line naming the command that applied the patch (plan.apply_command)
IN_SANDBOX = ("swerl_path_rules", "swerl_test_user")  # the helpers' file names beside this one in the sandbox


def _helpers():
    """(path_rules, test_user): swerl's modules on the host, their copies beside this file in a sandbox."""
    if __name__ == "__main__":
        # appended, so the standard library still answers first: nothing in this folder shadows it
        sys.path.append(os.path.dirname(os.path.abspath(__file__)))
        return tuple(__import__(name) for name in IN_SANDBOX)
    from swerl.grading import path_rules, test_user
    return path_rules, test_user


def run_step(name: str, arg, workdir: str, path_rules, test_user, log, found: dict) -> int:
    """One step's exit status (0: done); its output goes to ``log``, what root learns to ``found``."""
    if isinstance(arg, str):
        return subprocess.run(["bash", "-c", arg], cwd=workdir, stdin=subprocess.DEVNULL, stdout=log,
                              stderr=subprocess.STDOUT).returncode
    if name == "snapshot":
        path_rules.snapshot(arg["root"], arg["before"])
        return 0
    if name == "guard":
        verdict = path_rules.guard(arg["root"], arg["before"], arg["base"], arg["scope"], arg["rules"])
        found["guard"] = verdict
        return 3 if verdict["refused"] else 0
    if name == "lockdown":
        test_user.lockdown(arg["root"], arg["uid"], arg["home"], arg["evidence"], arg.get("wire"),
                           (found.get("guard") or {}).get("changed", []))
        return 0
    print(f"unknown set-up step {name!r}", file=log, flush=True)
    return 2


def _bounded(verdict: dict, limit: int = 200) -> dict:
    """The guard's verdict with at most ``limit`` paths a kind (a patch of 100,000 files makes no larger answer)."""
    out = {}
    for kind, paths in verdict.items():
        items = list(paths.items() if isinstance(paths, dict) else enumerate(paths))
        out[kind] = dict(items[:limit]) if isinstance(paths, dict) else list(paths)[:limit]
        if len(items) > limit:
            out[f"{kind}_count"] = len(items)
    return out


def main(argv: list[str]) -> int:
    """The steps in order; their output and root's findings go to the evidence folder (root's alone), so a
    patch that makes the set-up print a lot pushes nothing out of the graded log."""
    spec = json.loads(argv[1])
    path_rules, test_user = _helpers()
    evidence = spec["evidence"]
    os.makedirs(evidence, mode=0o700, exist_ok=True)
    os.chmod(evidence, 0o700)
    found: dict = {}
    stage, code = "", 0
    with open(os.path.join(evidence, "setup.log"), "ab") as log:
        for name, arg in spec["steps"]:
            stage = name
            log.write(f"{STAGE}{name}\n".encode())
            log.flush()
            code = run_step(name, arg, spec["workdir"], path_rules, test_user, log, found)
            log.flush()
            if name == "apply" and code == 0:
                with open(log.name, "rb") as f:
                    f.seek(max(0, os.path.getsize(log.name) - 4096))
                    lines = [ln for ln in f.read().decode("utf-8", "replace").splitlines() if ln.startswith(VIA)]
                    found["via"] = lines[-1][len(VIA):] if lines else "git apply --verbose"
            if code:
                break
    if "guard" in found:
        with open(os.path.join(evidence, "guard.json"), "w") as f:
            json.dump(_bounded(found["guard"]), f)
    with open(os.path.join(evidence, "setup.json"), "w") as f:
        json.dump({"stage": stage, "code": code, "via": found.get("via")}, f)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
