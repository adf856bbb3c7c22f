"""Point-to-point transfers between pipeline stages, with every wait bounded and explained (M046, M053).

What crosses a boundary: forward sends the stage's output activation ``[micro_batch, seq, hidden]``
to the next stage's rank; backward sends the gradient of that activation back.  Shapes are known in
advance (an optional shape message goes first for variable shapes).

Three rules keep this correct on every schedule, including interleaved with pp = 2, where both
directions join the same two ranks:

1. **One channel per direction.**  Each ordered pair (src -> dst) gets its own 2-rank process
   group.  On NCCL, ops of one communicator run in order on one stream, so a send queued before a
   receive to the same peer could wait on a peer doing the same -- separate channels cannot.
2. **Receive in the sender's order.**  Every rank knows the whole schedule, so it knows the exact
   sequence of messages each neighbour will send it (:func:`~pipeline_kit.schedules.messages.message_plan`,
   the kit's one message rule).  Receives are posted in that order -- all of a step's at its start
   when buffers live in host memory (:meth:`P2P.post_ahead`), else up to the one the next op
   needs.  On gloo each message also carries its sequence number as tag, so a skipped message is
   reported as itself, not as the one after it.  On NCCL the order alone pairs them, as in Megatron
   (whose ``p2p_communication.py`` passes no tag): torch documents that ``tag`` is not supported with
   NCCL (the docstrings of ``send``, ``recv``, ``isend`` and ``irecv``), so none is passed there.
3. **Buffers live until delivered.**  A gloo send completes only when the receiver posts the
   matching receive, and its ``Work`` cannot be polled; a helper thread waits on each send so the
   sender never blocks, and drops the buffer the moment it is delivered.

Every wait has a deadline (``timeout_s``).  When it passes, :class:`P2PTimeout` names the rank,
peer, microbatch, chunk, direction, expected shape and how many messages went each way -- on either
backend; on NCCL it adds that the missing message may be an earlier one on the link.
"""

from __future__ import annotations

import datetime
import queue
import threading
import time

import torch
import torch.distributed as dist

from ..schedules import Schedule
from ..schedules.messages import Message, message_plan
from ..trace import wait_record

__all__ = ["P2P", "P2PTimeout", "Message", "message_plan", "measure_latency"]  # Message, message_plan: re-exported


class P2PTimeout(RuntimeError):
    """A P2P wait passed its deadline; the message says who waited for what."""


class _Deliveries(threading.Thread):
    """Waits on sends in the background and releases each buffer once the receiver has it."""

    def __init__(self, wait_fn):
        super().__init__(daemon=True, name="p2p-sends")
        self.wait_fn = wait_fn
        self.items: queue.Queue = queue.Queue()
        self.outstanding = 0
        self.lock = threading.Condition()
        self.error: BaseException | None = None
        self.start()

    def add(self, work, keepalive, describe) -> None:
        with self.lock:
            self.outstanding += 1
        self.items.put((work, keepalive, describe))

    def run(self) -> None:
        while True:
            work, keepalive, describe = self.items.get()
            try:
                self.wait_fn(work, describe)
            except BaseException as exc:  # noqa: BLE001 - reported to the main thread, which ends the run
                self.error = self.error or exc
            del work, keepalive  # the Work holds the tensor too: release both now, not at the next send
            with self.lock:
                self.outstanding -= 1
                self.lock.notify_all()

    def drain(self, timeout_s: float) -> None:
        with self.lock:
            self.lock.wait_for(lambda: self.outstanding == 0 or self.error is not None, timeout=timeout_s + 5)


