"""The lake's storage: a local folder or ``s3://bucket/prefix`` through pyarrow's filesystems, and the one way
a file gets there: whole or not at all.

On a local folder a file is written under its temporary name (:func:`~.layout.temporary_name`: starts with
``_``, which every reader skips), fsynced, then renamed to its final name (atomic on one filesystem; a
rename over an older file of the same name replaces it). On S3 the file is built in memory and sent with
one PUT of the whole object on its final key: S3 shows an object only once its PUT completed, so no
temporary object is needed. Credentials and the endpoint come from the usual ``AWS_*`` variables
(``AWS_ENDPOINT_URL`` for an S3-compatible server) or from ``options``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.fs as pafs
import pyarrow.parquet as pq

from core.errors import Invalid, Unavailable
from predictions.lake import layout as lake


@dataclass(frozen=True)
class Lake:
    """Where a lake lies: its filesystem and root path (no trailing slash), and the URL it came from."""

    url: str
    fs: pafs.FileSystem
    root: str
    remote: bool  # S3: one PUT per file, no rename

    def path(self, relative: str) -> str:
        """The filesystem path of ``relative`` (a path inside the lake)."""
        return f"{self.root}/{relative}" if self.root else relative


# the AWS variables that reach an S3 lake (the Spark engine forwards them to its executors)
AWS_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_ENDPOINT_URL",
    "AWS_ENDPOINT_URL_S3",
    "AWS_REGION",
    "AWS_DEFAULT_REGION",
    "AWS_EC2_METADATA_DISABLED",
)


def s3_options(env: Mapping[str, str] | None = None) -> dict[str, object]:
    """S3FileSystem's options from the AWS variables (endpoint, region, keys), with short timeouts and two
    attempts per request (a refused endpoint is reported in seconds, not minutes)."""
    env = os.environ if env is None else env
    opts: dict[str, object] = {}
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL")
    if endpoint:
        parsed = urlparse(endpoint)
        opts["endpoint_override"] = parsed.netloc or parsed.path
        opts["scheme"] = parsed.scheme or "https"
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION")
    if region:
        opts["region"] = region
    elif endpoint:
        opts["region"] = "us-east-1"  # an S3-compatible server: no bucket region to look up
    if env.get("AWS_ACCESS_KEY_ID") and env.get("AWS_SECRET_ACCESS_KEY"):
        opts["access_key"] = env["AWS_ACCESS_KEY_ID"]
        opts["secret_key"] = env["AWS_SECRET_ACCESS_KEY"]
        if env.get("AWS_SESSION_TOKEN"):
            opts["session_token"] = env["AWS_SESSION_TOKEN"]
    opts["connect_timeout"] = 5.0
    opts["request_timeout"] = 30.0
    opts["retry_strategy"] = pafs.AwsStandardS3RetryStrategy(max_attempts=2)
    return opts


def lake_filesystem(url: str, *, options: Mapping[str, object] | None = None) -> tuple[pafs.FileSystem, str]:
    """The filesystem and root path (no trailing slash) of a lake URL: a folder, ``file://...`` or
    ``s3://bucket/prefix`` (the endpoint and keys from the AWS variables, :func:`s3_options`, or
    ``options``). The one place a lake's filesystem is made: the sink, export and the readers (the Spark
    engine's driver and executors) all come here. Raises :class:`Invalid` naming ``lake_url`` for a URL of
    another kind; nothing is read."""
    parsed = urlparse(url)
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise Invalid(f"lake_url {url!r}: an S3 lake needs a bucket (s3://bucket/prefix)")
        fs = pafs.S3FileSystem(**{**s3_options(), **(options or {})})
        return fs, f"{parsed.netloc}/{parsed.path.strip('/')}".rstrip("/")
    if parsed.scheme not in ("", "file"):
        raise Invalid(f"lake_url {url!r}: a local folder or s3://bucket/prefix, not {parsed.scheme}://")
    folder = Path(parsed.path if parsed.scheme == "file" else url).expanduser().absolute()
    return pafs.LocalFileSystem(), str(folder)


def open_lake(url: str, *, options: Mapping[str, object] | None = None) -> Lake:
    """The lake at ``url`` to write (:func:`lake_filesystem`); raises :class:`Invalid` naming ``lake_url``
    for a URL of another kind or a folder that does not exist."""
    fs, root = lake_filesystem(url, options=options)
    remote = isinstance(fs, pafs.S3FileSystem)
    if not remote and not Path(root).is_dir():
        raise Invalid(f"lake_url {url!r}: the folder {root} does not exist")
    return Lake(url, fs, root, remote=remote)


def check_writable(target: Lake) -> None:
    """Write and remove a probe file at the lake's root; raises :class:`Unavailable` naming the lake when
    it cannot be written (a read-only folder, an S3 endpoint or bucket that refuses)."""
    probe = target.path(lake.temporary_name(f"probe-{os.getpid()}"))
    try:
        with target.fs.open_output_stream(probe) as out:
            out.write(b"driftwarden")
        target.fs.delete_file(probe)
    except (OSError, pa.ArrowException) as exc:
        raise Unavailable(f"lake {target.url!r} cannot be written: {_first_line(exc)}") from exc


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


DICTIONARY_COLUMNS = ("request_id", "status", "protocol", "source")


def parquet_options(table: pa.Table) -> dict[str, object]:
    """How a lake file is encoded: zstd, and dictionary encoding only where values repeat (the request id,
    status, protocol, source and categorical features), not on the unique ids or the numbers (a dictionary
    of floats costs time and makes the file larger)."""
    names = [c for c in DICTIONARY_COLUMNS if c in table.column_names]
    if lake.FEATURES in table.column_names:
        struct = table.schema.field(lake.FEATURES).type
        names += [
            f"{lake.FEATURES}.{f.name}"
            for f in struct
            if pa.types.is_dictionary(f.type) or pa.types.is_string(f.type)
        ]
    return {"compression": "zstd", "use_dictionary": names}


def write_file(target: Lake, relative_dir: str, name: str, table: pa.Table) -> str:
    """Write ``table`` as ``relative_dir/name`` whole or not at all; returns the file's relative path.
    Raises the filesystem's error (OSError or an Arrow error) with nothing visible left behind."""
    final = f"{relative_dir}/{name}"
    if target.remote:
        sink = pa.BufferOutputStream()
        pq.write_table(table, sink, **parquet_options(table))
        body = sink.getvalue()
        with target.fs.open_output_stream(target.path(final)) as out:  # one PUT of the whole object
            out.write(body)
        return final
    folder = Path(target.path(relative_dir))
    folder.mkdir(parents=True, exist_ok=True)
    temporary = folder / lake.temporary_name(name)
    try:
        with open(temporary, "wb") as fh:
            pq.write_table(table, fh, **parquet_options(table))
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(temporary, folder / name)
    except BaseException:
        with contextlib.suppress(OSError):
            temporary.unlink()
        raise
    with contextlib.suppress(OSError):  # the rename itself durable
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
    return final


