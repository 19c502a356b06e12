"""What the sweep's planner and judge read: a job of the sweep (two nodes, or a group of
them) with its result, and the topology its nodes sit in (each node's switch at each level,
widest first), read from the nodes' labels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Pair = tuple[str, str]
Topology = Mapping[str, tuple[str, ...]]
"""Node -> the switch it sits under at each level, widest first (empty: not known)."""


@dataclass(frozen=True)
class Job:
    round: int
    pair: Pair
    verdict: str
    """PASS, FAIL or INCONCLUSIVE (as nccl-report judges the pair's run)."""
    members: tuple[str, ...] = ()
    """A group job's nodes in rank order (``pair`` is then its first two); empty for a pair."""

    @property
    def nodes(self) -> tuple[str, ...]:
        """The nodes the job ran on."""
        return self.members or self.pair


def topology_of(nodes: Sequence[str], labels: Mapping[str, Mapping[str, str]], levels: Sequence[str]) -> dict[str, tuple[str, ...]]:  # fmt: skip
    """Each node's switches at ``levels`` (widest first); empty for every node when some node
    lacks a level (the sweep then pairs without topology and says so)."""
    topo: dict[str, tuple[str, ...]] = {}
    for node in nodes:
        values = tuple(labels.get(node, {}).get(level, "") for level in levels)
        if not levels or "" in values:
            return dict.fromkeys(nodes, ())
        topo[node] = values
    return topo
