"""The agent's file tools, run inside the sandbox: a windowed viewer and exact line edits.

Installed at /opt/swerl/swerl_tools.py with one wrapper per tool on PATH. Standard library
only (run with the container's python3 -I -S). The open file and the window position
persist between commands in a small state file.
"""

import fnmatch
import json
import os
import sys

STATE = os.environ.get("SWERL_TOOLS_STATE", "/tmp/.swerl_tools_state.json")
WINDOW = int(os.environ.get("SWERL_TOOLS_WINDOW", "100"))
SNIPPET_CONTEXT = 3  # lines shown on each side of a replacement
MAX_HITS = 100


class ToolError(Exception):
    pass


def load_state():
    try:
        with open(STATE) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {"file": None, "first": 1}


def save_state(state):
    with open(STATE, "w") as f:
        json.dump(state, f)


def read_lines(path):
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        return f.read().split("\n")


def write_lines(path, lines):
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write("\n".join(lines))


def require_open(state):
    if not state.get("file"):
        raise ToolError("no file is open: use `open FILE` first")
    if not os.path.isfile(state["file"]):
        raise ToolError(f"the open file {state['file']} no longer exists")
    return state["file"]


def line_total(lines):
    """Lines of the file as an editor counts them (a final newline ends a line, it does not start one)."""
    return len(lines) - 1 if lines and lines[-1] == "" else len(lines)


def show(state):
    path = require_open(state)
    lines = read_lines(path)
    total = line_total(lines)
    first = max(1, min(state["first"], max(total - WINDOW + 1, 1)))
    state["first"] = first
    last = min(first + WINDOW - 1, total)
    out = [f"[File: {path} ({total} lines total)]"]
    if first > 1:
        out.append(f"({first - 1} more lines above)")
    out += [f"{n}:{lines[n - 1]}" for n in range(first, last + 1)]
    if last < total:
        out.append(f"({total - last} more lines below)")
    print("\n".join(out))


