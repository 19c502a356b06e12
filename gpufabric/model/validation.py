"""Rules that relate several fields of a stack, reported all at once by config path.

Each check looks at the sections it needs and is skipped when one of them failed to parse,
so a stack with a typo in one section still gets its other sections checked.
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from collections.abc import Callable, Iterator, Sequence
from typing import get_args

from msgspec import Struct
from msgspec.structs import replace

from gpufabric import nics
from gpufabric.model import nvlink, railblocks, railspan, storagechecks
from gpufabric.model.config import (
    HOSTNAME_LABEL,
    SECTIONS,
    Cluster,
    Fabric,
    GpuNodes,
    GpuOperatorSettings,
    GpuPool,
    NodePool,
    NvlinkSystem,
    Scheduling,
    Sources,
    StackModel,
    Tenant,
    TrainerRuntime,
    Training,
    node_pools,
)
from gpufabric.model.monitoring import Monitoring
from gpufabric.model.problems import Problem, suggest
from gpufabric.model.storage import Storage
from gpufabric.model.versions import (
    check_versions,
    effective_components,
    known_upstreams,
    undocumented_gpudirect_pair,
)
from gpufabric.plan import authority as registry

_NCCL_NAME = re.compile(r"^NCCL_[A-Z0-9_]{1,248}$")
"""An NCCL variable, and a ConfigMap key (at most 253 characters)."""


class Parts(Struct, frozen=True):
    """The sections of a stack that parsed; None where a section had errors."""

    cluster: Cluster | None
    gpuNodes: GpuNodes | list[GpuPool] | None
    """One pool, or a fleet's pools; a pool check sees one pool's nodes (a GpuNodes)."""
    fabric: Fabric | None
    gpuOperator: GpuOperatorSettings | None
    scheduling: Scheduling | None
    training: Training | None
    tenants: list[Tenant] | None
    versions: dict[str, str] | None
    sources: Sources | None
    monitoring: Monitoring | None
    storage: Storage | None

    @classmethod
    def of(cls, model: StackModel) -> Parts:
        return cls(**{name: getattr(model, name) for name in SECTIONS})


Check = Callable[[Parts], Iterator[Problem]]
CHECKS: list[Check] = []
POOL_CHECKS: list[Check] = []
"""Checks of one pool's nodes and fabric: run once per pool of a fleet."""


def check(fn: Check) -> Check:
    CHECKS.append(fn)
    return fn


def pool_check(fn: Check) -> Check:
    """A check of one pool's nodes and NIC layout (``p.gpuNodes`` is then one pool's)."""
    CHECKS.append(fn)
    POOL_CHECKS.append(fn)
    return fn


def run_checks(parts: Parts) -> list[Problem]:
    problems: list[Problem] = []
    fleet = isinstance(parts.gpuNodes, list)
    for fn in CHECKS:
        if fleet and fn in POOL_CHECKS:
            problems.extend(_per_pool(fn, parts))
        else:
            problems.extend(fn(parts))
    return list(dict.fromkeys(problems))


def pools_of(p: Parts) -> tuple[NodePool, ...]:
    """The pools of the parsed sections (none when gpuNodes or fabric did not parse)."""
    if p.gpuNodes is None or p.fabric is None:
        return ()
    return node_pools(p.gpuNodes, p.fabric)


def _per_pool(fn: Check, parts: Parts) -> Iterator[Problem]:
    """A pool check for each pool, its problems under the pool's own config paths."""
    if parts.gpuNodes is None or parts.fabric is None:
        return
    for pool in pools_of(parts):
        view = replace(parts, gpuNodes=pool.nodes, fabric=pool.fabric)
        for problem in fn(view):
            yield replace(
                problem,
                path=_pool_path(pool, problem.path),
                message=_pool_message(pool, problem.message),
            )


_FABRIC_KEY = re.compile(r"(?<![\w.\]])fabric\.([A-Za-z]+)")


def _pool_message(pool: NodePool, message: str) -> str:
    """A pool check's message naming ``fabric.<key>``: the pool's own key by its path."""
    return _FABRIC_KEY.sub(lambda m: pool.fabric_path(m.group(1)), message)


def _pool_path(pool: NodePool, path: str) -> str:
    if path.startswith("fabric."):
        return pool.fabric_path(path.removeprefix("fabric."))
    if path == "gpuNodes" or path.startswith("gpuNodes."):
        return pool.path + path.removeprefix("gpuNodes")
    return path


def _one_pool(p: Parts) -> GpuNodes | None:
    """The nodes a pool check sees (one pool's; None for a fleet seen whole)."""
    return p.gpuNodes if isinstance(p.gpuNodes, GpuNodes) else None


def capacity(p: Parts) -> tuple[int, int] | None:
    """(nodes, GPUs) of every pool together; None when gpuNodes did not parse."""
    nodes = p.gpuNodes
    if nodes is None:
        return None
    pools = nodes if isinstance(nodes, list) else [nodes]
    return sum(n.count for n in pools), sum(n.count * n.gpusPerNode for n in pools)


# ------------------------------------------------------------------------------ fabric


@pool_check
def _rails_unique(p: Parts) -> Iterator[Problem]:
    if p.fabric is None:
        return
    for attr in ("name", "netdev", "hca"):
        seen: dict[str, int] = {}
        for i, rail in enumerate(p.fabric.rails):
            value = getattr(rail, attr)
            if value is None:
                continue
            # mlx5_0 and mlx5_0:1 are one device: a port does not make another HCA.
            key = value.partition(":")[0] if attr == "hca" else value
            if key in seen:
                same = "the same device as " if key != value else ""
                yield Problem(
                    f"fabric.rails[{i}].{attr}",
                    f"{value!r} is {same}already used by rails[{seen[key]}]; each rail needs "
                    f"its own {attr}",
                )
            else:
                seen[key] = i


