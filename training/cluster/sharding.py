"""Model parallelism on parameter servers: large variables split into shards over the ps tasks.

With two or more parameter servers, async training creates its variables under
``ParameterServerStrategy``'s ``variable_partitioner`` (``MinSizePartitioner``): a variable larger than
``ps_min_shard_bytes`` is split along its first axis into shards of at least that size, at most
``ps_max_shards`` of them (0: one per parameter server), placed round-robin, so each ps holds part of it; a
smaller one stays whole on one ps.
Mirrored (sync) and local training never shard.

:func:`check_shards` refuses, before any process starts, a run whose largest shard (an embedding table's
shard plus its optimizer accumulator) would exceed ``ps_max_shard_bytes``. :func:`ps_shares` and
:func:`worker_rates` word what the chief reports: each ps's bytes of variables, each worker's steps/s, as
progress events that ``jobs show`` and the training logs show (:func:`parse_cluster_event` reads them back).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from core.config import Settings
from core.errors import Invalid
from training.cluster.features import Preprocessing

MIB = 1 << 20
SHARES_PREFIX = "ps shares:"
RATES_PREFIX = "worker steps/s:"
SLOT_COPIES = 2  # a table shard and its Adagrad accumulator live on the same ps


@dataclass(frozen=True)
class ShardPlan:
    """How one embedding table is split: its shape, the number of shards and the largest one's bytes."""

    name: str
    rows: int
    dim: int
    shards: int

    @property
    def largest_bytes(self) -> int:
        """The largest shard with its accumulator (float32)."""
        return math.ceil(self.rows / self.shards) * self.dim * 4 * SLOT_COPIES


def shard_count(*, rows: int, row_bytes: int, ps: int, settings: Settings) -> int:
    """The shards ``MinSizePartitioner`` makes of a ``[rows, ...]`` variable on ``ps`` parameter servers."""
    if ps < 2:
        return 1
    most = settings.ps_max_shards or ps
    by_size = math.ceil(rows * row_bytes / settings.ps_min_shard_bytes)
    return max(1, min(most, by_size, rows))


def plan(prep: Preprocessing, *, ps: int, settings: Settings) -> list[ShardPlan]:
    """The split of every embedding table on ``ps`` parameter servers."""
    return [
        ShardPlan(
            e.name,
            e.buckets,
            e.dim,
            shard_count(rows=e.buckets, row_bytes=e.dim * 4, ps=ps, settings=settings),
        )
        for e in prep.embedded
    ]


def check_shards(*, prep: Preprocessing, ps: int, settings: Settings) -> list[ShardPlan]:
    """The plan; :class:`core.errors.Invalid` names a table whose shard exceeds ``ps_max_shard_bytes``."""
    plans = plan(prep, ps=ps, settings=settings)
    limit = settings.ps_max_shard_bytes
    for p in plans:
        if p.largest_bytes > limit:
            need = next(
                (n for n in range(ps + 1, 65) if ShardPlan(p.name, p.rows, p.dim, n).largest_bytes <= limit),
                None,
            )
            more = f"train with --ps {need} or more, " if need else ""
            raise Invalid(
                f"--ps {ps}: the embedding of {p.name!r} ([{p.rows}, {p.dim}] float32, with its optimizer "
                f"accumulator) splits into {p.shards} shard(s) of {p.largest_bytes / MIB:.1f} MiB, above "
                f"ps_max_shard_bytes ({limit / MIB:.1f} MiB) a parameter server may hold: {more}"
                f"give a smaller "
                f"--embed {p.name}:DIM, or raise DRIFTWARDEN_PS_MAX_SHARD_BYTES"
            )
    return plans


def partitioner(*, ps: int, settings: Settings) -> Any:
    """The ``variable_partitioner`` for ``ps`` parameter servers (None with one: nothing to split)."""
    if ps < 2:
        return None
    import tensorflow as tf

    return tf.distribute.experimental.partitioners.MinSizePartitioner(
        min_shard_bytes=settings.ps_min_shard_bytes, max_shards=settings.ps_max_shards or ps
    )


