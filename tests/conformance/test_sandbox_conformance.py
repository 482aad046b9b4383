"""What every sandbox backend does, checked on each: a new backend joins ``BACKENDS`` and passes.

Each sandbox holds the demo task `durations` at its base commit. Counts of processes and
leftovers name only what the test made: a sleep with a random duration, a run id of its own.
"""

from __future__ import annotations

import os
import posixpath
import random
import uuid

import pytest

from swerl.envs.docker_hosts import DockerHostsConfig
from swerl.envs.docker_sandbox import DockerSandboxConfig, running_containers
from swerl.envs.factory import make_sandbox
from swerl.envs.k8s_config import KubernetesSandboxConfig
from swerl.envs.k8s_sandbox import running_pods
from swerl.envs.local_sandbox import LocalSandboxConfig, local_sandbox_folders
from swerl.envs.repos import MirrorRepoSource, git
from swerl.envs.sandbox import SandboxError, run_alone
from tests.support.fake_kube import FakeKubeAPI

DURATIONS = "swerl-demo__durations-1"
# docker three times: its commands go one docker exec each (graders), over one long-lived runner (agents), or through a
# pool of Docker hosts (here the local daemon alone: tests/integration/test_docker_hosts.py runs two); kubernetes
# against an in-process fake API server whose pods are Docker containers (no cluster runs here)
BACKENDS = ["local", pytest.param("docker", marks=pytest.mark.docker),
            pytest.param("docker-channel", marks=pytest.mark.docker), pytest.param("docker-hosts", marks=pytest.mark.docker),
            pytest.param("kubernetes", marks=pytest.mark.docker)]


@pytest.fixture(scope="module")
def fake_kube(docker_ready):
    with FakeKubeAPI() as fake:
        yield fake


class Backend:
    """How a test makes and audits sandboxes of one kind."""

    def __init__(self, kind: str, request, run_id: str, tmp_path, demo, task):
        self.kind, self.run_id, self.task = kind, run_id, task
        if kind == "local":
            self.config = LocalSandboxConfig(run_id=run_id, output_limit_bytes=2_000, parent_dir=tmp_path / "sandboxes")
            self.image = str(MirrorRepoSource(demo.repos_dir).locate(task.repo))
            self.missing_image = str(tmp_path / "no-such-repository")
        elif kind == "kubernetes":
            self.fake = request.getfixturevalue("fake_kube")
            self.config = KubernetesSandboxConfig(api_server=self.fake.url, namespace="swerl-test", run_id=run_id,
                                                  output_limit_bytes=2_000)
            self.image = request.getfixturevalue("demo_images")[DURATIONS]
            self.missing_image = f"{self.image}-gone"
        else:
            self.config = DockerSandboxConfig(run_id=run_id, output_limit_bytes=2_000, exec_channel=kind == "docker-channel")
            if kind == "docker-hosts":
                local = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
                self.config = DockerHostsConfig(hosts=[{"url": local, "max_sandboxes": 8}], container=self.config)
            self.image = request.getfixturevalue("demo_images")[DURATIONS]
            self.missing_image = f"{self.image}-gone"  # a tag that was never built (and cannot be pulled)

    def make(self, image: str | None = None, **kw):
        return make_sandbox(self.config, image or self.image, base_commit=self.task.base_commit, **kw)

    def leftovers(self) -> list:
        """What this test's sandboxes left: containers or folders carrying its run id."""
        if self.kind == "local":
            return local_sandbox_folders(self.run_id, self.config.parent_dir)
        if self.kind == "kubernetes":  # pods by label through the API, and containers the fake kept for no pod
            return running_pods(self.config, self.run_id) + self.fake.orphan_containers()
        return running_containers(self.run_id)  # a sandbox's own label, set from its config's run_id


@pytest.fixture(params=BACKENDS)
def backend(request, run_id, tmp_path, demo, demo_tasks):
    made = Backend(request.param, request, run_id, tmp_path, demo, demo_tasks[DURATIONS])
    yield made
    assert made.leftovers() == []


@pytest.fixture
def sandbox(backend):
    with backend.make() as sb:
        yield sb


def test_exec_returns_the_exit_code_and_stdout_and_stderr_interleaved(sandbox):
    res = sandbox.exec("echo out; echo err >&2; exit 7")
    assert (res.exit_code, res.output, res.timed_out, res.truncated, res.total_bytes) == (7, "out\nerr\n", False, False, 8)


def test_a_command_killed_by_a_signal_exits_128_plus_the_signal(sandbox):
    assert sandbox.exec("kill -9 $$").exit_code == 137


def test_commands_run_in_the_workdir_unless_given_a_cwd_and_see_the_env_they_are_given(sandbox):
    assert sandbox.exec("pwd").output == sandbox.workdir + "\n"
    res = sandbox.exec('pwd; echo "$SWERL_TEST_VAR"', cwd=posixpath.join(sandbox.workdir, "durations"),
                       env={"SWERL_TEST_VAR": "a b"})
    assert res.output == f"{sandbox.workdir}/durations\na b\n"


def test_a_timeout_kills_the_command_and_every_process_it_started(sandbox):
    n = random.randint(100_000, 999_999)  # a sleep no other test runs
    res = sandbox.exec(f"(setsid sleep {n} &); nohup sleep {n + 1} >/dev/null 2>&1 & while :; do :; done", timeout=1.5)
    assert (res.timed_out, res.exit_code) == (True, 124)
    assert sandbox.exec(f"ps -eo args= | grep -cE '^sleep ({n}|{n + 1})$' || true").output == "0\n"