RESERVED_INTERFACES = frozenset({"eth0", "lo"})
"""Pod interfaces a rail cannot be named after: the cluster network's and loopback."""
WELL_KNOWN_POD_NETWORKS = (
    ipaddress.ip_network("10.244.0.0/16"),  # flannel / kubeadm examples
    ipaddress.ip_network("192.168.0.0/16"),  # Calico default
    ipaddress.ip_network("10.96.0.0/12"),  # kubeadm service default
    ipaddress.ip_network("10.42.0.0/16"),  # k3s / RKE2 pods
    ipaddress.ip_network("10.43.0.0/16"),  # k3s / RKE2 services
)
MIN_RAIL_PREFIX = {4: 8, 6: 32}
"""A rail subnet wider than this is a typo, not a rail (0.0.0.0/0 would route everything)."""


def _unusable_subnet(net: ipaddress.IPv4Network | ipaddress.IPv6Network) -> str | None:
    for attr, what in (
        ("is_loopback", "loopback"),
        ("is_link_local", "link-local"),
        ("is_multicast", "multicast"),
        ("is_unspecified", "the unspecified address"),
        ("is_reserved", "reserved"),
    ):
        if getattr(net, attr):
            return (
                f"{net} is {what}; a rail needs a unicast subnet (a private one, or one of "
                "the site's own public allocation)"
            )
    if net.prefixlen < MIN_RAIL_PREFIX[net.version]:
        return (
            f"{net} is wider than /{MIN_RAIL_PREFIX[net.version]}; a rail subnet covers the "
            "GPU nodes' pods on one rail (e.g. a /16)"
        )
    return None


@pool_check
def _rail_names(p: Parts) -> Iterator[Problem]:
    if p.fabric is None:
        return
    for i, rail in enumerate(p.fabric.rails):
        if rail.name in RESERVED_INTERFACES:
            yield Problem(
                f"fabric.rails[{i}].name",
                f"{rail.name!r} is the pod's {'cluster' if rail.name == 'eth0' else 'loopback'} "
                "interface; the rail name becomes a second interface in every pod, so choose "
                "another (e.g. rail0)",
            )


@pool_check
def _subnets(p: Parts) -> Iterator[Problem]:
    if p.fabric is None:
        return
    rails = p.fabric.rails
    for i, rail in enumerate(rails):
        unusable = _unusable_subnet(rail.subnet)
        if unusable:
            yield Problem(f"fabric.rails[{i}].subnet", unusable)
            continue
        cidrs_known = p.cluster is not None and (p.cluster.podCIDR or p.cluster.serviceCIDR)
        if p.cluster is not None and not cidrs_known:
            for net in WELL_KNOWN_POD_NETWORKS:
                if net.version == rail.subnet.version and rail.subnet.overlaps(net):
                    yield Problem(
                        f"fabric.rails[{i}].subnet",
                        f"{rail.subnet} overlaps {net}, a common default pod or service "
                        "network; set cluster.podCIDR and cluster.serviceCIDR so the rails are "
                        "checked against the real ones",
                        warning=True,
                    )
                    break
        for j in range(i):
            if rail.subnet.version == rails[j].subnet.version and rail.subnet.overlaps(
                rails[j].subnet
            ):
                yield Problem(
                    f"fabric.rails[{i}].subnet",
                    f"{rail.subnet} overlaps rails[{j}] {rails[j].subnet}; rails need disjoint subnets",
                )
        if p.cluster is not None:
            for key in ("podCIDR", "serviceCIDR"):
                other = getattr(p.cluster, key)
                if (
                    other is not None
                    and other.version == rail.subnet.version
                    and rail.subnet.overlaps(other)
                ):
                    yield Problem(
                        f"fabric.rails[{i}].subnet",
                        f"{rail.subnet} overlaps cluster.{key} {other}; rail traffic would be "
                        "routed into the cluster network",
                    )
        if rail.gateway is not None:
            yield from railblocks.gateway_problems(
                f"fabric.rails[{i}].gateway", rail.gateway, rail.subnet, "rail"
            )
        for k, text in enumerate(rail.exclude):
            problem = _exclusion_problem(text, rail.subnet)
            if problem:
                yield Problem(f"fabric.rails[{i}].exclude[{k}]", problem)


def _exclusion_problem(
    text: str, subnet: ipaddress.IPv4Network | ipaddress.IPv6Network
) -> str | None:
    parts = [t.strip() for t in text.split("-")]
    if len(parts) not in (1, 2):
        return f"{text!r} is not an address or range; expected 10.0.0.1 or 10.0.0.1-10.0.0.9"
    try:
        addrs = [ipaddress.ip_address(t) for t in parts]
    except ValueError:
        return f"{text!r} is not an address or range; expected 10.0.0.1 or 10.0.0.1-10.0.0.9"
    if any(a not in subnet for a in addrs):
        return f"{text!r} is outside the rail subnet {subnet}"
    if len(addrs) == 2 and addrs[0] > addrs[1]:  # type: ignore[operator]
        return f"{text!r} ends before it starts"
    return None


@pool_check
def _ipam_capacity(p: Parts) -> Iterator[Problem]:
    if p.fabric is None:
        return
    one = _one_pool(p)
    nodes = one.count if one is not None else None
    if p.fabric.ipam.poolType == "ippool":
        yield from _ippool_capacity(p.fabric, nodes)
    else:
        yield from _cidrpool_capacity(p.fabric, nodes)


def _ippool_capacity(fabric: Fabric, nodes: int | None) -> Iterator[Problem]:
    """An IPPool hands every node perNodeBlockSize addresses of each rail's subnet."""
    ipam = fabric.ipam
    if ipam.perNodePrefix is not None:
        yield Problem(
            "fabric.ipam.perNodePrefix",
            "applies to poolType: cidrpool; an ippool hands out perNodeBlockSize addresses",
        )
    if nodes is None:
        return
    need = ipam.perNodeBlockSize * nodes
    for i, rail in enumerate(fabric.rails):
        if rail.blocks:
            continue  # each block's own capacity (gpufabric.model.railblocks)
        usable = rail.subnet.num_addresses - 2 - (1 if rail.gateway else 0)
        if need > usable:
            yield Problem(
                f"fabric.rails[{i}].subnet",
                f"{rail.subnet} has {usable} usable addresses but {nodes} nodes x "
                f"perNodeBlockSize {ipam.perNodeBlockSize} need {need}; widen the subnet "
                "or lower fabric.ipam.perNodeBlockSize",
            )


