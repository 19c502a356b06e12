"""UFM-managed partition keys: the NicClusterPolicy's ``ibKubernetes`` section names the
Secret holding the UFM credentials, and discovery never reads Secrets. The stack gets
``pkeyManagement: ufm`` and a ``ufm`` section whose three values are placeholders, with the
``pulumi config set`` commands that replace them (:attr:`~.infer.Notes.secrets`)."""

from __future__ import annotations

from typing import Any

from gpufabric.discover.infer import Context, spec

PATH = "fabric.infiniband.ufm"
UNSET_SECRET = "unset: replace with `pulumi config set --secret`"
"""Not Pulumi ciphertext: every ``pulumi`` command on the stack fails to decrypt it until
``pulumi config set --secret`` writes the real one."""
UNSET_HOST = "ufm-address.unset.invalid"
"""The reserved ``.invalid`` top-level domain (RFC 2606): never resolves."""
UNSET_USER = "unset"


def command(key: str, secret: bool = False) -> str:
    """The command that sets one value (Pulumi prompts for it; a secret's is not echoed)."""
    flag = " --secret" if secret else ""
    return f"pulumi config set{flag} --path 'gpufabric:{PATH}.{key}'"


def ufm(ctx: Context, fabric: dict[str, Any]) -> None:
    """Where gpufabric's NicClusterPolicy runs ib-kubernetes against UFM (``ufmSecret``),
    the stack's fabric gets UFM pkey management with placeholders for the credentials."""
    policy = next(iter(ctx.managed("NicClusterPolicy")), None)
    ib_k8s = spec(policy).get("ibKubernetes") if policy is not None else None
    if not isinstance(ib_k8s, dict) or not ib_k8s.get("ufmSecret"):
        return
    infiniband = fabric.setdefault("infiniband", {})
    infiniband["pkeyManagement"] = "ufm"
    infiniband["ufm"] = {
        "address": UNSET_HOST,
        "username": UNSET_USER,
        "password": {"secure": UNSET_SECRET},
    }
    ctx.notes.secrets += [
        (f"{PATH}.address", command("address")),
        (f"{PATH}.username", command("username")),
        (f"{PATH}.password", command("password", secret=True)),
    ]
    where = f"Secret {ib_k8s['ufmSecret']}"
    ctx.notes.unmapped.append(
        f"NicClusterPolicy: spec.ibKubernetes.ufmSecret: UFM's address, user and password are "
        f"in {where}, which discovery does not read: written as placeholders (port and scheme "
        f"left at 443 and https; the header's "
        f"`pulumi config set` commands replace them)"
    )
