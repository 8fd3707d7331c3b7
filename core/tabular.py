"""Tabular files (CSV or Parquet) as ordered numpy columns: floats for numbers, objects for strings.

:func:`read_table` reads a whole file (strings as Python objects). :class:`TableStream` reads one in batches
(Parquet row groups, CSV blocks) through Arrow, so a file larger than memory can be folded batch by batch
(:func:`fold_batches`); in its batches numbers are numpy arrays and text is a :class:`CodedColumn`
(dictionary codes: one small integer per cell, one Python string per distinct value).

A file that cannot be read or written raises :class:`TableError`: one line naming the file, what is wrong and
how to fix it (answered by the CLI root as ``error: ...`` with exit code 2).
"""

from __future__ import annotations

import contextlib
import csv
import json
import queue
import re
import threading
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from core.errors import Invalid

Columns = dict[str, np.ndarray]
SUFFIXES = {".csv": "csv", ".parquet": "parquet", ".pq": "parquet"}
"""The files written (and read) by their suffix."""
READ_SUFFIXES = {**SUFFIXES, ".tsv": "csv"}
"""The files read by their suffix: a tab-separated export (``.tsv``) too, read as a CSV (its separator is
read off its header line, :func:`csv_format`)."""
COMPRESSED = (".gz", ".bz2", ".zst", ".lz4")
"""Compressions of a CSV file read as it is (``x.csv.gz``): Arrow decompresses it by its name."""
BATCH_ROWS = 65_536  # Parquet rows per batch of a TableStream
PARQUET_BUFFER_BYTES = 1 << 20  # Parquet column chunks are read through a buffer this size, not whole
CSV_BLOCK_BYTES = 16 << 20  # CSV bytes per block (one batch) of a TableStream
S = TypeVar("S")
T = TypeVar("T")


class TableError(Invalid, ValueError):
    """A data file that cannot be read or written (missing, wrong format, empty, malformed).

    Also a ``ValueError`` so callers that catch bad input as ``ValueError`` keep working.
    """


