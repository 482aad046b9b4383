"""Shared fixtures: a Docker daemon (required: tests fail, never skip, without one), the demo
tasks materialised once per session, and their images built once per session."""

from __future__ import annotations

import os
import subprocess
import tempfile
import uuid
from pathlib import Path

import pytest

os.environ.setdefault("DO_NOT_TRACK", "1")
# Prefect offline, with its home (database, result cache) in a temp dir, before anything imports it
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "90")
if "PREFECT_HOME" not in os.environ:
    os.environ["PREFECT_HOME"] = tempfile.mkdtemp(prefix="swerl-test-prefect-")
if "SWERL_CACHE_DIR" not in os.environ:  # validation verdicts: no test may reuse another session's
    os.environ["SWERL_CACHE_DIR"] = tempfile.mkdtemp(prefix="swerl-test-cache-")


# The files that take minutes, longest first (`--durations` of the whole suite, 2026-11-29). The test command's
# workers each take whole files; started first (with `--no-loadscope-reorder`, which keeps this order instead of
# xdist's most-tests-first), they run beside the many short files instead of alone at the end.
SLOW_FILES = (
    "tests/integration/test_trainers.py",
    "tests/flows/test_pipeline_scaled_out.py",
    "tests/flows/test_deployments.py",
    "tests/flows/test_pipeline_flow.py",
    "tests/flows/test_pipeline_async.py",
    "tests/conformance/test_engine_conformance.py",
    "tests/integration/test_services_postgres.py",
    "tests/flows/test_dask_fanout.py",
    "tests/flows/test_pipeline_policy_server.py",
    "tests/integration/test_openai_engine.py",
    "tests/integration/test_official_harness_real.py",
    "tests/integration/test_official_harness_runner.py",
    "tests/integration/test_official_harness.py",
    "tests/flows/test_schedule_fires.py",
    "tests/flows/test_lineage_flows.py",
    "tests/integration/test_vllm_engine.py",
    "tests/integration/test_services.py",
)


def pytest_collection_modifyitems(config, items):
    """The slow files first, each file's tests in their own order (a stable sort: the rest keep theirs)."""
    rank = {name: i for i, name in enumerate(SLOW_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.split("::", 1)[0], len(SLOW_FILES)))


@pytest.fixture(scope="session")
def docker_ready() -> None:
    from swerl.envs.docker_client import DockerUnavailableError, docker_client

    try:
        docker_client()
    except DockerUnavailableError as e:
        pytest.fail(f"this test needs Docker: {e}")


@pytest.fixture(scope="session")
def demo(tmp_path_factory):
    from swerl.demo import materialize_demo

    return materialize_demo(tmp_path_factory.mktemp("demo"))


@pytest.fixture(scope="session")
def demo_tasks(demo):
    from swerl.data.loaders import load_tasks

    return {t.instance_id: t for t in load_tasks(demo.tasks_file).tasks}


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("builds")


@pytest.fixture(scope="session")
def demo_images(docker_ready, demo, demo_tasks, build_dir) -> dict[str, str]:
    from swerl.envs.images import ImageBuilder, ImageConfig

    outcomes = ImageBuilder(ImageConfig(repos=demo.repos_dir, build_logs=build_dir, builds=2)).build_all(list(demo_tasks.values()))
    failed = [o for o in outcomes if not o.ok]
    assert not failed, f"demo image builds failed: {[o.error for o in failed]}"
    return {o.instance_id: o.image for o in outcomes}


@pytest.fixture
def run_id() -> str:
    return f"test-{uuid.uuid4().hex[:8]}"


def git_patch(repo: Path, commit: str, changes: dict[str, str | None], tmp: Path) -> str:
    """The diff an agent would submit after writing ``changes`` (None deletes) on ``commit``."""
    work = tmp / f"work-{uuid.uuid4().hex[:6]}"
    subprocess.run(["git", "clone", "-q", str(repo), str(work)], check=True)
    subprocess.run(["git", "checkout", "-q", commit], cwd=work, check=True)
    for path, content in changes.items():
        target = work / path
        if content is None:
            target.unlink()
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(content)
    subprocess.run(["git", "add", "-A"], cwd=work, check=True)
    return subprocess.run(["git", "diff", "--cached", commit], cwd=work, check=True, capture_output=True, text=True).stdout


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory) -> Path:
    """The tiny default policy (random Qwen2 weights, locally trained tokenizer), made once per session."""
    from swerl.models import init_tiny

    return init_tiny(tmp_path_factory.mktemp("tiny-model"))


@pytest.fixture(scope="session")
def trained_checkpoint(tiny_model_dir, tmp_path_factory) -> Path:
    """A 'trainer checkpoint' of the tiny policy: every weight moved (noise 0.3, seeded), saved with save_pretrained."""
    from tests.support.checkpoints import moved_checkpoint

    return moved_checkpoint(tiny_model_dir, tmp_path_factory.mktemp("ckpt") / "step-1", seed=7)


@pytest.fixture(scope="session")
def tok(tiny_model_dir):
    """The tiny model's tokenizer, loaded the way users load any model's."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="session")
def chat(tok):
    """The token-exact chat format of the tiny model's tokenizer."""
    from swerl.agent.chat_format import ChatFormat

    return ChatFormat(tok)
