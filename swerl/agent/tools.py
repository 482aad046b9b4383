"""Putting the agent's tools into a sandbox: one script plus a wrapper per tool on PATH."""

from __future__ import annotations

import posixpath
import shlex
from importlib import resources

from swerl.envs.sandbox import Sandbox

# where they go in a container; a sandbox sharing the host's file system puts them under its ``root``
TOOLS_SCRIPT = "/opt/swerl/swerl_tools.py"
BIN_DIR = "/usr/local/bin"  # on PATH in every base image, ahead of /usr/bin
TOOLS_STATE = "/tmp/.swerl_tools_state.json"  # the open file and window, kept between commands
FILE_TOOLS = ("open", "goto", "scroll_up", "scroll_down", "create", "edit", "replace", "search_file", "find_file")


def in_sandbox(sandbox: Sandbox, path: str) -> str:
    """``path`` (one of swerl's absolute locations above) as the sandbox's commands see it."""
    return posixpath.join(sandbox.root, path.lstrip("/"))


def install_tools(sandbox: Sandbox) -> None:
    """Install the file tools; ``submit`` is handled by the agent loop, not in the sandbox."""
    script = resources.files("swerl.agent").joinpath("resources/swerl_tools.py").read_bytes()
    script_path, state = shlex.quote(in_sandbox(sandbox, TOOLS_SCRIPT)), shlex.quote(in_sandbox(sandbox, TOOLS_STATE))
    files = {in_sandbox(sandbox, TOOLS_SCRIPT): (script, 0o755)}
    # the image's own python3, not the task environment's (which may be an old Python, or activated
    # over PATH): the tools are standard library only and must behave the same everywhere
    for name in FILE_TOOLS:
        files[in_sandbox(sandbox, f"{BIN_DIR}/{name}")] = (
            f'#!/bin/sh\nSWERL_TOOLS_STATE={state} exec {shlex.quote(sandbox.python)} -I -S {script_path} {name} "$@"\n', 0o755)
    sandbox.write_files(files)