def center(state, line):
    state["first"] = max(1, line - WINDOW // 2)


def parse_line(text, what="line number"):
    try:
        n = int(text)
    except ValueError:
        raise ToolError(f"{what} must be an integer, got {text!r}")
    if n < 1:
        raise ToolError(f"{what} must be at least 1, got {n}")
    return n


def cmd_open(state, args):
    if not args or len(args) > 2:
        raise ToolError("usage: open FILE [LINE]")
    path = os.path.abspath(args[0])
    if os.path.isdir(path):
        raise ToolError(f"{args[0]} is a directory: use ls, or find_file")
    if not os.path.isfile(path):
        raise ToolError(f"file {args[0]} not found")
    state["file"] = path
    center(state, parse_line(args[1]) if len(args) == 2 else 1 + WINDOW // 2)
    show(state)


def cmd_goto(state, args):
    if len(args) != 1:
        raise ToolError("usage: goto LINE")
    require_open(state)
    center(state, parse_line(args[0]))
    show(state)


def cmd_scroll(state, step):
    require_open(state)
    state["first"] = max(1, state["first"] + step)
    show(state)


def cmd_create(state, args):
    if len(args) != 1:
        raise ToolError("usage: create FILE")
    path = os.path.abspath(args[0])
    if os.path.exists(path):
        raise ToolError(f"{args[0]} already exists: use open and edit")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    open(path, "w").close()
    state["file"], state["first"] = path, 1
    show(state)


def cmd_edit(state, args, stdin_text):
    usage = "usage: edit START:END <<'EOF'\\n<replacement lines>\\nEOF   (END = START-1 inserts before START)"
    if len(args) != 1 or ":" not in args[0]:
        raise ToolError(usage)
    start_s, end_s = args[0].split(":", 1)
    start, end = parse_line(start_s, "START"), int(end_s) if end_s.lstrip("-").isdigit() else None
    if end is None or end < start - 1:
        raise ToolError(f"END must be an integer >= START-1, got {end_s!r}; {usage}")
    path = require_open(state)
    lines = read_lines(path)
    trailing = lines and lines[-1] == ""
    body = lines[:-1] if trailing else lines
    if start > len(body) + 1 or end > len(body):
        raise ToolError(f"lines {start}:{end} are outside the file ({len(body)} lines)")
    new = stdin_text.split("\n")
    if new and new[-1] == "":
        new = new[:-1]
    body[start - 1:end] = new
    write_lines(path, body + ([""] if trailing or not body else []))
    center(state, start)
    show(state)


def cmd_replace(state, args):
    if len(args) != 2:
        raise ToolError("usage: replace SEARCH REPLACE   (quote each; SEARCH must occur exactly once in the open file)")
    path = require_open(state)
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        text = f.read()
    count = text.count(args[0])
    if count != 1:
        raise ToolError(f"SEARCH occurs {count} times in {path}; it must occur exactly once (add surrounding text)")
    at = text.index(args[0])
    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
        f.write(text.replace(args[0], args[1], 1))
    first = text[:at].count("\n") + 1
    center(state, first)
    show_snippet(path, first, first + args[1].count("\n"))


def show_snippet(path, first, last, context=SNIPPET_CONTEXT):
    """The edited lines and a few around them (the whole window would repeat what the agent just read)."""
    lines = read_lines(path)
    total = line_total(lines)
    a, b = max(1, first - context), min(total, last + context)
    print("\n".join([f"[Edited {path}: lines {a}-{b} of {total}]"] + [f"{n}:{lines[n - 1]}" for n in range(a, b + 1)]))


def cmd_search_file(state, args):
    if not args or len(args) > 2:
        raise ToolError("usage: search_file TERM [FILE]")
    path = os.path.abspath(args[1]) if len(args) == 2 else require_open(state)
    if not os.path.isfile(path):
        raise ToolError(f"file {args[1]} not found")
    hits = [(n, line) for n, line in enumerate(read_lines(path), 1) if args[0] in line]
    if not hits:
        print(f'No matches for "{args[0]}" in {path}')
        return
    print(f'Found {len(hits)} matches for "{args[0]}" in {path}:')
    for n, line in hits[:MAX_HITS]:
        print(f"Line {n}:{line}")
    if len(hits) > MAX_HITS:
        print(f"({len(hits) - MAX_HITS} more matches not shown)")


def cmd_find_file(state, args):
    if not args or len(args) > 2:
        raise ToolError("usage: find_file NAME [DIR]   (NAME may use * and ?)")
    root = args[1] if len(args) == 2 else "."
    if not os.path.isdir(root):
        raise ToolError(f"directory {root} not found")
    hits = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x != ".git")
        hits += [os.path.join(d, f) for f in sorted(files) if fnmatch.fnmatch(f, args[0])]
    if not hits:
        print(f'No files named "{args[0]}" in {root}')
        return
    print(f'Found {len(hits)} files named "{args[0]}" in {root}:')
    print("\n".join(hits[:MAX_HITS]))


TOOLS = {
    "open": cmd_open,
    "goto": cmd_goto,
    "scroll_down": lambda state, args: cmd_scroll(state, WINDOW),
    "scroll_up": lambda state, args: cmd_scroll(state, -WINDOW),
    "create": cmd_create,
    "edit": lambda state, args: cmd_edit(state, args, "" if sys.stdin.isatty() else sys.stdin.read()),
    "replace": cmd_replace,
    "search_file": cmd_search_file,
    "find_file": cmd_find_file,
}


def main(argv):
    if not argv:
        print("usage: swerl_tools.py TOOL [ARGS]", file=sys.stderr)
        return 2
    tool, args = argv[0], argv[1:]
    state = load_state()
    handler = TOOLS.get(tool)
    try:
        if handler is None:
            raise ToolError(f"unknown tool {tool}")
        handler(state, args)
    except ToolError as e:
        print(f"Error: {e}")
        return 1
    finally:
        save_state(state)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
