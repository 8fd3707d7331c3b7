"""Reading the lake's listing: a model's committed files of a time range, partitions pruned by date and hour,
each file checked to be Parquet with the layout's columns (:mod:`.layout`) before anything counts it.

Only the listing and the files' footers are read here (no rows): the rows are read where they are counted,
in Spark's executors (:mod:`monitors.spark`).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from core.errors import Invalid, Unavailable
from predictions.lake.files import lake_filesystem as filesystem_of
from predictions.lake.layout import FEATURES, LABELS, PREDICTIONS, SUFFIX, TABLES, hour_of

HOUR = timedelta(hours=1)

# the fixed columns a reader needs, and the Arrow types the layout gives them
PREDICTION_TYPES: dict[str, pa.DataType] = {
    "prediction_id": pa.string(),
    "model_version": pa.int64(),
    "logged_at": pa.timestamp("us", tz="UTC"),
    "status": pa.string(),
    "source": pa.string(),
    "output": pa.float64(),
}
LABEL_TYPES: dict[str, pa.DataType] = {
    "prediction_id": pa.string(),
    "label": pa.float64(),
    "received_at": pa.timestamp("us", tz="UTC"),
}


@dataclass(frozen=True)
class LakeFile:
    """One committed file: its path as the filesystem names it, its size in bytes and its partition's hour."""

    path: str
    size: int
    hour: datetime


def lake_filesystem(url: str) -> tuple[pafs.FileSystem, str]:
    """The filesystem and root path of a lake URL to read (:func:`predictions.lake.files.lake_filesystem`),
    once its root answers: a missing folder or a refused endpoint is ``Unavailable`` naming the URL."""
    fs, root = filesystem_of(url)
    try:
        info = fs.get_file_info(root)
    except (OSError, pa.ArrowException) as exc:
        raise Unavailable(f"the lake {url} cannot be read: {_one_line(exc)}") from None
    if info.type == pafs.FileType.NotFound and not url.startswith("s3://"):
        raise Unavailable(f"the lake {url} does not exist (setting lake_url)")
    if info.type == pafs.FileType.File:
        raise Invalid(f"the lake {url} is a file, not a folder (setting lake_url)")
    return fs, root


def list_files(
    *,
    fs: pafs.FileSystem,
    root: str,
    table: str,
    model_name: str,
    since: datetime | None = None,
    until: datetime | None = None,
) -> list[LakeFile]:
    """The committed files of ``table`` for ``model_name`` whose hour overlaps ``[since, until)``, oldest hour
    first (names starting with ``_`` or ``.``, the temporary ones, are skipped); only the partitions of that
    range are listed."""
    if table not in TABLES:
        raise ValueError(f"unknown lake table {table!r}")
    base = f"{root}/{table}/model={model_name}"
    low = hour_of(since) if since is not None else None
    out: list[LakeFile] = []
    for day in _folders(fs, base, "date"):
        try:
            date = datetime.strptime(day, "%Y-%m-%d").replace(tzinfo=UTC)
        except ValueError:
            continue
        if (low is not None and date + timedelta(days=1) <= low) or (until is not None and date >= until):
            continue  # the whole day lies outside the range: its hours are never listed
        for hh in _folders(fs, f"{base}/date={day}", "hour"):
            if not (hh.isdigit() and int(hh) < 24):
                continue
            hour = date + timedelta(hours=int(hh))
            if (low is not None and hour < low) or (until is not None and hour >= until):
                continue
            out += _committed(fs, f"{base}/date={day}/hour={hh}", hour)
    return sorted(out, key=lambda f: (f.hour, f.path))


def _folders(fs: pafs.FileSystem, path: str, key: str) -> list[str]:
    """The values of the ``key=value`` folders directly under ``path`` (none when it does not exist)."""
    try:
        infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    except (OSError, pa.ArrowException) as exc:
        raise Unavailable(f"the lake folder {path} cannot be listed: {_one_line(exc)}") from None
    prefix = f"{key}="
    names = [i.base_name for i in infos if i.type == pafs.FileType.Directory]
    return sorted(n.removeprefix(prefix) for n in names if n.startswith(prefix))


