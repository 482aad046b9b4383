"""Health probes: each answers (healthy, why not) and never raises."""

from __future__ import annotations

import httpx

from swerl.services.config import ServicesConfig

PROBE_TIMEOUT_S = 3.0


def _get(url: str) -> httpx.Response:
    # trust_env=False: a proxy from the environment must not sit between us and loopback
    with httpx.Client(timeout=PROBE_TIMEOUT_S, trust_env=False) as client:
        return client.get(url)


def prefect_server(config: ServicesConfig) -> tuple[bool, str]:
    url = f"{config.prefect_api_url}/health"
    try:
        r = _get(url)
    except httpx.HTTPError as e:
        return False, f"GET {url}: {type(e).__name__}: {e}"
    if r.status_code == 200 and r.json() is True:
        return True, ""
    return False, f"GET {url}: HTTP {r.status_code} {r.text[:200]}"


def mlflow_server(config: ServicesConfig) -> tuple[bool, str]:
    url = f"{config.mlflow_url}/health"
    try:
        r = _get(url)
    except httpx.HTTPError as e:
        return False, f"GET {url}: {type(e).__name__}: {e}"
    if r.status_code == 200:
        return True, ""
    return False, f"GET {url}: HTTP {r.status_code} {r.text[:200]}"


def worker_name(config: ServicesConfig) -> str:
    return f"{config.work_pool}-worker"


def prefect_worker(config: ServicesConfig) -> tuple[bool, str]:
    """The worker has registered with the server and its heartbeat keeps it ONLINE in the pool."""
    url = f"{config.prefect_api_url}/work_pools/{config.work_pool}/workers/filter"
    try:
        with httpx.Client(timeout=PROBE_TIMEOUT_S, trust_env=False) as client:
            r = client.post(url, json={})
    except httpx.HTTPError as e:
        return False, f"POST {url}: {type(e).__name__}: {e}"
    if r.status_code != 200:
        return False, f"POST {url}: HTTP {r.status_code} {r.text[:200]}"
    name = worker_name(config)
    mine = [w for w in r.json() if w.get("name") == name]
    if not mine:
        return False, f"no worker named {name!r} has registered in work pool {config.work_pool!r} yet"
    if mine[0].get("status") != "ONLINE":
        return False, f"worker {name!r} is {mine[0].get('status')} in work pool {config.work_pool!r}"
    return True, ""