def _cidrpool_capacity(fabric: Fabric, nodes: int | None) -> Iterator[Problem]:
    """A CIDRPool gives every node a perNodePrefix block of each rail's subnet."""
    ipam = fabric.ipam
    if "perNodeBlockSize" in ipam.model_fields_set:
        yield Problem(
            "fabric.ipam.perNodeBlockSize",
            "applies to poolType: ippool; a cidrpool gives each node a perNodePrefix block",
        )
    if ipam.perNodePrefix is None:
        yield Problem(
            "fabric.ipam.perNodePrefix",
            "required with poolType: cidrpool (the prefix length of each node's block, e.g. 28)",
        )
        return
    for i, rail in enumerate(fabric.rails):
        prefix = rail.subnet.prefixlen
        if ipam.perNodePrefix <= prefix or ipam.perNodePrefix > rail.subnet.max_prefixlen:
            yield Problem(
                "fabric.ipam.perNodePrefix",
                f"{ipam.perNodePrefix} does not split rails[{i}] subnet {rail.subnet}; "
                f"expected a prefix between {prefix + 1} and {rail.subnet.max_prefixlen}",
            )
            continue
        block_size = 2 ** (rail.subnet.max_prefixlen - ipam.perNodePrefix)
        if rail.gateway is not None:
            index = int(rail.gateway) - int(rail.subnet.network_address)
            if index >= block_size:
                yield Problem(
                    f"fabric.rails[{i}].gateway",
                    f"{rail.gateway} is not in the first /{ipam.perNodePrefix} block of "
                    f"{rail.subnet}; a cidrpool gives every node's block a gateway at the same "
                    "offset, so name it in the first block (e.g. its .1)",
                )
        blocks = 2 ** (ipam.perNodePrefix - prefix)
        if nodes is not None and blocks < nodes:
            yield Problem(
                f"fabric.rails[{i}].subnet",
                f"{rail.subnet} splits into {blocks} /{ipam.perNodePrefix} blocks but the stack "
                f"expects {nodes} nodes; widen the subnet or raise fabric.ipam.perNodePrefix",
            )


@pool_check
def _rail_blocks(p: Parts) -> Iterator[Problem]:
    if p.fabric is not None:
        yield from railblocks.problems(p.fabric, p.scheduling)


@pool_check
def _rail_span(p: Parts) -> Iterator[Problem]:
    if p.fabric is not None:
        yield from railspan.problems(p.fabric, p.scheduling, _one_pool(p))


@pool_check
def _fabric_modes(p: Parts) -> Iterator[Problem]:
    """The link's and the NIC mode's own rules (gpufabric.nics), then the NIC driver's and
    the NCCL variables'."""
    f = p.fabric
    if f is None:
        return
    link, mode = nics.link(f.type), nics.mode(f.rdma)
    yield from link.problems(f, mode)
    yield from mode.problems(f, link)
    yield from _nic_driver(f)
    for name in sorted(f.ncclEnv):
        if not _NCCL_NAME.match(name):
            yield Problem(
                f"fabric.ncclEnv.{name[:60]}{'...' if len(name) > 60 else ''}",
                "not an NCCL variable; expected a name like NCCL_DEBUG (NCCL_ and capitals, digits "
                "or '_', at most 253 characters)",
            )


def _nic_driver(f: Fabric) -> Iterator[Problem]:
    driver = f.nicDriver
    if driver.source == "operator" and "hostStack" in driver.model_fields_set:
        yield Problem(
            "fabric.nicDriver.hostStack",
            "applies to source: host; with source: operator the Network Operator installs DOCA-OFED",
        )
    if f.gpuDirect == "peermem" and driver.source == "host" and driver.hostStack == "inbox":
        yield Problem(
            "fabric.gpuDirect",
            "'peermem' needs DOCA-OFED/MLNX_OFED, but fabric.nicDriver.hostStack is inbox; "
            "install DOCA-OFED or MLNX_OFED on the hosts (hostStack: doca | mlnx-ofed), let the Network Operator "
            "manage it (nicDriver.source: operator), or use gpuDirect: dmabuf (recommended)",
        )


# ------------------------------------------------------------------------------- pools


@check
def _pools(p: Parts) -> Iterator[Problem]:
    """A fleet's pools: names of their own, selectors that cannot pick one node twice, and
    rails that do not collide across pools."""
    if not isinstance(p.gpuNodes, list):
        return
    seen: dict[str, int] = {}
    for i, pool in enumerate(p.gpuNodes):
        if pool.name in seen:
            yield Problem(
                f"gpuNodes[{i}].name", f"{pool.name!r} is already gpuNodes[{seen[pool.name]}]'s"
            )
        seen.setdefault(pool.name, i)
        for j in range(i):
            other = p.gpuNodes[j]
            if _selectors_meet(pool.nodeSelector, other.nodeSelector):
                yield Problem(
                    f"gpuNodes[{i}].nodeSelector",
                    f"{_selector_text(pool.nodeSelector)} can select the same node as "
                    f"gpuNodes[{j}] ({other.name}: {_selector_text(other.nodeSelector)}); each "
                    "node belongs to one pool: give the pools a label key they differ in (e.g. "
                    "nvidia.com/gpu.product, or your own gpufabric.io/pool)",
                )
    yield from _fleet_rails(pools_of(p))
    yield from _pool_quotas(p)


def _selectors_meet(a: dict[str, str], b: dict[str, str]) -> bool:
    """Two equality selectors can match one node unless a key they share differs."""
    return all(a[k] == b[k] for k in a.keys() & b.keys())


def _selector_text(selector: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(selector.items())) or "{} (every node)"


def _rail_layout(pool: NodePool, index: int) -> tuple[object, ...]:
    """What a rail's network, pool and device plugin are made of: two pools may share a
    rail (one network serves both) only when all of it is the same."""
    f = pool.fabric
    rail = f.rails[index]
    return (f.type, f.rdma, f.mtu, f.ipam, f.sriov, rail.model_dump())


