"""The verdict's rules: what a run must show, and one function per reason it falls short.

:class:`NcclExpectation` is what the stack expects of a run (from its resolved facts and the
command line, :func:`expectation`); :class:`Evidence` is what the rules derive from a
parsed run once; each ``rule_*`` gives the findings it makes (FAIL or INCONCLUSIVE, with
the reason), and :data:`RULES` lists them in the order their reasons are listed.
:func:`combine` turns the findings into a verdict: PASS only when no rule found anything.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from gpufabric.exitcodes import Verdict
from gpufabric.model import nvlink
from gpufabric.plan.facts import Facts
from gpufabric.plan.resolve import DEFAULT_FRACTION
from gpufabric.verify.nccl.parsed import Run

GIB = 1 << 30
_GDR_VIA = re.compile(r"/GDRDMA(?:\(PCI\))?(?:/Shared)?$")
"""net.cc: NET/<net>/<dev>[(<proxy>)][/GDRDMA[(PCI)]][/Shared] (NCCL 2.26+ adds (PCI))."""


MNNVL_MIN_NCCL = (2, 25, 2)
"""The NCCL release multi-node NVLink through ComputeDomains needs (issue 38; the IMEX
channel and FABRIC handle path of mnnvl.cc)."""
NVLINK_BARS = nvlink.DOMAIN_BARS
"""Each NVL72 system's default all_reduce bus-bandwidth bar inside one NVLink domain."""
NVLINK_BAR_BYTES = nvlink.DOMAIN_BAR_GIB * GIB
"""The bar is judged on the rows at this size and above (the published figures' size)."""


@dataclass(frozen=True, kw_only=True)
class NvlinkDomain:
    """What a run on a multi-node NVLink pool must show."""

    system: str
    scope: str = "domain"
    """``domain``: every rank in one NVLink domain (the bar below, NVLink transport proven,
    no NET channel); ``across``: ranks in several domains (the InfiniBand bar as for any
    pool, with the NCCL version checked)."""
    threshold_gbps: float
    threshold_source: str


def nvlink_domain(
    system: str, scope: str = "domain", min_busbw: float | None = None
) -> NvlinkDomain:
    """The domain expectation of ``system`` (a key of :data:`NVLINK_BARS`); ``min_busbw``
    replaces the system's default bar."""
    default, source = NVLINK_BARS[system]
    if min_busbw is not None:
        return NvlinkDomain(
            system=system,
            scope=scope,
            threshold_gbps=min_busbw,
            threshold_source="--nvlink-min-busbw",
        )
    return NvlinkDomain(system=system, scope=scope, threshold_gbps=default, threshold_source=source)


@dataclass(frozen=True, kw_only=True)
class NcclExpectation:
    """What the stack expects of a run."""

    rdma: bool = True
    link_layer: str | None = None  # "IB" or "RoCE"
    gdr: bool = True
    threshold_gbps: float | None = None
    threshold_source: str = "none"
    gpus_per_node: int | None = None
    line_rate_gbytes: float | None = None
    """The node's NIC line rate (rails x link rate) in GB/s: inter-node bus bandwidth above
    it by more than measurement noise is not a measurement over the NICs."""
    nvlink: NvlinkDomain | None = None
    """A multi-node NVLink pool's run (None for every other pool: no rule below reads it)."""


def nvlink_scope(facts: Facts, nodes: int | None) -> str | None:
    """Where a run of ``nodes`` trays on the pool of ``facts`` runs: ``domain`` when they
    fit one NVLink domain (the acceptance job is placed inside one clique where it fits),
    ``across`` when they do not; None on a pool that is no NVL72 pool, or with no count."""
    domains = facts.nodes.nvlink
    if domains is None or nodes is None:
        return None
    return "domain" if domains.fits_one_domain(nodes) else "across"


