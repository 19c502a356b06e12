"""A simulated fleet for the bad-node sweep: nodes under leaves (and spines), faults of several
classes, and a job runner that answers as the fleet would. Seeded: the same seed gives the same
fleet and the same results. Shared by tests/verify/test_sweep_sim.py and benchmarks/sweep_sim.py.

Fault classes (what a link between two nodes carries):
- bad: every link of the node is slow (a dead NIC, a slow GPU).
- flaky: every job with the node fails with probability 1/3, independently (drawn from the
  seed, the round and the job's nodes).
- partner: the node is slow with a fixed half of the fleet (chosen per pair by the seed): a
  link between it and one of those partners is slow.
- uplink: a leaf's uplink is degraded: every link between one of its nodes and a node under
  another leaf is slow; links inside the leaf are not.
- rail: one rail of the node is bad: every job with it fails (all rails run together), and a
  one-rail job fails on that rail only.

A job is judged on its bus bandwidth, and the model of which links a job loads rests on how
NCCL moves the data of the acceptance tests (all_reduce with NCCL_ALGO=Ring, all_gather):
- NCCL's ring algorithm passes data around a ring of the ranks; between nodes, each channel's
  ring leaves a node for the next node in rank order and enters from the previous one, so in
  one ring a node sends to one peer and receives from one peer (two partners when there are
  three nodes or more). Several channels run at once, but across nodes they follow the same
  node order: they spread the traffic over NICs, not over more partners.
- A ring moves at the pace of its slowest hop: every chunk crosses every link, so the
  measured busbw is bounded by the slowest link the ring uses. A job fails when any link of
  any of its rings is slow, or when a member is bad, or (flaky) by its draw.
- A pair job (2 nodes) loads the one link between them.
- A group job of g nodes runs its tests once per rank order of
  :func:`gpufabric.verify.sweep.rounds.ring_orders` (ceil(g / 2) orders, Walecki's zig-zag
  rings), whose rings together load every one of the g (g - 1) / 2 links of the group; a
  single rank order would load only g of them. So a group holding a node slow with half of
  its partners fails unless all g - 1 of its group partners are among the good half:
  probability 1 - 2^-(g - 1).
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from gpufabric.verify.sweep import cost as sweep_cost
from gpufabric.verify.sweep import job as sweep_job
from gpufabric.verify.sweep.rounds import ring_orders

LEAF_LABEL = "topology.gpufabric.io/leaf"
SPINE_LABEL = "topology.gpufabric.io/spine"
RAILS = [f"rail{i}" for i in range(8)]
CLASSES = ("bad", "flaky", "partner", "uplink", "rail", "mixed")


@dataclass
class Fleet:
    nodes: list[str]
    topology: dict[str, tuple[str, ...]]
    levels: tuple[str, ...]
    bad: set[str] = field(default_factory=set)
    flaky: set[str] = field(default_factory=set)
    partner: set[str] = field(default_factory=set)
    uplinks: set[str] = field(default_factory=set)
    """Leaves (their names) whose uplink is degraded."""
    rail: dict[str, str] = field(default_factory=dict)
    seed: int = 0

    @property
    def faulty(self) -> set[str]:
        """Nodes that should be drained."""
        return self.bad | self.partner | set(self.rail)

    def leaf(self, node: str) -> str:
        return self.topology[node][-1]

    def _partner_slow(self, a: str, b: str) -> bool:
        x, y = sorted((a, b))
        return hashlib.sha256(f"{self.seed}:{x}:{y}".encode()).digest()[0] & 1 == 1

    def across_uplink(self, pair: tuple[str, str]) -> bool:
        a, b = pair
        return self.leaf(a) != self.leaf(b) and bool({self.leaf(a), self.leaf(b)} & self.uplinks)

    def _draw(self, *key: object) -> float:
        digest = hashlib.sha256(":".join(map(str, (self.seed, *key))).encode()).digest()
        return int.from_bytes(digest[:8], "big") / 2**64

    def slow_link(self, a: str, b: str) -> bool:
        """Whether the link between ``a`` and ``b`` is slow (flakiness aside)."""
        if {a, b} & (self.bad | set(self.rail)) or self.across_uplink((a, b)):
            return True
        return any(n in self.partner and self._partner_slow(a, b) for n in (a, b))

    def group_fails(self, members: tuple[str, ...], round_: int = 0) -> bool:
        """Whether a group job fails: a slow link in one of its rings (every link of the
        group, over its rank orders), or a flaky member's draw for this job."""
        rings = ring_orders(len(members))
        links = {
            frozenset((members[r[i]], members[r[(i + 1) % len(r)]]))
            for r in rings
            for i in range(len(r))
        }
        if any(self.slow_link(*sorted(link)) for link in links):
            return True
        key = ",".join(sorted(members))
        return any(self._draw(round_, key, n) < 1 / 3 for n in members if n in self.flaky)

    def run_group(self, members: tuple[str, ...], round_: int, index: int) -> Any:
        verdict = "FAIL" if self.group_fails(members, round_) else "PASS"
        return SimpleNamespace(verdict=verdict, runs=[])

    def fails(self, pair: tuple[str, str], round_: int = 0) -> bool:
        """Whether the pair's job in ``round_`` fails; a flaky member's draw depends only on
        the seed, the round and the pair, so a fleet answers the same whatever order its
        jobs run in."""
        a, b = pair
        if {a, b} & (self.bad | set(self.rail)):
            return True
        if self.across_uplink(pair):
            return True
        if any(n in self.partner and self._partner_slow(a, b) for n in pair):
            return True
        return any(self._draw(round_, *sorted(pair), n) < 1 / 3 for n in pair if n in self.flaky)

    def run_pair(self, pair: tuple[str, str], round_: int, index: int) -> Any:
        return SimpleNamespace(verdict="FAIL" if self.fails(pair, round_) else "PASS", runs=[])

    def run_rail_pair(self, pair: tuple[str, str], rail: str, round_: int, index: int) -> Any:
        failing = any(self.rail.get(n) == rail for n in pair)
        return SimpleNamespace(verdict="FAIL" if failing else "PASS", runs=[])


