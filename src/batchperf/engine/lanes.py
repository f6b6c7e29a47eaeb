"""A dense copy of the running requests' K/V, one lane each, so a decode step reads its keys without a gather.

The KV pool (the model runner's ``kv``) holds each request's K/V in the blocks of its block table, wherever the
block manager put them; a decode step's attention used to gather every row's keys and values out of the pool
(``index_select`` through the block tables), a memory copy of the whole context per layer and step: on the CPU
peer cells 190-320 us a step, 20 ms of a 450 ms run (studies/continuous-step). :class:`KVLanes` keeps a second
copy laid out as ``[layers, 2 (K, V), lanes * lane_slots, kv_heads, head_dim]``: request ``r`` in lane ``l`` holds
its position ``i`` at slot ``l * lane_slots + i``. Every new token's K/V is written to the pool (which stays what
the KV accounting counts) and to its lane; when a step's decode rows sit in lanes ``0 .. B-1`` in order, their
keys are the view ``lanes[:B, :L]``, with no copy.

The lanes are bookkeeping over the scheduler's requests, which stay as they are: a request gets a lane when its
prompt starts (``num_cached == 0``) and keeps it while it runs; a lane is free again once its request is finished
or was preempted (its status is no longer RUNNING), and a preempted request recomputes from position 0 into a lane
again. A request whose lane does not hold its ``num_cached`` tokens (none was free, or it was admitted
before the lanes were made) has none, and a step with such a decode row reads the pool as before.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from batchperf.engine.request import Request, Status
from batchperf.engine.scheduler import Scheduled


class KVLanes:
    """``count`` lanes of K/V for the runner's ``layers``; a lane's length grows (by copying) as requests do."""

    def __init__(self, count: int, lane_slots: int, like: torch.Tensor) -> None:
        """``like``: the KV pool, ``[layers, 2, slots, kv_heads, head_dim]`` (its shape's tail, dtype, device)."""
        if count < 1:
            raise ValueError(f"count must be >= 1 lane, got {count}")
        self.count = count
        self._shape = (like.shape[0], like.shape[3], like.shape[4])  # layers, kv heads, head dim
        self._empty = like.new_empty(0)  # new lanes take its dtype and device (the pool itself is not held)
        self._owner: list[Request | None] = [None] * count  # the request in each lane
        self._epoch = [0] * count  # its preemptions when it got the lane
        self._filled = [0] * count  # leading positions of the lane that hold its K/V
        self._lane_of = _LaneOf()  # request id -> lane (-1: none)
        self.lane_slots = 0
        self.kv: torch.Tensor | None = None
        self.layers: list[torch.Tensor] = []  # per layer: K and V, [2, count * lane_slots + 1, KVH, D]
        self._grow(max(lane_slots, 1))

    @property
    def scratch_slot(self) -> int:
        """The slot a row without a lane writes to: one past the lanes (never read)."""
        return self.count * self.lane_slots

    def assign(self, items: Sequence[Scheduled]) -> list[int]:
        """Each item's lane, or -1: the lane holds the request's K/V up to its ``num_cached``, and will hold this
        step's new tokens too (the runner writes them). Lanes grow here where a request outgrows them.

        A step whose requests all hold their lanes (every decode step but one after a request joined or left)
        makes no call per request: comprehensions over the requests' fields, as the step's packing."""
        owner, epoch, filled = self._owner, self._epoch, self._filled
        requests = [item.request for item in items]
        if [o for o in owner if o is not None and o.status is not Status.RUNNING]:  # someone finished or was preempted
            self._compact({r.request_id for r in requests})
        # the same request, not preempted since, and its lane holds at least its cached positions (a step run
        # again writes the same positions again)
        lanes = [lane if lane >= 0 and owner[lane] is r and epoch[lane] == r.preemptions
                 and filled[lane] >= r.num_cached else -1
                 for r, lane in zip(requests, [self._lane_of[r.request_id] for r in requests])]
        if -1 in lanes:
            self._admit(requests, lanes)
        for item, lane in zip(items, lanes):
            if lane >= 0:
                filled[lane] = item.request.num_cached + item.num_new
        longest = max([filled[lane] for lane in lanes if lane >= 0], default=0)
        if longest > self.lane_slots:
            self._grow(max(longest, 2 * self.lane_slots))
        return lanes

    def _admit(self, requests: list[Request], lanes: list[int]) -> None:
        """Free the stale lanes among ``lanes`` (-1), then give a free lane to each prompt starting at position 0."""
        in_step = {r.request_id for r in requests}
        for i, (request, lane) in enumerate(zip(requests, lanes)):
            if lane >= 0:
                continue
            stale = self._lane_of[request.request_id]
            if stale >= 0:  # recomputed after a preemption, or out of step
                self._release(stale)
            if request.num_cached == 0:
                lanes[i] = lane = self._free(in_step)
                if lane >= 0:
                    self._release(lane)
                    self._owner[lane], self._epoch[lane] = request, request.preemptions
                    self._lane_of[request.request_id] = lane

    def _compact(self, in_step: set[int]) -> None:
        """Free the lanes of requests that left (finished, or preempted: no longer RUNNING, and not in this step),
        then move the highest lanes down into the gaps, so running requests keep to lanes 0 .. n-1 and a decode
        step of all of them is ``dense``. A move copies one lane's filled slots, all layers at once."""
        owner = self._owner
        for lane, request in enumerate(owner):
            if request is not None and request.status is not Status.RUNNING and request.request_id not in in_step:
                self._release(lane)
        while None in owner:
            low = owner.index(None)
            high = max([lane for lane, request in enumerate(owner) if request is not None], default=-1)
            if high < low:
                return
            n = self._filled[high]
            self.kv.narrow(2, low * self.lane_slots, n).copy_(self.kv.narrow(2, high * self.lane_slots, n))
            request, epoch = owner[high], self._epoch[high]
            self._release(high)
            owner[low], self._epoch[low], self._filled[low] = request, epoch, n
            self._lane_of[request.request_id] = low

    def _free(self, in_step: set[int]) -> int:
        for lane, owner in enumerate(self._owner):
            if owner is None or (owner.status is not Status.RUNNING and owner.request_id not in in_step):
                return lane
        return -1

    def _release(self, lane: int) -> None:
        owner = self._owner[lane]
        if owner is not None and self._lane_of[owner.request_id] == lane:
            del self._lane_of[owner.request_id]
        self._owner[lane] = None

    def _grow(self, lane_slots: int) -> None:
        layers, kv_heads, head_dim = self._shape
        kv = self._empty.new_zeros(layers, 2, self.count * lane_slots + 1, kv_heads, head_dim)  # + the scratch slot
        if self.kv is not None:  # the lanes' contents, each at the start of its longer lane
            old = self.kv.narrow(2, 0, self.count * self.lane_slots).view(layers, 2, self.count, self.lane_slots,
                                                                           kv_heads, head_dim)
            kv.narrow(2, 0, self.count * lane_slots).view(layers, 2, self.count, lane_slots, kv_heads,
                                                          head_dim).narrow(3, 0, self.lane_slots).copy_(old)
        self.kv, self.lane_slots = kv, lane_slots
        self.layers = list(kv)
        slot = kv_heads * head_dim
        self._strides = (lane_slots * slot, head_dim, slot, 1)  # [lane, kv head, position, dim]
        per_tensor = kv.shape[2] * slot  # one layer's K (or V): every slot, the scratch one too
        self._offsets = [(2 * layer * per_tensor, (2 * layer + 1) * per_tensor) for layer in range(layers)]

    def write(self, layer: int, kv: torch.Tensor, decode_slots: torch.Tensor,
              spans: Sequence[tuple[int, int, int]]) -> None:
        """Write a step's new K/V (``kv``, ``[2, rows, KVH, D]``, decode rows first) into ``layer``'s lanes: the
        decode rows one by one at ``decode_slots``, each prompt's rows as one copy (``spans``: first row, first
        lane slot, rows; a slice copy of a 256-token prompt took a third of an ``index_copy_`` of its rows)."""
        lanes, decode = self.layers[layer], decode_slots.shape[0]
        if decode:
            lanes.index_copy_(1, decode_slots, kv if kv.shape[1] == decode else kv.narrow(1, 0, decode))
        for row, slot, n in spans:
            lanes.narrow(1, slot, n).copy_(kv.narrow(1, row, n))

    def keys_values(self, layer: int, lanes: int, length: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Lanes ``0 .. lanes-1``'s first ``length`` keys and values in ``layer``, ``[lanes, KVH, length, D]`` each:
        views (one op each), as SDPA reads them."""
        _, _, _, kv_heads, head_dim = self.kv.shape
        size = (lanes, kv_heads, length, head_dim)
        k, v = self._offsets[layer]
        return self.kv.as_strided(size, self._strides, k), self.kv.as_strided(size, self._strides, v)


class _LaneOf(dict[int, int]):
    """Request id -> lane; -1 for a request without one (a subscript, not ``get``: no call on the decode path)."""

    def __missing__(self, request_id: int) -> int:
        return -1
