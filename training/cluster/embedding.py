"""Hashed embeddings of high-cardinality categorical features: which features, how many buckets, how wide
(no TensorFlow here; the tables and their lookup are :mod:`training.cluster.embedded_net`).

A categorical feature is embedded when ``train --embed FEATURE[:DIM]`` names it, or when it has more
distinct levels than the ``embed_min_levels`` setting (default 1,000). Its value is hashed
(``tf.strings.to_hash_bucket_fast``: FarmHash, stable across processes and versions) into ``buckets``
buckets (the ``embed_buckets`` setting, else the power of two above twice its levels), and the bucket's row
of a trainable ``[buckets, dim]`` table is the feature's part of the network's input.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from core.errors import Invalid

MAX_EMBED_DIM = 512
MAX_BUCKETS = 1 << 24


@dataclass(frozen=True)
class EmbeddedEncoding:
    """One embedded feature: its name, hash buckets and embedding width."""

    name: str
    buckets: int
    dim: int

    @property
    def table_bytes(self) -> int:
        """Bytes of its float32 table."""
        return self.buckets * self.dim * 4


def parse_embed(options: Iterable[str]) -> dict[str, int | None]:
    """``--embed`` values (``FEATURE`` or ``FEATURE:DIM``, repeatable or comma-separated) as name -> dim."""
    out: dict[str, int | None] = {}
    for option in options:
        for item in (part.strip() for part in option.split(",")):
            if not item:
                continue
            name, sep, dim_text = item.partition(":")
            if not name:
                raise Invalid(f"--embed {item!r}: give FEATURE or FEATURE:DIM (e.g. merchant_id:16)")
            dim: int | None = None
            if sep:
                if not dim_text.isdigit() or not 1 <= int(dim_text) <= MAX_EMBED_DIM:
                    raise Invalid(
                        f"--embed {item!r}: DIM must be a whole number from 1 to {MAX_EMBED_DIM} "
                        f"(e.g. {name}:16)"
                    )
                dim = int(dim_text)
            out[name] = dim
    return out


def default_buckets(levels: int) -> int:
    """The power of two above twice ``levels`` (at least 2)."""
    return 1 << max(1, (2 * max(1, levels)).bit_length())


def encoding(
    name: str, *, levels: int, dim: int | None, buckets: int | None, default_dim: int
) -> EmbeddedEncoding:
    """The embedding of a feature with ``levels`` distinct training values."""
    count = buckets or default_buckets(levels)
    if count > MAX_BUCKETS:
        raise Invalid(
            f"feature {name!r}: {count} hash buckets, more than {MAX_BUCKETS} (a bucket number travels as an "
            "exact float32): set DRIFTWARDEN_EMBED_BUCKETS lower"
        )
    return EmbeddedEncoding(name=name, buckets=count, dim=dim or default_dim)


def check_named(embed: Mapping[str, int | None], categorical: Iterable[str], numeric: Iterable[str]) -> None:
    """Every ``--embed`` name is a categorical feature (a numeric one or an unknown name is refused)."""
    cats, nums = set(categorical), set(numeric)
    for name in embed:
        if name in nums:
            raise Invalid(
                f"--embed {name}: {name!r} is a numeric feature; only categorical ones are embedded"
            )
        if name not in cats:
            known = ", ".join(sorted(cats)) or "none"
            raise Invalid(f"--embed {name}: not a categorical feature of the data (categorical: {known})")


def check_mode(mode: str, embedded: Iterable[str]) -> None:
    """Embedded features train in async (parameter servers) and local mode; sync all-reduce has no sparse
    update of a mirrored table here, so it is refused in one line."""
    names = list(embedded)
    if mode == "sync" and names:
        raise Invalid(
            f"--mode sync cannot train the embedding of {', '.join(map(repr, names))} (mirrored variables "
            "have no sparse update here): train with --mode async (sharded over --ps) or --mode local"
        )