def screened(nodes: list[str]) -> list[sweep_job.Job]:
    """Five passing rounds over 16 ``nodes`` in which every node passes with five distinct
    partners (a record the judge's rules are then tested on top of)."""
    rounds = [
        list(zip(nodes[::2], nodes[1::2], strict=True)),
        list(zip(nodes[1::2], nodes[2::2] + nodes[:1], strict=True)),
        [(nodes[i], nodes[i + 4]) for i in (0, 1, 2, 3, 8, 9, 10, 11)],
        [(nodes[i], nodes[i + 8]) for i in range(8)],
        [(nodes[i], nodes[i + 6]) for i in range(6)]
        + [(nodes[12], nodes[14]), (nodes[13], nodes[15])],
    ]
    return [sweep_job.Job(r, pair, "PASS") for r, pairs in enumerate(rounds, 1) for pair in pairs]


def build(n: int, kind: str, k: int, seed: int) -> Fleet:
    """``n`` nodes, 16 to a leaf (fewer on small fleets), 4 leaves to a spine from 256 nodes;
    ``k`` faults of ``kind`` (uplink: ``k`` leaves, at most a quarter of them)."""
    rng = random.Random(seed)
    per_leaf = max(4, min(16, n // 4))
    nodes = [f"gpu-{i:05d}" for i in range(n)]
    spines = n >= 256
    topology = {
        node: ((f"spine-{i // per_leaf // 4:03d}",) if spines else ())
        + (f"leaf-{i // per_leaf:03d}",)
        for i, node in enumerate(nodes)
    }
    levels = (SPINE_LABEL, LEAF_LABEL) if spines else (LEAF_LABEL,)
    fleet = Fleet(nodes, topology, levels, seed=seed)
    leaves = sorted({t[-1] for t in topology.values()})
    picked = rng.sample(nodes, min(n, k * 4))
    if kind in ("bad", "mixed"):
        fleet.bad = set(picked[:k])
    if kind in ("flaky", "mixed"):
        fleet.flaky = set(picked[k : 2 * k])
    if kind in ("partner", "mixed"):
        fleet.partner = set(picked[2 * k : 3 * k])
    if kind == "rail":
        fleet.rail = {node: rng.choice(RAILS) for node in picked[:k]}
    if kind in ("uplink", "mixed"):
        fleet.uplinks = set(rng.sample(leaves, max(1, min(k, len(leaves) // 4))))
    return fleet


@dataclass
class Score:
    false_drains: int
    """Healthy (or only flaky) nodes named to drain."""
    misses: int
    """Nodes to drain that were not named (bad, partner-dependent, bad rail) and degraded
    uplinks not named as path faults."""
    escapes: int
    """Nodes to drain that were reported GOOD (the misses a user would not see)."""
    flaky_reported: int
    flaky_good_after_failure: int
    """Flaky nodes reported GOOD although a job with a healthy partner failed."""
    false_paths: int
    unknown: int
    rounds: int
    jobs: int
    waves: dict[int, int]
    """Concurrency -> waves of jobs (rounds of ``concurrency`` jobs at a time)."""
    seconds: dict[int, float]
    """Concurrency -> wall time: each wave takes as long as its jobs (see :func:`job_seconds`)."""


PAIR_S = 90.0
"""A two-node acceptance job from submission to its judged log (both tests, one rank order)."""
RUN_S = 15.0
"""One more nccl-tests run (mpirun start, NCCL init, 1-8 GiB) in a job: a group job of g
nodes runs both tests once per rank order of ring_orders(g)."""


def job_seconds(size: int, pair_s: float = PAIR_S, run_s: float = RUN_S) -> float:
    """How long a job of ``size`` nodes takes: a pair's time, plus two test runs for every
    rank order past the first (the planner's :class:`gpufabric.verify.sweep.cost.Cost`)."""
    return sweep_cost.Cost(pair_s, run_s).seconds(size)


def score(
    fleet: Fleet,
    report: Any,
    concurrencies: tuple[int, ...] = (1, 8),
    pair_s: float = PAIR_S,
    run_s: float = RUN_S,
) -> Score:
    drained = set(report.bad)
    found_leaves = {p.switch for p in report.paths if p.level == LEAF_LABEL}
    healthy = set(fleet.nodes) - fleet.faulty - fleet.flaky
    failed_with_healthy = {
        n
        for job in report.jobs
        if job.verdict == "FAIL"
        for n in job.nodes
        if n in fleet.flaky
        and (set(job.nodes) - {n}) <= healthy
        and not any(fleet.across_uplink((a, b)) for a in job.nodes for b in job.nodes)
    }
    waves = {c: _waves(report.jobs, c) for c in concurrencies}
    seconds = {c: _waves(report.jobs, c, pair_s, run_s) for c in concurrencies}
    rail_jobs = sum(len(report.nodes[n].rails) for n in report.bad)
    for c in concurrencies:  # one-rail jobs: each node one at a time (rail_rounds at 8)
        waves[c] += rail_jobs if c == 1 else report.rail_rounds
        seconds[c] += (rail_jobs if c == 1 else report.rail_rounds) * pair_s
    return Score(
        false_drains=len(drained - fleet.faulty - fleet.flaky),
        misses=len(fleet.faulty - drained) + len(fleet.uplinks - found_leaves),
        escapes=sum(1 for n in fleet.faulty if report.nodes[n].verdict == "GOOD"),
        flaky_reported=sum(1 for n in fleet.flaky if report.nodes[n].verdict == "FLAKY"),
        flaky_good_after_failure=sum(
            1 for n in failed_with_healthy if report.nodes[n].verdict == "GOOD"
        ),
        false_paths=len(found_leaves - fleet.uplinks)
        + sum(1 for p in report.paths if p.level != LEAF_LABEL),
        unknown=len(report.unknown),
        rounds=report.rounds + report.rail_rounds,
        jobs=len(report.jobs),
        waves=waves,
        seconds=seconds,
    )


def _waves(jobs: Any, concurrency: int, pair_s: float = 0.0, run_s: float = 0.0) -> Any:
    """Waves of jobs when the quota admits ``concurrency`` two-node jobs at once (2 x
    ``concurrency`` nodes), each round's jobs admitted as the sweep's runner admits them
    (:func:`gpufabric.verify.sweep.cost.round_seconds`): with ``pair_s``, the seconds those
    rounds take (a job of g nodes :func:`job_seconds`), else the rounds' length in jobs one
    after another."""
    rounds: dict[int, list[int]] = {}
    for job in jobs:
        rounds.setdefault(job.round, []).append(len(job.nodes))
    cost = sweep_cost.Cost(pair_s, run_s).seconds if pair_s else (lambda size: 1.0)
    total = sum(sweep_cost.round_seconds(sizes, 2 * concurrency, cost) for sizes in rounds.values())
    return total if pair_s else int(total)


# ------------------------------------------------------- the cluster path: an MPI Operator

STANDIN = "@@gpufabric-standin"
"""The line the stand-in mpirun prints in place of nccl-tests' output; the operator expands
it into the output nccl-tests would print for the hosts it ran on, in rank order."""

MPIRUN = f"""#!/bin/bash
# stand-in mpirun: prints {STANDIN}, the program, -np, the NCCL_ALGO it exported and the
# hosts of the hostfile mpirun would read (OMPI_MCA_orte_default_hostfile), in rank order
hostfile=${{OMPI_MCA_orte_default_hostfile:?no hostfile}}
np="" prev="" test="" algo=default
for arg in "$@"; do
  [ "$prev" = "-np" ] && np=$arg
  case $arg in *_perf_mpi) test=$arg ;; NCCL_ALGO=*) algo=${{arg#NCCL_ALGO=}} ;; esac
  prev=$arg
done
printf '%s %s np=%s algo=%s' '{STANDIN}' "$test" "$np" "$algo"
while read -r host slots; do printf ' %s:%s' "$host" "${{slots#slots=}}"; done < "$hostfile"
printf '\\n'
"""


@dataclass
class Run:
    """One mpirun the stand-in saw: its job, test, NCCL_ALGO, ranks and nodes in rank order."""

    job: str
    test: str
    algo: str
    np: int
    slots: tuple[int, ...]
    nodes: tuple[str, ...]


@dataclass
class MPIOperator:
    """Plays the MPI Operator (and a scheduler) for the sweep's MPIJobs in a FakeKube: each
    pinned Worker lands on one of its nodes (in an order of its own, not the hostfile's),
    the launcher's script runs under bash with the operator's hostfile (``<job>-worker-<i>
    .<job>.<ns>.svc slots=<slotsPerWorker>``) over a stand-in mpirun, and each run's output
    is nccl-tests' for its nodes in rank order: the bus bandwidth of its slowest ring link
    (``link(a, b)`` GB/s; a ring of two nodes is their one link; a one-rail job: that rail's
    HCA and its share of the link). The job ends as the
    launcher's exit status says. ``cut(job)``: order markers to keep in that job's log (the
    rest is lost, as when the launcher is killed); ``hold(job)``: the job never ends."""

    workdir: Path
    link: Callable[[str, str], float]
    layer: str = "RoCE"
    hcas: int = 2
    cut: Callable[[str], int | None] = lambda _job: None
    hold: Callable[[str], bool] = lambda _job: False
    log: Callable[[str, tuple[str, ...], float], Any] | None = None
    """The nccl-tests log of a run (test, nodes in rank order, busbw), a Log of
    tests/nccllogs.py or a subclass (NVL72 trays: tests/ncclmnnvl.py), for runs on all
    rails; None: nccllogs.Log over ``layer`` and ``hcas``."""
    runs: list[Run] = field(default_factory=list)
    jobs: list[dict[str, Any]] = field(default_factory=list)

    def install(self, fake: Any) -> MPIOperator:
        bindir = self.workdir / "bin"
        bindir.mkdir(parents=True, exist_ok=True)
        (bindir / "mpirun").write_text(MPIRUN)
        (bindir / "mpirun").chmod(0o755)
        fake.on_create.append(self.on_create)
        return self

    def on_create(self, fake: Any, obj: dict[str, Any]) -> None:
        if obj.get("kind") != "MPIJob":
            return
        self.jobs.append(obj)
        ns, name = obj["metadata"]["namespace"], obj["metadata"]["name"]
        workers = _pinned_nodes(obj)
        where = sorted(workers, key=lambda n: hashlib.sha256(f"{name}/{n}".encode()).digest())
        hosts = {}
        for i, node in enumerate(where):
            pod = f"{name}-worker-{i}"
            hosts[pod] = node
            fake.add(_pod(ns, pod, name, "worker", node))
        launcher = _pod(ns, f"{name}-launcher", name, "launcher", None)
        fake.add(launcher)
        if self.hold(name):
            return
        log, rc = self._launch(obj, hosts)
        keep = self.cut(name)
        if keep is not None:
            log = _cut(log, keep)
        fake.logs[f"/api/v1/namespaces/{ns}/pods/{name}-launcher"] = log
        state = "Succeeded" if rc == 0 else "Failed"
        obj["status"] = {"conditions": [{"type": state, "status": "True", "message": f"rc {rc}"}]}

    def _launch(self, job: dict[str, Any], hosts: dict[str, str]) -> tuple[str, int]:
        import subprocess

        from gpufabric.verify.nccl import job as nccl

        ns, name = job["metadata"]["namespace"], job["metadata"]["name"]
        slots = job["spec"]["slotsPerWorker"]
        where = self.workdir / name
        where.mkdir(exist_ok=True)
        hostfile = where / "hostfile"
        hostfile.write_text("".join(f"{p}.{name}.{ns}.svc slots={slots}\n" for p in hosts))
        spec = job["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
        script = spec["containers"][0]["command"][2]
        script = script.replace(nccl.ORDER_HOSTFILE, str(where / "order"))
        env = {
            "PATH": f"{self.workdir / 'bin'}:/usr/bin:/bin",
            "OMPI_MCA_orte_default_hostfile": str(hostfile),
        }
        done = subprocess.run(
            ["bash", "-c", script], env=env, capture_output=True, text=True, check=False
        )
        networks = json.loads(
            job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["metadata"]["annotations"][
                "k8s.v1.cni.cncf.io/networks"
            ]
        )
        rail = int(networks[0]["name"][-1]) if len(networks) == 1 else None
        out = [self._expand(name, line, hosts, rail) for line in done.stdout.splitlines()]
        return "\n".join(out) + "\n" + done.stderr, done.returncode

    def _expand(self, job: str, line: str, hosts: dict[str, str], rail: int | None) -> str:
        from nccllogs import Log, text

        if not line.startswith(STANDIN + " "):
            return line
        _, test, np, algo, *ranked = line.split()
        pods = [h.rsplit(":", 1) for h in ranked]
        nodes = tuple(hosts[h.split(".", 1)[0]] for h, _ in pods)
        run = Run(job, test, algo.split("=", 1)[1], int(np.split("=", 1)[1]),
                  tuple(int(s) for _, s in pods), nodes)  # fmt: skip
        self.runs.append(run)
        ring = zip(nodes, nodes[1:] + nodes[:1], strict=True)
        busbw = min(self.link(a, b) for a, b in ring if a != b)
        hcas, first = self.hcas, 0
        if rail is not None:  # a one-rail job: that rail's HCA, its share of the link
            busbw, hcas, first = busbw / self.hcas, 1, rail
        if self.log is not None and rail is None:
            return text(self.log(test, nodes, busbw)).rstrip("\n")
        log = Log(test=test, hosts=nodes, busbw=busbw, layer=self.layer, hcas=hcas, first_hca=first)
        return text(log).rstrip("\n")


def _pinned_nodes(job: dict[str, Any]) -> list[str]:
    worker = job["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
    term = worker["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return list(term["nodeSelectorTerms"][0]["matchExpressions"][0]["values"])


def _pod(ns: str, pod: str, job: str, role: str, node: str | None) -> dict[str, Any]:
    labels = {"training.kubeflow.org/job-name": job, "training.kubeflow.org/job-role": role}
    spec: dict[str, Any] = {"hostname": pod, "subdomain": job}
    if node is not None:
        spec["nodeName"] = node
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": pod, "namespace": ns, "labels": labels},
        "spec": spec,
    }


def _cut(log: str, keep: int) -> str:
    """The log up to (not including) order marker ``keep + 1``."""
    lines, seen = [], 0
    for line in log.splitlines():
        if line.startswith("==> gpufabric order "):
            seen += 1
            if seen > keep:
                break
        lines.append(line)
    return "\n".join(lines) + "\n"
