"""Engine, sessions, the declarative base shared by every domain's tables, and opening the database."""

from __future__ import annotations

import enum
import fcntl
import hashlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, overload

from sqlalchemy import JSON, DateTime, Dialect, Engine, Enum, MetaData, create_engine, event, make_url, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.types import TypeDecorator

from core import migrate
from core.config import Settings, get_settings
from core.errors import Unavailable

# JSONB on PostgreSQL (indexable, compact), plain JSON text elsewhere.
JSONType = JSON().with_variant(JSONB(), "postgresql")

NAMING = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


def utcnow() -> datetime:
    """Timezone-aware now, UTC."""
    return datetime.now(UTC)


@overload
def aware(value: datetime | str) -> datetime: ...
@overload
def aware(value: None) -> None: ...
@overload
def aware(value: datetime | str | None) -> datetime | None: ...
def aware(value: datetime | str | None) -> datetime | None:
    """A stored time as timezone-aware UTC (None stays None).

    SQLite keeps no zone: it hands stored times back naive (they are UTC), and a raw query's aggregate as
    the stored text. A :class:`UTCDateTime` column does this itself; this is for the values no column type
    processes (raw SQL, untyped expressions) and for times given from outside.
    """
    if value is None:
        return None
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """A timestamp column whose values come back timezone-aware UTC on every backend.

    The DDL is ``DateTime(timezone=True)`` (``timestamptz`` on PostgreSQL), so migrations see no change;
    SQLite stores no zone and returns naive UTC, which this type makes aware. Aware values are stored as UTC.
    """

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None or value.tzinfo is None:
            return value
        return value.astimezone(UTC)

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        return aware(value)


def str_enum(cls: type[enum.StrEnum], name: str) -> Enum:
    """A string column of the enum's values (no database enum type: the same on SQLite and PostgreSQL)."""
    return Enum(cls, name=name, native_enum=False, length=16, values_callable=lambda e: [m.value for m in e])


class Base(DeclarativeBase):
    """Declarative base; every table of every domain hangs off this metadata."""

    metadata = MetaData(naming_convention=NAMING)
    type_annotation_map = {dict[str, Any]: JSONType, list[Any]: JSONType}


def make_engine(url: str, **kwargs: Any) -> Engine:
    """An engine: SQLite gets WAL, a busy timeout and its folder; PostgreSQL a connect timeout and no JIT."""
    if url.startswith("sqlite"):
        path = url.split("///", 1)[-1]
        if path and path != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        kwargs.setdefault("connect_args", {"timeout": 30, "check_same_thread": False})
        engine = create_engine(url, **kwargs)
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    if url.startswith("postgresql"):
        # a black-holed server fails a connection attempt after this, not after the OS's TCP timeout. JIT off:
        # the window reads cost more than jit_above_cost, and compiling took longer than running them (a
        # 65k-row range of the log: 230 ms with JIT, 40-120 ms of it compiling; 133 ms without)
        args = dict(kwargs.get("connect_args") or {"connect_timeout": 10})
        given = [str(o) for o in (make_url(url).query.get("options"), args.get("options")) if o]
        args["options"] = " ".join([*given, "-c jit=off"])  # the URL's own options (a search_path) are kept
        kwargs["connect_args"] = args
    kwargs.setdefault("pool_pre_ping", True)
    return create_engine(url, **kwargs)


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.close()


def begin_sqlite(session: Session, *, immediate: bool = False) -> None:
    """On SQLite, begin the session's transaction now if the driver has not yet (no-op elsewhere).

    The SQLite driver (``pysqlite``, Python 3.11) opens a transaction only before the first write: the reads
    before it run outside any transaction, and a savepoint taken before any write would become the outermost
    transaction, committed on release. ``immediate`` also takes the database's write lock at once: a deferred
    transaction that read before another writer committed can no longer write ("database is locked", with no
    wait), while writers that lock first queue on the busy timeout, so a read-then-write never fails halfway.

    This is a helper for the sessions that need it, not SQLAlchemy's engine-wide pysqlite recipe
    (``isolation_level = None`` on connect, ``BEGIN`` on every ``begin``): that recipe begins every
    transaction deferred before its first read, so every read-then-write of every session (not only these)
    could fail with "database is locked" under concurrent writers, and a transaction could no longer be
    begun ``IMMEDIATE`` once it had read; making every ``BEGIN`` immediate instead would let each read-only
    session (a monitor reading a window of the log) hold the write lock that the prediction writer waits on.
    """
    connection = session.connection()
    if connection.dialect.name != "sqlite":
        return
    raw = connection.connection.dbapi_connection
    if raw is not None and not raw.in_transaction:
        connection.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")


def make_session_factory(engine: Engine) -> sessionmaker[Session]:
    """A session factory bound to ``engine`` (objects stay usable after commit)."""
    return sessionmaker(engine, expire_on_commit=False)


@contextmanager
def session_scope(factory: sessionmaker[Session]) -> Iterator[Session]:
    """Commit on success, roll back on error, always close."""
    session = factory()
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


