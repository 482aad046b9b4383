"""A long-lived command runner inside a container, spoken to over the container's own stdin
and stdout, attached before it starts (``over_attach``).

A docker exec costs ~65-100 ms of daemon and runc work on a loaded 2-core host; a line on an
already open stream costs a few, and attaching to the container costs no exec at all. The
runner (``swerl_exec.py --serve``) reads one
JSON request per line and answers one JSON line carrying the request's tag, so a stale
or forged line (a command can write to the runner's stdout through /proc) is skipped, not
taken for the answer. The stream is docker's multiplexed format: an 8-byte header
(stream id, size) before each chunk.
"""

from __future__ import annotations

import json
import select
import socket
import struct
import time

# far above any real answer (output_limit_bytes, JSON-escaped); a command flooding the
# runner's stdout without newlines breaks the channel instead of the host's memory
MAX_PENDING_BYTES = 256 << 20


class ChannelTimeout(Exception):
    """No answer within the deadline; the channel itself may still be fine."""


class ChannelBroken(Exception):
    """The runner or its stream is gone; the channel cannot be used again."""


class RunnerRestarted(ChannelBroken):
    """The runner died during a request (a command killed it) and a new one now reads the same stream: that
    request has no answer, the channel still works."""


# the line a container's serving shell prints when its runner died and it started another (see
# container_files.serve_script)
RUNNER_EXITED = "runner_exited"


class ExecChannel:
    """One ``swerl_exec.py --serve`` process in a container and the socket to it."""

    def __init__(self, io):
        """The channel over ``io``, a docker stream (or a socket) whose far end is the runner's stdin and stdout."""
        self._io = io
        self._sock = getattr(io, "_sock", io)
        self._frames = b""  # raw bytes not yet split into frames
        self._lines = b""  # stdout bytes not yet split into lines
        self._stderr = b""
        self.broken: str | None = None

    @classmethod
    def over_attach(cls, api, container_id: str) -> ExecChannel:
        """The runner that is (or starts) reading the container's own stdin: attach before the container
        starts, so no line it writes is missed. The container must be created with ``stdin_open``."""
        return cls(api.attach_socket(container_id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1}))

    def close(self) -> None:
        """End the stream (a plain close leaves it open while docker's response object holds the socket): the
        runner reads end-of-file and exits, and so does a container whose own command it is (docker sets
        StdinOnce for an attached stdin)."""
        for end in (lambda: self._sock.shutdown(socket.SHUT_RDWR), self._sock.close):
            try:
                end()
            except OSError:
                pass

    def alive(self) -> bool:
        """False when the runner has already gone (its stream is at EOF) or the channel broke."""
        if self.broken:
            return False
        try:
            while select.select([self._sock], [], [], 0)[0]:  # drain what is there; EOF raises
                self._pump()
        except (ChannelBroken, OSError, ValueError):
            self.broken = self.broken or "the runner's stream closed"
        return self.broken is None

    def request(self, payload: dict, deadline_s: float) -> dict:
        """Send ``payload`` (which carries a ``tag``) and wait up to ``deadline_s`` for its answer."""
        if not self.alive():
            raise ChannelBroken(self.broken)
        # what was said before this request is stale (a forged line, a dead runner's notice): drop its lines
        self._lines = self._lines[self._lines.rfind(b"\n") + 1:]
        try:
            self._sock.sendall(json.dumps(payload).encode() + b"\n")
        except OSError as e:
            self.broken = f"cannot write to the runner: {e}"
            raise ChannelBroken(self.broken) from e
        return self.wait(payload.get("tag") or payload["kill_tag"], deadline_s)

    def wait(self, tag: str, deadline_s: float) -> dict:
        """The answer carrying ``tag``; lines with any other tag are dropped."""
        end = time.monotonic() + deadline_s
        while True:
            while b"\n" in self._lines:
                line, self._lines = self._lines.split(b"\n", 1)
                try:
                    data = json.loads(line)
                except ValueError:
                    continue
                if isinstance(data, dict) and data.pop("tag", None) == tag:
                    return data
                if isinstance(data, dict) and set(data) == {RUNNER_EXITED}:
                    raise RunnerRestarted(f"the runner was killed (exit {data[RUNNER_EXITED]}); a new one took its place")
            left = end - time.monotonic()
            if left <= 0:
                raise ChannelTimeout(f"no answer from the runner within {deadline_s:.0f}s")
            try:
                readable, _, _ = select.select([self._sock], [], [], left)
            except (OSError, ValueError) as e:
                self.broken = f"the runner's stream failed: {e}"
                raise ChannelBroken(self.broken) from e
            if readable:
                self._pump()

    def _pump(self) -> None:
        """Read what is available and split it into frames; raises ChannelBroken at EOF."""
        try:
            chunk = self._sock.recv(1 << 16)
        except OSError as e:
            self.broken = f"the runner's stream failed: {e}"
            raise ChannelBroken(self.broken) from e
        if not chunk:
            tail = self._stderr.decode("utf-8", "replace")[-300:]
            self.broken = "the runner exited" + (f": {tail}" if tail else "")
            raise ChannelBroken(self.broken)
        self._frames += chunk
        while len(self._frames) >= 8:
            stream, size = struct.unpack(">BxxxL", self._frames[:8])
            if len(self._frames) < 8 + size:
                break
            body, self._frames = self._frames[8:8 + size], self._frames[8 + size:]
            if stream == 2:
                self._stderr = (self._stderr + body)[-4096:]
            else:
                self._lines += body
        if len(self._lines) > MAX_PENDING_BYTES:
            self.broken = f"over {MAX_PENDING_BYTES} bytes from the runner without a line end"
            raise ChannelBroken(self.broken)
