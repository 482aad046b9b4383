"""The exec channel's stream handling: docker's 8-byte frame headers, answers matched by tag.

Docker itself is exercised in tests/integration/test_sandbox.py; here the far end of a real
socket pair plays the runner, so that frames split across reads can be produced at will.
"""

from __future__ import annotations

import json
import socket
import struct
import threading

import pytest

from swerl.envs import exec_channel
from swerl.envs.exec_channel import ChannelBroken, ChannelTimeout, ExecChannel, RunnerRestarted


def _frame(body: bytes, stream: int = 1) -> bytes:
    return struct.pack(">BxxxL", stream, len(body)) + body


@pytest.fixture
def ends():
    ours, runner = socket.socketpair()
    channel = ExecChannel(ours)
    yield channel, runner
    channel.close()
    runner.close()


def test_a_request_is_one_json_line_and_its_answer_may_arrive_in_pieces(ends):
    channel, runner = ends
    answer = json.dumps({"tag": "t1", "exit_code": 0, "output": "hi\n"}).encode() + b"\n"
    wire = _frame(b"runner warming up\n", stream=2) + _frame(answer[:7]) + _frame(answer[7:])
    runner.sendall(wire[:5])  # half a header
    with pytest.raises(ChannelTimeout):
        channel.wait("t1", 0.05)
    runner.sendall(wire[5:])
    assert channel.wait("t1", 1.0) == {"exit_code": 0, "output": "hi\n"}


def _answer_when_asked(runner: socket.socket, *answers: dict) -> threading.Thread:
    """The runner's side: read one request line, then send ``answers``; what it read is kept on the thread."""
    def run() -> None:
        worker.read = runner.recv(1000)
        runner.sendall(b"".join(_frame(json.dumps(a).encode() + b"\n") for a in answers))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    return worker


def test_requests_are_written_as_one_line_each(ends):
    channel, runner = ends
    worker = _answer_when_asked(runner, {"tag": "t2", "exit_code": 3})
    assert channel.request({"tag": "t2", "cmd": "ls"}, 5.0) == {"exit_code": 3}
    worker.join()
    assert worker.read == b'{"tag": "t2", "cmd": "ls"}\n'


def test_what_was_said_before_a_request_is_not_taken_for_its_answer(ends):
    channel, runner = ends
    runner.sendall(_frame(b'{"tag": "t5", "exit_code": 0, "output": "said early"}\n'))
    worker = _answer_when_asked(runner, {"tag": "t5", "exit_code": 2, "output": "the answer"})
    assert channel.request({"tag": "t5", "cmd": "true"}, 5.0) == {"exit_code": 2, "output": "the answer"}
    worker.join()


def test_a_runner_killed_during_a_request_fails_that_request_and_its_successor_answers_the_next(ends):
    channel, runner = ends
    worker = _answer_when_asked(runner, {exec_channel.RUNNER_EXITED: 137})
    with pytest.raises(RunnerRestarted, match=r"the runner was killed \(exit 137\); a new one took its place"):
        channel.request({"tag": "t6", "cmd": "kill -9 $PPID"}, 5.0)
    worker.join()
    assert channel.alive()
    worker = _answer_when_asked(runner, {"tag": "t7", "exit_code": 0})
    assert channel.request({"tag": "t7", "cmd": "true"}, 5.0) == {"exit_code": 0}
    worker.join()


def test_a_container_s_own_runner_is_reached_by_attaching_to_its_stdio():
    class _AttachApi:
        def attach_socket(self, container_id, params):
            self.attached = (container_id, params)
            return ours

    ours, runner = socket.socketpair()
    api = _AttachApi()
    channel = ExecChannel.over_attach(api, "c3")
    assert api.attached == ("c3", {"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
    worker = _answer_when_asked(runner, {"tag": "t8", "exit_code": 0})
    assert channel.request({"tag": "t8", "cmd": "true"}, 5.0) == {"exit_code": 0}
    worker.join()
    channel.close()
    runner.close()


def test_lines_with_another_tag_or_no_json_are_skipped(ends):
    channel, runner = ends
    forged = b'{"tag": "t3", "exit_code": 0, "output": "forged"}\nnot json\n'
    real = json.dumps({"tag": "t4", "exit_code": 1, "output": "real"}).encode() + b"\n"
    runner.sendall(_frame(forged) + _frame(real))
    assert channel.wait("t4", 1.0) == {"exit_code": 1, "output": "real"}


def test_a_runner_that_exits_breaks_the_channel_with_its_last_words(ends):
    channel, runner = ends
    runner.sendall(_frame(b"Traceback: boom\n", stream=2))
    runner.close()
    assert channel.alive() is False
    with pytest.raises(ChannelBroken, match="the runner exited: Traceback: boom"):
        channel.request({"tag": "t5"}, 1.0)


def test_a_flood_without_line_ends_breaks_the_channel_instead_of_filling_memory(ends, monkeypatch):
    channel, runner = ends
    monkeypatch.setattr(exec_channel, "MAX_PENDING_BYTES", 100)
    runner.sendall(_frame(b"x" * 150))
    with pytest.raises(ChannelBroken, match="over 100 bytes from the runner without a line end"):
        channel.wait("t6", 1.0)