def _to_numpy(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    column = _plain(column)
    t = column.type
    if pa.types.is_decimal(t):  # a database's money or measure: a number, as a CSV of it reads
        return column.cast(pa.float64()).to_numpy(zero_copy_only=False)
    if pa.types.is_duration(t):
        return _seconds(column).to_numpy(zero_copy_only=False)
    if pa.types.is_integer(t) or pa.types.is_boolean(t):
        if column.null_count or pa.types.is_uint64(t):  # NaN for the nulls; see _batch_column on uint64
            return column.cast(pa.float64(), safe=False).to_numpy(zero_copy_only=False)
        return column.to_numpy().astype(np.int64)
    if pa.types.is_floating(t):
        return column.to_numpy(zero_copy_only=False).astype(np.float64)
    return np.array(column.to_pylist(), dtype=object)


@dataclass(frozen=True)
class CodedColumn:
    """A text column as dictionary codes: ``codes[i]`` indexes ``categories``; -1 is a null (missing).

    ``categories`` holds each distinct value once (``str``; ``""`` stays a value, which the monitors count as
    missing like a null). ``np.asarray`` decodes it into objects (None for nulls): correct anywhere, but one
    object per cell; :func:`value_counts` and :func:`as_float` read the codes instead.
    """

    codes: np.ndarray  # int32, one per row
    categories: np.ndarray  # object array of str

    def __len__(self) -> int:
        return int(self.codes.shape[0])

    @property
    def size(self) -> int:
        return int(self.codes.shape[0])

    def __getitem__(self, rows: slice | np.ndarray) -> CodedColumn:
        return CodedColumn(codes=self.codes[rows], categories=self.categories)

    def counts(self) -> Counter[str | None]:
        """Rows per value (None: nulls), values that occur only."""
        n = np.bincount(self.codes.astype(np.int64) + 1, minlength=len(self.categories) + 1).tolist()
        out: Counter[str | None] = Counter()
        if n[0]:
            out[None] = n[0]
        for cat, k in zip(self.categories.tolist(), n[1:], strict=True):
            if k:
                out[cat] += k
        return out

    def decode(self) -> np.ndarray:
        """The column as an object array (None for nulls)."""
        lookup = np.empty(len(self.categories) + 1, dtype=object)
        lookup[: len(self.categories)] = self.categories
        return lookup[self.codes]  # code -1 takes the trailing None

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> np.ndarray:
        out = self.decode()
        return out if dtype is None else out.astype(dtype)

    @classmethod
    def concat(cls, parts: Sequence[CodedColumn]) -> CodedColumn:
        """One column from batches whose dictionaries differ (codes remapped onto one dictionary, each value
        once, in the order first seen); batches of one dictionary of distinct values (a Parquet column
        chunk's, read batch by batch) are joined as they are, which gives the same codes."""
        words = parts[0].categories.tolist() if parts else []
        if parts and len(set(words)) == len(words) and all(p.categories.tolist() == words for p in parts[1:]):
            categories = np.empty(len(words), dtype=object)
            categories[:] = words
            return cls(
                codes=np.concatenate([p.codes for p in parts]).astype(np.int32, copy=False),
                categories=categories,
            )
        index: dict[str, int] = {}
        codes = []
        for part in parts:
            ids = np.array([index.setdefault(c, len(index)) for c in part.categories.tolist()] + [-1])
            codes.append(ids.astype(np.int32)[part.codes])
        categories = np.empty(len(index), dtype=object)
        categories[:] = list(index)
        return cls(codes=np.concatenate(codes) if codes else np.zeros(0, np.int32), categories=categories)


Column = np.ndarray | CodedColumn

Take = Callable[[str, np.ndarray], Column]
"""The values of column ``name`` at the rows ``positions`` (sorted, distinct): a table read at some rows."""


def text_codes(values: np.ndarray) -> CodedColumn | None:
    """An object column of text as :class:`CodedColumn`, by one hashing pass in C (``pandas.factorize``):
    ``str`` values become categories (``""`` stays one), None and float NaN become nulls (code -1). None
    when the column holds anything else (a number, a date, ``pd.NA``): such a column keeps its per-value
    path, whose ``str(value)`` and equality rules codes would not follow."""
    values = np.asarray(values, dtype=object)
    if values.ndim != 1:
        return None
    if values.size <= SMALL_TEXT:
        return _small_text_codes(values)
    import pandas as pd  # imported here: only a caller holding much text as objects pays for it

    codes, uniques = pd.factorize(values, use_na_sentinel=True)
    words = uniques.tolist()
    if not all(isinstance(w, str) for w in words):
        return None
    nulls = codes < 0
    if nulls.any():
        for v in values[nulls].tolist():
            if not (v is None or (isinstance(v, float) and v != v)):
                return None
    categories = np.empty(len(words), dtype=object)
    categories[:] = [w if type(w) is str else str(w) for w in words]  # a str subclass (np.str_) as str
    return CodedColumn(codes=codes.astype(np.int32, copy=False), categories=categories)


SMALL_TEXT = 4096
"""A text column of at most this many values is coded in Python (a dict), without loading pandas."""


def _small_text_codes(values: np.ndarray) -> CodedColumn | None:
    """:func:`text_codes` of a short column, value by value."""
    index: dict[str, int] = {}
    codes: list[int] = []
    for v in values.tolist():
        if v is None or (isinstance(v, float) and v != v):
            codes.append(-1)
        elif isinstance(v, str):
            codes.append(index.setdefault(v if type(v) is str else str(v), len(index)))
        else:
            return None
    categories = np.empty(len(index), dtype=object)
    categories[:] = list(index)
    return CodedColumn(codes=np.array(codes, dtype=np.int32), categories=categories)


def as_coded(values: Column) -> Column:
    """``values`` with text held as objects turned into codes (:func:`text_codes`) when it can be, else
    unchanged: the one conversion a caller makes before handing a text column to several counters."""
    if isinstance(values, CodedColumn) or values.dtype != object:
        return values
    coded = text_codes(values)
    return values if coded is None else coded


def value_counts(values: Column) -> Counter[Any]:
    """Rows per distinct value, as ``Counter(values.tolist())`` counts them (NaNs may share one key)."""
    if isinstance(values, CodedColumn):
        return values.counts()
    if values.dtype.kind in "iufb":
        uniq, n = np.unique(values, return_counts=True)
        return Counter(dict(zip(uniq.tolist(), n.tolist(), strict=True)))
    return Counter(values.tolist())


PERIOD = "pandas.period"
"""The Arrow extension pandas writes a ``Period`` column as (a month, a day: its storage counts them)."""


def _extension(field: pa.Field) -> str:
    """The name of a field's Arrow extension type: a registered one's, or the one its metadata names (pandas'
    types read where pandas is not loaded: their storage, the name in the field's metadata)."""
    if isinstance(field.type, pa.BaseExtensionType):
        return str(field.type.extension_name)
    return (field.metadata or {}).get(b"ARROW:extension:name", b"").decode(errors="replace")


def _temporal(schema: pa.Schema) -> set[str]:
    """The names of a schema's date, time and timestamp columns (a CSV's ISO dates: Arrow's) and pandas'
    periods. A duration is none of them: it is an amount, read as seconds (:func:`_seconds`)."""
    return {
        f.name
        for f in schema
        if (pa.types.is_temporal(f.type) and not pa.types.is_duration(f.type)) or _extension(f) == PERIOD
    }


def _plain(array: Any) -> Any:
    """An Arrow (chunked) array of an extension type (pandas' periods and intervals) as its storage."""
    if not isinstance(array.type, pa.BaseExtensionType):
        return array
    if isinstance(array, pa.ChunkedArray):
        return pa.chunked_array([c.storage for c in array.chunks], type=array.type.storage_type)
    return array.storage


_PER_SECOND = {"s": 1, "ms": 10**3, "us": 10**6, "ns": 10**9}


def _seconds(array: pa.Array | pa.ChunkedArray) -> pa.Array | pa.ChunkedArray:
    """A duration column (Arrow's ``duration``, a pandas ``timedelta64``) as float64 seconds, nulls kept: an
    amount (a session's length, a delivery's delay) whose distribution may drift like any number's."""
    import pyarrow.compute as pc  # here: only a duration needs it (~25 ms to load)

    ticks = array.cast(pa.int64()).cast(pa.float64())
    return pc.divide(ticks, float(_PER_SECOND[array.type.unit]))


_PANDAS_INDEX = re.compile(r"__index_level_\d+__")


def _pandas_index(schema: pa.Schema, *, from_csv: bool = False) -> set[str]:
    """The columns holding a pandas frame's unnamed index: ``df.to_parquet()`` writes one as a column
    ``__index_level_0__`` unless it is 0..n-1 (told by the file's pandas metadata), ``df.to_csv()`` as a
    first column without a name. Row numbers, no data; pandas reads them back as the frame's index, not
    columns: the tables here leave them out."""
    if from_csv:
        return {""} if schema.names and schema.names[0] == "" else set()
    try:
        meta = schema.pandas_metadata or {}
    except ValueError:  # metadata that is not JSON: no index known
        return set()
    listed = meta.get("index_columns", []) if isinstance(meta, dict) else []
    return {c for c in listed if isinstance(c, str) and _PANDAS_INDEX.fullmatch(c) and c in schema.names}


def _coded(array: pa.Array) -> CodedColumn:
    """A text (or other non-numeric) Arrow array as codes; non-strings become ``str(value)``."""
    if pa.types.is_null(array.type):
        codes = np.full(len(array), -1, dtype=np.int32)
        return CodedColumn(codes=codes, categories=np.empty(0, dtype=object))
    if not pa.types.is_dictionary(array.type):
        import pyarrow.compute as pc  # here: Parquet text reads as dictionaries; it costs ~25 ms to load

        array = pc.dictionary_encode(array)
    codes = _numbers(array.indices, np.int32, null=-1)
    if pa.types.is_timestamp(array.dictionary.type):  # as text, by Arrow: a Python datetime may overflow
        words = array.dictionary.cast(pa.string()).to_pylist()  # (a CSV's 0001-01-01T00:00:00+01:00)
    else:
        words = array.dictionary.to_pylist()
    if not (pa.types.is_string(array.dictionary.type) or pa.types.is_large_string(array.dictionary.type)):
        words = [None if w is None else str(w) for w in words]
    if array.dictionary.null_count:  # a null inside the dictionary: a null cell
        nulls = np.array([w is None for w in words] + [True])
        codes = np.where(nulls[codes], -1, codes).astype(np.int32)
        words = ["" if w is None else w for w in words]
    categories = np.empty(len(words), dtype=object)
    categories[:] = words
    return CodedColumn(codes=codes, categories=categories)


def _numbers(
    array: pa.Array, dtype: type[np.int32] | type[np.int64] | type[np.float64], *, null: float = np.nan
) -> np.ndarray:
    """A numeric (or boolean) Arrow array as a numpy array of ``dtype``, nulls as ``null``, read from the
    array's buffers: zero-copy (read-only) when it has that type and no null. Not through ``Array.to_numpy``
    or ``fill_null``, which load pandas (seconds on a busy machine) for a command that needs none of it."""
    target = {np.int32: pa.int32(), np.int64: pa.int64(), np.float64: pa.float64()}[dtype]
    if array.type != target:  # an integer beyond 2**53 becomes the nearest float64 (as numpy's astype)
        array = array.cast(target, safe=not pa.types.is_floating(target))
    n = len(array)
    validity, data = array.buffers()[:2]
    if data is None or not n:
        return np.zeros(0, dtype=dtype)
    out = np.frombuffer(data, dtype=dtype, count=n, offset=array.offset * np.dtype(dtype).itemsize)
    if array.null_count:  # the validity bitmap, one bit a value (least significant first), read by numpy
        bits = np.frombuffer(validity, dtype=np.uint8)
        valid = np.unpackbits(bits, bitorder="little")[array.offset : array.offset + n].view(bool)
        out = np.where(valid, out, null).astype(dtype, copy=False)
    return out


def _nested(t: pa.DataType) -> bool:
    """A type whose cells hold several values: a list, a record (struct) or a map."""
    return (
        pa.types.is_list(t)
        or pa.types.is_large_list(t)
        or pa.types.is_fixed_size_list(t)
        or pa.types.is_struct(t)
        or pa.types.is_map(t)
    )


def _batch_column(array: pa.Array) -> Column:
    """Numbers as ``read_table`` types them (int64, or float64 with NaN for nulls, decimals too; zero-copy
    where Arrow allows, so read-only), anything else as codes. An unsigned 64-bit column (a hash, an id) is
    float64 in every batch, whatever its values: int64 cannot hold those from 2**63 on."""
    array = _plain(array)
    t = array.type
    if _nested(t):
        # a list per cell (a multi-class model's probabilities), a record, a map: its JSON text, as a CSV
        # would hold it (what JSON has no type for, a date or bytes, as its text)
        text = [None if v is None else json.dumps(v, default=str) for v in array.to_pylist()]
        return _coded(pa.array(text, type=pa.string()))
    if pa.types.is_decimal(t):  # as read_table reads it: float64
        return _numbers(array.cast(pa.float64()), np.float64)
    if pa.types.is_duration(t):  # as read_table reads it: seconds
        return _numbers(_seconds(array), np.float64)
    if not (pa.types.is_integer(t) or pa.types.is_boolean(t) or pa.types.is_floating(t)):
        return _coded(array)
    if array.null_count or pa.types.is_floating(t) or pa.types.is_uint64(t):
        return _numbers(array, np.float64)
    return _numbers(array, np.int64)


def _format(p: Path, *, verb: str) -> str:
    known = READ_SUFFIXES if verb == "read" else SUFFIXES
    if (
        verb == "read"
        and p.suffix.lower() in COMPRESSED
        and known.get(p.with_suffix("").suffix.lower()) == "csv"
    ):
        return "csv"
    fmt = known.get(p.suffix.lower())
    if fmt is None:
        packed = ", ".join(".csv" + c for c in COMPRESSED)
        use = "use .csv or .parquet"
        if verb == "read":
            use += f" (a tab-separated file may be .tsv; a CSV may come compressed: {packed})"
        raise TableError(f"cannot {verb} {p}: unsupported file type {p.suffix or '(none)'!r}; {use}")
    return fmt


def _readable(p: Path) -> str:
    """The format of a file that exists and may be read, else :class:`TableError`: a directory, a device, a
    pipe or a socket (a link to one too) is refused before it is opened (reading ``/dev/zero`` never ends)."""
    if not p.exists():
        raise TableError(
            f"data file not found: {p} (check the path; make one with `driftwarden data generate`)"
        )
    if p.is_dir():
        raise TableError(f"{p} is a directory, not a data file: give a .csv or .parquet file")
    if not p.is_file():
        raise TableError(f"{p} is not a regular file (a device, pipe or socket): give a .csv or .parquet")
    fmt = _format(p, verb="read")
    if fmt == "csv" and p.stat().st_size == 0:
        raise TableError(f"{p} is empty (0 bytes): a CSV needs a header row and data rows")
    return fmt


# Arrow's CSV parse errors end with the row they could not parse: never shown (the file may not be the one
# meant, e.g. a link to another file, and a row of data is not the user's to see in an error)
_ECHOED_ROW = re.compile(r"(Expected \d+ columns?, got \d+)\s*:.*$", re.S)
_SHOWN = 300  # characters of a reason shown at most


def _unreadable(p: Path, fmt: str, exc: BaseException) -> TableError:
    """A reader's error as one line naming the file and what is wrong, never the file's content."""
    if isinstance(exc, UnicodeDecodeError):
        return _not_utf8(p, fmt, f"byte 0x{exc.object[exc.start]:02x}")
    reason = _ECHOED_ROW.sub(r"\1", " ".join(str(exc).split()))
    if "invalid utf8" in reason.lower():
        return _not_utf8(p, fmt, reason)
    if len(reason) > _SHOWN:
        reason = reason[:_SHOWN] + " ..."
    return TableError(f"cannot read {p} as {fmt.upper()}: {reason}")


def _not_utf8(p: Path, fmt: str, where: str) -> TableError:
    return TableError(
        f"cannot read {p} as {fmt.upper()}: its text is not UTF-8 ({where}); text is read as UTF-8: convert "
        "it (e.g. iconv -f LATIN1 -t UTF-8)"
    )


def _utf8(p: Path, fmt: str, schema: pa.Schema) -> None:
    """A CSV column Arrow read as bytes held text that is not UTF-8: refused (a CSV is UTF-8 text)."""
    if fmt != "csv":
        return
    for k, field in enumerate(schema):
        if pa.types.is_binary(field.type) or pa.types.is_large_binary(field.type):
            raise _not_utf8(p, fmt, f"column #{k + 1}, {field.name[:40]!r}")


def _unique_names(p: Path, names: Sequence[str]) -> None:
    duplicates = sorted(name for name, n in Counter(names).items() if n > 1)
    if duplicates:
        raise TableError(f"{p} has duplicate column names {duplicates}: rename them so each is unique")


CSV_DELIMITERS = (",", ";", "\t", "|")
"""The separators a CSV file may use: a comma, or a semicolon (a spreadsheet's export where the comma is the
decimal mark), a tab or a bar."""


CSV_SNIFF_BYTES = 1 << 16
"""The head of a CSV file read for its separator and decimal mark."""

CSV_NULLS = (
    *("", "#N/A", "#N/A N/A", "#NA", "-1.#IND", "-1.#QNAN", "-NaN", "-nan", "1.#IND", "1.#QNAN"),
    *("<NA>", "N/A", "NA", "NULL", "NaN", "None", "n/a", "nan", "null"),
)
"""The cells of a CSV file that are no value: pandas' (``read_csv``'s default), which are Arrow's and
``None`` and ``<NA>`` (a Python ``str(None)``, a pandas missing value printed): read as numbers by pandas, a
column holding them was text here."""

_COMMA_DECIMAL = re.compile(r"[+-]?\d+,\d+")
_POINT_DECIMAL = re.compile(r"[+-]?\d*\.\d+")


@dataclass(frozen=True)
class CsvFormat:
    """How a CSV file writes its fields and numbers: ``delimiter`` and ``decimal_point``; ``grouped``: the
    columns whose numbers are written with their thousands grouped (``"1,234.5"``; ``1.234,5`` where the
    decimal mark is a comma), which Arrow would read as text."""

    delimiter: str = ","
    decimal_point: str = "."
    grouped: frozenset[str] = frozenset()

    @property
    def thousands(self) -> str:
        """The mark that groups thousands: a comma, or a point where the comma is the decimal mark."""
        return "," if self.decimal_point == "." else "."

    def numbers(self, grouped: bool) -> re.Pattern[str]:
        """A number as this file writes it, its thousands ``grouped`` (at least one mark) or not."""
        d, t = re.escape(self.decimal_point), re.escape(self.thousands)
        whole = rf"\d{{1,3}}(?:{t}\d{{3}})+" if grouped else r"\d+"
        return re.compile(rf"[+-]?{whole}(?:{d}\d+)?")

    def cell(self, *, grouped_only: bool = False) -> str:
        """The regular expression (Arrow's) of a whole cell holding a number as this file writes it, its
        thousands grouped or not (``grouped_only``: grouped)."""
        kinds = (True,) if grouped_only else (True, False)
        return "^(?:" + "|".join(self.numbers(grouped=g).pattern for g in kinds) + ")$"


def csv_format(path: Path) -> CsvFormat:
    """The separator, the decimal mark and the columns of grouped numbers of a CSV file, read off its head.

    The separator: of :data:`CSV_DELIMITERS`, the one that splits the header line into the most fields
    (quotes respected), a comma on a tie (a file of one column). The decimal mark: a comma when the separator
    is not one and the first rows hold more numbers written with a decimal comma (``50,25``) than with a
    point (a spreadsheet's export where the comma is the decimal mark), else a point. Read as a plain CSV, a
    semicolon-separated file was one text column named ``x;y`` whose every row is a category, and numbers
    written ``50,25`` were text. The columns of grouped numbers: :func:`_grouped_columns`."""
    with pa.input_stream(str(path), compression="detect") as f:  # x.csv.gz: decompressed
        head = f.read(CSV_SNIFF_BYTES).decode("utf-8", errors="replace").lstrip("\ufeff")
    lines = head.splitlines()
    if len(head) == CSV_SNIFF_BYTES and len(lines) > 1:
        lines = lines[:-1]  # cut short
    header = lines[0] if lines else ""
    fields = {d: len(next(csv.reader([header], delimiter=d), [])) for d in CSV_DELIMITERS}
    delimiter = max(CSV_DELIMITERS, key=lambda d: (fields[d], d == ","))
    names = next(csv.reader([header], delimiter=delimiter), [])
    rows = list(csv.reader(lines[1:], delimiter=delimiter))
    mark = "."
    if delimiter != ",":
        cells = [cell.strip() for row in rows for cell in row]
        comma = sum(1 for cell in cells if _COMMA_DECIMAL.fullmatch(cell))
        point = sum(1 for cell in cells if _POINT_DECIMAL.fullmatch(cell))
        mark = "," if comma > point else "."
    found = CsvFormat(delimiter=delimiter, decimal_point=mark)
    return CsvFormat(delimiter, mark, grouped=_grouped_columns(found, names, rows))


def _grouped_columns(found: CsvFormat, names: list[str], rows: list[list[str]]) -> frozenset[str]:
    """The columns whose every cell of ``rows`` (a file's first rows) is empty or a number as ``found``
    writes numbers, with at least one number's thousands grouped (a spreadsheet's export of formatted
    numbers)."""
    grouped, plain = found.numbers(grouped=True), found.numbers(grouped=False)
    out = set()
    for k, name in enumerate(names):
        cells = [row[k].strip() for row in rows if k < len(row) and row[k].strip()]
        if any(grouped.fullmatch(c) for c in cells) and all(
            grouped.fullmatch(c) or plain.fullmatch(c) for c in cells
        ):
            out.add(name)
    return frozenset(out)


def _grouped_text(column: pa.Array | pa.ChunkedArray, found: CsvFormat) -> bool:
    """Whether a text column holds numbers only, as the file of format ``found`` writes them, at least one
    with its thousands grouped (empty cells are nulls)."""
    import pyarrow.compute as pc  # here: only a text column of a CSV needs it (~25 ms to load)

    if not pc.any(pc.match_substring_regex(column, found.cell(grouped_only=True))).as_py():
        return False
    return _all_numbers(column, found)


def _all_numbers(column: pa.Array | pa.ChunkedArray, found: CsvFormat) -> bool:
    """Whether every cell of a text column is a number as the file of format ``found`` writes them (its
    thousands grouped or not; nulls are no cells)."""
    import pyarrow.compute as pc  # here: only a text column of a CSV needs it (~25 ms to load)

    return not pc.sum(pc.invert(pc.match_substring_regex(column, found.cell()))).as_py()


def _ungrouped(array: pa.Array | pa.ChunkedArray, found: CsvFormat) -> pa.Array | pa.ChunkedArray:
    """A column of numbers written with grouped thousands (text, each cell checked by the caller:
    :func:`_all_numbers`) as float64."""
    import pyarrow.compute as pc  # here: only such a column needs it (~25 ms to load)

    text = pc.replace_substring(array, pattern=found.thousands, replacement="")
    if found.decimal_point != ".":
        text = pc.replace_substring(text, pattern=found.decimal_point, replacement=".")
    return pc.cast(text, pa.float64())


def _csv_options(
    found: CsvFormat, *, column_types: Mapping[str, pa.DataType] | None = None, **convert: Any
) -> tuple[pacsv.ParseOptions, pacsv.ConvertOptions]:
    """Arrow's options to read a CSV file of format ``found`` (an empty text is null; its columns of grouped
    numbers as text, for :func:`_ungrouped`; ``column_types`` and ``convert``: more)."""
    types = {name: pa.string() for name in found.grouped} | dict(column_types or {})
    return pacsv.ParseOptions(delimiter=found.delimiter), pacsv.ConvertOptions(
        strings_can_be_null=True,
        null_values=CSV_NULLS,
        decimal_point=found.decimal_point,
        column_types=types,
        **convert,
    )


def read_table(path: str | Path) -> Columns:
    """Read a ``.csv`` (its separator and decimal mark: :func:`csv_format`) or ``.parquet`` file into columns;
    nulls become NaN or None.

    Raises :class:`TableError` for a missing, empty, malformed or unsupported file, or duplicate column names.
    """
    p = Path(path)
    fmt = _readable(p)
    try:
        if fmt == "csv":
            found = csv_format(p)
            parse, convert = _csv_options(found)
            table = _numbers_of(pacsv.read_csv(p, parse_options=parse, convert_options=convert), found)
        else:
            table = pq.read_table(p)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
        raise _unreadable(p, fmt, exc) from exc
    _utf8(p, fmt, table.schema)
    _unique_names(p, table.column_names)
    index = _pandas_index(table.schema, from_csv=fmt == "csv")
    return {name: _to_numpy(table.column(name)) for name in table.column_names if name not in index}


def _numbers_of(table: pa.Table, found: CsvFormat) -> pa.Table:
    """``table`` (a CSV file of format ``found``, read whole) with its columns of grouped numbers as float64:
    each text column whose every cell is a number, at least one grouped (:func:`_grouped_text`; wherever in
    the file: the head's :attr:`CsvFormat.grouped` are among them)."""
    for k, field in enumerate(table.schema):
        if pa.types.is_string(field.type) and _grouped_text(column := table.column(k), found):
            table = table.set_column(k, field.name, _ungrouped(column, found))
    return table


class _Widened(Exception):
    """A later CSV block holds a value the type inferred from the first block cannot: read again."""


_CONVERSION = re.compile(r"CSV column #(\d+): CSV conversion error to (\w+)(?:: invalid value '(.*)')?", re.S)
_WIDER = {"null": pa.int64(), "int64": pa.float64(), "double": pa.string()}


@dataclass(frozen=True)
class MemoryTable:
    """A table already in memory (an Arrow table) that a :class:`TableStream` reads like a file: its batches
    are slices of the table, never copies of it; ``name`` names it in messages (as a file's path would)."""

    table: pa.Table
    name: str = "the table"

    def __str__(self) -> str:
        return self.name


TableSource = str | Path | MemoryTable
"""What a :class:`TableStream` reads: a ``.csv`` / ``.parquet`` path, or a table in memory."""


class TableStream:
    """A ``.csv`` or ``.parquet`` file (or a :class:`MemoryTable`) read in batches of numpy columns (text as
    :class:`CodedColumn`).

    Parquet is read row group by row group (dictionary pages stay codes), CSV block by block (its separator:
    :func:`csv_format`), so memory is bounded by a batch whatever the file's size. Opening checks what
    :func:`read_table` checks (missing, empty, malformed, unsupported, duplicate names); ``names`` are the
    columns, ``rows`` the row count when the file's metadata knows it (Parquet), ``booleans`` the columns of
    true/false values (CSV: as its first block types them), which batches give as 1/0. A CSV column typed by
    its first block is widened as :func:`read_table` would type it (int -> float -> text) when a later block
    needs it; iterate with :func:`fold_batches`, which starts the fold again in that case. ``threads=False``
    decodes Parquet in the calling thread (less memory; for a caller whose own threads keep the cores busy).
    """

    def __init__(
        self,
        path: TableSource,
        *,
        batch_rows: int = BATCH_ROWS,
        block_bytes: int = CSV_BLOCK_BYTES,
        threads: bool = True,
    ) -> None:
        self.memory = path if isinstance(path, MemoryTable) else None
        self.path = Path(str(path))
        self.batch_rows = batch_rows
        self.block_bytes = block_bytes
        self.threads = threads
        self.rows: int | None = None
        self.booleans: set[str] = set()  # the columns of true/false values (read as 1/0)
        self.temporal: set[str] = set()  # the columns of dates, times and timestamps (read as text)
        self.names: list[str] = []
        self._header: list[str] = []  # every column of the file, a pandas index too
        self._ungroupable: set[str] = set()  # CSV columns found to hold a cell that is no grouped number
        self._types: dict[str, pa.DataType] = {}
        self._csv = CsvFormat()
        self._by_column: pq.ParquetFile | None = None  # the Parquet file :meth:`pieces` reads
        if self.memory is not None:
            self.format = "memory"
            self._columns_of(self.memory.table.schema)
            self.rows = self.memory.table.num_rows
            _unique_names(self.path, self.names)
            return
        self.format = _readable(self.path)
        try:
            if self.format == "parquet":
                meta = pq.ParquetFile(self.path)
                self._columns_of(meta.schema_arrow)
                self.rows = meta.metadata.num_rows
                self._text = [
                    f.name
                    for f in meta.schema_arrow
                    if pa.types.is_string(f.type) or pa.types.is_large_string(f.type)
                ]
            else:
                self._csv = csv_format(self.path)
                with self._open_csv(None) as reader:
                    self._columns_of(reader.schema, from_csv=True)
                    _utf8(self.path, self.format, reader.schema)
        except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
            raise _unreadable(self.path, self.format, exc) from exc
        _unique_names(self.path, self.names)

    def _columns_of(self, schema: pa.Schema, *, from_csv: bool = False) -> None:
        """``names`` (a pandas index left out), ``booleans`` and ``temporal`` from the table's schema."""
        index = _pandas_index(schema, from_csv=from_csv)
        self._header = [str(name) for name in schema.names]  # a CSV's columns, as its errors number them
        self.names = [name for name in self._header if name not in index]
        self.booleans = {f.name for f in schema if pa.types.is_boolean(f.type)}
        self.temporal = _temporal(schema)

    def _open_csv(self, columns: Sequence[str] | None) -> pacsv.CSVStreamingReader:
        wanted = list(columns) if columns is not None else None
        parse, convert = _csv_options(self._csv, include_columns=wanted, column_types=self._types)
        return pacsv.open_csv(
            self.path,
            read_options=pacsv.ReadOptions(block_size=self.block_bytes),
            parse_options=parse,
            convert_options=convert,
        )

    def _grouped_in(self, first: pa.RecordBatch) -> None:
        """Add to :attr:`CsvFormat.grouped` the text columns of a CSV's first block (which types them for the
        whole file) that hold grouped numbers only (:func:`_grouped_text`): met past the head that
        :func:`csv_format` read, as :func:`read_table` finds them."""
        for field in first.schema:
            name = field.name
            known = name in self._csv.grouped or name in self._ungroupable
            if not known and pa.types.is_string(field.type) and _grouped_text(first.column(name), self._csv):
                grouped = self._csv.grouped | {name}
                self._csv = CsvFormat(self._csv.delimiter, self._csv.decimal_point, grouped)

    def _number(self, name: str, column: pa.Array) -> pa.Array:
        """A CSV column of grouped numbers (:attr:`CsvFormat.grouped`) as float64, others as they are; a cell
        that is no such number makes the column text for the whole file, read again (:class:`_Widened`), as
        :func:`read_table` reads it."""
        if name not in self._csv.grouped:
            return column
        if _all_numbers(column, self._csv):
            return _ungrouped(column, self._csv)
        found = self._csv
        self._csv = CsvFormat(found.delimiter, found.decimal_point, grouped=found.grouped - {name})
        self._types[name] = pa.string()
        self._ungroupable.add(name)
        raise _Widened(f"column {name!r} holds a cell that is no number")

    def _widen(self, exc: pa.ArrowInvalid) -> bool:
        """Widen the column a CSV conversion error names (False when it is not such an error): to the
        numbers with grouped thousands of :attr:`CsvFormat.grouped` when the value it could not convert is
        one (met past the head that :func:`csv_format` read), else int -> float -> text."""
        found = _CONVERSION.search(str(exc))
        if found is None or self.format != "csv":
            return False
        name, was, value = self._header[int(found.group(1))], found.group(2), found.group(3) or ""
        grouped = self._csv.numbers(grouped=True)
        known = name in self._csv.grouped or name in self._ungroupable
        if was != "string" and not known and grouped.fullmatch(value):
            self._csv = CsvFormat(self._csv.delimiter, self._csv.decimal_point, self._csv.grouped | {name})
            self._types[name] = pa.string()  # grouped thousands past the head: _number reads them
            return True
        wider = _WIDER.get(was, pa.string())
        if was == "string" or self._types.get(name) == wider:
            return False
        self._types[name] = wider
        return True

    def batches(self, columns: Sequence[str] | None = None) -> Iterator[dict[str, Column]]:
        """Batches of ``columns`` (default: all; each must be one of ``names``)."""
        wanted = list(self.names if columns is None else columns)
        if self.memory is not None:
            for batch in self.memory.table.select(wanted).to_batches(max_chunksize=self.batch_rows):
                yield {name: _batch_column(batch.column(name)) for name in wanted}
            return
        try:
            if self.format == "parquet":
                text = [c for c in self._text if c in wanted]
                source = pq.ParquetFile(
                    self.path, read_dictionary=text, pre_buffer=False, buffer_size=PARQUET_BUFFER_BYTES
                )
                batches: Iterator[pa.RecordBatch] = source.iter_batches(
                    batch_size=self.batch_rows, columns=wanted, use_threads=self.threads
                )
            else:
                batches = iter(self._open_csv(wanted))
            first = self.format == "csv"
            for batch in batches:
                _utf8(self.path, self.format, batch.schema)
                if first:
                    self._grouped_in(batch)
                    first = False
                yield {name: _batch_column(self._number(name, batch.column(name))) for name in wanted}
        except pa.ArrowInvalid as exc:
            if self._widen(exc):
                raise _Widened(str(exc)) from exc
            raise _unreadable(self.path, self.format, exc) from exc
        except (pa.ArrowException, OSError, UnicodeDecodeError) as exc:
            raise _unreadable(self.path, self.format, exc) from exc

    def pieces(self, name: str) -> Iterator[Column]:
        """Column ``name`` whole, one row group of a Parquet file (one chunk of a table in memory) at a time:
        a file of one row group gives the column in one piece, decoded once (zero-copy where Arrow allows, so
        read-only). Not for a CSV, whose rows hold every column: read it with :meth:`batches`."""
        if self.memory is not None:
            for chunk in self.memory.table.column(name).chunks:
                yield _batch_column(chunk)
            return
        if self.format != "parquet":
            raise ValueError(f"{self.path}: a CSV is read by rows (batches), not by column")
        try:
            if self._by_column is None:  # opened once: each opening reads every column's metadata (in Python)
                self._by_column = pq.ParquetFile(
                    self.path, read_dictionary=self._text, pre_buffer=False, buffer_size=PARQUET_BUFFER_BYTES
                )
            source = self._by_column
            for group in range(source.num_row_groups):
                for chunk in source.read_row_group(group, columns=[name], use_threads=False).column(0).chunks:
                    yield _batch_column(chunk)
        except (pa.ArrowException, OSError) as exc:
            raise _unreadable(self.path, self.format, exc) from exc


def _read_ahead(batches: Iterator[T], depth: int, meanwhile: Callable[[], None] | None = None) -> Iterator[T]:
    """The items of ``batches``, produced by a thread up to ``depth`` ahead (Arrow decodes without the GIL,
    so reading the next batch overlaps with work on this one); its errors are raised here, in order.
    ``meanwhile`` runs in this thread once the thread has started on the first item."""
    items: queue.Queue[tuple[bool, Any]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def produce() -> None:
        try:
            for item in batches:
                while not stop.is_set():
                    try:
                        items.put((True, item), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            items.put((False, None))
        except BaseException as exc:  # handed to the consumer, raised there
            items.put((False, exc))

    worker = threading.Thread(target=produce, name="table-read-ahead", daemon=True)
    worker.start()
    try:
        if meanwhile is not None:
            meanwhile()
        while True:
            more, item = items.get()
            if not more:
                if item is not None:
                    raise item
                return
            yield item
    finally:
        stop.set()
        while worker.is_alive():  # unblock a producer waiting on a full queue, then let it end
            with contextlib.suppress(queue.Empty):
                items.get(timeout=0.1)


def fold_batches(
    stream: TableStream,
    *,
    columns: Sequence[str] | None,
    start: Callable[[], S],
    add: Callable[[S, dict[str, Column]], None],
    read_ahead: int = 1,
    meanwhile: Callable[[], None] | None = None,
) -> S:
    """Fold every batch of ``columns`` into a state made by ``start`` (made again if a CSV column widens).

    The next ``read_ahead`` batches are read by a thread while ``add`` works (0: no thread); that thread
    imports nothing (what decoding a CSV's or a table's text loads is imported first, in this thread), so a
    caller may import meanwhile: ``meanwhile`` runs once, in this thread, before the first batch reaches
    ``add``, while the read-ahead thread reads it. Arrow's memory is handed back to the system at the end.
    """
    if read_ahead > 0 and stream.format != "parquet":
        import pyarrow.compute  # noqa: F401  # what _coded imports for CSV text: here, not on the read-ahead thread
    while True:
        state = start()
        batches = stream.batches(columns)
        if meanwhile is not None and read_ahead == 0:
            meanwhile()
        try:
            for batch in _read_ahead(batches, read_ahead, meanwhile) if read_ahead > 0 else batches:
                add(state, batch)
            return state
        except _Widened:
            meanwhile = None  # it ran
            continue
        finally:
            release_memory()


def release_memory() -> None:
    """Hand the memory Arrow kept of the batches read back to the system."""
    pa.default_memory_pool().release_unused()


def write_table(columns: Mapping[str, np.ndarray], path: str | Path) -> Path:
    """Write columns to ``.csv`` or ``.parquet`` (chosen by the suffix); NaN/None become nulls."""
    p = Path(path)
    fmt = _format(p, verb="write")
    p.parent.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for name, col in columns.items():
        if col.dtype.kind == "f":
            arrays[name] = pa.array(col, mask=np.isnan(col))
        elif col.dtype.kind == "O":
            arrays[name] = pa.array([None if v is None or v == "" else str(v) for v in col], type=pa.string())
        else:
            arrays[name] = pa.array(col)
    table = pa.table(arrays)
    if fmt == "csv":
        pacsv.write_csv(table, p)
    else:
        pq.write_table(table, p)
    return p


def _parse_float(v: Any) -> float:
    try:
        return float(v) if v is not None and v != "" else np.nan
    except (TypeError, ValueError):
        return np.nan


def as_python(values: Column) -> list[Any]:
    """A column as Python values, None for a null (a NaN number, a missing text)."""
    if isinstance(values, CodedColumn):
        return values.decode().tolist()
    out = values.tolist()
    if values.dtype.kind == "f" and np.isnan(values).any():
        return [None if v != v else v for v in out]
    return out


def as_float(values: Column) -> np.ndarray:
    """A numeric column as float64 (NaN for missing); strings that are not numbers become NaN."""
    if isinstance(values, CodedColumn):  # each distinct string parsed once
        lookup = np.array([_parse_float(v) for v in values.categories.tolist()] + [np.nan])
        return lookup[values.codes]
    if values.dtype.kind in "iufb":
        return np.asarray(values, dtype=np.float64)
    out = np.full(values.shape, np.nan)
    for i, v in enumerate(values):
        out[i] = _parse_float(v)
    return out
