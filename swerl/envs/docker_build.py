"""Build one image from a context on disk, streaming the daemon's log to a file."""

from __future__ import annotations

import io
import re
import tarfile
from collections import deque
from pathlib import Path

from swerl.envs.docker_client import docker_client

LOG_TAIL_LINES = 30


# lines that say why a step failed, as pip, setuptools, apt and the shell print them
_CAUSE = re.compile(
    r"(No module named|ModuleNotFoundError|ImportError|Error:|ERROR:|error:|FileNotFoundError|"
    r"Could not find a version|No matching distribution|Unable to locate package|command not found|not found|"
    r"Permission denied|SyntaxError|CalledProcessError|requires a different Python|Requires-Python)"
)


def build_cause(tail: list[str], reason: str) -> str:
    """The last line of a failed build's log that names a cause (the daemon's own message does not)."""
    for line in reversed(tail):
        text = line.strip()
        if text and not text.startswith("ERROR: The command") and text not in reason and _CAUSE.search(text):
            return text[:300]
    return ""


class ImageBuildError(RuntimeError):
    """The daemon refused or failed a build; the message names the cause and carries the tail of its log."""

    def __init__(self, tag: str, reason: str, log_path: Path, tail: list[str]):
        self.tag, self.reason, self.log_path, self.tail = tag, reason, log_path, tail
        self.cause = build_cause(tail, reason)
        shown = "".join(tail).rstrip()
        why = f"{self.cause} ({reason.strip()})" if self.cause else reason.strip()
        super().__init__(f"building {tag} failed: {why} (full log: {log_path})\n--- last lines ---\n{shown}")


def context_tar(root: Path | None, extra: dict[str, bytes]) -> io.BytesIO:
    """A tar of ``root`` (if any) plus in-memory files such as the Dockerfile."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        if root is not None:
            for child in sorted(root.iterdir()):
                tf.add(child, arcname=child.name)
        for name, data in extra.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tf.addfile(info, io.BytesIO(data))
    buf.seek(0)
    return buf


def label_instruction(labels: dict[str, str]) -> str:
    """One ``LABEL`` line setting every label. Labels given through the API become one build step
    each for the classic builder, each step a container: three labels cost a third of a small
    instance image's build."""
    for key in labels:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._/-]*", key):
            raise ValueError(f"label key {key!r}: letters, digits and . _ / - only")
    return "LABEL " + " ".join(f'{key}="{_quoted(str(value))}"' for key, value in sorted(labels.items()))


def _quoted(value: str) -> str:
    """``value`` inside a Dockerfile's double quotes: no escape, quote or variable is interpreted."""
    if "\n" in value or "\r" in value:
        raise ValueError(f"label value {value!r}: one line only")
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")


def build_image(dockerfile: str, tag: str, log_path: Path, *, context: Path | None = None,
                files: dict[str, bytes] | None = None, labels: dict[str, str] | None = None,
                use_cache: bool = True) -> str:
    """Build ``tag`` and return its image id; raise ImageBuildError with the log's tail.

    ``use_cache=False`` skips the daemon's layer cache. The legacy builder's lookup reads every
    child image of the step's parent, and one removed meanwhile by another client fails the
    build ("unable to find image sha256:..."; seen on a COPY step while other work removed
    images). An instance image's layers are its own, so for it the lookup can only cost: its
    environment image has one child per instance built on it.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    tail: deque[str] = deque(maxlen=LOG_TAIL_LINES)
    if labels:
        try:
            dockerfile = dockerfile.rstrip("\n") + "\n" + label_instruction(labels) + "\n"
        except ValueError as e:  # a label made from a task's fields: that task's build fails, not the others'
            raise ImageBuildError(tag, str(e), log_path, []) from None
    payload = dict(files or {})
    payload["Dockerfile"] = dockerfile.encode()
    client = docker_client()
    error = None
    with log_path.open("a") as log:
        log.write(f"=== building {tag}\n{dockerfile}\n===\n")
        try:
            for chunk in client.api.build(
                fileobj=context_tar(context, payload), custom_context=True, tag=tag, rm=True, forcerm=True,
                decode=True, nocache=not use_cache,
            ):
                text = chunk.get("stream") or ""
                if "error" in chunk:
                    error = chunk["error"]
                    text = f"ERROR: {error}\n"
                if text:
                    log.write(text)
                    tail.extend(text.splitlines(keepends=True))
        except Exception as e:  # the daemon can also fail the request itself
            error = f"{type(e).__name__}: {e}"
            log.write(f"ERROR: {error}\n")
    if error:
        raise ImageBuildError(tag, error, log_path, list(tail))
    return client.images.get(tag).id