def _fleet_rails(pools: Sequence[NodePool]) -> Iterator[Problem]:
    """Rail names and subnets across pools: one name is one network."""
    owner: dict[str, tuple[NodePool, int]] = {}
    for pool in pools:
        for k, rail in enumerate(pool.fabric.rails):
            path = pool.fabric_path(f"rails[{k}]")
            first = owner.get(rail.name)
            if first is not None:
                if _rail_layout(first[0], first[1]) != _rail_layout(pool, k):
                    yield Problem(
                        f"{path}.name",
                        f"{rail.name!r} is also a rail of pool {first[0].name} with another "
                        "layout; a rail name is one network, pool and device resource across "
                        "the cluster: name this pool's rails apart (e.g. "
                        f"{(pool.name + '-' + rail.name)[:15]!r})",
                    )
                continue
            for other_name, (other_pool, m) in owner.items():
                other = other_pool.fabric.rails[m]
                if other.subnet.version == rail.subnet.version and other.subnet.overlaps(
                    rail.subnet
                ):
                    yield Problem(
                        f"{path}.subnet",
                        f"{rail.subnet} overlaps rail {other_name} of pool {other_pool.name} "
                        f"({other.subnet}); rails of different pools need disjoint subnets",
                    )
            owner[rail.name] = (pool, k)


def _pool_quotas(p: Parts) -> Iterator[Problem]:
    """Tenant quotas of a fleet: per pool, naming real pools, holding in each pool, and
    covering each pool's GPUs (what no tenant's quota holds, Kueue never admits)."""
    if p.tenants is None or not isinstance(p.gpuNodes, list):
        return
    names = [pool.name for pool in p.gpuNodes]
    if len(set(names)) != len(names):
        return  # pools named twice: reported by _pools; their figures would mislead
    pools = {pool.name: pool for pool in p.gpuNodes}
    used: dict[str, list[tuple[str, int]]] = {name: [] for name in pools}
    for i, tenant in enumerate(p.tenants):
        yield from _map_keys(f"tenants[{i}].gpuBorrowingLimit", tenant.gpuBorrowingLimit, pools)
        quota = tenant.gpuQuota
        if not isinstance(quota, dict):
            if len(pools) == 1:
                used[names[0]].append((tenant.namespace, quota))
            elif quota:
                yield Problem(
                    f"tenants[{i}].gpuQuota",
                    f"{quota} names no pool, and the stack has {len(pools)} "
                    f"({', '.join(pools)}); give the GPUs per pool, e.g. "
                    f"{{{names[0]}: {quota}}}",
                )
            continue
        yield from _map_keys(f"tenants[{i}].gpuQuota", quota, pools)
        for name, gpus in quota.items():
            if name in pools:
                used[name].append((tenant.namespace, gpus))
    if len(pools) > 1 and p.tenants and p.scheduling is not None:
        yield from _pool_quotas_held(p.scheduling.gang, p.tenants)
    idle = p.scheduling is not None and registry.get(p.scheduling.gang).admits_only_quota
    for name, shares in used.items():
        yield from _pool_share(pools[name], shares, idle and bool(p.tenants))


def _map_keys(path: str, value: object, pools: dict[str, GpuPool]) -> Iterator[Problem]:
    if not isinstance(value, dict):
        return
    for name in value:
        if name not in pools:
            yield Problem(
                f"{path}.{name}",
                f"{name!r} is not a pool{suggest(name, list(pools))}; accepted: "
                + ", ".join(pools),
            )


def _pool_share(pool: GpuPool, shares: list[tuple[str, int]], idle: bool) -> Iterator[Problem]:
    """One pool's quotas: they fit its GPUs, and (a warning, where GPUs outside every quota
    stay ``idle``) they cover them."""
    have = pool.count * pool.gpusPerNode
    total = sum(g for _, g in shares)
    listed = " + ".join(f"{g} ({ns})" for ns, g in shares)
    if total > have:
        yield Problem(
            "tenants",
            f"gpuQuota in pool {pool.name} totals {total} GPUs ({listed}) but the pool has "
            f"{have} ({pool.count} nodes x {pool.gpusPerNode} GPUs): the quotas cannot "
            "all be honoured; lower them, or let a tenant borrow idle GPUs "
            "(gpuBorrowingLimit) instead",
        )
    elif total < have and idle:
        held = f"only {total} ({listed}) are" if shares else "none is"
        yield Problem(
            "tenants",
            f"pool {pool.name} has {have} GPUs and {held} in a tenant's gpuQuota: queues admit "
            f"only what some quota holds (a tenant borrows others' idle quota, never GPUs "
            f"outside every quota), so {have - total} of its GPUs are never used; give them "
            f"to tenants (tenants[].gpuQuota.{pool.name})",
            warning=True,
        )


def _pool_quotas_held(gang: str, tenants: Sequence[Tenant]) -> Iterator[Problem]:
    """An authority whose queues cannot hold a quota per pool holds the sum: said, once."""
    authority = registry.get(gang)
    if authority.quota_per_pool:
        return
    sums = ", ".join(f"{t.namespace} {t.gpu_quota_total}" for t in tenants)
    yield Problem(
        "scheduling.gang",
        f"{gang}: {authority.title} queues hold one amount per resource, not one per pool: "
        f"each tenant's queue gets its gpuQuota summed over the pools ({sums}), and a job's "
        "pool is its node selector; gpufabric job and verify keep to each pool's share, a "
        "job submitted otherwise is held only to the sum. For quotas per pool use gang: "
        "kueue (a ResourceFlavor per pool)",
        warning=True,
    )


# --------------------------------------------------------------------------------- gpu


@check
def _gpu_operator(p: Parts) -> Iterator[Problem]:
    g = p.gpuOperator
    if g is None:
        return
    d = g.driver
    if not d.enabled:
        for key in ("version", "usePrecompiled", "useNvidiaDriverCRD"):
            if key in d.model_fields_set:
                yield Problem(
                    f"gpuOperator.driver.{key}",
                    "set, but gpuOperator.driver.enabled is false (the hosts bring their driver)",
                )
        f = p.fabric
        if f is not None and f.gpuDirect == "peermem" and f.nicDriver.source == "operator":
            # The host driver package's nvidia-peermem links against the host's NIC stack.
            yield Problem(
                "gpuOperator.driver.enabled",
                "false with fabric.gpuDirect: peermem needs the NIC driver on the hosts too "
                "(nvidia-peermem from the host driver package is built against it); set "
                "fabric.nicDriver.source: host, or use gpuDirect: dmabuf",
            )
    if d.usePrecompiled and d.useNvidiaDriverCRD:
        yield Problem(
            "gpuOperator.driver.usePrecompiled",
            "set it per NVIDIADriver resource when useNvidiaDriverCRD is true, not here",
        )


