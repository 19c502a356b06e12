"""Per-run SSH keys for an acceptance job whose operator mints none (a PyTorchJob).

The MPI Operator and the Trainer's MPI policy give their launchers SSH keys; the Training
Operator's PyTorchJob does not, so ``verify nccl`` makes an Ed25519 pair in memory for each
run and hands it to the job's pods as a ``kubernetes.io/ssh-auth`` Secret owned by the job
(the garbage collector removes it with the job, should verify be killed before its own
cleanup). The private key is never written to disk, printed or logged.
"""

from __future__ import annotations

import base64
from collections.abc import Mapping
from typing import Any

from gpufabric.outputs.jobs import ssh_secret_name

COMMENT = "gpufabric-verify"


def keypair() -> tuple[bytes, bytes]:
    """(private key in OpenSSH format, ``ssh-ed25519 ... gpufabric-verify`` public line).
    cryptography is imported here: only a run that makes keys pays for it (~75 ms)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    )
    return private, public + f" {COMMENT}\n".encode()


def secret_ref(job: Mapping[str, Any]) -> dict[str, Any]:
    """The Secret a run of ``job`` creates, by name only (what is deleted, never its keys)."""
    meta = job["metadata"]
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": ssh_secret_name(meta["name"]), "namespace": meta["namespace"]},
    }


def secret(job: Mapping[str, Any], owner_uid: str) -> dict[str, Any]:
    """A fresh key pair for one run of ``job``, owned by the job when its uid is known."""
    private, public = keypair()
    obj = secret_ref(job)
    meta = obj["metadata"]
    meta["labels"] = {"app.kubernetes.io/managed-by": "gpufabric-verify"}
    if owner_uid:
        meta["ownerReferences"] = [
            {
                "apiVersion": job["apiVersion"],
                "kind": job["kind"],
                "name": job["metadata"]["name"],
                "uid": owner_uid,
            }
        ]
    obj["type"] = "kubernetes.io/ssh-auth"
    obj["data"] = {
        "ssh-privatekey": base64.b64encode(private).decode(),
        "ssh-publickey": base64.b64encode(public).decode(),
    }
    return obj