def expectation(
    facts: Facts | None,
    min_busbw: float | None,
    fraction: float = DEFAULT_FRACTION,
    rails: int | None = None,
    nodes: int | None = None,
    nvlink_min_busbw: float | None = None,
) -> NcclExpectation:
    """From the stack's resolved facts and the command line: the threshold is --min-busbw,
    or ``fraction`` of the node's line rate (the Plan's acceptance facts). With ``rails``,
    for a run restricted to that many rails: the line rate and --min-busbw scale with
    them. With ``nodes`` on an NVL72 pool, a run of that many trays (:func:`nvlink_scope`):
    inside one NVLink domain the system's bar (or ``nvlink_min_busbw``) is the threshold
    and the NICs' line rate no ceiling; across domains the InfiniBand threshold stands,
    and both check the NCCL version."""
    exp = _fabric_expectation(facts, min_busbw, fraction, rails)
    scope = None if facts is None else nvlink_scope(facts, nodes)
    if facts is None or facts.nodes.nvlink is None or scope is None:
        return exp
    bar = nvlink_domain(nvlink.product(facts.nodes.nvlink.system), scope, nvlink_min_busbw)
    if scope == "across":
        return replace(exp, nvlink=bar)
    return replace(
        exp,
        nvlink=bar,
        threshold_gbps=bar.threshold_gbps,
        threshold_source=bar.threshold_source,
        line_rate_gbytes=None,
    )


def _fabric_expectation(
    facts: Facts | None,
    min_busbw: float | None,
    fraction: float = DEFAULT_FRACTION,
    rails: int | None = None,
) -> NcclExpectation:
    """:func:`expectation` over the pool's NICs (every pool's, and an NVL72 pool's across
    its domains)."""
    if facts is None:
        if min_busbw is None:
            return NcclExpectation()
        return NcclExpectation(threshold_gbps=min_busbw, threshold_source="--min-busbw")
    acceptance = facts.acceptance.at_fraction(fraction)
    if rails is not None:
        acceptance = acceptance.on_rails(rails)
    if min_busbw is None:
        threshold, source = acceptance.threshold_gbps, acceptance.threshold_source
    elif rails is None or rails == facts.acceptance.rails:
        threshold, source = min_busbw, "--min-busbw"
    else:
        all_rails = facts.acceptance.rails
        threshold = round(min_busbw * rails / all_rails, 2)
        source = f"--min-busbw x {rails}/{all_rails} rails"
    return NcclExpectation(
        rdma=acceptance.rdma,
        link_layer=acceptance.link_layer,
        gdr=True,
        threshold_gbps=threshold,
        threshold_source=source,
        gpus_per_node=facts.nodes.gpus_per_node,
        line_rate_gbytes=acceptance.line_rate_gbytes,
    )


LINE_RATE_NOISE = 1.10
"""Inter-node bus bandwidth may exceed the line rate by measurement noise, not more."""


@dataclass(frozen=True)
class Finding:
    """What one rule found: a verdict contribution (FAIL or INCONCLUSIVE) and its reason."""

    verdict: Verdict
    reason: str


def _fail(reason: str) -> list[Finding]:
    return [Finding(Verdict.FAIL, reason)]


def _unsure(reason: str) -> list[Finding]:
    return [Finding(Verdict.INCONCLUSIVE, reason)]


@dataclass(frozen=True, kw_only=True)
class Bound:
    """What one test kind's bus bandwidth can reach over the NICs, and must reach."""

    ceiling_gbps: float | None
    ceiling_source: str
    threshold_gbps: float | None
    threshold_source: str
    no_threshold: str | None
    """Why the stack gives this test kind no threshold (None when it does)."""


RING_BOUND = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce")
"""Kinds whose bus bandwidth over the NICs is bounded by the node's line rate (nccl-tests
doc/PERFORMANCE.md: busbw is normalised so that it compares to the hardware's peak)."""
IN_NETWORK_KINDS = ("all_reduce",)
"""Kinds that CollNet (SHARP) and NVLS reduction speed up beyond the ring bound."""


def _kind(test: str | None) -> str | None:
    """all_reduce of "all_reduce_perf_mpi" or "./build/all_reduce_perf"."""
    if test is None:
        return None
    return test.rsplit("/", 1)[-1].split("_perf", 1)[0]