def _committed(fs: pafs.FileSystem, path: str, hour: datetime) -> list[LakeFile]:
    infos = fs.get_file_info(pafs.FileSelector(path, allow_not_found=True))
    return [
        LakeFile(path=i.path, size=int(i.size or 0), hour=hour)
        for i in infos
        if i.type == pafs.FileType.File and i.base_name.endswith(SUFFIX) and i.base_name[0] not in "_."
    ]


def check_file(
    *, fs: pafs.FileSystem, file: LakeFile, table: str, features: Mapping[str, str] | None = None
) -> pa.Schema:
    """The file's schema, once its footer shows the layout's columns of ``table`` with their types and, for
    predictions, a ``features`` struct whose fields ``features`` names have a kind that fits (``numeric``:
    float64 or an integer; ``categorical``: text, dictionary-encoded or not). Anything else is ``Invalid``
    naming the file and what is wrong."""
    try:
        with fs.open_input_file(file.path) as handle:
            schema = pq.read_schema(handle)
    except (OSError, pa.ArrowException) as exc:
        raise Invalid(f"the lake file {file.path} is not a readable Parquet file: {_one_line(exc)}") from None
    wanted = PREDICTION_TYPES if table == PREDICTIONS else LABEL_TYPES
    for name, kind in wanted.items():
        field = schema.field(name) if name in schema.names else None
        if field is None or not field.type.equals(kind):
            got = "missing" if field is None else str(field.type)
            raise Invalid(f"the lake file {file.path} has another schema: column {name} is {got}, not {kind}")
    if table == PREDICTIONS and features:
        _check_features(file, schema, features)
    return schema


def _check_features(file: LakeFile, schema: pa.Schema, features: Mapping[str, str]) -> None:
    struct = schema.field(FEATURES).type if FEATURES in schema.names else None
    if struct is None or not pa.types.is_struct(struct):
        raise Invalid(f"the lake file {file.path} has another schema: no {FEATURES} struct column")
    fields = {struct.field(i).name: struct.field(i).type for i in range(struct.num_fields)}
    missing = [name for name in features if name not in fields]
    if missing:
        raise Invalid(
            f"the lake file {file.path} has another schema: its features lack {', '.join(missing)} "
            f"(is it in the folder of another model?)"
        )
    for name, kind in features.items():
        t = fields[name]
        value = t.value_type if pa.types.is_dictionary(t) else t
        fits = (
            pa.types.is_floating(value) or pa.types.is_integer(value)
            if kind == "numeric"
            else pa.types.is_string(value) or pa.types.is_large_string(value) or pa.types.is_null(value)
        )
        if not fits:
            raise Invalid(f"the lake file {file.path} has another schema: feature {name} is {t}, not {kind}")


def files_digest(files: Iterable[LakeFile]) -> str:
    """A digest of the files' names and sizes (an hour's counts are valid while its files are these)."""
    digest = hashlib.blake2b(digest_size=16)
    for f in sorted(files, key=lambda f: f.path):
        digest.update(f"{f.path.rsplit('/', 1)[-1]}\t{f.size}\n".encode())
    return digest.hexdigest()


def by_hour(files: Sequence[LakeFile]) -> dict[datetime, list[LakeFile]]:
    """The files grouped by their partition's hour, oldest first."""
    out: dict[datetime, list[LakeFile]] = {}
    for f in sorted(files, key=lambda f: (f.hour, f.path)):
        out.setdefault(f.hour, []).append(f)
    return out


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:300] or type(exc).__name__


__all__ = [
    "HOUR",
    "LABELS",
    "PREDICTIONS",
    "LakeFile",
    "by_hour",
    "check_file",
    "files_digest",
    "lake_filesystem",
]