def committed_files(target: Lake, table_name: str) -> list[str]:
    """Every committed file of a table (relative paths, sorted): what a reader sees."""
    base = target.path(table_name)
    try:
        infos = target.fs.get_file_info(pafs.FileSelector(base, recursive=True, allow_not_found=True))
    except FileNotFoundError:
        return []
    prefix = f"{target.root}/" if target.root else ""
    out = []
    for info in infos:
        name = info.base_name
        if info.type == pafs.FileType.File and name.endswith(lake.SUFFIX) and not name.startswith(("_", ".")):
            out.append(info.path.removeprefix(prefix))
    return sorted(out)


def partitions_before(target: Lake, table_name: str, before: str) -> list[str]:
    """Every ``date=`` partition of ``table_name`` older than ``before`` (``yyyy-mm-dd``), every model's
    (relative paths, sorted)."""
    found: list[str] = []
    base = target.path(table_name)
    models = target.fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
    for model in models:
        if model.type != pafs.FileType.Directory:
            continue
        for day in target.fs.get_file_info(pafs.FileSelector(model.path, allow_not_found=True)):
            date = day.base_name.removeprefix("date=")
            if day.type == pafs.FileType.Directory and day.base_name.startswith("date=") and date < before:
                found.append(day.path.removeprefix(f"{target.root}/"))
    return sorted(found)


def drop_partitions_before(target: Lake, table_name: str, before: str) -> list[str]:
    """Delete every ``date=`` partition of ``table_name`` older than ``before`` (whole folders: retention);
    returns those removed."""
    old = partitions_before(target, table_name, before)
    for relative in old:
        target.fs.delete_dir(target.path(relative))
    return old
