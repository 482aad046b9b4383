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
IN_SANDBOX = ("swerl_path_rules", "swerl_test_user")  # the helpers' file names beside this one in the sandbox


def _helpers():
    """(path_rules, test_user): swerl's modules on the host, their copies beside this file in a sandbox."""
    if __name__ == "__main__":
        # appended, so the standard library still answers first: nothing in this folder shadows it
        sys.path.append(os.path.dirname(os.path.abspath(__file__)))
        return tuple(__import__(name) for name in IN_SANDBOX)
    from swerl.grading import path_rules, test_user
    return path_rules, test_user


def run_step(name: str, arg, workdir: str, path_rules, test_user) -> int:
    """One step's exit status (0: done)."""
    if isinstance(arg, str):
        return subprocess.run(["bash", "-c", arg], cwd=workdir, stdin=subprocess.DEVNULL).returncode
    if name == "snapshot":
        path_rules.snapshot(arg["root"], arg["before"])
        return 0
    if name == "guard":
        verdict = path_rules.guard(arg["root"], arg["before"], arg["base"], set(arg["test_patch_files"]), arg["rules"])
        print(path_rules.GUARD_LINE + json.dumps(verdict, sort_keys=True), flush=True)
        return 3 if verdict["refused"] else 0
    if name == "lockdown":
        test_user.lockdown(arg["root"], arg["uid"], arg["home"], arg["evidence"])
        return 0
    print(f"unknown set-up step {name!r}", file=sys.stderr)
    return 2


def main(argv: list[str]) -> int:
    spec = json.loads(argv[1])
    path_rules, test_user = _helpers()
    for name, arg in spec["steps"]:
        print(STAGE + name, flush=True)  # before the step's own output, which another process may write
        code = run_step(name, arg, spec["workdir"], path_rules, test_user)
        if code:
            return code
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
