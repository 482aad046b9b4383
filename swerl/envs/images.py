"""Image layers base -> environment -> instance, each tagged by the hash of what goes in it.

Identical environments (same Python, packages, set-up commands, CA certificates) hash
the same and are built once; an instance image adds the repository at base_commit in
/testbed and its install step. A task with a prebuilt image (SWE-bench 5's ``image``, SWE-rebench's
``docker_image``) is used as is: pulled when it is not local, never rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from pathlib import Path

from docker.errors import APIError, DockerException, ImageNotFound
from pydantic import BaseModel, Field

from swerl.data.task import Task
from swerl.envs import labels
from swerl.envs.base_image import BaseImageConfig, BaseImageError, base_tag, ensure_base_image
from swerl.envs.docker_build import ImageBuildError, build_image
from swerl.envs.docker_client import docker_client
from swerl.envs.repos import MirrorSettings, RepoNotFoundError, export_testbed, repo_source

ENV_REPO = "swerl-env"
INSTANCE_REPO = "swerl-instance"
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")
VENV = "/opt/venv"
UPGRADE_INSTALLERS = "python -m pip install --upgrade pip setuptools wheel"
# every environment layer: the build context's extra-ca.pem appended to the bundle pip and requests use
CA_BUNDLE_LINES = (
    "COPY extra-ca.pem /usr/local/share/swerl/extra-ca.pem",
    "RUN cat /usr/local/share/swerl/extra-ca.pem >> /etc/ssl/certs/ca-certificates.crt",
    "ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt "
    "REQUESTS_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 "
    "PIP_ROOT_USER_ACTION=ignore PYTHONDONTWRITEBYTECODE=1",
)


class CACertSettings(BaseModel):
    """The CA certificates image builds trust (a proxy that re-signs TLS needs its own)."""

    ca_certs: list[Path] | None = Field(None, description="Extra CA certificates (PEM) for image builds, appended to "
                                        "every build's CA bundle; None: the host's bundle.")


class GitHubSettings(BaseModel):
    """Whether a repository missing from the mirror may come from GitHub."""

    github: bool = Field(False, description="Clone repositories missing from the mirror folder from GitHub.")


class ImageSettings(CACertSettings, GitHubSettings):
    """How a task set's images are built: the CA certificates, whether GitHub may supply a repository, the builds at
    once, where base images come from, and whether existing images are rebuilt."""

    builds: int = Field(2, ge=1, le=64, description="Image builds at once (bounded by the Docker daemon).")
    base: BaseImageConfig = Field(default_factory=BaseImageConfig, description="Where the base images (Python, git, "
                                  "patch, a compiler) come from: a registry's python:X.Y-slim, or Debian.")
    force: bool = Field(False, description="Rebuild images even when their tag exists.")


class ImageConfig(ImageSettings, MirrorSettings):
    """How instance images are built: the image settings, the repositories' mirror, and where build logs go."""

    build_logs: Path = Field(Path(".swerl/build-logs"), description="One build log per image is kept here.")

    def ca_bundle(self) -> list[Path]:
        """The PEM files appended to every build's CA bundle: ``ca_certs``, or (None) the host's bundle when it exists."""
        if self.ca_certs is None:
            return [HOST_CA_BUNDLE] if HOST_CA_BUNDLE.is_file() else []
        return list(self.ca_certs)


def content_digest(*parts: object) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:16]


def ca_blob(config: ImageConfig) -> bytes:
    blobs = []
    for path in config.ca_bundle():
        if not path.is_file():
            raise FileNotFoundError(f"extra CA certificate {path} does not exist; fix the path or drop --ca-cert")
        blobs.append(path.read_bytes().rstrip(b"\n") + b"\n")
    return b"".join(blobs)


@dataclass(frozen=True)
class EnvSpec:
    """Everything that decides an environment image."""

    python: str
    pip_packages: tuple[str, ...]
    pre_install: tuple[str, ...]
    ca_hash: str

    @property
    def tag(self) -> str:
        return f"{ENV_REPO}:py{self.python}-{content_digest(self.python, self.pip_packages, self.pre_install, self.ca_hash)}"


def env_spec(task: Task, ca: bytes) -> EnvSpec:
    cfg = task.install_config
    pip = list(cfg.pip_packages)
    if cfg.packages and not cfg.packages.endswith((".txt", ".yml", ".yaml")):
        pip += cfg.packages.split()
    if not any(re.split(r"[<>=!~\[ ;]", p, maxsplit=1)[0].lower() == "pytest" for p in pip):
        pip.append("pytest")
    return EnvSpec(cfg.python, tuple(pip), tuple(cfg.pre_install), hashlib.sha256(ca).hexdigest()[:12])