class P2P:
    """Sends and receives of one rank, for a fixed schedule (one instance per run)."""

    def __init__(self, schedule: Schedule, rank: int, device: torch.device, shape: tuple[int, ...],
                 dtype: torch.dtype = torch.float32, timeout_s: float = 60.0, verbose: bool = False,
                 send_shapes: bool = False, via_host: bool = False):
        self.schedule, self.rank, self.pp, self.placement = schedule, rank, schedule.pp, schedule.placement
        self.rank_of = [schedule.rank_of(s) for s in range(schedule.stages)]
        self.device, self.shape, self.dtype = device, tuple(shape), dtype
        self.timeout_s, self.verbose = timeout_s, verbose
        self.send_shapes, self.via_host = send_shapes, via_host
        self.nccl = dist.get_backend() == "nccl" and not via_host
        self.tagged = not self.nccl  # gloo matches a receive to its send by tag; torch: not with NCCL
        # post a whole step's receives at its start: only where buffers are host memory (see post_ahead)
        self.receive_early = not self.nccl and not send_shapes
        self.plan = message_plan(schedule)
        # Every rank creates every channel's group, in the same order (new_group is collective).
        self.groups = {ch: dist.new_group(list(ch)) for ch in sorted(self.plan) if ch[0] != ch[1]}
        self.tags = {ch: {msg: i for i, msg in enumerate(msgs)} for ch, msgs in self.plan.items()}
        self.local: dict[Message, torch.Tensor] = {}  # src and dst stage on this rank (pp = 1, a V's turn)
        self.sent: dict[int, int] = {}
        self.received: dict[int, int] = {}
        self._wait_log: list | None = None
        self._t0 = 0.0
        self._deliveries = _Deliveries(self._wait)
        self._reset_receives()

    # -- sending -------------------------------------------------------------------------------
    def send(self, tensor: torch.Tensor, msg: Message) -> None:
        """Post a non-blocking send of ``tensor``; returns at once."""
        dst = self.rank_of[msg.dst_stage]
        self._raise_pending_error()
        if dst == self.rank:
            self.local[msg] = tensor.detach()
            return
        ch = (self.rank, dst)
        tag = self.tags[ch][msg]
        payload = tensor.detach()  # a second reference to the storage: deallocating the output keeps it alive
        if self.via_host:
            payload = payload.cpu()
        self._log(f"send {msg.direction:<8} mb={msg.microbatch} stage {msg.src_stage}->{msg.dst_stage} to rank {dst} "
                  f"shape={tuple(payload.shape)} " + (f"tag={tag}" if self.tagged else f"#{tag} (NCCL: by order)"))
        group = self.groups[ch]
        if self.send_shapes:
            meta = torch.tensor([payload.dim(), *payload.shape, *[0] * (4 - payload.dim())], dtype=torch.int64)
            meta = meta.to(payload.device)
            self._deliveries.add(self._post(dist.isend, meta, dst, group, 2 * tag), meta,
                                 lambda: self._send_desc(msg, dst, "shape message of the "))
            tag = 2 * tag + 1
        work = self._post(dist.isend, payload, dst, group, tag)
        self.sent[dst] = self.sent.get(dst, 0) + 1
        self._deliveries.add(work, payload, lambda: self._send_desc(msg, dst))

    # -- receiving -----------------------------------------------------------------------------
    def recv(self, msg: Message) -> torch.Tensor:
        """Return the tensor of ``msg``, waiting at most ``timeout_s`` for it."""
        src = self.rank_of[msg.src_stage]
        self._raise_pending_error()
        if src == self.rank:
            return self.local.pop(msg)
        ch = (src, self.rank)
        self._post_up_to(ch, msg)
        work, buf = self._pending[ch].pop(msg)
        started = time.perf_counter()
        self._wait(work, lambda: self._recv_desc(msg, src))
        if self._wait_log is not None:
            self._wait_log.append(wait_record(self.rank, src, msg.direction, msg.microbatch,
                                              self.schedule.chunk_of(msg.dst_stage), msg.dst_stage,
                                              started - self._t0, time.perf_counter() - self._t0))
        self.received[src] = self.received.get(src, 0) + 1
        self._log(f"recv {msg.direction:<8} mb={msg.microbatch} stage {msg.src_stage}->{msg.dst_stage} from rank {src} "
                  f"shape={tuple(buf.shape)}")
        return buf.to(self.device) if self.via_host else buf

    def prefetch(self, msg: Message | None) -> None:
        """Post the receive of ``msg`` now (and, first, of every earlier message on its channel) without
        waiting, so the transfer overlaps the compute that comes before it is needed.  With shape
        messages there is no prefetch: a receive cannot be posted before its shape has arrived."""
        if msg is None or self.rank_of[msg.src_stage] == self.rank or self.send_shapes:
            return
        self._post_up_to((self.rank_of[msg.src_stage], self.rank), msg)

    def post_ahead(self, msgs) -> None:
        """At a step's start, post the receive of every message in ``msgs`` (None: no message) at once.

        Why: a gloo send leaves only once the receiver has posted its receive.  The receiver's notice
        crosses the socket, then the data does, and each crossing waits for a gloo thread on one side
        to be scheduled -- milliseconds when ranks share cores.  Posted just in time, that round trip
        lies on the pipeline's critical path; posted at the step's start, every message flows the
        moment it is sent.  The price is that every receive buffer of the step exists from its start:
        cheap in host memory, not on a GPU, whose memory the simulator's peaks are compared with --
        so with NCCL (and with shape messages, whose sizes are not known yet) receives stay lazy:
        :meth:`prefetch` posts each one a single op ahead.
        """
        if self.receive_early:
            for msg in msgs:
                self.prefetch(msg)

    def _post_up_to(self, ch, msg: Message) -> None:
        msgs, todo = self.plan[ch], self._pending[ch]
        while msg not in todo:  # post receives in the sender's order up to this one
            nxt = msgs[self._posted[ch]]
            self._posted[ch] += 1
            todo[nxt] = self._post_recv(ch, nxt)

    def _post_recv(self, ch, msg: Message):
        tag, group = self.tags[ch][msg], self.groups[ch]
        where = torch.device("cpu") if self.via_host else self.device
        shape = self.shape
        if self.send_shapes:
            meta = torch.zeros(5, dtype=torch.int64, device=where)
            self._wait(self._post(dist.irecv, meta, ch[0], group, 2 * tag),
                       lambda: self._recv_desc(msg, ch[0], "shape message of the "))
            ndim = int(meta[0])
            shape = tuple(int(d) for d in meta[1:1 + ndim])
            tag = 2 * tag + 1
        buf = torch.empty(shape, dtype=self.dtype, device=where)
        return self._post(dist.irecv, buf, ch[0], group, tag), buf

    def _post(self, op, tensor: torch.Tensor, peer: int, group, seq: int):
        """Post ``op`` (``dist.isend`` or ``dist.irecv``) on a channel; ``seq``, the transfer's position on its
        channel, goes as the tag on gloo only (see rule 2 of the module docstring): on NCCL the channel's order is
        what pairs a receive with its send, and no tag is passed."""
        if self.tagged:
            return op(tensor, peer, group=group, tag=seq)
        return op(tensor, peer, group=group)

    # -- step boundaries ----------------------------------------------------------------------
    def waits_since(self, t0: float, log: list) -> None:
        """Record every receive wait of this step into ``log``, in seconds since ``t0``."""
        self._t0, self._wait_log = t0, log

    def finish_step(self) -> None:
        """Wait until every send of the step is delivered; reset per-step receive state."""
        self._deliveries.drain(self.timeout_s)
        self._raise_pending_error()
        if self._deliveries.outstanding:
            raise P2PTimeout(f"rank {self.rank}: {self._deliveries.outstanding} send(s) still undelivered "
                             f"{self.timeout_s:g} s after the step ended")
        self._reset_receives()

    def _reset_receives(self) -> None:
        self._posted = {ch: 0 for ch in self.plan if ch[1] == self.rank}
        self._pending: dict = {ch: {} for ch in self.plan if ch[1] == self.rank}

    # -- waiting, with a deadline ----------------------------------------------------------------
    def _wait(self, work, describe) -> None:
        began = time.perf_counter() - self._t0

        def describe_at() -> str:
            return f"{describe()} (the wait began {began:.3f} s into the step)"

        deadline = time.monotonic() + self.timeout_s
        if self.nccl:  # an NCCL wait would only order streams; poll for completion on the CPU
            while not work.is_completed():
                if time.monotonic() > deadline:
                    raise P2PTimeout(describe_at())
                time.sleep(0.0002)
            work.wait()
            return
        try:
            work.wait(timeout=datetime.timedelta(seconds=self.timeout_s))
        except RuntimeError as exc:
            if "imed out" in str(exc) or time.monotonic() >= deadline - 0.05:
                raise P2PTimeout(describe_at()) from None
            raise

    def _raise_pending_error(self) -> None:
        if self._deliveries.error is not None:
            raise self._deliveries.error

    def _counts(self, peer: int) -> str:
        return (f"messages with rank {peer} so far: {self.received.get(peer, 0)} received, "
                f"{self.sent.get(peer, 0)} sent")

    def _recv_desc(self, msg: Message, src: int, prefix: str = "") -> str:
        return (f"rank {self.rank} timed out after {self.timeout_s:g} s waiting to receive the {prefix}"
                f"{msg.what(self.pp, self.placement)} from rank {src}; expected shape {self.shape} "
                f"{str(self.dtype).replace('torch.', '')}; "
                f"{self._counts(src)}"
                + ("" if self.tagged else "; NCCL pairs the messages of a link by order alone, so the missing "
                   "message may be an earlier one on this link, whose successors filled the buffers before this "
                   "one (compare the counts on both ends)"))

    def _send_desc(self, msg: Message, dst: int, prefix: str = "") -> str:
        return (f"rank {self.rank} timed out after {self.timeout_s:g} s waiting for rank {dst} to receive the "
                f"{prefix}{msg.what(self.pp, self.placement)}; shape {self.shape}; {self._counts(dst)}")

    def _log(self, text: str) -> None:
        if self.verbose:
            print(f"[rank {self.rank}] {text}", flush=True)


