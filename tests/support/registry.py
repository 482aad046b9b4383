"""A Docker registry on this machine for the tests and the bench: Debian's ``docker-registry`` (Docker
Distribution), plain HTTP, its storage in a temporary folder.

    with local_registry(tmp) as port:   # this daemon pushes to 127.0.0.1:port (loopback: trusted as plain
        ...                              # HTTP); a netns host pulls from 10.201.0.1:port (--insecure-registry)

It listens on every address of this machine (the veth end a namespaced daemon reaches, and loopback).
``RegistryUnavailable`` says why none can run here.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

BINARY = "/usr/bin/docker-registry"


class RegistryUnavailable(RuntimeError):
    """No registry can run here (the package is not installed, or it does not start)."""


@contextlib.contextmanager
def local_registry(root: Path, port: int | None = None, wait_s: float = 30.0) -> Iterator[int]:
    """Run a registry storing under ``root`` for the block; yield its port."""
    from swerl.inference.vllm_server import free_port

    binary = shutil.which("docker-registry") or (BINARY if Path(BINARY).exists() else None)
    if binary is None:
        raise RegistryUnavailable("docker-registry is not installed (apt-get install docker-registry)")
    port = port or free_port("0.0.0.0")
    root.mkdir(parents=True, exist_ok=True)
    config = root / "config.yml"
    config.write_text(f"version: 0.1\nlog:\n  level: warn\nstorage:\n  filesystem:\n    rootdirectory: {root / 'data'}\n"
                      f"http:\n  addr: 0.0.0.0:{port}\n")
    log = (root / "registry.log").open("wb")
    proc = subprocess.Popen([binary, "serve", str(config)], stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    try:
        deadline = time.monotonic() + wait_s
        while True:
            if proc.poll() is not None:
                raise RegistryUnavailable(f"docker-registry exited ({proc.returncode}): {(root / 'registry.log').read_text()[-600:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/v2/", timeout=2).status_code == 200:
                    break
            if time.monotonic() > deadline:
                raise RegistryUnavailable(f"docker-registry did not answer on port {port} within {wait_s:.0f}s")
            time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
