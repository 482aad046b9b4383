"""`swerl demo materialize` and `swerl sandbox reap`."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from swerl.cli.common import console
from swerl.util.paths import DEMO_DIR


def demo_materialize(out: Path = typer.Option(DEMO_DIR, "--out", help="Folder for repos/ and tasks.jsonl.")) -> None:
    """Write the demo tasks (tasks.jsonl) and their git repositories (repos/)."""
    from swerl.demo import materialize_demo

    demo = materialize_demo(out)
    console.print(f"{len(demo.instance_ids)} demo task(s): --tasks {demo.tasks_file} --repos {demo.repos_dir}")


def sandbox_reap(everything: bool = typer.Option(False, "--all", help="Remove every swerl sandbox, live owners too."),
                 host: Optional[list[str]] = typer.Option(None, "--host", help="A Docker host of a sandbox pool to clean "
                                                          "too (tcp://10.0.0.2:2375); repeat for each."),
                 kube_namespace: Optional[list[str]] = typer.Option(
                     None, "--kube-namespace", help="Delete swerl's sandbox pods in this Kubernetes namespace too; repeat for each."),
                 kube_api_server: Optional[str] = typer.Option(None, "--kube-api-server", help="The cluster's API server "
                                                               "(https://host:6443); default: the kubeconfig, else in-cluster."),
                 kubeconfig: Optional[Path] = typer.Option(None, "--kubeconfig", help="Kubeconfig file (default: $KUBECONFIG, "
                                                           "else ~/.kube/config)."),
                 kube_context: Optional[str] = typer.Option(None, "--kube-context", help="Kubeconfig context."),
                 kube_token_file: Optional[Path] = typer.Option(None, "--kube-token-file", help="Bearer token file for "
                                                                "--kube-api-server.")) -> None:
    """Remove sandboxes left by crashed runs (dead owner on this machine, or past their lifetime): containers here and
    on the given Docker hosts, pods in the given Kubernetes namespaces."""
    from swerl.envs.docker_sandbox import reap_containers

    removed = reap_containers(everything=everything, hosts=host or ())
    console.print(f"removed {len(removed)} container(s)")
    if kube_namespace:
        from kubernetes.client.exceptions import ApiException
        from kubernetes.config.config_exception import ConfigException
        from pydantic import ValidationError
        from urllib3.exceptions import HTTPError

        from swerl.envs.k8s_sandbox import KubernetesSandboxConfig, reap_pods
        from swerl.envs.sandbox import SandboxError

        for namespace in kube_namespace:
            try:
                config = KubernetesSandboxConfig(namespace=namespace, api_server=kube_api_server, kubeconfig=kubeconfig,
                                                 context=kube_context, token_file=kube_token_file)
                pods = reap_pods(config, everything=everything)
            except (ValidationError, SandboxError, ApiException, ConfigException, HTTPError, OSError) as e:
                console.print(f"[red]namespace {namespace}: {e}[/red]")
                raise typer.Exit(1) from e
            console.print(f"removed {len(pods)} pod(s) in namespace {namespace}")
