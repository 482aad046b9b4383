"""Which commands of a task's set-up root may run: only those that start no code of the repository.

A published ``eval_script`` (and ``install_config.eval_commands``) prepares the tests: it activates
the environment, resets the test files, applies the test patch, and in every SWE-bench record it
re-installs the package once the prediction is in (swebench's ``specs["install"]``, ``python -m pip
install -e .``). That install runs the agent's ``setup.py`` or in-tree build backend. As root, that
code could read root's secret, rewrite pytest or leave a process of root's behind, and no later
check could trust the container again. So a set-up command stays root's only when every program it
starts is one of ``ROOT_PROGRAMS``, which read the repository as data and never run it; everything
else (an interpreter, an installer, a build tool, a program of the repository, a command
substitution) runs as the test user, like the tests. Unknown means the test user's: the cost of a
wrong guess is a publisher's command without root (seen in its log), never the agent's code with it.
"""

from __future__ import annotations

import re
import shlex

# programs that read the repository as data; each starts nothing of it (git's hooks and filters live
# in .git/config and .git/hooks, which a prediction cannot reach)
ROOT_PROGRAMS = frozenset({
    ":", "true", "false", "cd", "pwd", "export", "unset", "set", "shopt", "umask", "ulimit", "echo", "printf",
    "git", "sed", "cat", "ls", "mkdir", "cp", "mv", "rm", "ln", "chmod", "chown", "touch", "which", "test", "[",
    "locale-gen", "update-locale", "apt-get", "apt", "sleep",
})
# shell words that open or close a compound command, or only join commands
OPENERS = {"if": "fi", "for": "done", "while": "done", "until": "done", "select": "done", "case": "esac", "{": "}"}
CLOSERS = frozenset(OPENERS.values())
KEYWORDS = frozenset({*OPENERS, *CLOSERS, "then", "else", "elif", "do", "!", "time"})
OPERATORS = frozenset({"&&", "||", ";", "|", "&", "(", ")", ";;", "|&"})
CONDA_SUBCOMMANDS = frozenset({"activate", "deactivate", "info", "list"})
_HEREDOC = re.compile(r"<<-?\s*(['\"]?)([A-Za-z0-9_.-]+)\1")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def _tokens(text: str) -> list[str] | None:
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    try:
        return list(lexer)
    except ValueError:  # an open quote: the command goes on on the next line
        return None


def _shell_tokens(head: list[str]) -> list[str] | None:
    """The tokens of a unit's shell lines, a newline read as the ``;`` it is to the shell (a line continued
    by ``\\`` joined to the next; lines inside an open quote read as one text)."""
    joined: list[str] = []
    for line in head:
        if joined and joined[-1].endswith("\\"):
            joined[-1] = joined[-1][:-1] + " " + line
        else:
            joined.append(line)
    per_line = [_tokens(line) for line in joined]
    if all(t is not None for t in per_line):
        return [token for tokens in per_line for token in [*tokens, ";"]]
    return _tokens("\n".join(head))


def _commands(tokens: list[str]) -> list[list[str]]:
    """Each simple command's words (assignments and redirections' targets included), keywords dropped."""
    commands, current = [], []
    for token in tokens:
        if token in OPERATORS or (not current and token in KEYWORDS):
            if current:
                commands.append(current)
            current = []
            continue
        if not current and _ASSIGNMENT.match(token):
            continue
        current.append(token)
    if current:
        commands.append(current)
    return commands


def _depth(tokens: list[str]) -> int:
    """How many compound commands ``tokens`` opens but leaves open (negative: closes more)."""
    depth, at_start = 0, True
    for token in tokens:
        if at_start and token in OPENERS:
            depth += 1
        elif at_start and token in CLOSERS:
            depth -= 1
        at_start = token in OPERATORS or token in KEYWORDS
    return depth


def _parts(unit: list[str]) -> tuple[list[str], list[str], bool]:
    """A unit's shell lines, its here-documents' bodies (delimiters included), and whether any of those
    bodies is unquoted (the shell expands it)."""
    head, body, expands, delimiter = [], [], False, None
    for line in unit:
        if delimiter is not None:
            body.append(line)
            if line.strip() == delimiter:
                delimiter = None
            continue
        head.append(line)
        found = _HEREDOC.search(line)
        if found:
            delimiter, expands = found.group(2), expands or not found.group(1)
    return head, body, expands


def units(lines: list[str]) -> list[list[str]]:
    """``lines`` cut into complete commands: a here-document with its body, a line continued by ``\\`` or
    an open quote with what follows, a compound command (``if`` ... ``fi``) whole."""
    out: list[list[str]] = []
    i = 0
    while i < len(lines):
        unit: list[str] = []
        while i < len(lines):
            line = lines[i]
            unit.append(line)
            i += 1
            found = _HEREDOC.search(line)
            if found:  # the body is data, up to its delimiter line
                while i < len(lines):
                    unit.append(lines[i])
                    i += 1
                    if lines[i - 1].strip() == found.group(2):
                        break
            if line.endswith("\\"):
                continue
            tokens = _shell_tokens(_parts(unit)[0])
            if tokens is not None and _depth(tokens) <= 0:
                break
        out.append(unit)
    return out


def root_may_run(unit: list[str], workdir: str) -> bool:
    """Whether every program ``unit`` starts is one that runs no code of the repository at ``workdir``."""
    head, body, expands = _parts(unit)
    text, data = "\n".join(head), "\n".join(body)
    # a command substitution runs whatever it names; in an unquoted here-document's body too
    if "$(" in text or "`" in text or (expands and ("$(" in data or "`" in data)):
        return False
    tokens = _shell_tokens(head)
    if tokens is None:
        return False
    for words in _commands(tokens):
        words = [w for w in words if not re.fullmatch(r"\d*[<>]+&?\d*-?", w)]
        if not words:
            continue
        program = words[0]
        if "/" in program:
            if not program.startswith("/") or _inside(program, workdir):
                return False
            program = program.rsplit("/", 1)[1]
        if program in {"source", "."}:
            if len(words) < 2 or not words[1].startswith("/") or _inside(words[1], workdir):
                return False
        elif program == "conda":
            if len(words) < 2 or words[1] not in CONDA_SUBCOMMANDS:
                return False
        elif program not in ROOT_PROGRAMS:
            return False
    return True


def _inside(path: str, workdir: str) -> bool:
    top = workdir.rstrip("/") + "/"
    return path == workdir or path.startswith(top)


def split(lines: list[str], workdir: str) -> list[tuple[bool, list[str]]]:
    """``lines`` as runs of whole commands, each run marked root's (True) or the test user's (False)."""
    runs: list[tuple[bool, list[str]]] = []
    for unit in units(lines):
        as_root = root_may_run(unit, workdir)
        if runs and runs[-1][0] == as_root:
            runs[-1][1].extend(unit)
        else:
            runs.append((as_root, list(unit)))
    return runs