def _parts(variable: Any) -> list[Any]:
    if type(variable).__module__.startswith("keras"):  # a Keras variable wraps the TF one
        variable = variable.value
    parts = getattr(variable, "variables", None)
    return list(parts) if isinstance(parts, list | tuple) and parts else [variable]


_PS_DEVICE = re.compile(r"/job:ps/replica:\d+/task:(\d+)")


def ps_shares(variables: Iterable[Any], *, ps: int) -> dict[str, int]:
    """Bytes of ``variables`` each parameter server holds (``ps:i`` -> bytes), each shard where it lies."""
    shares = {f"ps:{i}": 0 for i in range(ps)}
    for variable in variables:
        for part in _parts(variable):
            found = _PS_DEVICE.search(str(getattr(part, "device", "")))
            if found is None:
                continue
            key = f"ps:{found.group(1)}"
            size = int(part.shape.num_elements() or 0) * part.dtype.size
            shares[key] = shares.get(key, 0) + size
    return shares


def placement_events(net: Any) -> list[str]:
    """One line per embedding table: where each shard lies and its shape (from the strategy's variables)."""
    lines = []
    for name, table in zip(getattr(net, "names", ()), getattr(net, "tables", ()), strict=True):
        where = []
        for part in _parts(table):
            found = _PS_DEVICE.search(str(getattr(part, "device", "")))
            where.append(f"{'ps:' + found.group(1) if found else part.device} {list(part.shape)}")
        lines.append(f"embedding {name}: {len(where)} shard(s): {', '.join(where)}")
    return lines


def shares_event(shares: Mapping[str, int]) -> str:
    """``ps shares: ps:0=123456 ps:1=123456`` (bytes)."""
    return SHARES_PREFIX + " " + " ".join(f"{k}={v}" for k, v in shares.items())


def worker_rates(steps: Mapping[str, int], seconds: float) -> dict[str, float]:
    """Steps per second of each worker over ``seconds``."""
    return {k: round(v / max(seconds, 1e-9), 2) for k, v in steps.items()}


def rates_event(rates: Mapping[str, float]) -> str:
    """``worker steps/s: worker:0=12.5 worker:1=11.9``."""
    return RATES_PREFIX + " " + " ".join(f"{k}={v:g}" for k, v in rates.items())


def parse_cluster_event(text: str) -> dict[str, Any] | None:
    """``{"ps_bytes": {...}}`` or ``{"worker_steps_per_s": {...}}`` from an event line; None for others."""
    for prefix, key, kind in (
        (SHARES_PREFIX, "ps_bytes", int),
        (RATES_PREFIX, "worker_steps_per_s", float),
    ):
        at = text.find(prefix)
        if at >= 0:
            pairs = (item.split("=", 1) for item in text[at + len(prefix) :].split() if "=" in item)
            return {key: {k: kind(v) for k, v in pairs}}
    return None


def describe(cluster: Mapping[str, Any]) -> str:
    """One line for ``jobs show``: each ps's share (MiB) and each worker's steps/s."""
    parts = []
    shares = cluster.get("ps_bytes") or {}
    if shares:
        parts.append("variables " + ", ".join(f"{k} {v / MIB:.2f} MiB" for k, v in shares.items()))
    rates = cluster.get("worker_steps_per_s") or {}
    if rates:
        parts.append("steps/s " + ", ".join(f"{k} {v:g}" for k, v in rates.items()))
    return "; ".join(parts)


class WorkerRates:
    """Each worker's steps per second between two calls, from the chief's ``[workers]`` step counter."""

    def __init__(self, counter: Any) -> None:
        self.counter = counter
        self.last = [int(v) for v in counter.numpy()]
        self.at = time.monotonic()

    def event(self) -> str:
        """:func:`rates_event` of the steps since the previous call."""
        now_steps, now = [int(v) for v in self.counter.numpy()], time.monotonic()
        steps = {f"worker:{i}": n - was for i, (n, was) in enumerate(zip(now_steps, self.last, strict=True))}
        seconds, self.last, self.at = now - self.at, now_steps, now
        return rates_event(worker_rates(steps, seconds))