def test_bound(
    test: str | None, nranks: int | None, in_network: Sequence[str], exp: NcclExpectation
) -> Bound:
    """The ceiling and threshold of one test kind. Ring-bound kinds (and a run whose test is
    unnamed, as old builds print) have the line rate as ceiling and the stack's threshold;
    all_reduce with in-network reduction (CollNet/SHARP, NVLS) may reach 2(n-1)/n of it;
    other kinds (alltoall, sendrecv, gather, scatter, hypercube) are not bounded by the line
    rate alone: no ceiling, and no threshold unless --min-busbw gives one."""
    kind, rate = _kind(test), exp.line_rate_gbytes
    if exp.nvlink is not None and _in_domain(exp):
        return _domain_bound(kind, exp.nvlink)
    own = exp.threshold_source.startswith("--min-busbw")
    if kind is not None and kind not in RING_BOUND:
        why = (
            f"no stack threshold for {kind}: its bus bandwidth over the NICs depends on how "
            "many ranks cross the network, not on the line rate alone (pass --min-busbw)"
        )
        threshold = exp.threshold_gbps if own else None
        source = exp.threshold_source if own else "none"
        return Bound(
            ceiling_gbps=None,
            ceiling_source="",
            threshold_gbps=threshold,
            threshold_source=source,
            no_threshold=None if own else why,
        )
    ceiling, source = rate, "line rate"
    if rate is not None and in_network and kind in IN_NETWORK_KINDS and nranks and nranks > 1:
        ceiling = round(rate * 2 * (nranks - 1) / nranks, 2)
        source = f"in-network reduction ({', '.join(in_network)}): 2(n-1)/n x line rate"
    return Bound(
        ceiling_gbps=ceiling,
        ceiling_source=source,
        threshold_gbps=exp.threshold_gbps,
        threshold_source=exp.threshold_source,
        no_threshold=None,
    )


NVLINK_BAR_KINDS = ("all_reduce",)
"""Kinds the NVL72 systems' default bars are stated for (the published figures are
all_reduce's); other kinds inside a domain are held to --nvlink-min-busbw only."""


def _domain_bound(kind: str | None, bar: NvlinkDomain) -> Bound:
    """Inside one NVLink domain: no NIC ceiling; the domain's bar for the kinds it is
    stated for (and a run whose test is unnamed), any kind's with --nvlink-min-busbw."""
    judged = kind is None or kind in NVLINK_BAR_KINDS or bar.threshold_source.startswith("--")
    return Bound(
        ceiling_gbps=None,
        ceiling_source="",
        threshold_gbps=bar.threshold_gbps if judged else None,
        threshold_source=bar.threshold_source if judged else "none",
        no_threshold=None,
    )


@dataclass(frozen=True, kw_only=True)
class Evidence:
    """A run and what the rules derive from it (once, for all of them)."""

    run: Run
    nodes: int | None
    socket: bool
    """NCCL used TCP sockets (said so, or an inter-node channel went over NET/Socket)."""
    impossible: tuple[str, ...]
    gdr_channels: int
    """Inter-node channels over GPUDirect RDMA."""
    best: float | None
    """Best bus bandwidth at >= 1 GiB."""
    bound: Bound = field(
        default_factory=lambda: Bound(
            ceiling_gbps=None,
            ceiling_source="",
            threshold_gbps=None,
            threshold_source="none",
            no_threshold=None,
        )
    )
    """The test kind's bus-bandwidth ceiling and threshold (:func:`test_bound`)."""

    @property
    def multi(self) -> bool:
        return self.nodes is not None and self.nodes >= 2

    @classmethod
    def of(cls, run: Run, exp: NcclExpectation | None = None) -> Evidence:
        large = [r.best for r in run.rows if r.size >= GIB and r.best is not None]
        exp = exp if exp is not None else NcclExpectation()
        return cls(
            bound=test_bound(run.test, run.nranks, sorted(run.in_network), exp),
            run=run,
            nodes=run.nodes,
            socket=run.socket_in_use or any(v.startswith("NET/Socket") for v in run.inter_node),
            impossible=tuple(text for r in run.rows for text in r.impossible),
            gdr_channels=sum(1 for v in run.inter_node if _GDR_VIA.search(v)),
            best=max(large) if large else None,
        )


