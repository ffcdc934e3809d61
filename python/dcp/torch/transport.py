# SPDX-License-Identifier: Apache-2.0
"""Moves the executor's transfers with torch.distributed point-to-point operations.

The C++ executor calls start() once per Launch with (is_send, peer, buffer, offset, bytes) tuples
and wait() once per Wait; both run with the GIL held, everything else runs without it. A transfer
is a contiguous byte slice, at `offset`, of the tensor numbered `buffer` in the list the caller
set (set_buffers), so gloo and NCCL send and receive in place. The executor's buffers are those
of the running pass, numbered as the lowering places values (pass_buffers: its arena, and its
kept tensor, into which a kv value the forward pass keeps is received straight).
The n-th send from a to b matches the n-th receive on b from a (one tag), as the Program's
Launches promise. Gloo cannot send to the own rank: such transfers are copied here, matched in
the same order.

On CUDA the transfers run on a communication stream of the transport's own: a Launch's transfers
start once the compute stream has reached the Launch (an event recorded there), and a Wait makes
the compute stream, not the host, wait for them; so the kernels of stage s run while the
transfers of stage s + 1 move, in the order the Program gives. On the CPU there is nothing to
order: every call is synchronous."""
from __future__ import annotations

import collections
import contextlib
import datetime

import torch
import torch.distributed as dist

from dcp import _core

_BUFFERS = _core.LOWERING_SCHEMA["buffers"]


def pass_buffers(arena: torch.Tensor, kept: torch.Tensor) -> list[torch.Tensor]:
    """A pass's buffers for set_buffers, in the lowering's numbering: its arena and kept tensor."""
    named = {"arena": arena, "kept": kept}
    return [named[name] for name in sorted(_BUFFERS, key=_BUFFERS.get)]


class _Streams:
    """The communication stream and its ordering against the current (compute) stream on CUDA;
    no-ops on the CPU."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.comm = torch.cuda.Stream(device) if self.cuda else None

    @contextlib.contextmanager
    def issuing(self):
        """Runs the body on the communication stream, after what the compute stream holds."""
        if not self.cuda:
            yield
            return
        ready = torch.cuda.Event()
        ready.record()
        self.comm.wait_event(ready)
        with torch.cuda.stream(self.comm):
            yield

    def mark(self):
        """An event after what the communication stream holds (None on the CPU)."""
        if not self.cuda:
            return None
        done = torch.cuda.Event()
        done.record(self.comm)
        return done

    @staticmethod
    def join(event) -> None:
        """The compute stream waits for `event`."""
        if event is not None:
            torch.cuda.current_stream().wait_event(event)


class TorchTransport:
    def __init__(self, group, rank: int, size: int, timeout: datetime.timedelta):
        self.group = group
        self.rank = rank
        self.size = size
        self.timeout = timeout
        self.buffers: list[torch.Tensor] = []  # what a transfer's buffer number names
        self._streams = _Streams(torch.device("cpu"))
        self._pending: dict[int, tuple[list, list[int], object]] = {}
        self._next = 0
        self._self_sends: collections.deque = collections.deque()
        self._self_recvs: collections.deque = collections.deque()
        self.failed: str | None = None

    def prepare(self, device: torch.device) -> None:
        """Before transfers of tensors on `device` (every rank at once: the executor's prepare):
        its streams, and nothing pending."""
        if device != self._streams.device:
            self._streams = _Streams(device)
            if self._streams.cuda and self.group is not None:
                # torch.distributed: with NCCL, the group's first call must involve every rank,
                # which a Launch's batch_isend_irecv need not; prepare() runs on every rank.
                dist.barrier(group=self.group, device_ids=[device.index])
        self._pending.clear()
        self._self_sends.clear()
        self._self_recvs.clear()

    def set_buffers(self, buffers: list[torch.Tensor]) -> None:
        """The 1-D uint8 tensors that transfers slice, by number (empty between uses)."""
        self.buffers = buffers

    def start(self, ops: list) -> int:
        if self.failed is not None:
            raise RuntimeError(f"the transport failed earlier: {self.failed}")
        p2p = []
        peers = []
        for is_send, peer, buffer, offset, nbytes in ops:
            view = self.buffers[buffer][offset:offset + nbytes]
            if peer == self.rank:
                (self._self_sends if is_send else self._self_recvs).append(view)
                continue
            peers.append(peer)
            p2p.append(dist.P2POp(dist.isend if is_send else dist.irecv, view, group=self.group,
                                  group_peer=peer))
        with self._streams.issuing():
            while self._self_sends and self._self_recvs:
                self._self_recvs.popleft().copy_(self._self_sends.popleft())
            works = dist.batch_isend_irecv(p2p) if p2p else []
            done = self._streams.mark()
        group = self._next
        self._next += 1
        self._pending[group] = (works, peers, done)
        return group

    def wait(self, group: int) -> None:
        works, peers, done = self._pending.pop(group)
        try:
            for work in works:
                if self._streams.cuda:
                    # NCCL: the compute stream waits; the group's timeout is NCCL's watchdog's.
                    work.wait()
                elif work.wait(timeout=self.timeout) is False:
                    raise RuntimeError(f"timed out after {self.timeout.total_seconds():g} s")
            self._streams.join(done)
        except Exception as error:  # noqa: BLE001 - re-raised with the peers named
            self.failed = (f"transfers with ranks {sorted(set(peers))} failed: "
                           f"{type(error).__name__}: {str(error).splitlines()[0]}")
            raise RuntimeError(self.failed) from error
        if not self._pending and (self._self_sends or self._self_recvs):
            raise RuntimeError(f"{len(self._self_sends)} sends to and {len(self._self_recvs)} "
                               "receives from this rank itself found no partner")

    def barrier(self) -> None:
        dist.barrier(group=self.group)

    def abort(self, reason: str) -> None:
        # torch.distributed has no way to fail the other ranks at once: they see this rank's
        # connections close, or time out.
        self.failed = reason


class LocalTransport(TorchTransport):
    """One rank, no process group: every transfer is a copy to itself."""

    def __init__(self, timeout: datetime.timedelta):
        super().__init__(None, 0, 1, timeout)

    def barrier(self) -> None:
        pass