@check
def _pool_drivers(p: Parts) -> Iterator[Problem]:
    """A fleet's pools with a driver of their own: the GPU Operator serves them through
    NVIDIADriver resources only (one ClusterPolicy driver serves every node alike)."""
    g = p.gpuOperator
    pools = pools_of(p)
    if g is None or len(pools) < 2:
        return
    first = pools[0].fabric
    for pool in pools:
        own = pool.driver is not None and bool(pool.driver.model_fields_set)
        gpudirect = pool.fabric.gpuDirect != first.gpuDirect
        if not own and not gpudirect:
            continue
        path = f"{pool.path}.driver" if own else pool.fabric_path("gpuDirect")
        what = (
            "a driver of its own"
            if own
            else f"gpuDirect {pool.fabric.gpuDirect} (pool {pools[0].name}: {first.gpuDirect}), "
            "another driver setup"
        )
        if not g.driver.enabled:
            if own:
                yield Problem(
                    path,
                    f"pool {pool.name} sets {what}, but gpuOperator.driver.enabled is false "
                    "(the hosts bring their driver); install it on the pool's hosts and "
                    "remove this",
                )
        elif not g.driver.useNvidiaDriverCRD:
            yield Problem(
                path,
                f"pool {pool.name} needs {what}, which the GPU Operator installs per pool "
                "through NVIDIADriver resources only; set gpuOperator.driver."
                "useNvidiaDriverCRD: true",
            )


@pool_check
def _quarantine_toleration(p: Parts) -> Iterator[Problem]:
    """Jobs tolerate the GPU nodes' taints, never the quarantine taint: a restarted pod would
    land on the node that failed it."""
    from gpufabric.plan.monitoring import QUARANTINE_TAINT

    nodes = _one_pool(p)
    for i, t in enumerate(nodes.tolerations if nodes is not None else ()):
        if t.key == QUARANTINE_TAINT:
            yield Problem(
                f"gpuNodes.tolerations[{i}].key",
                f"{t.key!r} is the taint `gpufabric health` puts on a failed node: a job "
                "tolerating it restarts on the node that failed it; accepted: the GPU nodes' "
                "own taints (e.g. nvidia.com/gpu)",
            )


@check
def _failure_policy(p: Parts) -> Iterator[Problem]:
    """The authority's requeuing agrees with training.failurePolicy."""
    if p.scheduling is None or p.training is None:
        return
    authority = registry.get(p.scheduling.gang)
    yield from authority.failure_problems(p.scheduling, p.training.failurePolicy.maxRestarts)


@check
def _monitoring(p: Parts) -> Iterator[Problem]:
    m = p.monitoring
    if m is None or not m.enabled:
        return
    if p.gpuOperator is not None and not p.gpuOperator.dcgmExporter.enabled:
        yield Problem(
            "monitoring.enabled",
            "true, but gpuOperator.dcgmExporter.enabled is false: the GPU alerts and dashboards "
            "read the DCGM exporter's counters; enable the exporter or leave monitoring off",
        )
    if not m.prometheus.install and not m.prometheus.selectorLabels:
        yield Problem(
            "monitoring.prometheus.selectorLabels",
            "empty, but monitoring.prometheus.install is false: name the labels your "
            "Prometheus selects ServiceMonitors and PrometheusRules by (e.g. release: "
            "kube-prometheus-stack), or set install: true",
        )
    yield from _in_cluster_health(p)


def _in_cluster_health(p: Parts) -> Iterator[Problem]:
    assert p.monitoring is not None
    ic = p.monitoring.health.inCluster
    if not ic.enabled:
        return
    path = "monitoring.health.inCluster"
    if ic.image is None:
        yield Problem(f"{path}.image", "required when enabled: your gpufabric project built into an image")  # fmt: skip
    tenants = [t.namespace for t in p.tenants or []]
    if ic.tenant is None or ic.tenant not in tenants:
        yield Problem(
            f"{path}.tenant",
            f"{ic.tenant or 'missing'}: the tenant whose namespace runs the re-certification "
            f"jobs; accepted: {', '.join(tenants) or 'none (add a tenant)'}",
        )


# -------------------------------------------------------------------------- scheduling


def _repeats(path: str, values: Sequence[str]) -> Iterator[Problem]:
    seen: set[str] = set()
    for i, v in enumerate(values):
        if v in seen:
            yield Problem(f"{path}[{i}]", f"{v!r} is listed twice")
        seen.add(v)


@check
def _topology(p: Parts) -> Iterator[Problem]:
    s = p.scheduling
    if s is None:
        return
    yield from _repeats("scheduling.topologyLevels", s.topologyLevels)
    # What only the chosen authority requires of its settings and of the shared keys.
    authority = registry.get(s.gang)
    yield from authority.scheduling_problems(s)
    for key in sorted(s.model_fields_set & set(authority.ignored_settings)):
        yield Problem(
            f"scheduling.{key}",
            f"has no effect under {authority.title}: {authority.ignored_settings[key]}; remove it",
            warning=True,
        )
    if s.topologyLevels:
        yield from _node_topology(p)