Rule = Callable[[Evidence, NcclExpectation], list[Finding]]
"""One rule of the verdict: the findings it makes on a run (none when it has nothing to say)."""


def rule_test_failed(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    return _fail(f"the test failed: {ev.run.fatal[0]}") if ev.run.fatal else []


def rule_killed(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    return _fail(f"the run was killed or crashed: {ev.run.killed[0]}") if ev.run.killed else []


def rule_malformed(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    malformed = ev.run.malformed
    return _unsure(f"malformed input: {'; '.join(malformed[:3])}") if malformed else []


def rule_unfinished(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    """Fewer rows than the test announced; else a named test with rows but no end line."""
    run = ev.run
    printed = len(run.rows) + run.unreadable_rows
    if run.expected_rows is not None and printed < run.expected_rows:
        return _fail(
            f"the run ended early: {printed} of {run.expected_rows} announced sizes were printed"
        )
    if run.test is not None and run.rows and not run.concluded:
        return _fail("the run did not finish (no 'Collective test concluded' line)")
    if run.rows and not run.footer:
        return _fail("the run did not finish: the table has no out-of-bounds footer (cut?)")
    return []


def rule_no_rows(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    return [] if ev.run.rows else _unsure("no data rows: the test printed no results table")


def rule_impossible_values(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    if not ev.impossible:
        return []
    return _fail(f"impossible values: {', '.join(ev.impossible[:3])}")


def rule_out_of_bounds(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    if ev.run.out_of_bounds_ok is not False:
        return []
    if not ev.run.out_of_bounds:
        return _fail("the out-of-bounds check did not say OK")
    return _fail(f"{ev.run.out_of_bounds} out-of-bounds values")


def rule_own_bandwidth_check(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    """nccl-tests judged its own average against NCCL_TESTS_MIN_BW and exited non-zero."""
    if not ev.run.avg_failed:
        return []
    return _fail(
        f"nccl-tests' own check failed: average bus bandwidth {ev.run.avg_busbw} GB/s is "
        "below its NCCL_TESTS_MIN_BW floor (the binary exits with failure)"
    )


def rule_wrong_elements(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    wrong = sum(r.wrong for r in ev.run.rows)
    return _fail(f"{wrong} wrong elements reported by -c 1") if wrong else []


def rule_nccl_warnings(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    return [Finding(Verdict.FAIL, f"NCCL WARN: {w['cause']}") for w in ev.run.warnings]


def rule_socket_fallback(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    if not (exp.rdma and ev.socket and ev.multi):
        return []
    return _fail("socket fallback: NCCL used TCP (NET/Socket) between nodes, not RDMA")


def _in_domain(exp: NcclExpectation) -> bool:
    return exp.nvlink is not None and exp.nvlink.scope == "domain"


def _rdma_between_nodes(ev: Evidence, exp: NcclExpectation) -> bool:
    """RDMA is expected between the run's nodes and NCCL did not fall back to sockets
    (inside one NVLink domain the nodes talk over NVLink, not the NICs)."""
    return exp.rdma and ev.multi and not ev.socket and not _in_domain(exp)


def rule_transport_unproven(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    if not _rdma_between_nodes(ev, exp):
        return []
    if not ev.run.networks and not ev.run.inter_node:
        return _unsure("no transport lines: rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET")
    if not ev.run.inter_node:
        return _unsure(
            "no inter-node channel lines: the transport between nodes is not proven "
            "(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,NET prints them)"
        )
    return []


def rule_link_layer(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    if not _rdma_between_nodes(ev, exp) or not exp.link_layer:
        return []
    if not ev.run.link_layers:
        return _unsure(
            f"link layer not proven: no 'NET/IB : Using' line names the HCAs' link layer "
            f"(expected {exp.link_layer})"
        )
    wrong_layer = sorted(
        f"{hca}/{layer}" for hca, layer in ev.run.link_layers.items() if layer != exp.link_layer
    )
    if not wrong_layer:
        return []
    return _fail(f"link layer {', '.join(wrong_layer)}, expected {exp.link_layer}")


def rule_gdr_disabled(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    if not (_rdma_between_nodes(ev, exp) and exp.gdr and ev.run.gdr_disabled):
        return []
    return _fail(f"GPU Direct RDMA disabled for {', '.join(sorted(set(ev.run.gdr_disabled)))}")


def rule_staged_channels(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    if not (_rdma_between_nodes(ev, exp) and exp.gdr):
        return []
    staged = len(ev.run.inter_node) - ev.gdr_channels
    if not staged:
        return []
    return _fail(f"{staged} inter-node channels without GDRDMA (staged through host memory)")


def rule_node_count(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    if ev.nodes is None:
        return _unsure(
            "node count unknown: no '# Rank ... on HOST' lines and no NCCL 'nNodes' line"
        )
    if ev.nodes == 1:
        return _unsure("single node: no inter-node traffic was measured")
    return []


def rule_no_large_sizes(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    if not ev.run.rows or ev.best is not None or ev.impossible:
        return []
    return _unsure("no results at message sizes >= 1 GiB (run with -e 8G or more)")


def rule_above_line_rate(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    """Inter-node bandwidth above the test kind's ceiling (beyond noise) did not cross the
    NICs; multi-node NVLink (MNNVL) is exempt."""
    best, limit = ev.best, ev.bound.ceiling_gbps
    if not ev.multi or best is None or limit is None or ev.run.mnnvl or _in_domain(exp):
        return []
    if best <= limit * LINE_RATE_NOISE:
        return []
    hint = (
        "a tree/NVLS algorithm? run all_reduce with NCCL_ALGO=Ring"
        if not ev.run.in_network
        else "in-network reduction was counted in the ceiling"
    )
    what = (
        f"the nodes' line rate {limit:g} GB/s"
        if ev.bound.ceiling_source == "line rate"
        else f"the ceiling {limit:g} GB/s ({ev.bound.ceiling_source})"
    )
    return _fail(
        f"best bus bandwidth {best:g} GB/s is above {what} by more than "
        f"{round((LINE_RATE_NOISE - 1) * 100)}%: not a measurement over the NICs ({hint})"
    )


def rule_no_threshold(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    if ev.bound.threshold_gbps is not None or _in_domain(exp):
        return []
    return _unsure(ev.bound.no_threshold or "no threshold: pass --stack (line rate) or --min-busbw")


def rule_below_threshold(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    """Judged on >= 2 nodes only: one node (one rank prints busbw 0) is INCONCLUSIVE."""
    threshold = ev.bound.threshold_gbps
    if threshold is None or ev.best is None or ev.best >= threshold or not ev.multi:
        return []
    if _in_domain(exp):
        return []
    return _fail(
        f"best bus bandwidth at >= 1 GiB is {ev.best:g} GB/s, below the threshold "
        f"{threshold:g} GB/s ({ev.bound.threshold_source})"
    )


def rule_no_ib_device(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    if not (exp.rdma and ev.multi and ev.run.no_ib_device):
        return []
    return _fail("a rank found no RDMA device ('NET/IB : No device found.')")


def _version(v: tuple[int, int, int]) -> str:
    return ".".join(str(n) for n in v)


def rule_nccl_version(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    """Multi-node NVLink needs NCCL 2.25.2 or later: read from the ranks' own lines."""
    if exp.nvlink is None:
        return []
    versions = ev.run.nccl_versions
    if not versions:
        return _unsure(
            "NCCL version not in the log (MNNVL needs 2.25.2 or later): rerun with NCCL_DEBUG=INFO"
        )
    old = sorted(v for v in versions if v < MNNVL_MIN_NCCL)
    if not old:
        return []
    return _fail(
        f"NCCL {', '.join(_version(v) for v in old)} is older than "
        f"{_version(MNNVL_MIN_NCCL)}, the first release multi-node NVLink works with"
    )


def rule_mnnvl_unproven(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    """Inside one domain NCCL must say it runs multi-node NVLink (mnnvl.cc's clique line, or
    MNNVL 1 on its comm line); MNNVL 0 is a failure, silence is not proof."""
    if not _in_domain(exp) or not ev.multi:
        return []
    if ev.run.mnnvl:
        return []
    if ev.run.mnnvl_off:
        return _fail(
            "NCCL runs without multi-node NVLink (its comm line says MNNVL 0): the trays talk "
            "over the network inside one NVLink domain"
        )
    return _unsure(
        "multi-node NVLink not proven: no 'MNNVL 1 cliqueId' or 'comm ... MNNVL' line "
        "(NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT prints them)"
    )


def rule_one_clique(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    """Inside one domain every rank is in one clique as large as the run."""
    cliques, nranks = ev.run.cliques, ev.run.nranks
    if not _in_domain(exp) or not cliques:
        return []
    if len(cliques) > 1:
        shown = ", ".join(f"{k} ({v} ranks)" for k, v in sorted(cliques.items()))
        return _fail(f"the run spans {len(cliques)} NVLink cliques ({shown}), not one domain")
    ((clique, size),) = cliques.items()
    if nranks is not None and size < nranks:
        return _fail(
            f"clique {clique} holds {size} of the run's {nranks} ranks: the rest are outside "
            "its NVLink domain"
        )
    return []


def rule_net_inside_domain(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    if not _in_domain(exp) or not ev.run.inter_node:
        return []
    kinds = ", ".join(sorted({v.split("/")[1] if "/" in v else v for v in ev.run.inter_node}))
    return _fail(
        f"{len(ev.run.inter_node)} channels over NET ({kinds}) inside one NVLink domain: "
        "NCCL fell back to the network between trays of one rack"
    )


def rule_domain_bar(ev: Evidence, exp: NcclExpectation) -> list[Finding]:
    """Inside one domain: the best bus bandwidth at >= 8 GiB against the system's bar."""
    threshold = ev.bound.threshold_gbps
    if not _in_domain(exp) or exp.nvlink is None or not ev.run.rows or not ev.multi:
        return []
    if threshold is None:  # a kind the system's bar is not stated for
        return []
    bar = exp.nvlink
    large = [r.best for r in ev.run.rows if r.size >= NVLINK_BAR_BYTES and r.best is not None]
    if not large:
        return _unsure(
            f"no results at >= 8 GiB, the size the {bar.system} bar is stated at (run with -e 8G)"
        )
    best = max(large)
    if best >= threshold:
        return []
    return _fail(
        f"best bus bandwidth at >= 8 GiB is {best:g} GB/s, below the NVLink domain bar "
        f"{threshold:g} GB/s ({ev.bound.threshold_source})"
    )


RULES: tuple[Rule, ...] = (
    rule_test_failed,
    rule_killed,
    rule_malformed,
    rule_unfinished,
    rule_no_rows,
    rule_impossible_values,
    rule_out_of_bounds,
    rule_own_bandwidth_check,
    rule_wrong_elements,
    rule_nccl_warnings,
    rule_socket_fallback,
    rule_no_ib_device,
    rule_transport_unproven,
    rule_link_layer,
    rule_gdr_disabled,
    rule_staged_channels,
    rule_node_count,
    rule_no_large_sizes,
    rule_above_line_rate,
    rule_no_threshold,
    rule_below_threshold,
    rule_nccl_version,
    rule_mnnvl_unproven,
    rule_one_clique,
    rule_net_inside_domain,
    rule_domain_bar,
)
"""The verdict's rules, in the order their reasons are listed (failures before doubts)."""


def findings(ev: Evidence, exp: NcclExpectation, rules: Sequence[Rule] = RULES) -> list[Finding]:
    """Every rule's findings on the run, in rule order."""
    return [finding for rule in rules for finding in rule(ev, exp)]


def combine(found: Sequence[Finding]) -> tuple[Verdict, tuple[str, ...]]:
    """FAIL when any finding fails, else INCONCLUSIVE when any doubts, else PASS; the
    reasons list the failures first, then the doubts, each in rule order."""
    fail = [f.reason for f in found if f.verdict == Verdict.FAIL]
    unsure = [f.reason for f in found if f.verdict != Verdict.FAIL]
    verdict = Verdict.FAIL if fail else Verdict.INCONCLUSIVE if unsure else Verdict.PASS
    return verdict, tuple(fail + unsure)
