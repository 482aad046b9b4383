"""The agent's file tools, run for real inside a sandbox."""

from __future__ import annotations

import pytest

from swerl.agent.tools import install_tools
from swerl.envs.docker_sandbox import DockerSandbox, DockerSandboxConfig

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def sb(demo_images):
    image = demo_images["swerl-demo__pagekit-1"]
    with DockerSandbox(image, DockerSandboxConfig()) as sandbox:
        install_tools(sandbox)
        sandbox.write_file("notes.py", "".join(f"line {i}\n" for i in range(1, 251)))
        yield sandbox


def run(sb, cmd: str) -> str:
    return sb.exec(cmd).output


def test_open_shows_a_numbered_window_with_context_counts(sb):
    out = run(sb, "open notes.py 120")
    lines = out.splitlines()
    assert lines[0] == "[File: /testbed/notes.py (250 lines total)]"
    assert lines[1] == "(69 more lines above)" and lines[2] == "70:line 70"
    assert lines[-2] == "169:line 169" and lines[-1] == "(81 more lines below)"


def test_goto_and_scrolling_move_the_window(sb):
    run(sb, "open notes.py")
    assert run(sb, "goto 250").splitlines()[2] == "151:line 151"
    assert run(sb, "scroll_up").splitlines()[2] == "51:line 51"
    assert run(sb, "scroll_down").splitlines()[2] == "151:line 151"


def test_edit_replaces_a_line_range_with_exact_indentation(sb):
    sb.write_file("edit_me.py", "def f(x):\n    return x\n\n\nprint(f(1))\n")
    run(sb, "open edit_me.py")
    out = run(sb, "edit 2:2 <<'EOF'\n    if x is None:\n        return 0\n    return x + 1\nEOF")
    assert "4:    return x + 1" in out
    assert sb.read_file("edit_me.py").decode() == "def f(x):\n    if x is None:\n        return 0\n    return x + 1\n\n\nprint(f(1))\n"


def test_edit_with_end_before_start_inserts(sb):
    sb.write_file("ins.py", "a\nc\n")
    run(sb, "open ins.py")
    run(sb, "edit 2:1 <<'EOF'\nb\nEOF")
    assert sb.read_file("ins.py").decode() == "a\nb\nc\n"


def test_edit_outside_the_file_is_an_error_and_changes_nothing(sb):
    sb.write_file("small.py", "a\n")
    run(sb, "open small.py")
    res = sb.exec("edit 5:6 <<'EOF'\nx\nEOF")
    assert res.exit_code == 1 and res.output == "Error: lines 5:6 are outside the file (1 lines)\n"
    assert sb.read_file("small.py") == b"a\n"


def test_replace_needs_exactly_one_occurrence(sb):
    sb.write_file("rep.py", "x = 1\ny = 1\n")
    run(sb, "open rep.py")
    assert run(sb, "replace ' = 1' ' = 2'") == "Error: SEARCH occurs 2 times in /testbed/rep.py; it must occur exactly once (add surrounding text)\n"
    assert run(sb, "replace 'y = 1' 'y = 2'") == "[Edited /testbed/rep.py: lines 1-2 of 2]\n1:x = 1\n2:y = 2\n"
    assert sb.read_file("rep.py") == b"x = 1\ny = 2\n"


def test_replace_shows_the_edited_lines_with_three_on_each_side(sb):
    sb.write_file("long.py", "".join(f"v{i} = {i}\n" for i in range(1, 21)))
    run(sb, "open long.py")
    out = run(sb, "replace 'v10 = 10' 'v10 = 100\nv10b = 0'")
    assert out == "[Edited /testbed/long.py: lines 7-14 of 21]\n" + "".join(
        f"{n}:{text}\n" for n, text in zip(range(7, 15), ["v7 = 7", "v8 = 8", "v9 = 9", "v10 = 100", "v10b = 0", "v11 = 11", "v12 = 12", "v13 = 13"]))


def test_search_file_and_find_file(sb):
    out = run(sb, "search_file 'line 24' notes.py")
    assert out.splitlines() == ['Found 11 matches for "line 24" in /testbed/notes.py:', "Line 24:line 24"] + [
        f"Line {n}:line {n}" for n in range(240, 250)]
    found = run(sb, "find_file 'paginator*.py'")
    assert found.splitlines() == ['Found 1 files named "paginator*.py" in .:', "./pagekit/paginator.py"]


def test_create_opens_a_new_empty_file_and_refuses_to_overwrite(sb):
    assert run(sb, "create pkg_new/mod.py").splitlines()[0] == "[File: /testbed/pkg_new/mod.py (0 lines total)]"
    assert run(sb, "create notes.py") == "Error: notes.py already exists: use open and edit\n"


def test_tools_without_an_open_file_say_what_to_do(sb):
    sb.exec("rm -f /tmp/.swerl_tools_state.json")
    assert run(sb, "goto 3") == "Error: no file is open: use `open FILE` first\n"