def _node_topology(p: Parts) -> Iterator[Problem]:
    """Each node names exactly the switch levels, and the levels form a tree: a switch of a
    narrower level sits under one switch of each wider level."""
    s = p.scheduling
    if s is None or not s.nodeTopology:
        return
    switch_levels = [lv for lv in s.topologyLevels if lv != HOSTNAME_LABEL]
    if not switch_levels:
        yield Problem(
            "scheduling.nodeTopology",
            "set, but scheduling.topologyLevels names no level above the node",
        )
        return
    total = capacity(p)
    if total is not None and len(s.nodeTopology) > total[0]:
        counted = "gpuNodes.count" if not isinstance(p.gpuNodes, list) else "the pools' counts"
        yield Problem(
            "scheduling.nodeTopology",
            f"{len(s.nodeTopology)} nodes, more than {counted} {total[0]}",
        )
    parent: dict[tuple[str, str], tuple[str, str]] = {}
    for node, labels in s.nodeTopology.items():
        missing = [lv for lv in switch_levels if lv not in labels]
        extra = [lv for lv in labels if lv not in switch_levels]
        if missing or extra:
            yield Problem(
                f"scheduling.nodeTopology.{node}",
                (f"missing {', '.join(missing)}" if missing else "")
                + ("; " if missing and extra else "")
                + (f"{', '.join(extra)} is not in scheduling.topologyLevels" if extra else ""),
            )
            continue
        for wide, narrow in itertools.pairwise(switch_levels):
            key, up = (narrow, labels[narrow]), (wide, labels[wide])
            if parent.setdefault(key, up) != up:
                yield Problem(
                    f"scheduling.nodeTopology.{node}",
                    f"{narrow}={labels[narrow]} is under {wide}={parent[key][1]} for other "
                    f"nodes, here under {labels[wide]}; a switch has one parent",
                )


@check
def _training(p: Parts) -> Iterator[Problem]:
    t = p.training
    if t is None:
        return
    yield from _repeats("training.trainingOperator.schemes", t.trainingOperator.schemes)
    yield from _repeats("training.trainer.runtimes", t.trainer.runtimes)
    if not t.trainer.enabled and "runtimes" in t.trainer.model_fields_set:
        yield Problem("training.trainer.runtimes", "set, but training.trainer.enabled is false")
    if t.trainer.enabled and not t.trainer.runtimes:
        yield Problem(
            "training.trainer.runtimes",
            "[] gives TrainJobs no runtime to reference; accepted: "
            + ", ".join(get_args(TrainerRuntime)),
        )
    if not (t.mpiOperator or t.trainingOperator.schemes or t.trainer.enabled):
        yield Problem(
            "training",
            "installs no job operator; enable mpiOperator, trainingOperator.schemes or trainer",
        )
    elif not (t.mpiOperator or t.trainer.enabled or "pytorchjob" in t.trainingOperator.schemes):
        yield Problem(
            "training.mpiOperator",
            "false, training.trainer.enabled false and no 'pytorchjob' in "
            "training.trainingOperator.schemes: `gpufabric verify nccl` has no job to run its "
            "acceptance test as (multi-node nccl-tests is launched by mpirun); accepted: "
            "training.mpiOperator: true (MPIJob), training.trainer.enabled: true (TrainJob) or "
            "'pytorchjob' in training.trainingOperator.schemes (PyTorchJob)",
            warning=True,
        )


# ------------------------------------------------------------------------------ NVL72


@pool_check
def _nvl72_trays(p: Parts) -> Iterator[Problem]:
    """An NVL72 pool's nodes are trays: 4 GPUs each, 18 to a rack's NVLink domain."""
    nodes = _one_pool(p)
    if nodes is None or nodes.nvlink is None:
        return
    system = nodes.nvlink.system
    if nodes.gpusPerNode != nvlink.GPUS_PER_TRAY:
        yield Problem(
            "gpuNodes.gpusPerNode",
            f"{nodes.gpusPerNode}, but a {system} node is a compute tray of "
            f"{nvlink.GPUS_PER_TRAY} GPUs; set gpusPerNode: {nvlink.GPUS_PER_TRAY}",
        )
    whole = nvlink.TRAYS_PER_DOMAIN
    if nodes.count > whole and nodes.count % whole:
        yield Problem(
            "gpuNodes.count",
            f"{nodes.count} trays fill {nodes.count // whole} racks of {whole} and "
            f"{nodes.count % whole} trays of another: a partial rack's jobs get a smaller "
            f"NVLink domain (expected a multiple of {whole} for whole {system} racks)",
            warning=True,
        )
    driver = getattr(nodes, "driver", None)
    version = driver.version if driver is not None and driver.version else None
    if version is None and p.gpuOperator is not None:
        version = p.gpuOperator.driver.version
    if version is not None and nvlink.version_tuple(version) < nvlink.version_tuple(
        nvlink.MIN_DRIVER
    ):
        where = (
            "gpuNodes.driver.version"
            if driver is not None and driver.version
            else ("gpuOperator.driver.version")
        )
        yield Problem(
            where,
            f"{version} is older than {nvlink.MIN_DRIVER}, the NVIDIA driver ComputeDomains "
            f"need (DRA driver 0.4.0) for {system} trays; pin {nvlink.MIN_DRIVER} or later, "
            "or leave it unset for the GPU Operator's default driver",
        )


def _nvl72_pools(p: Parts) -> list[NodePool]:
    return [pool for pool in pools_of(p) if pool.nodes.nvlink is not None]


@check
def _nvl72_platform(p: Parts) -> Iterator[Problem]:
    """What a stack with an NVL72 pool needs from Kubernetes, the GPU Operator and training."""
    pools = _nvl72_pools(p)
    if not pools:
        return
    names = ", ".join(pool.name for pool in pools)
    if p.cluster is not None:
        k8s = nvlink.version_tuple(p.cluster.kubernetesVersion)
        low = k8s[:2] < nvlink.MIN_KUBERNETES or (
            len(k8s) > 2 and k8s < nvlink.MIN_KUBERNETES_PATCH
        )
        if low:
            yield Problem(
                "cluster.kubernetesVersion",
                f"{p.cluster.kubernetesVersion}, but NVL72 pool {names} needs Kubernetes 1.34.2 "
                "or later: ComputeDomains and IMEX channels are claimed through "
                "resource.k8s.io/v1 (DRA driver 0.4.0 prerequisites); upgrade the cluster "
                'and set kubernetesVersion: "1.34.2" or later (the patch the cluster runs)',
            )
    yield from _clique_by_hand(p, names)
    yield from _system_named_twice(pools)
    if p.gpuOperator is not None and not p.gpuOperator.cdi:
        yield Problem(
            "gpuOperator.cdi",
            f"false, but NVL72 pool {names} needs CDI: the DRA driver hands pods their IMEX "
            "channels as CDI devices; set gpuOperator.cdi: true (the GPU Operator's default)",
        )
    t = p.training
    if t is not None and not t.mpiOperator and "pytorchjob" not in t.trainingOperator.schemes:
        yield Problem(
            "training.mpiOperator",
            f"false and no 'pytorchjob' in training.trainingOperator.schemes: NVL72 pool "
            f"{names} runs its acceptance test and multi-node jobs with an IMEX channel "
            "claimed by every pod, which a TrainJob cannot add (Trainer 2.3's runtimePatches "
            "take no resourceClaims); set training.mpiOperator: true or add 'pytorchjob'",
        )


