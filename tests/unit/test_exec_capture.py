"""The in-sandbox runner keeps the head and tail of output and marks what it dropped."""

import importlib.util
from pathlib import Path

import swerl.envs

spec = importlib.util.spec_from_file_location("swerl_exec", Path(swerl.envs.__file__).parent / "resources" / "swerl_exec.py")
swerl_exec = importlib.util.module_from_spec(spec)
spec.loader.exec_module(swerl_exec)


def test_short_output_is_kept_whole():
    cap = swerl_exec.Capture(10)
    cap.feed(b"abc")
    cap.feed(b"de")
    assert cap.text() == ("abcde", False) and cap.total == 5


def test_long_output_keeps_head_and_tail_around_a_marker():
    cap = swerl_exec.Capture(6)
    for chunk in (b"abcd", b"efgh", b"ijkl"):
        cap.feed(chunk)
    assert cap.text() == ("abc\n[... 6 bytes of output truncated ...]\njkl", True)
    assert cap.total == 12
