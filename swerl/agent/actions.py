"""Turning a model's reply into exactly one command, as the paper's scaffold requires.

A reply is free-text reasoning followed by ONE fenced block holding the command. No block,
or more than one, is a format error that goes back to the model as an observation.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

FENCE = re.compile(r"^```[ \t]*([\w+-]*)[ \t]*\n(.*?)^```[ \t]*$", re.DOTALL | re.MULTILINE)
INTERACTIVE = frozenset({"vi", "vim", "nvim", "nano", "emacs", "less", "more", "top", "htop", "man", "ipython", "jupyter", "watch", "tmux", "screen"})
REPLS = frozenset({"python", "python3", "bash", "sh", "node", "irb"})
TOOLS = frozenset({"open", "goto", "scroll_up", "scroll_down", "create", "edit", "replace", "search_file", "find_file", "submit"})


class FormatError(ValueError):
    """The reply does not hold exactly one command; the message is shown to the model."""


@dataclass(frozen=True)
class Action:
    """One parsed command."""

    thought: str
    command: str

    @property
    def name(self) -> str:
        first = self.command.split(None, 1)[0] if self.command.strip() else ""
        return first

    @property
    def is_tool(self) -> bool:
        return self.name in TOOLS

    @property
    def is_submit(self) -> bool:
        return self.command.strip() == "submit"


def holds_command(text: str) -> bool:
    """True once ``text`` holds a complete fenced block: what ``parse_action`` reads a command from."""
    return FENCE.search(text) is not None


def parse_action(reply: str) -> Action:
    """The single fenced command of ``reply``; raise FormatError otherwise."""
    blocks = FENCE.findall(reply)
    if not blocks:
        raise FormatError(
            "no command found: end your reply with exactly one command in a fenced block, e.g.\n```\nls -la\n```"
        )
    if len(blocks) > 1:
        raise FormatError(f"more than one command: your reply has {len(blocks)} fenced blocks; send exactly one command per turn")
    command = blocks[0][1].rstrip("\n")
    if not command.strip():
        raise FormatError("no command found: the fenced block is empty")
    if "\x00" in command:  # no shell command can hold one: refused here, never sent to the sandbox
        raise FormatError("the command contains a NUL byte (\\0), which no shell command can hold; remove it")
    thought = reply[: FENCE.search(reply).start()].strip()
    action = Action(thought=thought, command=command)
    refuse_interactive(action)
    return action


def refuse_interactive(action: Action) -> None:
    """Interactive programs would hang the sandbox: refuse them before they run."""
    first_line = action.command.strip().splitlines()[0]
    try:
        words = shlex.split(first_line)
    except ValueError:
        return  # unbalanced quotes are the shell's business, and it will say so
    if not words:
        return
    prog = words[0].rsplit("/", 1)[-1]
    if prog in INTERACTIVE:
        raise FormatError(f"interactive program '{prog}' is not supported: use open/edit/replace to view and change files")
    if prog in REPLS and len(words) == 1 and "<<" not in action.command:
        raise FormatError(f"'{prog}' without arguments starts an interactive session, which is not supported; run a script or use -c")
