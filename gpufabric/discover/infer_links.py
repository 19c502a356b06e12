"""The rails' link rate (``fabric.linkRateGbps``): the SR-IOV operator's node states report
each PF's ``linkSpeed`` ("200000 Mb/s", as sriov-network-operator's status reads it from
the kernel); the rate sets the acceptance bar (rails x rate), so where nothing reports it
the default is written and said."""

from __future__ import annotations

import re

from gpufabric.discover.infer import Context
from gpufabric.discover.infer_fabric import Pools
from gpufabric.model.config import Fabric

SPEED = re.compile(r"^\s*(\d+)\s*Mb/s\s*$")


def apply(ctx: Context, pools: Pools) -> None:
    """Set ``linkRateGbps`` on the stack's fabric and each pool's that the node states show
    at another rate than the default; say it where none shows."""
    default = Fabric.model_fields["linkRateGbps"].default
    entries = pools.section if isinstance(pools.section, list) else []
    fabrics = [("fabric", pools.fabric, pools.fabric.get("rails") or [])]
    for entry in entries:
        own = entry.get("fabric")
        if own is not None and own.get("rails"):
            fabrics.append((f"gpuNodes[{entry['name']}].fabric", own, own["rails"]))
    speeds = _speeds(ctx)
    for where, fabric, rails in fabrics:
        seen = {speeds[r["netdev"]] for r in rails if r.get("netdev") in speeds}
        inherited = default if fabric is pools.fabric else pools.fabric.get("linkRateGbps", default)
        if len(seen) == 1:
            rate = seen.pop()
            if rate != inherited:
                fabric["linkRateGbps"] = rate
        elif len(seen) > 1:
            ctx.notes.unmapped.append(
                f"SriovNetworkNodeState: status.interfaces[].linkSpeed: {where}'s rails run at "
                f"{', '.join(f'{s} Gb/s' for s in sorted(seen))}: the slowest counts"
            )
            fabric["linkRateGbps"] = min(seen)
        else:
            ctx.notes.unmapped.append(
                f"{where}.linkRateGbps: no SR-IOV node state reports the rails' speed: written "
                f"at the default {default} Gb/s; set it (the acceptance bar is rails x rate)"
            )


def _speeds(ctx: Context) -> dict[str, int]:
    """PF name -> Gb/s, as the node states report them (the first report of a name wins)."""
    out: dict[str, int] = {}
    for state in ctx.snap.of("SriovNetworkNodeState"):
        for iface in (state.get("status") or {}).get("interfaces") or []:
            if not isinstance(iface, dict):
                continue
            found = SPEED.match(str(iface.get("linkSpeed", "")))
            if found and iface.get("name") and int(found.group(1)) > 0:
                out.setdefault(str(iface["name"]), int(found.group(1)) // 1000)
    return out