def env_dockerfile(spec: EnvSpec, base: str) -> str:
    lines = [
        f"FROM {base}",
        *CA_BUNDLE_LINES,
        f"RUN python3 -m venv {VENV}",
        f"ENV VIRTUAL_ENV={VENV} PATH={VENV}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        # a distribution's venv carries its own old pip (bullseye: 20.3), which cannot install a
        # PEP 660 editable pyproject.toml project; the newest pip/setuptools/wheel that support this
        # Python can (pip picks them by Requires-Python, 3.8 included)
        f"RUN {UPGRADE_INSTALLERS}",
    ]
    lines += [f"RUN {cmd}" for cmd in spec.pre_install]
    lines.append(f"RUN pip install {' '.join(shlex.quote(p) for p in spec.pip_packages)}")
    return "\n".join(lines) + "\n"


def instance_tag(task: Task, env_tag: str) -> str:
    cfg = task.install_config
    digest = content_digest(env_tag, task.repo, task.base_commit, cfg.install, cfg.reqs_path, cfg.packages)
    return f"{INSTANCE_REPO}:{tag_name(task.instance_id)}-{digest[:12]}"


def tag_name(instance_id: str) -> str:
    """An instance id as the name part of an image tag (lower case, no characters docker refuses)."""
    return re.sub(r"[^a-z0-9_.-]", "-", instance_id.lower())[:100]


def build_log_path(log_dir: Path, tag: str) -> Path:
    """Where the build log of image ``tag`` is kept."""
    return Path(log_dir) / (re.sub(r"[^A-Za-z0-9_.-]", "_", tag) + ".log")


def instance_dockerfile(task: Task, env_tag: str) -> str:
    cfg = task.install_config
    lines = [f"FROM {env_tag}", "COPY testbed /testbed", "WORKDIR /testbed"]
    reqs = list(cfg.reqs_path) or ([cfg.packages] if cfg.packages.endswith(".txt") else [])
    lines += [f"RUN pip install -r {shlex.quote(r)}" for r in reqs]
    if cfg.install:
        lines.append(f"RUN {cfg.install}")
    # no `RUN git status` to refresh the index: a RUN starts a container, a third of a small task's build; git
    # re-checks the copied files' stat data once, at a sandbox's first git command, and finds them unchanged
    return "\n".join(lines) + "\n"


class BuildOutcome(BaseModel):
    """What happened to one task's image."""

    instance_id: str
    image: str | None = None
    image_id: str | None = None
    env_image: str | None = None
    base_image: str | None = None
    cached: bool = False
    error: str | None = None
    log_path: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None


def image_exists(tag: str) -> bool:
    try:
        docker_client().images.get(tag)
        return True
    except ImageNotFound:
        return False


