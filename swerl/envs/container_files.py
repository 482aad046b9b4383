"""What swerl puts into a container and asks of its image, whatever runs the container (Docker,
Kubernetes): the runner's source, files as a tar, where python3 is, and what an activation sets."""

from __future__ import annotations

import io
import json
import tarfile
import time
from importlib import resources

from swerl.envs.docker_config import PYTHON_CANDIDATES, SWEBENCH_ACTIVATE, SWEBENCH_CONDA_ENV
from swerl.envs.exec_channel import RUNNER_EXITED
from swerl.envs.sandbox import SandboxError

class ContainerSandboxPaths:
    """What a sandbox whose commands run in a container of its own (a Docker container, a pod) says of its paths:
    the file system is the container's own, and swerl's helpers run with the image's system python3."""

    config: object  # a sandbox config with ``workdir``
    _python: str | None

    @property
    def workdir(self) -> str:
        return self.config.workdir

    @property
    def root(self) -> str:
        return "/"

    @property
    def python(self) -> str:
        """The image's system python3, which runs swerl's own helpers (never the task's environment)."""
        return self._python or "python3"


# prints the first python3 of PYTHON_CANDIDATES, else the one on PATH
PYTHON_PROBE = " || ".join(f"test -x {p} && echo {p}" for p in PYTHON_CANDIDATES) + " || command -v python3"


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
    return (f"{found}; command -v python3 >/dev/null && exec python3 -I -S {args}; "
            "echo 'no python3 in this image; the sandbox runner needs one' >&2; exit 127")


def found_python(image: str, code: int | None, out: str) -> str:
    """The python3 PYTHON_PROBE found in ``image``, from its exit code and output; SandboxError otherwise."""
    found = out.strip().splitlines()
    if code == 0 and found and found[0].startswith("/"):
        return found[0]
    if code in (1, 127) and not found:
        raise SandboxError(f"image {image} has no python3; the sandbox runner needs one")
    # anything else is the probe failing (a container dying under load), not the image
    raise SandboxError(f"probing {image} for python3 failed (exit code {code}): {out[-300:]!r}")


def activation_spec(activate: str | None) -> dict | None:
    """What the runner sources to activate an image's environment (a sandbox config's ``activate``):
    'auto' is SWE-bench's conda environment where the image has one; None: nothing."""
    if activate == "auto":
        return {"probe": f"{SWEBENCH_CONDA_ENV}/bin/python", "lines": SWEBENCH_ACTIVATE}
    return {"probe": None, "lines": activate} if activate else None


def activated_env(image: str, answer: dict) -> dict[str, str]:
    """The variables an activation set, from the runner's answer (``--activate``, or a one-shot run's)."""
    if "activation_error" in answer:
        raise SandboxError(f"{answer['activation_error']} in {image}; fix the image or set the sandbox's "
                           "`activate` (None: the image's own environment)")
    return answer.get("activated_env", answer.get("env")) or {}


def probed_activation(image: str, code: int | None, out: str) -> dict[str, str]:
    """``activated_env`` of the runner's ``--activate`` answer, its last line of ``out``."""
    try:
        answer = json.loads(out.strip().splitlines()[-1])
    except (IndexError, ValueError):
        raise SandboxError(f"probing the environment of {image} failed (exit {code}): {out[-300:]!r}") from None
    return activated_env(image, answer)


# A Docker agent sandbox's command (its exec channel): a shell that runs swerl's runner (found as exec_any_python
# finds it), which serves requests on the container's stdin until the host closes it or ``lifetime_s`` passes, and
# starts a new runner when a command kills it, announcing that on stdout (docker's init holds the container's stdio
# while it runs, so a dead runner would otherwise go unnoticed until a timeout). The script and the runner's source
# ride in the environment (removed before the runner starts), not on the command line: PID 1 forwards signals to the
# container's command, and its command line should not be what an agent's `pkill -f python` matches.
SERVE_ENV = ("SANDBOX_INIT", "SANDBOX_RUNNER")
MAX_RUNNER_RESTARTS = 100


def serve_script(lifetime_s: int) -> str:
    return (f'src=$SANDBOX_RUNNER; unset {" ".join(SERVE_ENV)}; n=0; while :; do '
            '( ' + exec_any_python(f'-u -c "$src" --serve {int(lifetime_s)}') + ' ); c=$?; '
            f'case $c in 0|127) exit $c;; esac; n=$((n + 1)); [ $n -gt {MAX_RUNNER_RESTARTS} ] && exit $c; '
            f'echo "{{\\"{RUNNER_EXITED}\\": $c}}"; done')