def _clique_by_hand(p: Parts, names: str) -> Iterator[Problem]:
    """The clique label is GPU Feature Discovery's, and its topology level gpufabric's: a
    stack that lists it (a level Kueue would get twice, which its Topology refuses at apply,
    and immutably) or hand-sets it on nodes would fight GFD."""
    s = p.scheduling
    if s is None:
        return
    label = nvlink.CLIQUE_LABEL
    if label in s.topologyLevels:
        yield Problem(
            f"scheduling.topologyLevels[{s.topologyLevels.index(label)}]",
            f"{label}: the NVLink domain level of NVL72 pool {names}, which gpufabric adds "
            "itself (GPU Feature Discovery sets the label); remove it, listing only the "
            "switch levels a person labels",
        )
    for node, labels in s.nodeTopology.items():
        if label in labels:
            yield Problem(
                f"scheduling.nodeTopology.{node}",
                f"{label} is set by GPU Feature Discovery on NVL72 trays (pool {names}) from "
                "the GPUs' own fabric; a hand-set value would fight it: remove it",
            )


def _system_named_twice(pools: Sequence[NodePool]) -> Iterator[Problem]:
    """A pool whose GPU model or product selector names the other NVL72 system than its
    nvlink.system (a GB200 stack copied, only the system switched): judged by the wrong bar."""
    for pool in pools:
        nvl = pool.nodes.nvlink
        assert nvl is not None
        system = nvlink.product(nvl.system)
        others = [nvlink.product(x) for x in get_args(NvlinkSystem) if nvlink.product(x) != system]
        texts = {
            f"{pool.path}.gpuModel": pool.nodes.gpuModel or "",
            **{f"{pool.path}.nodeSelector.{k}": v for k, v in pool.nodes.nodeSelector.items()},
        }
        for path, text in texts.items():
            named = [o for o in others if o in text.upper()]
            if named:
                yield Problem(
                    path,
                    f"{text!r} names {named[0]}, but {pool.path}.nvlink.system is "
                    f"{nvl.system}: the pool's bar, driver and checks follow the system; make "
                    "them agree",
                    warning=True,
                )


# ----------------------------------------------------------------------------- tenants

SYSTEM_NAMESPACES = frozenset({"default", "kube-system", "kube-public", "kube-node-lease"})
TOOL_NAMESPACES = frozenset({"gpufabric-probe"})
"""Namespaces gpufabric's own tools create (the probe DaemonSet of verify nodes)."""


def _owned_namespaces(p: Parts) -> dict[str, str]:
    """Namespace -> who owns it: Kubernetes, gpufabric's tools, or a pinned component."""
    owned = dict.fromkeys(SYSTEM_NAMESPACES, "Kubernetes")
    owned |= dict.fromkeys(TOOL_NAMESPACES, "gpufabric verify")
    for c in effective_components(p.versions or {}).values():
        owned.setdefault(c.namespace, c.name)
    return owned


@check
def _network_namespace(p: Parts) -> Iterator[Problem]:
    """The NADs' namespace is created, labelled restricted and protected by gpufabric: it
    must be its own."""
    if p.fabric is None or p.fabric.nadScope != "system":
        return
    ns = p.fabric.networkNamespace
    owner = _owned_namespaces(p).get(ns)
    if owner is not None:
        yield Problem(
            "fabric.networkNamespace",
            f"{ns!r} belongs to {owner}; the rails' networks need a namespace of their own "
            "(default gpufabric-networks)",
        )


@check
def _tenants(p: Parts) -> Iterator[Problem]:
    if p.tenants is None:
        return
    reserved = set(_owned_namespaces(p))
    if p.fabric is not None and p.fabric.nadScope == "system":
        reserved.add(p.fabric.networkNamespace)
    seen: dict[str, int] = {}
    total = capacity(p)
    gpus = total[1] if total is not None else None
    yield from _tenant_isolation(p)
    for i, tenant in enumerate(p.tenants):
        ns = tenant.namespace
        if ns in seen:
            yield Problem(f"tenants[{i}].namespace", f"{ns!r} is already tenants[{seen[ns]}]")
        seen[ns] = i
        if ns in reserved:
            yield Problem(
                f"tenants[{i}].namespace",
                f"{ns!r} is a system namespace; give the tenant a namespace of its own",
            )
        if not isinstance(p.gpuNodes, GpuNodes):
            continue  # a fleet's quotas are per pool (_pool_quotas); or gpuNodes is broken
        mapped = [
            k for k in ("gpuQuota", "gpuBorrowingLimit") if isinstance(getattr(tenant, k), dict)
        ]
        for key in mapped:
            yield Problem(
                f"tenants[{i}].{key}",
                f"{_show_map(getattr(tenant, key))} gives GPUs per pool, but gpuNodes is one pool "
                "(a mapping); give a number, or make gpuNodes a list of named pools",
            )
        if mapped:
            continue
        quota = tenant.gpu_quota_total
        borrow = tenant.borrowing_in("")
        if gpus is not None and quota > gpus:
            yield Problem(
                f"tenants[{i}].gpuQuota",
                f"{quota} is more than the cluster has ({_shape(p)} = {gpus})",
            )
        elif gpus is not None and quota + borrow > gpus:
            yield Problem(
                f"tenants[{i}].gpuBorrowingLimit",
                f"{borrow} lets the tenant reach "
                f"{quota + borrow} GPUs, more than the cluster's "
                f"{gpus}; the excess can never be used",
                warning=True,
            )
    if not isinstance(p.gpuNodes, list):
        yield from _quota_total(p.tenants, gpus, _shape(p))
    yield from _own_queues(p)


