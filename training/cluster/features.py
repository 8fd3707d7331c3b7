"""Preprocessing that travels inside the model: raw feature values in, one dense float32 matrix out.

The same TensorFlow function encodes the training data (in the workers' input pipelines) and the
serving requests (inside the exported SavedModel), so training and serving cannot disagree.

Numeric feature ``x``: missing (NaN) -> the training mean, then ``z = clip((x - mean) / std, -10, 10)``;
nullable features add a 0/1 missing indicator. Categorical feature: one-hot over the training
vocabulary; a missing ("") or unseen value encodes as all zeros. An embedded categorical feature
(:mod:`training.cluster.embedding`) encodes as its hash bucket (a float32 whole number), after every other
column; the network's wrapper (:mod:`training.cluster.embedded_net`) looks the bucket up in its table, so the
builder's input (``Preprocessing.width`` columns) holds the embedding vectors in those columns' place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from registry.schema import FeatureKind, ModelSchema
from training.cluster.embedding import EmbeddedEncoding, encoding

if TYPE_CHECKING:
    import tensorflow as tf

Z_CLIP = 10.0


@dataclass(frozen=True)
class NumericEncoding:
    name: str
    mean: float
    std: float
    missing_indicator: bool


@dataclass(frozen=True)
class CategoricalEncoding:
    name: str
    vocabulary: tuple[str, ...]


@dataclass(frozen=True)
class Preprocessing:
    """Fitted preprocessing constants, in schema order."""

    numeric: tuple[NumericEncoding, ...]
    categorical: tuple[CategoricalEncoding, ...]
    order: tuple[str, ...]
    embedded: tuple[EmbeddedEncoding, ...] = ()

    @property
    def dense_width(self) -> int:
        """Columns of the numeric and one-hot part."""
        return sum(1 + int(n.missing_indicator) for n in self.numeric) + sum(
            len(c.vocabulary) for c in self.categorical
        )

    @property
    def width(self) -> int:
        """Columns of the network's input (the builder's ``input_dim``): embeddings in place of buckets."""
        return self.dense_width + sum(e.dim for e in self.embedded)

    @property
    def encoded_width(self) -> int:
        """Columns of the encoded matrix :func:`encode` returns (one bucket column per embedded feature)."""
        return self.dense_width + len(self.embedded)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def fit_preprocessing(
    columns: Mapping[str, np.ndarray],
    schema: ModelSchema,
    *,
    embed: Mapping[str, int | None] | None = None,
    embed_dim: int = 8,
    embed_buckets: int | None = None,
) -> Preprocessing:
    """Fit means, spreads and vocabularies on the training columns; a categorical feature named in ``embed``
    (name -> dim or None) or of high cardinality (``spec.levels``) is embedded instead of one-hot encoded."""
    numeric, categorical, embedded = [], [], []
    embed = embed or {}
    for spec in schema.features:
        col = columns[spec.name]
        if spec.kind is FeatureKind.NUMERIC:
            values = col.astype(np.float64)
            present = values[~np.isnan(values)]
            mean = float(present.mean()) if present.size else 0.0
            std = float(present.std()) if present.size else 1.0
            numeric.append(NumericEncoding(spec.name, mean, std if std > 1e-12 else 1.0, spec.nullable))
        elif spec.levels or spec.name in embed:
            levels = spec.levels or len(spec.categories)
            dim = embed.get(spec.name)
            embedded.append(
                encoding(spec.name, levels=levels, dim=dim, buckets=embed_buckets, default_dim=embed_dim)
            )
        else:
            categorical.append(CategoricalEncoding(spec.name, spec.categories))
    return Preprocessing(tuple(numeric), tuple(categorical), tuple(schema.feature_names), tuple(embedded))


def encode(features: Mapping[str, tf.Tensor], prep: Preprocessing) -> tf.Tensor:
    """Encode a dict of raw 1-D tensors into a ``[batch, prep.encoded_width]`` float32 matrix."""
    import tensorflow as tf

    parts = []
    for num in prep.numeric:
        x = tf.cast(features[num.name], tf.float32)
        missing = tf.math.is_nan(x)
        z = (tf.where(missing, tf.constant(num.mean, tf.float32), x) - num.mean) / num.std
        parts.append(tf.clip_by_value(z, -Z_CLIP, Z_CLIP)[:, None])
        if num.missing_indicator:
            parts.append(tf.cast(missing, tf.float32)[:, None])
    for cat in prep.categorical:
        x = features[cat.name]
        vocab = tf.constant(list(cat.vocabulary), dtype=tf.string)
        parts.append(tf.cast(tf.equal(x[:, None], vocab[None, :]), tf.float32))
    for emb in prep.embedded:  # bucket numbers stay exact in float32 (below 2**24)
        bucket = tf.strings.to_hash_bucket_fast(features[emb.name], emb.buckets)
        parts.append(tf.cast(bucket, tf.float32)[:, None])
    return tf.concat(parts, axis=1)
