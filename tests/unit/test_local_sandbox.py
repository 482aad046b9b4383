"""The local sandbox's own rules (the behaviour it shares with every backend is in tests/conformance)."""

from __future__ import annotations

import os
import threading
import uuid

import pytest

from swerl.envs.docker_sandbox import DockerSandboxConfig
from swerl.envs.factory import SandboxConfig, environment_kind, make_sandbox
from swerl.envs.flaky_sandbox import FlakySandbox, FlakySandboxConfig
from swerl.envs.local_sandbox import LocalSandbox, LocalSandboxConfig, local_sandbox_folders
from swerl.envs.repos import git
from swerl.envs.sandbox import SandboxError


@pytest.fixture
def config(tmp_path, run_id):
    return LocalSandboxConfig(run_id=run_id, parent_dir=tmp_path / "sandboxes")


@pytest.fixture
def plain_folder(tmp_path):
    folder = tmp_path / "plain"
    (folder / "pkg").mkdir(parents=True)
    (folder / "pkg" / "mod.py").write_text("x = 1\n")
    return folder


def test_a_plain_folder_is_copied_and_committed_as_the_base(config, plain_folder, run_id):
    with LocalSandbox(str(plain_folder), config) as sb:
        assert sb.exec("git log --format=%s").output == "swerl base\n"
        assert sb.base_commit == sb.exec("git rev-parse HEAD").output.strip()
        sb.write_file("pkg/mod.py", "x = 2\n")
        assert "-x = 1\n+x = 2\n" in sb.diff()
    assert (plain_folder / "pkg" / "mod.py").read_text() == "x = 1\n"  # the source is never touched
    assert local_sandbox_folders(run_id, config.parent_dir) == []


def test_a_mirror_without_base_commit_starts_from_its_head(config, demo, demo_tasks):
    task = demo_tasks["swerl-demo__durations-1"]
    mirror = demo.repos_dir / task.repo.replace("/", "__")
    with LocalSandbox(str(mirror), config) as sb:
        head = git("rev-parse", "main", cwd=mirror).strip()
        assert sb.base_commit == head != task.base_commit
        assert sb.exec("git rev-list --all").output == f"{head}\n{task.base_commit}\n"


def test_files_outside_the_sandbox_folder_are_refused(config, plain_folder, tmp_path):
    outside = tmp_path / f"outside-{uuid.uuid4().hex[:6]}"
    with LocalSandbox(str(plain_folder), config) as sb:
        with pytest.raises(SandboxError, match="is outside this local sandbox's folder"):
            sb.write_file(str(outside), "x")
        with pytest.raises(SandboxError, match="is outside this local sandbox's folder"):
            sb.read_file("../../../../etc/hostname")
    assert not outside.exists()


def test_commands_find_swerls_folders_under_root_and_a_private_tmpdir(config, plain_folder):
    with LocalSandbox(str(plain_folder), config) as sb:
        out = sb.exec('echo "$TMPDIR"; echo "${PATH%%:*}"; mktemp').output.splitlines()
        assert out[:2] == [f"{sb.root}/tmp", f"{sb.root}/usr/local/bin"]
        assert out[2].startswith(f"{sb.root}/tmp/")


def test_a_missing_cwd_is_a_runner_failure(config, plain_folder):
    from swerl.envs.sandbox import RunnerFailed

    with LocalSandbox(str(plain_folder), config) as sb:
        with pytest.raises(RunnerFailed, match="FileNotFoundError"):
            sb.exec("true", cwd="no/such/folder")


def test_a_slot_is_held_from_start_to_close_and_a_failed_start_gives_it_back(config, plain_folder, tmp_path):
    slots = threading.BoundedSemaphore(1)
    with LocalSandbox(str(plain_folder), config, slots=slots):
        assert not slots.acquire(blocking=False)
    with pytest.raises(SandboxError, match="is not a folder"):
        LocalSandbox(str(tmp_path / "nothing"), config, slots=slots).start()
    assert slots.acquire(blocking=False)


def test_a_run_id_with_odd_characters_still_names_the_folders(tmp_path, plain_folder):
    config = LocalSandboxConfig(run_id="run/1 x", parent_dir=tmp_path)
    with LocalSandbox(str(plain_folder), config) as sb:
        assert os.path.basename(sb.root).startswith("swerl-local-run_1_x-")
        assert [str(p) for p in local_sandbox_folders("run/1 x", tmp_path)] == [sb.root]


def test_sandbox_configs_are_one_union_tagged_by_kind_and_docker_without_one():
    from pydantic import TypeAdapter

    adapter = TypeAdapter(SandboxConfig)
    assert adapter.validate_python({"memory": "1g"}) == DockerSandboxConfig(memory="1g")
    assert adapter.validate_python({"kind": "local", "repo_folder": "repo"}) == LocalSandboxConfig(repo_folder="repo")
    flaky = adapter.validate_python({"kind": "flaky", "fail_every": 4, "inner": {"kind": "docker"}})
    assert flaky == FlakySandboxConfig(fail_every=4, inner=DockerSandboxConfig())
    assert [environment_kind(c) for c in (DockerSandboxConfig(), LocalSandboxConfig(), flaky)] == ["image", "repository", "image"]
    with pytest.raises(ValueError, match="does not match any of the expected tags: 'docker', 'docker_hosts', 'local', "
                       "'kubernetes', 'flaky'"):
        adapter.validate_python({"kind": "nomad"})
    with pytest.raises(ValueError, match="fail_every"):
        FlakySandboxConfig(fail_every=1)


def test_a_flaky_config_passes_its_run_id_to_the_inner_backend():
    flaky = FlakySandboxConfig(inner=LocalSandboxConfig())
    flaky.run_id = "r-1"
    assert (flaky.inner.run_id, flaky.run_id, flaky.workdir) == ("r-1", "r-1", "testbed")


def test_every_third_start_of_a_flaky_config_fails_before_the_inner_sandbox_starts(config, plain_folder, run_id):
    flaky = FlakySandboxConfig(fail_every=3, inner=config)
    outcomes = []
    for _ in range(6):
        sb = make_sandbox(flaky, str(plain_folder))
        assert isinstance(sb, FlakySandbox)
        try:
            with sb:
                outcomes.append(sb.exec("echo ok").output)
        except SandboxError as e:
            outcomes.append(str(e))
    assert outcomes == ["ok\n", "ok\n", "injected start failure: start 3 of this flaky sandbox config (one start in 3 fails)",
                        "ok\n", "ok\n", "injected start failure: start 6 of this flaky sandbox config (one start in 3 fails)"]
    assert local_sandbox_folders(run_id, config.parent_dir) == []
