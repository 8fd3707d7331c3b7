"""The lake sink from the settings, and its bad input: one line naming the setting or the lake; a server
starts on a lake that refuses writes (its rows wait, the ``lake`` check fails), a command stops."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import Settings
from core.errors import Invalid, Unavailable
from predictions.health import log_check
from predictions.lake.setup import open_sink
from predictions.spool import Spool
from predictions.writer import LogWriter, writer_engine
from tests.lake.sinkdata import batches, documents, unwritable


def _settings(tmp_path: Path, **lake: object) -> Settings:
    return Settings(database_url=f"sqlite:///{tmp_path / 'c.db'}", spool_path=tmp_path / "spool", **lake)  # type: ignore[arg-type]


def test_off_mode_has_no_sink(tmp_path: Path) -> None:
    assert open_sink(_settings(tmp_path, lake_url=str(tmp_path)), strict=True) is None


@pytest.mark.parametrize(
    ("lake", "words"),
    [
        ({"lake_mode": "only"}, "lake_mode=only needs lake_url"),
        ({"lake_mode": "also", "lake_url": "/no/such/lake"}, "/no/such/lake does not exist"),
        ({"lake_mode": "also", "lake_url": "gs://bucket/x"}, "not gs://"),
        ({"lake_mode": "only", "lake_url": "s3:///prefix"}, "needs a bucket"),
    ],
)
def test_a_bad_lake_setting_is_one_line_naming_it(tmp_path: Path, lake: dict[str, str], words: str) -> None:
    for strict in (True, False):  # a server refuses to start too: no wait fixes a typo
        with pytest.raises(Invalid) as caught:
            open_sink(_settings(tmp_path, **lake), strict=strict)
        assert words in str(caught.value) and "\n" not in str(caught.value)


def test_an_s3_endpoint_that_refuses(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "k")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s")
    cfg = _settings(tmp_path, lake_mode="only", lake_url="s3://refusing/lake")
    with pytest.raises(Unavailable) as caught:
        open_sink(cfg, strict=True)
    assert "s3://refusing/lake" in str(caught.value) and "cannot be written" in str(caught.value)
    sink = open_sink(cfg, strict=False)  # a server: starts, its rows wait in the spool
    assert sink is not None
    sink.wal.close()


def test_the_lake_check_fails_while_the_lake_cannot_be_written(tmp_path: Path, local_lake: str) -> None:
    cfg = _settings(tmp_path, lake_mode="only", lake_url=local_lake)
    sink = open_sink(cfg, strict=True)
    assert sink is not None
    sink.retry_s = 0.0
    engine = writer_engine(cfg.database_url.get_secret_value())
    writer = LogWriter(engine=engine, spool=Spool.claim(tmp_path / "log-spool"), lake=sink, database=False)
    checks = {c.name: c for c in log_check(writer)}
    try:
        writer.start()
        with unwritable(Path(local_lake)):
            sink.append(batches(documents(3)), sync=True)
            assert not sink.flush()
            status = checks["lake"].fn()
            assert status.ok is False and local_lake in status.detail and status.value == 3.0
        assert sink.flush()
        status = checks["lake"].fn()
        assert status.ok is True and "3 rows committed, 0 waiting" in status.detail
    finally:
        writer.close(10.0)
        engine.dispose()