def _own_queues(p: Parts) -> Iterator[Problem]:
    """A tenant whose queue would be one the authority creates itself (Volcano's ``root``:
    its capability would cap every tenant's queue under it)."""
    if p.scheduling is None or p.tenants is None:
        return
    authority = registry.get(p.scheduling.gang)
    for i, tenant in enumerate(p.tenants):
        queue = authority.queue_name(tenant.namespace)
        if queue in authority.own_queues:
            yield Problem(
                f"tenants[{i}].namespace",
                f"{tenant.namespace!r} would name the tenant's queue {queue!r}, a queue "
                f"{authority.title} creates itself ({', '.join(sorted(authority.own_queues))}); "
                "give the tenant another namespace",
            )


def _show_map(value: dict[str, int]) -> str:
    return "{" + ", ".join(f"{k}: {v}" for k, v in value.items()) + "}"


def _shape(p: Parts) -> str:
    """The GPUs of the stack in words: "4 nodes x 8 GPUs", or per pool for a fleet."""
    nodes = p.gpuNodes
    pools: list[GpuNodes] = list(nodes) if isinstance(nodes, list) else [nodes] if nodes else []
    return " + ".join(
        f"{n.count} nodes x {n.gpusPerNode} GPUs"
        + (f" ({n.name})" if isinstance(n, GpuPool) and len(pools) > 1 else "")
        for n in pools
    )


def _quota_total(tenants: Sequence[Tenant], capacity: int | None, shape: str) -> Iterator[Problem]:
    """Nominal quotas are what each tenant is guaranteed; together they must fit."""
    total = sum(t.gpu_quota_total for t in tenants)
    if capacity is None or total <= capacity:
        return
    shares = " + ".join(f"{t.gpu_quota_total} ({t.namespace})" for t in tenants)
    yield Problem(
        "tenants",
        f"gpuQuota totals {total} GPUs ({shares}) but the cluster has {capacity} "
        f"({shape}): the cluster is oversubscribed and "
        f"the quotas cannot all be honoured. Lower the quotas so they sum to at most {capacity}; "
        f"to let a tenant use idle GPUs beyond its share, give it a gpuBorrowingLimit instead",
    )


def _tenant_isolation(p: Parts) -> Iterator[Problem]:
    """Per-tenant partitions and VLANs: only on per-tenant networks, only where the CNI has
    them, and never shared (that would undo the isolation)."""
    f, tenants = p.fabric, p.tenants or []
    for carrier in nics.links():
        attr = carrier.tenant_isolation
        owners: dict[object, int] = {}
        for i, tenant in enumerate(tenants):
            value = getattr(tenant, attr)
            if value is None:
                continue
            path = f"tenants[{i}].{attr}"
            if value in owners:
                yield Problem(
                    path,
                    f"{value} is already tenants[{owners[value]}]'s; isolation needs one per tenant",
                )
            owners[value] = i
            if f is None:
                continue
            if f.nadScope != "tenant":
                yield Problem(path, "applies to per-tenant networks; set fabric.nadScope: tenant")
            if nics.link(f.type) is not carrier or not nics.mode(f.rdma).virtual_functions:
                yield Problem(
                    path,
                    f"a per-tenant {attr} is carried by {carrier.name} SR-IOV VFs, but the fabric is "
                    f"{f.type} with rdma: {f.rdma}",
                )
            else:
                yield from carrier.tenant_isolation_problems(f, path)


# ----------------------------------------------------------------------------- storage


@check
def _storage(p: Parts) -> Iterator[Problem]:
    yield from storagechecks.storage_problems(p.storage, p.tenants)
    yield from storagechecks.gds_problems(p.gpuOperator, p.fabric, p.storage)


# ---------------------------------------------------------------------------- versions


def features(p: Parts) -> set[str]:
    """Names of what a stack uses, as versions.yaml rules refer to them."""
    out: set[str] = set()
    if p.scheduling is not None:
        authority = registry.get(p.scheduling.gang)
        out.add(authority.name)
        if authority.topology_levels(p.scheduling.topologyLevels):
            out.add("topology")  # e.g. Kueue always places through a Topology
    if p.training is not None:
        if p.training.mpiOperator:
            out.add("mpi-operator")
        if p.training.trainingOperator.schemes:
            out.add("training-operator")
        if p.training.trainer.enabled:
            out.add("trainer")
    for f in [pool.fabric for pool in pools_of(p)] or ([p.fabric] if p.fabric else []):
        out.add(f.type)
        out.add(f.gpuDirect)
        out.update(nics.mode(f.rdma).version_features)
        if f.nicDriver.source == "operator":
            out.add("operator-nic-driver")
    if _nvl72_pools(p):
        out.add("nvl72")  # the DRA driver for NVIDIA GPUs (versions.yaml)
    if isinstance(p.gpuNodes, list) and len(p.gpuNodes) > 1:
        out.add("node-pools")  # a NicNodePolicy per pool (versions.yaml)
    return out


@check
def _versions(p: Parts) -> Iterator[Problem]:
    if p.versions is None:
        return
    minor = p.cluster.kubernetes_minor if p.cluster else None
    yield from check_versions(p.versions, features(p), minor)
    fabrics = [pool.fabric for pool in pools_of(p)] or ([p.fabric] if p.fabric else [])
    if any(nics.mode(f.rdma).has_rdma for f in fabrics):
        pair = undocumented_gpudirect_pair(p.versions)
        if pair is not None:
            yield pair


@check
def _sources(p: Parts) -> Iterator[Problem]:
    """Mirror keys must name upstreams the pinned releases use: a misspelt key would
    silently leave the real upstream in place."""
    if p.sources is None:
        return
    registries, repositories = known_upstreams()
    for key in p.sources.registries:
        if key not in registries:
            known = sorted(registries)
            yield Problem(
                f"sources.registries.{key}",
                f"'{key}' is not a registry any pinned release pulls from{suggest(key, known)} "
                f"(accepted: {', '.join(known)})",
            )
    for key in p.sources.charts:
        if key.rstrip("/") not in repositories:
            known = sorted(repositories)
            yield Problem(
                f"sources.charts.{key}",
                f"'{key}' is not a chart repository of the pinned releases{suggest(key, known)} "
                f"(accepted: {', '.join(known)})",
            )