class ImageBuilder:
    """Builds the images of a task set, deduplicating environments, in parallel."""

    def __init__(self, config: ImageConfig):
        self.config = config
        self._ca = ca_blob(config)

    def planned_tag(self, task: Task) -> str:
        """The instance image a task will use, without building anything."""
        if task.prebuilt_image:
            return task.prebuilt_image
        return instance_tag(task, env_spec(task, self._ca).tag)

    def build_all(self, tasks: Sequence[Task], progress: Callable[[BuildOutcome], None] | None = None) -> list[BuildOutcome]:
        """Build every task's image; a failed build is reported and never stops the others."""
        outcomes: dict[str, BuildOutcome] = {}
        envs: dict[str, tuple[EnvSpec, list[Task]]] = {}
        for task in tasks:
            if task.prebuilt_image:
                outcomes[task.instance_id] = self._prebuilt(task)
                if progress:
                    progress(outcomes[task.instance_id])
                continue
            spec = env_spec(task, self._ca)
            envs.setdefault(spec.tag, (spec, []))[1].append(task)

        env_errors: dict[str, tuple[str, str]] = {}
        with ThreadPoolExecutor(self.config.builds) as pool:
            futures = {pool.submit(self._ensure_env, spec): tag for tag, (spec, _) in envs.items()}
            for fut in as_completed(futures):
                tag = futures[fut]
                err = fut.exception()
                if err is not None:
                    env_errors[tag] = (str(err), str(self._log_path(tag)))
            todo = []
            for tag, (spec, env_tasks) in envs.items():
                for task in env_tasks:
                    if tag in env_errors:
                        msg, log = env_errors[tag]
                        outcomes[task.instance_id] = BuildOutcome(
                            instance_id=task.instance_id, env_image=tag, error=f"environment image failed: {msg}", log_path=log
                        )
                        if progress:
                            progress(outcomes[task.instance_id])
                    else:
                        todo.append((task, spec))
            futures2 = {pool.submit(self._ensure_instance, task, spec): task for task, spec in todo}
            for fut in as_completed(futures2):
                outcome = fut.result()
                outcomes[outcome.instance_id] = outcome
                if progress:
                    progress(outcome)
        return [outcomes[t.instance_id] for t in tasks]

    def _log_path(self, tag: str) -> Path:
        return build_log_path(self.config.build_logs, tag)

    def _prebuilt(self, task: Task) -> BuildOutcome:
        image = task.prebuilt_image or ""
        field = "image" if task.image else "docker_image"
        try:
            if not image_exists(image):
                repo, _, tag = image.rpartition(":") if ":" in image.split("/")[-1] else (image, "", "latest")
                docker_client().images.pull(repo, tag=tag or "latest")
            return BuildOutcome(instance_id=task.instance_id, image=image, image_id=docker_client().images.get(image).id, cached=True)
        except DockerException as e:  # not found, refused, or no registry reachable at all
            return BuildOutcome(
                instance_id=task.instance_id, image=image,
                error=f"prebuilt {field} {image} is neither local nor pullable: {getattr(e, 'explanation', e)} "
                "(pull or load it into this Docker daemon, or point the task at a reachable registry)",
            )

    def _ensure_env(self, spec: EnvSpec) -> str:
        if image_exists(spec.tag) and not self.config.force:
            return spec.tag
        log = self._log_path(spec.tag)
        base = ensure_base_image(spec.python, self.config.base, self._log_path(base_tag(spec.python, self.config.base)))
        build_image(
            env_dockerfile(spec, base), spec.tag, log, files={"extra-ca.pem": self._ca},
            labels={labels.MANAGED: "1", labels.KIND: "env", labels.CONTENT_HASH: spec.tag.split("-")[-1]},
        )
        return spec.tag

    def _ensure_instance(self, task: Task, spec: EnvSpec) -> BuildOutcome:
        tag = instance_tag(task, spec.tag)
        log = self._log_path(tag)
        outcome = BuildOutcome(
            instance_id=task.instance_id, image=tag, env_image=spec.tag,
            base_image=base_tag(spec.python, self.config.base), log_path=str(log),
        )
        try:
            if image_exists(tag) and not self.config.force:
                outcome.cached = True
            else:
                source = repo_source(self.config.repos, github=self.config.github)
                with tempfile.TemporaryDirectory(prefix="swerl-ctx-") as ctx:
                    export_testbed(source.locate(task.repo), task.base_commit, Path(ctx) / "testbed")
                    # no layer cache: see build_image
                    build_image(
                        instance_dockerfile(task, spec.tag), tag, log, context=Path(ctx),
                        labels={labels.MANAGED: "1", labels.KIND: "instance", labels.INSTANCE_ID: task.instance_id},
                        use_cache=False,
                    )
            outcome.image_id = docker_client().images.get(tag).id
        except (ImageBuildError, RepoNotFoundError, BaseImageError, RuntimeError, OSError) as e:
            outcome.error = str(e)
        return outcome


def write_manifest(outcomes: Sequence[BuildOutcome], path: Path) -> None:
    """The task -> image map that rollouts and grading read, and MLflow records as lineage."""
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {o.instance_id: o.model_dump() for o in outcomes}
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def list_images(kind: str | None = None) -> list[dict[str, str]]:
    """swerl's images, newest first."""
    filters = {"label": [f"{labels.MANAGED}=1"] + ([f"{labels.KIND}={kind}"] if kind else [])}
    rows = []
    for image in docker_client().images.list(filters=filters):
        rows.append({
            "tags": ", ".join(image.tags) or "<none>",
            "kind": image.labels.get(labels.KIND, "?"),
            "instance_id": image.labels.get(labels.INSTANCE_ID, ""),
            "size_mb": f"{image.attrs.get('Size', 0) / 1e6:.0f}",
            "created": image.attrs.get("Created", "")[:19],
        })
    return sorted(rows, key=lambda r: r["created"], reverse=True)


def prune_images(kind: str | None = None, keep: Sequence[str] = ()) -> list[str]:
    """Remove swerl's images of ``kind`` (instances first, so env layers can go too)."""
    removed = []
    order = [kind] if kind else ["instance", "env", "base"]
    for k in order:
        for image in docker_client().images.list(filters={"label": [f"{labels.MANAGED}=1", f"{labels.KIND}={k}"]}):
            if any(t in keep for t in image.tags):
                continue
            try:
                docker_client().images.remove(image.id, force=True)
                removed.extend(image.tags or [image.id])
            except APIError:
                pass  # still used by a running container; the next prune gets it
    return removed
