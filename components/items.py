"""Maps Plan items onto pulumi-kubernetes resources; the only place that knows how.

Helm charts become ``helm.v4.Chart`` (every object shows in previews and PR comments),
overlays become ``kustomize.v2.Directory`` and objects become Kubernetes resources of their
own type token, created from the rendered body as it is, so what ``gpufabric render``
writes is what ``pulumi up`` applies. Secrets in bodies become Pulumi secrets.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from gpufabric.plan import ids
from gpufabric.plan.items import HelmChart, Item, K8sObject, KustomizeOverlay, SecretRef


def type_token(api_version: str, kind: str) -> str:
    """The pulumi-kubernetes type token of a kind: core/v1 for the core group."""
    return ids.k8s_type(api_version, kind)


def with_secrets(data: Any) -> Any:
    """Replace SecretRef placeholders with Pulumi secrets holding the decrypted value."""
    if isinstance(data, SecretRef):
        if data.value.plaintext is None:
            raise pulumi.RunError(
                f"{data.path}: the secret is not available to this program "
                "(set it with `pulumi config set --secret`)"
            )
        return pulumi.Output.secret(data.value.plaintext)
    if isinstance(data, Mapping):
        return {str(k): with_secrets(v) for k, v in data.items()}
    if isinstance(data, list | tuple):
        return [with_secrets(v) for v in data]
    return data


class KubernetesObject(pulumi.CustomResource):
    """Any Kubernetes object, registered under its own type token with its body as inputs."""

    def __init__(
        self, resource_name: str, body: Mapping[str, Any], opts: pulumi.ResourceOptions
    ) -> None:
        token = type_token(str(body["apiVersion"]), str(body["kind"]))
        super().__init__(token, resource_name, with_secrets(body), opts)


def await_transform(awaits: Mapping[str, str]) -> pulumi.ResourceTransform:
    """A transform that makes Pulumi wait for chart-created objects to report ready."""
    tokens = {type_token(*key.rsplit("/", 1)): cond for key, cond in awaits.items()}

    def transform(args: pulumi.ResourceTransformArgs) -> pulumi.ResourceTransformResult | None:
        condition = tokens.get(args.type_)
        if condition is None:
            return None
        props: dict[str, Any] = dict(args.props)
        metadata: dict[str, Any] = dict(props.get("metadata") or {})
        annotations: dict[str, Any] = dict(metadata.get("annotations") or {})
        annotations["pulumi.com/waitFor"] = condition
        metadata["annotations"] = annotations
        props["metadata"] = metadata
        return pulumi.ResourceTransformResult(props=props, opts=args.opts)

    return transform


def materialize(overlay: KustomizeOverlay) -> Path:
    """Write an overlay's rendered files to a directory named by their content hash, so the
    same overlay always lands in the same place and kustomize reads exactly what render shows."""
    files = overlay.files()
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
    target = Path(tempfile.gettempdir()) / "gpufabric-kustomize" / digest
    if not target.is_dir():
        staging = Path(tempfile.mkdtemp(prefix="gpufabric-kustomize-"))
        for rel, text in files.items():
            (staging / rel).parent.mkdir(parents=True, exist_ok=True)
            (staging / rel).write_text(text)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.replace(staging, target)
        except OSError:  # another run wrote the same content first
            shutil.rmtree(staging, ignore_errors=True)
    return target


def resource_for(name: str, item: Item, opts: pulumi.ResourceOptions) -> pulumi.Resource:
    """Create the Pulumi resource for one Plan item."""
    opts = pulumi.ResourceOptions.merge(
        opts,
        pulumi.ResourceOptions(protect=item.protect, retain_on_delete=item.retain_on_delete),
    )
    payload = item.payload
    if isinstance(payload, K8sObject):
        return KubernetesObject(name, payload.body, opts)
    if isinstance(payload, HelmChart):
        oci = payload.repository.startswith("oci://")
        if payload.awaits:
            opts = pulumi.ResourceOptions.merge(
                opts, pulumi.ResourceOptions(transforms=[await_transform(payload.awaits)])
            )
        return k8s.helm.v4.Chart(
            name,
            chart=payload.chart_ref,
            version=payload.version,
            name=payload.release,
            namespace=payload.namespace,
            repository_opts=None
            if oci
            else k8s.helm.v4.RepositoryOptsArgs(repo=payload.repository),
            values=with_secrets(payload.values),
            opts=opts,
        )
    assert isinstance(payload, KustomizeOverlay)
    return k8s.kustomize.v2.Directory(
        name,
        directory=str(materialize(payload)),
        namespace=payload.namespace,
        opts=opts,
    )
