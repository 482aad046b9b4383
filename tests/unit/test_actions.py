"""Parsing exactly one command from a reply; format errors are messages for the model."""

import pytest

from swerl.agent.actions import Action, FormatError, parse_action


def test_reasoning_then_one_fenced_command():
    action = parse_action("The test fails on empty input.\nLet me look.\n\n```\nopen pagekit/paginator.py 40\n```\n")
    assert action == Action(thought="The test fails on empty input.\nLet me look.", command="open pagekit/paginator.py 40")
    assert (action.name, action.is_tool, action.is_submit) == ("open", True, False)


def test_a_language_tag_on_the_fence_is_allowed():
    assert parse_action("x\n```bash\npytest -q tests\n```").command == "pytest -q tests"


def test_multi_line_commands_keep_their_lines():
    reply = "Fix it.\n```\nedit 3:4 <<'EOF'\n    return a\n\n    b\nEOF\n```"
    assert parse_action(reply).command == "edit 3:4 <<'EOF'\n    return a\n\n    b\nEOF"


def test_submit_is_recognised():
    assert parse_action("Done.\n```\nsubmit\n```").is_submit


@pytest.mark.parametrize("reply,message", [
    ("I think the bug is in line 3.", "no command found"),
    ("```\n\n```", "no command found: the fenced block is empty"),
    ("```\nls\n```\nand\n```\npwd\n```", "more than one command: your reply has 2 fenced blocks"),
    ("```\nvim a.py\n```", "interactive program 'vim' is not supported"),
    ("```\n/usr/bin/less log.txt\n```", "interactive program 'less' is not supported"),
    ("```\npython\n```", "'python' without arguments starts an interactive session"),
])
def test_format_errors_explain_what_to_do(reply, message):
    with pytest.raises(FormatError, match=message.replace("(", r"\(").replace("'", "'")):
        parse_action(reply)


def test_a_python_heredoc_is_not_interactive():
    assert parse_action("```\npython3 <<'EOF'\nprint(1)\nEOF\n```").name == "python3"


def test_a_command_holding_a_nul_byte_is_a_format_error_never_sent_to_the_sandbox():
    # a NUL cannot be part of a shell command: sent on, it would break the sandbox's runner instead of the command
    with pytest.raises(FormatError, match=r"^the command contains a NUL byte \(\\0\), which no shell command can hold; remove it$"):
        parse_action("Look.\n```\ncat a\x00b.py\n```")
