# SPDX-License-Identifier: Apache-2.0
"""The shares of a global batch among data-parallel replicas.

A global batch is `replicas` packed batches of at most `capacity` tokens each. Its samples are
dealt to the replicas so that their steps come out alike: first by each sample's attention work
(the unmasked pairs of its mask, every kind weighed by its layers), largest first to the
replica with the least work; then the split is judged by the cost model, each replica's share
planned and simulated, and samples move from the slowest replica to the fastest while its step
shrinks. Every rank runs the same deterministic steps on the same global batch, so all agree on
the shares without exchanging anything."""
from __future__ import annotations

import dataclasses
from typing import Callable, Sequence

Plan = object  # a dcp.Plan; typed loosely so that this module needs no binding


@dataclasses.dataclass
class Split:
    """Each replica's samples (positions into the global batch), with the plans and simulated
    steps of the shares when they were judged."""
    shares: list[list[int]]
    plans: list[Plan | None]
    steps: list[float]


def deal(works: Sequence[float], tokens: Sequence[int], replicas: int,
         capacity: int) -> list[list[int]] | None:
    """Largest work first, each sample to the replica with the least work that has room for its
    tokens (ties: the lower replica). None when some sample fits no replica."""
    order = sorted(range(len(works)), key=lambda i: (-works[i], -tokens[i], i))
    shares: list[list[int]] = [[] for _ in range(replicas)]
    load = [0.0] * replicas
    room = [capacity] * replicas
    for i in order:
        fits = [r for r in range(replicas) if room[r] >= tokens[i]]
        if not fits:
            return None
        r = min(fits, key=lambda r: (load[r], r))
        shares[r].append(i)
        load[r] += works[i]
        room[r] -= tokens[i]
    return [sorted(s) for s in shares]


def fill_empty(bins: list[list[int]], replicas: int) -> list[list[int]]:
    """`bins` padded to `replicas` shares, a share left empty taking one sample of the share with
    the most samples (needs at least `replicas` samples)."""
    shares = [list(b) for b in bins] + [[] for _ in range(replicas - len(bins))]
    for share in shares:
        if not share:
            donor = max(shares, key=len)
            share.append(donor.pop())
    return [sorted(s) for s in shares]


def split(works: Sequence[float], tokens: Sequence[int], bins: list[list[int]], replicas: int,
          capacity: int, judge: Callable[[list[list[int]]], list[tuple[Plan, float]]] | None,
          rounds: int) -> Split:
    """The shares of a global batch of len(works) samples (every replica gets one at least: the
    caller guarantees len(works) >= replicas). `bins` is the packing's own split, the fallback
    when dealing by work finds no room. judge(shares) plans shares (at once) and returns each one's
    (plan, simulated step); with it, up to `rounds` moves of one sample from the slowest replica to
    the fastest are tried, each kept only if the slower of the two new steps is below the old
    slowest."""
    shares = deal(works, tokens, replicas, capacity) or fill_empty(bins, replicas)
    if judge is None:
        return Split(shares, [None] * replicas, [0.0] * replicas)
    judged = judge(shares)
    plans = [p for p, _ in judged]
    steps = [t for _, t in judged]
    for _ in range(rounds):
        slow = max(range(replicas), key=lambda r: (steps[r], -r))
        fast = min(range(replicas), key=lambda r: (steps[r], r))
        if slow == fast or len(shares[slow]) < 2:
            break
        room = capacity - sum(tokens[i] for i in shares[fast])
        # The sample whose share of the slow replica's work is nearest half the gap.
        slow_work = sum(works[i] for i in shares[slow]) or 1.0
        gap = (steps[slow] - steps[fast]) / 2
        movable = [i for i in shares[slow] if tokens[i] <= room]
        if not movable:
            break
        pick = min(movable, key=lambda i: (abs(steps[slow] * works[i] / slow_work - gap), i))
        new_slow = [i for i in shares[slow] if i != pick]
        new_fast = sorted(shares[fast] + [pick])
        (slow_plan, slow_step), (fast_plan, fast_step) = judge([new_slow, new_fast])
        if max(slow_step, fast_step) >= steps[slow]:
            break
        shares[slow], plans[slow], steps[slow] = new_slow, slow_plan, slow_step
        shares[fast], plans[fast], steps[fast] = new_fast, fast_plan, fast_step
    return Split(shares, plans, steps)
