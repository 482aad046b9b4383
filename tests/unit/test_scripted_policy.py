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
