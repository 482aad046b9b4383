"""The scripted policy's replies for a gold patch: minimal edits, bottom-up, then submit."""

from __future__ import annotations

from swerl.inference.scripted import script_from_patch

PATCH = """diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -2,7 +2,7 @@
 
 
 def hours(days, extra=0):
-    return days // 24 + extra
+    return days * 24 + extra
 
 
 def first(items):
@@ -20,3 +20,4 @@ def last(items):
     if not items:
         return None
     return items[-1]
+# end
"""


def test_minimal_edits_touch_only_the_changed_lines_bottom_up():
    assert script_from_patch(PATCH) == [
        "Let me look at the repository first.\n```\nls\n```",
        "Let me open the file to fix.\n```\nopen pkg/mod.py\n```",
        "Applying the change at line 23.\n```\nedit 23:22 <<'SWERL_EOF'\n# end\nSWERL_EOF\n```",  # insert before line 23
        "Applying the change at line 5.\n```\nedit 5:5 <<'SWERL_EOF'\n    return days * 24 + extra\nSWERL_EOF\n```",
        "The fix is in place.\n```\nsubmit\n```",
    ]


def test_whole_hunks_when_asked():
    replies = script_from_patch(PATCH, explore=False, minimal=False)
    assert replies[1] == ("Applying the change at line 20.\n```\nedit 20:22 <<'SWERL_EOF'\n    if not items:\n        return None\n"
                          "    return items[-1]\n# end\nSWERL_EOF\n```")
    assert replies[2].startswith("Applying the change at line 2.\n```\nedit 2:8 <<'SWERL_EOF'\n\n\ndef hours(days, extra=0):\n")


# -- the `replace` demonstrator: open, replace the smallest unique span, submit

import pytest  # noqa: E402

from swerl.inference.base import GenerationRequest  # noqa: E402
from swerl.inference.scripted import ReplaceDemonstrator, file_view, minimal_replace, one_line_change  # noqa: E402

ONE_LINE = """diff --git a/pkg/mod.py b/pkg/mod.py
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -3,3 +3,3 @@
 
 def hours(days, extra=0):
-    return days // 24 + extra
+    return days * 24 + extra
"""

FILE = "def f(x, y):\n    if x < 3:\n        return x + y\n    return x < y\n"


def test_one_line_change_reads_path_old_and_new_line():
    assert one_line_change(ONE_LINE) == ("pkg/mod.py", "    return days // 24 + extra", "    return days * 24 + extra")
    assert one_line_change(PATCH) is None  # two hunks


@pytest.mark.parametrize(("old", "new", "expected"), [
    ("        return x + y", "        return x - y", ("+", "-")),            # the operator alone is unique
    ("    if x < 3:", "    if x <= 3:", ("< 3", "<= 3")),                   # `<` twice: grow right to a unique span
    ("    return x < y", "    return x <= y", ("< y", "<= y")),
    ("    if x < 3:", "    if not x < 3:", ("if", "if not")),              # an insertion anchors on the token before
])
def test_minimal_replace_is_the_smallest_unique_span_of_whole_tokens(old, new, expected):
    assert minimal_replace(FILE, old, new) == expected


def test_minimal_replace_gives_up_when_no_span_is_unique():
    assert minimal_replace("a = 1\na = 1\n", "a = 1", "a = 2") is None


def test_file_view_rebuilds_the_whole_file_the_open_tool_showed():
    shown = "noise\n[File: /testbed/pkg/mod.py (2 lines total)]\n1:def f():\n2:    return 1\n(Open file: /testbed/pkg/mod.py)"
    assert file_view(shown) == ("/testbed/pkg/mod.py", "def f():\n    return 1\n")
    assert file_view("[File: /testbed/big.py (300 lines total)]\n1:x\n2:y\n") is None  # a window: unknowable


class _Tok:
    """Decodes ids that are the text's code points (enough for the demonstrator)."""

    def decode(self, ids, skip_special_tokens=False):
        return "".join(map(chr, ids))


def _request(turn: int, text: str = "") -> GenerationRequest:
    return GenerationRequest("r", [ord(c) for c in text], 64, trajectory_id="pkg__mod-1/0", turn=turn)


def test_the_demonstrator_opens_replaces_what_it_saw_then_submits():
    demo = ReplaceDemonstrator(_Tok(), {"pkg__mod-1": ONE_LINE})
    shown = ("[File: /testbed/pkg/mod.py (4 lines total)]\n1:\n2:\n3:def hours(days, extra=0):\n"
             "4:    return days // 24 + extra\n(Open file: /testbed/pkg/mod.py)")
    assert demo(_request(0)) == "```\nopen pkg/mod.py\n```"
    assert demo(_request(1, shown)) == "```\nreplace // '*'\n```"
    assert demo(_request(2)) == "```\nsubmit\n```"


def test_the_demonstrator_edits_by_line_number_when_no_span_of_the_line_is_unique():
    demo = ReplaceDemonstrator(_Tok(), {"pkg__mod-1": ONE_LINE})
    shown = "[File: /testbed/pkg/mod.py (2 lines total)]\n1:    return days // 24 + extra\n2:    return days // 24 + extra\n"
    assert demo(_request(1, shown)) == ("Applying the change at line 5.\n```\nedit 5:5 <<'SWERL_EOF'\n"
                                        "    return days * 24 + extra\nSWERL_EOF\n```")


def test_a_noisy_demonstrator_gives_up_after_open_on_a_fixed_share_of_trajectories():
    shown = ("[File: /testbed/pkg/mod.py (4 lines total)]\n1:\n2:\n3:def hours(days, extra=0):\n"
             "4:    return days // 24 + extra\n(Open file: /testbed/pkg/mod.py)")
    noisy = ReplaceDemonstrator(_Tok(), {"pkg__mod-1": ONE_LINE}, give_up=0.5)
    # the draw hashes the trajectory id: the same samples give up on every rerun, about half of them
    assert sum(noisy.gives_up(f"pkg__mod-1/{i}") for i in range(200)) == 90
    assert [i for i in range(8) if noisy.gives_up(f"pkg__mod-1/{i}")] == [0, 2, 3, 7]
    quitter = GenerationRequest("r", [ord(c) for c in shown], 64, trajectory_id="pkg__mod-1/2", turn=1)
    assert noisy(quitter) == "```\nsubmit\n```"
    assert noisy(_request(0)) == "```\nopen pkg/mod.py\n```"  # it still opens the right file first
    assert ReplaceDemonstrator(_Tok(), {"pkg__mod-1": ONE_LINE}, give_up=1.0)(_request(1, shown)) == "```\nsubmit\n```"
    assert ReplaceDemonstrator(_Tok(), {"pkg__mod-1": ONE_LINE}, give_up=0.0)(_request(1, shown)) == "```\nreplace // '*'\n```"
    with pytest.raises(ValueError, match="give_up is a probability, got 1.5"):
        ReplaceDemonstrator(_Tok(), {}, give_up=1.5)
