"""Putting the agent's tools into a sandbox: one script plus a wrapper per tool on PATH."""

from __future__ import annotations

from importlib import resources

from swerl.envs.sandbox import Sandbox

TOOLS_SCRIPT = "/opt/swerl/swerl_tools.py"
BIN_DIR = "/usr/local/bin"  # on PATH in every base image, ahead of /usr/bin
FILE_TOOLS = ("open", "goto", "scroll_up", "scroll_down", "create", "edit", "replace", "search_file", "find_file")


def install_tools(sandbox: Sandbox) -> None:
    """Install the file tools; ``submit`` is handled by the agent loop, not in the sandbox."""
    script = resources.files("swerl.agent").joinpath("resources/swerl_tools.py").read_bytes()
    files = {TOOLS_SCRIPT: (script, 0o755)}
    # the image's own python3, not the task environment's (which may be an old Python, or activated
    # over PATH): the tools are standard library only and must behave the same everywhere
    python = getattr(sandbox, "python", None) or "python3"
    for name in FILE_TOOLS:
        files[f"{BIN_DIR}/{name}"] = (f'#!/bin/sh\nexec {python} -I -S {TOOLS_SCRIPT} {name} "$@"\n', 0o755)
    sandbox.write_files(files)