def test_a_background_child_does_not_outlive_its_command(sandbox):
    n = random.randint(100_000, 999_999)
    assert sandbox.exec(f"sleep {n} & echo started").output == "started\n"
    assert sandbox.exec(f"ps -eo args= | grep -c '^sleep {n}$' || true").output == "0\n"


def test_long_output_keeps_head_and_tail_around_a_marker(sandbox):
    res = sandbox.exec("seq 1 100000")
    assert res.truncated and res.total_bytes == len("".join(f"{i}\n" for i in range(1, 100001))) == 588895
    head, marker, tail = res.output.partition("\n[... ")
    assert head.startswith("1\n2\n3\n") and tail.endswith("99999\n100000\n")
    assert marker and " bytes of output truncated ...]\n" in tail
    assert len(res.output) < 2_100  # the 2,000 bytes kept plus the marker


def test_files_round_trip_as_bytes_and_a_missing_file_says_where(sandbox):
    sandbox.write_file("notes/a.bin", b"\x00\x01swerl\n")
    assert sandbox.read_file(f"{sandbox.workdir}/notes/a.bin") == b"\x00\x01swerl\n"
    with pytest.raises(FileNotFoundError, match=f"{sandbox.workdir}/missing.txt does not exist"):
        sandbox.read_file("missing.txt")
    with pytest.raises(IsADirectoryError, match="is not a regular file"):
        sandbox.read_file("notes")


def test_write_files_makes_folders_keeps_modes_and_the_root_bin_folder_is_on_path(sandbox):
    tool = f"swerl-hello-{uuid.uuid4().hex[:8]}"
    sandbox.write_files({"deep/er/a.py": ("print(1)\n", 0o644),
                         posixpath.join(sandbox.root, "usr/local/bin", tool): (b"#!/bin/sh\necho hi\n", 0o755)})
    assert sandbox.read_file("deep/er/a.py") == b"print(1)\n"
    assert sandbox.exec(f"{tool} && stat -c '%a' deep/er deep/er/a.py").output == "hi\n755\n644\n"


def test_preloaded_files_are_there_when_the_sandbox_starts(backend):
    with backend.make(preload={"pre/loaded.txt": ("ready\n", 0o600)}) as sb:
        assert sb.exec("cat pre/loaded.txt; stat -c '%a' pre/loaded.txt").output == "ready\n600\n"


def test_the_workdir_holds_base_commit_and_none_of_the_later_history(sandbox, backend, demo):
    assert sandbox.exec("git rev-list --all").output == backend.task.base_commit + "\n"
    assert sandbox.exec("git tag; git remote").output == ""
    mirror = MirrorRepoSource(demo.repos_dir).locate(backend.task.repo)
    later = git("rev-list", f"{backend.task.base_commit}..main", cwd=mirror).split()
    assert len(later) == 1  # the demo's fix commit: in the mirror, absent from the sandbox's object store
    assert sandbox.exec(f"git cat-file -e {later[0]}").exit_code != 0
    assert sandbox.exec("git status --porcelain --untracked-files=no").output == ""


def test_diff_shows_edits_deletions_and_untracked_files_against_base_commit_even_after_a_commit(sandbox):
    committed = sandbox.exec("echo '# edited' >> durations/parser.py && rm durations/formatting.py && "
                             "git -c user.name=t -c user.email=t@localhost commit -qam wip && echo 'x = 1' > brand_new.py")
    assert committed.exit_code == 0
    diff = sandbox.diff()
    assert "+++ b/durations/parser.py" in diff and "\n+# edited\n" in diff
    assert "diff --git a/durations/formatting.py b/durations/formatting.py\ndeleted file mode 100644" in diff
    assert "diff --git a/brand_new.py b/brand_new.py\nnew file mode 100644" in diff and "\n+x = 1\n" in diff
    # the repository's own index is untouched: nothing staged, the new file still untracked
    assert sandbox.exec("git diff --cached --name-only; git ls-files --others brand_new.py").output == "brand_new.py\n"


def test_close_removes_everything_the_sandbox_made_and_later_commands_fail(backend):
    sb = backend.make().start()
    sb.write_file("scratch.txt", "x")
    assert len(backend.leftovers()) == 1
    sb.close()
    sb.close()  # twice is fine
    assert backend.leftovers() == []
    with pytest.raises(SandboxError, match="not running"):
        sb.exec("true")


def test_a_sandbox_that_cannot_start_raises_sandbox_error_and_leaves_nothing(backend):
    with pytest.raises(SandboxError):
        backend.make(backend.missing_image).start()
    assert backend.leftovers() == []


def test_run_alone_starts_the_sandbox_for_one_command_whose_files_stay_readable_until_close(backend):
    # graders run one command per sandbox: Docker makes it the container's own command (no exec)
    sandbox = backend.make(preload={"in.txt": ("given\n", 0o644)})
    try:
        res = run_alone(sandbox, "cat in.txt; echo made > out.txt; exit 4", timeout=60)
        assert (res.exit_code, res.output, res.timed_out) == (4, "given\n", False)
        assert sandbox.read_file("out.txt") == b"made\n"
    finally:
        sandbox.close()
    assert backend.leftovers() == []
