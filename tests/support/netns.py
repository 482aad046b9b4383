"""Network namespaces as stand-in hosts on one machine: each gets a veth pair to the host, an
address, and a default route through the host, so a process started inside it (``nsenter
--net``) reaches every address of the host, and the host reaches it at its own address.

Names and subnets carry a random suffix chosen by the caller; ``remove`` tears down what
``make`` created, nothing else."""

from __future__ import annotations

import contextlib
import os
import random
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NoReturn

import pytest


def unavailable(what: str, error: BaseException) -> NoReturn:
    """A test that needs a namespace (or a daemon inside one) that this machine cannot make: skipped on a
    developer's machine, failed where the suite must run everything (``SWERL_REQUIRE_DOCKER=1``, set by
    scripts/test.sh and so by CI), so a broken set-up never passes as a row of skips."""
    message = f"{what} cannot be made here: {error}"
    if os.environ.get("SWERL_REQUIRE_DOCKER") == "1":
        pytest.fail(f"{message} (SWERL_REQUIRE_DOCKER=1: this suite must run every multi-host test)", pytrace=False)
    pytest.skip(message)


@dataclass(frozen=True)
class Namespace:
    name: str
    host_ip: str  # the host's end of the veth pair
    ip: str  # the namespace's end

    @property
    def path(self) -> str:
        return f"/run/netns/{self.name}"

    @property
    def host_if(self) -> str:
        """The host's end of the veth pair (interface names hold 15 characters)."""
        return f"{self.name[:11]}h"

    @property
    def ns_if(self) -> str:
        return f"{self.name[:11]}n"

    def argv(self, command: list[str]) -> list[str]:
        """``command`` run inside the namespace (``nsenter``: works where ``ip netns exec`` may not)."""
        return ["nsenter", f"--net={self.path}", *command]


def _ip(*args: str, netns: Namespace | None = None) -> None:
    command = ["ip", *args]
    done = subprocess.run(netns.argv(command) if netns else command, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)}: {done.stderr.strip()}")


def make(name: str, subnet: str) -> Namespace:
    """Namespace ``name`` at ``<subnet>.2``, the host at ``<subnet>.1`` (``subnet``: three octets, e.g. 10.202.0)."""
    ns = Namespace(name, f"{subnet}.1", f"{subnet}.2")
    host_end, ns_end = ns.host_if, ns.ns_if
    _ip("netns", "add", name)
    try:
        _ip("link", "add", host_end, "type", "veth", "peer", "name", ns_end)
        _ip("link", "set", ns_end, "netns", name)
        _ip("addr", "add", f"{ns.host_ip}/24", "dev", host_end)
        _ip("link", "set", host_end, "up")
        _ip("addr", "add", f"{ns.ip}/24", "dev", ns_end, netns=ns)
        _ip("link", "set", ns_end, "up", netns=ns)
        _ip("link", "set", "lo", "up", netns=ns)
        _ip("route", "add", "default", "via", ns.host_ip, netns=ns)
    except Exception:
        remove(ns)
        raise
    return ns


def remove(ns: Namespace) -> None:
    """The namespace and its veth pair (deleting one end deletes both); safe when half made."""
    subprocess.run(["ip", "link", "delete", ns.host_if], capture_output=True)
    subprocess.run(["ip", "netns", "delete", ns.name], capture_output=True)


@contextlib.contextmanager
def stand_in_hosts(prefix: str, first_octet: int, count: int = 2) -> Iterator[list[Namespace]]:
    """``count`` namespaces (``<prefix><tag><i>`` at 10.<first_octet + i>.<random>.2) for the block, removed after;
    a test that cannot make them is skipped, or failed under SWERL_REQUIRE_DOCKER=1 (``unavailable``)."""
    if len(prefix) > 6:  # the veth ends are named from the first 11 characters: prefix, 4 of tag, index
        raise ValueError(f"prefix {prefix!r}: at most 6 characters")
    tag = uuid.uuid4().hex[:4]
    made: list[Namespace] = []
    try:
        try:
            for i in range(count):
                made.append(make(f"{prefix}{tag}{i}", f"10.{first_octet + i}.{random.randint(1, 250)}"))
        except (RuntimeError, FileNotFoundError) as e:
            unavailable("network namespaces", e)
        yield made
    finally:
        for ns in made:
            remove(ns)
