"""Repository sources and the /testbed export that hides later history (real git, no Docker)."""

from __future__ import annotations

import subprocess

import pytest

from swerl.envs.repos import ChainRepoSource, MirrorRepoSource, RepoNotFoundError, export_testbed, git, repo_source


@pytest.fixture(scope="module")
def mirror(tmp_path_factory):
    from swerl.demo import materialize_demo

    demo = materialize_demo(tmp_path_factory.mktemp("demo"), slugs=["pagekit"])
    repo = demo.repos_dir / "swerl-demo__pagekit"
    return demo.repos_dir, repo, git("rev-list", "--max-parents=0", "main", cwd=repo).strip(), git("rev-parse", "main", cwd=repo).strip()


def test_mirror_finds_plain_and_bare_repositories(mirror, tmp_path):
    repos_dir, repo, _, _ = mirror
    assert MirrorRepoSource(repos_dir).locate("swerl-demo/pagekit") == repo
    subprocess.run(["git", "clone", "-q", "--mirror", str(repo), str(tmp_path / "swerl-demo__pagekit.git")], check=True)
    assert MirrorRepoSource(tmp_path).locate("swerl-demo/pagekit") == tmp_path / "swerl-demo__pagekit.git"


def test_a_missing_repository_names_the_folder_and_the_fix(tmp_path):
    with pytest.raises(RepoNotFoundError, match=r"repository a/b is not in the mirror folder .* \(looked for a__b, a__b.git\); clone it there"):
        MirrorRepoSource(tmp_path).locate("a/b")
    with pytest.raises(RepoNotFoundError, match="no repository source configured"):
        ChainRepoSource([]).locate("a/b")


@pytest.mark.parametrize("bare", [False, True])
def test_testbed_holds_base_commit_with_no_remote_no_tags_no_newer_objects(mirror, tmp_path, bare):
    _, repo, base, fix = mirror
    source = repo
    if bare:
        source = tmp_path / "bare.git"
        subprocess.run(["git", "clone", "-q", "--mirror", str(repo), str(source)], check=True)
    dest = tmp_path / "testbed"
    assert export_testbed(source, base[:10], dest) == base
    assert git("rev-parse", "HEAD", cwd=dest).strip() == base
    assert git("remote", cwd=dest) == "" and git("tag", cwd=dest) == ""
    assert git("status", "--porcelain", cwd=dest) == ""
    assert git("rev-list", "--all", cwd=dest).split() == [base]
    missing = subprocess.run(["git", "cat-file", "-e", fix], cwd=dest)
    assert missing.returncode != 0  # the fix commit is not in the object store at all


def test_an_unknown_commit_is_a_clear_error(mirror, tmp_path):
    _, repo, _, _ = mirror
    with pytest.raises(RepoNotFoundError, match="commit deadbeef is not in"):
        export_testbed(repo, "deadbeef", tmp_path / "tb")
    assert not (tmp_path / "tb").exists()


def test_repo_source_chain_tries_the_mirror_first(mirror):
    repos_dir, repo, _, _ = mirror
    assert repo_source(repos_dir).locate("swerl-demo/pagekit") == repo
