"""Images: content-hash tags, shared environments, CA certificates, failures that stay local."""

from __future__ import annotations

import pytest

from swerl.envs.docker_client import docker_client
from swerl.envs.images import HOST_CA_BUNDLE, ImageBuilder, ImageConfig, env_spec, instance_tag

pytestmark = pytest.mark.docker


def test_demo_tasks_share_one_environment_image(demo_tasks, demo_images):
    builder = ImageBuilder(ImageConfig())
    env_tags = {env_spec(t, builder._ca).tag for t in demo_tasks.values()}
    assert len(env_tags) == 1
    assert len(set(demo_images.values())) == len(demo_tasks)


def test_rebuilding_is_a_cache_hit(demo, demo_tasks, demo_images, build_dir):
    outcomes = ImageBuilder(ImageConfig(repos=demo.repos_dir, build_logs=build_dir)).build_all(list(demo_tasks.values()))
    assert [o.cached for o in outcomes] == [True] * len(demo_tasks)
    assert {o.instance_id: o.image for o in outcomes} == demo_images


def test_instance_tag_changes_with_the_install_command(demo_tasks):
    task = next(iter(demo_tasks.values()))
    other = task.model_copy(update={"install_config": task.install_config.model_copy(update={"install": "true"})})
    assert instance_tag(task, "swerl-env:x") != instance_tag(other, "swerl-env:x")
    assert instance_tag(task, "swerl-env:x") == instance_tag(task.model_copy(), "swerl-env:x")


def test_extra_ca_certificates_go_into_the_environment(demo, demo_tasks, build_dir, tmp_path):
    import subprocess

    pem = tmp_path / "corp-ca.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(tmp_path / "k.pem"),
                    "-out", str(pem), "-days", "2", "-subj", "/CN=swerl test CA"], check=True, capture_output=True)
    task = next(iter(demo_tasks.values()))
    builder = ImageBuilder(ImageConfig(repos=demo.repos_dir, build_logs=build_dir, ca_certs=[HOST_CA_BUNDLE, pem]))
    spec = env_spec(task, builder._ca)
    assert spec.tag != env_spec(task, ImageBuilder(ImageConfig())._ca).tag
    builder._ensure_env(spec)
    out = docker_client().containers.run(spec.tag, ["sh", "-c", f"tail -{len(pem.read_text().splitlines())} /etc/ssl/certs/ca-certificates.crt; echo $PIP_CERT"], remove=True)
    assert out.decode() == pem.read_text() + "/etc/ssl/certs/ca-certificates.crt\n"


def test_a_missing_ca_file_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="extra CA certificate .*nope.pem does not exist"):
        ImageBuilder(ImageConfig(ca_certs=[tmp_path / "nope.pem"]))


def test_failed_builds_are_reported_with_their_log_and_do_not_stop_the_others(demo, demo_tasks, build_dir):
    good = next(iter(demo_tasks.values()))
    broken = good.model_copy(update={
        "instance_id": "swerl-demo__broken-install-1",
        "install_config": good.install_config.model_copy(update={"install": "echo installing widgets && exit 3"}),
    })
    missing = good.model_copy(update={"instance_id": "swerl-demo__missing-1", "repo": "swerl-demo/not-there"})
    outcomes = {o.instance_id: o for o in ImageBuilder(ImageConfig(repos=demo.repos_dir, build_logs=build_dir)).build_all([broken, good, missing])}
    assert outcomes[good.instance_id].ok
    err = outcomes[broken.instance_id].error
    assert "returned a non-zero code: 3" in err and "installing widgets" in err and "--- last lines ---" in err
    assert "installing widgets" in open(outcomes[broken.instance_id].log_path).read()
    assert "repository swerl-demo/not-there is not in the mirror folder" in outcomes[missing.instance_id].error


def test_a_prebuilt_docker_image_is_used_as_is(demo_tasks, demo_images):
    task = next(iter(demo_tasks.values()))
    prebuilt = task.model_copy(update={"docker_image": demo_images[task.instance_id]})
    (outcome,) = ImageBuilder(ImageConfig()).build_all([prebuilt])
    assert (outcome.ok, outcome.image, outcome.cached, outcome.env_image) == (True, demo_images[task.instance_id], True, None)
    absent = task.model_copy(update={"docker_image": "swerl-nowhere/nothing:1"})
    (outcome,) = ImageBuilder(ImageConfig()).build_all([absent])
    assert outcome.error.startswith("prebuilt docker_image swerl-nowhere/nothing:1 is neither local nor pullable")


def test_labels_are_set_exactly_by_one_build_step(demo_images, tmp_path):
    from swerl.envs.docker_build import build_image

    base = next(iter(demo_images.values()))
    tag = "swerl-test-labels:one-step"
    wanted = {"swerl.test": "labels", "swerl.odd": 'a "quoted" $HOME \\ back', "swerl.empty": ""}
    log = tmp_path / "build.log"
    try:
        build_image(f"FROM {base}\n", tag, log, labels=wanted)
        got = docker_client().images.get(tag).labels
        assert {k: got[k] for k in wanted} == wanted
        assert log.read_text().count("LABEL ") == 2  # the Dockerfile echoed in the log, then its one step
    finally:
        docker_client().images.remove(tag, force=True)


def test_a_label_that_would_break_the_dockerfile_is_refused():
    from swerl.envs.docker_build import label_instruction

    assert label_instruction({"b": "2", "a": "x y"}) == 'LABEL a="x y" b="2"'
    with pytest.raises(ValueError, match="label key 'a b'"):
        label_instruction({"a b": "1"})
    with pytest.raises(ValueError, match="one line only"):
        label_instruction({"a": "1\nRUN rm -rf /"})


def test_a_label_that_cannot_be_written_fails_that_build_only(tmp_path):
    from swerl.envs.docker_build import ImageBuildError, build_image

    with pytest.raises(ImageBuildError, match="label value .*one line only"):
        build_image("FROM scratch\n", "swerl-test-labels:never", tmp_path / "build.log", labels={"swerl.instance_id": "a\nb"})