def measure_latency(p2p: P2P, rounds: int = 20) -> float:
    """One-way time of one boundary tensor from rank 0 to rank 1 and back, halved, in seconds.

    It uses the runtime's own path -- non-blocking sends and receives on the pipeline's channels --
    so the figure includes what each message really costs (posting, waking the receiver), which
    is what the simulator needs to predict a real run.  Every rank returns the same value.
    """
    result = torch.zeros(1, dtype=torch.float64, device=p2p.device if p2p.nccl else "cpu")
    world = dist.get_world_size()
    if world > 1 and p2p.rank in (0, 1):
        me, peer = p2p.rank, 1 - p2p.rank
        out_group, in_group = p2p.groups.get((me, peer)), p2p.groups.get((peer, me))
        where = torch.device("cpu") if p2p.via_host else p2p.device
        buf = torch.zeros(p2p.shape, dtype=p2p.dtype, device=where)
        sends = []
        for i in range(rounds + 2):
            if i == 2:
                t0 = time.perf_counter()  # after two warm-up rounds
            tag = 1_000_000 + i
            if me == 0:
                sends.append(p2p._post(dist.isend, buf, peer, out_group, tag))
                p2p._wait(p2p._post(dist.irecv, buf, peer, in_group, tag),
                          lambda: "latency probe: no reply from rank 1")
            else:
                p2p._wait(p2p._post(dist.irecv, buf, peer, in_group, tag),
                          lambda: "latency probe: nothing from rank 0")
                sends.append(p2p._post(dist.isend, buf, peer, out_group, tag))
        result[0] = (time.perf_counter() - t0) / (2 * rounds)
        for work in sends:
            p2p._wait(work, lambda: "latency probe: a send was never received")
    if world > 1:
        dist.broadcast(result, 0)
    return float(result[0])