# PostgreSQL's SQLSTATEs of a server that cannot be reached or is going away: class 08 (connection
# exception), admin_shutdown, crash_shutdown, cannot_connect_now (starting up or shutting down)
UNREACHABLE_STATES = ("08", "57P01", "57P02", "57P03")
RETRY_AFTER_S = 5  # the Retry-After of an answer refused while the database is unreachable


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` (or the error it wraps) says the database cannot be reached right now: no connection
    could be made (refused, timed out, the SQLite file cannot be opened), the connection was lost or the
    server is shutting down, or the pool had none to give. A statement the database refused (a syntax error, a
    missing table, a constraint, a lock) is not: that is a bug or bad data, never an outage."""
    current: BaseException | None = exc
    for _ in range(8):  # the chain of causes, bounded
        if current is None:
            return False
        if isinstance(current, sa_exc.TimeoutError):  # the pool's: every connection busy or none made
            return True
        if isinstance(current, sa_exc.DBAPIError):
            if current.connection_invalidated:  # the dialect saw a disconnect
                return True
            if current.statement is None and isinstance(
                current, sa_exc.OperationalError | sa_exc.InterfaceError
            ):  # raised while connecting, before any statement
                return True
            current = current.orig
            continue
        if _driver_unreachable(current):
            return True
        current = current.__cause__
    return False


def _driver_unreachable(exc: BaseException) -> bool:
    """A DB-API error of the driver itself (psycopg raises its own from some paths) that is about the
    connection: an interface error, or an operational one without a SQLSTATE (the client's) or with one of
    :data:`UNREACHABLE_STATES`."""
    if not type(exc).__module__.startswith("psycopg"):
        return False  # sqlite3's own errors come from statements on an open file (locked, no such table)
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "InterfaceError" in names:
        return True
    state = getattr(exc, "sqlstate", None)
    return "OperationalError" in names and (state is None or str(state).startswith(UNREACHABLE_STATES))


class DatabaseUnavailable(Unavailable):
    """The database cannot be reached: answered 503 with ``Retry-After`` (HTTP), exit 2 (CLI)."""

    def __init__(self, cause: BaseException) -> None:
        self.headers = {"Retry-After": str(RETRY_AFTER_S)}
        super().__init__(
            f"the database is unavailable ({type(cause).__name__}); try again in a few seconds "
            "(rule: database_unavailable)"
        )


def unavailable(exc: BaseException) -> DatabaseUnavailable | None:
    """The :class:`DatabaseUnavailable` to answer for ``exc`` when it is the database being unreachable
    (:func:`unreachable`), else None."""
    return DatabaseUnavailable(exc) if unreachable(exc) else None


@dataclass
class Database:
    """An engine and its session factory."""

    url: str
    engine: Engine
    factory: sessionmaker[Session]

    @contextmanager
    def session(self) -> Iterator[Session]:
        """A transactional session: commit on success, roll back on error."""
        with session_scope(self.factory) as session:
            yield session

    def dispose(self) -> None:
        self.engine.dispose()


@contextmanager
def try_lock(db: Database, name: str) -> Iterator[bool]:
    """Hold the lock ``name`` across every process on this database, if free; yields whether it is held.

    PostgreSQL: a session-level advisory lock on a connection kept for the block (released on exit, or by the
    server when the connection dies). SQLite: an exclusive ``flock`` on a file beside the database file
    (released on exit, or by the kernel when the process dies); an in-memory database has no other process.
    """
    key = hashlib.sha256(name.encode()).digest()[:8]
    if is_sqlite(db.url):
        database = db.engine.url.database
        if not database or database == ":memory:":
            yield True
            return
        folder = Path(database).parent / (Path(database).name + ".locks")
        folder.mkdir(exist_ok=True)
        with open(folder / f"{key.hex()}.lock", "a") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                yield False
                return
            try:
                yield True
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)
        return
    number = int.from_bytes(key, "big", signed=True)
    with db.engine.connect() as conn:
        got = bool(conn.execute(text("SELECT pg_try_advisory_lock(:k)"), {"k": number}).scalar())
        conn.commit()
        try:
            yield got
        finally:
            if got:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": number})
                conn.commit()


def is_sqlite(url: str) -> bool:
    """Whether ``url`` names the embedded SQLite backend."""
    return url.startswith("sqlite")


def open_database(
    url: str | None = None, *, upgrade: bool | None = None, settings: Settings | None = None
) -> Database:
    """Open the configured database after checking that its schema matches the code.

    ``upgrade=None`` follows the settings: the embedded SQLite default upgrades itself, a server database
    only with ``DRIFTWARDEN_DATABASE_AUTO_UPGRADE=true``; otherwise an old schema raises
    :class:`core.migrate.SchemaOutdated` naming ``driftwarden db upgrade``.
    """
    settings = settings or get_settings()
    url = url or settings.database_url.get_secret_value()
    if upgrade is None:
        upgrade = is_sqlite(url) or settings.database_auto_upgrade
    migrate.ensure_schema(url, auto_upgrade=upgrade)
    engine = make_engine(url)
    return Database(url=url, engine=engine, factory=make_session_factory(engine))
