"""The window sketch cache: counts of sealed blocks of batch ids kept in ``monitor_window_sketches`` and
merged. Over a sequence of runs with the log changing in between (a moving window, feedback for old blocks,
a batch appearing in and one leaving an old block, a version filter, a time bound cutting a block, a new
profile and threshold, requests of several predictions with a last-N window cutting inside one, also at a
block's first id), the cached read equals a read with an empty cache exactly (every array, counter, label
count and the Page-Hinkley state) and today's full read (no cache) up to the rounding of float sums. The
monitor runs use it on PostgreSQL only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, cast

import numpy as np
import pytest
from sqlalchemy import Engine, delete, func, select, text

from core.config import Settings
from core.database import Database, open_database
from monitors import sketch_cache as cache_module
from monitors.engine import evaluate
from monitors.flows import sketch_cache
from monitors.log_window import SketchCache, Window, read_window
from monitors.models import WindowSketchBlock
from monitors.profile import CategoricalProfile, NumericProfile, Profile
from monitors.sketch import GridCounts, WindowSketch, decode_counts, encode_counts
from monitors.sketch_cache import BlockReader
from predictions import typed
from predictions.service import record_feedback
from predictions.windows import BlockStat, WindowReader, WindowSpec
from tests.monitors.helpers import true_probability
from tests.predictions.logdata import log_inputs, plain
from tests.support import CREDIT_FEATURES, credit_profile, postgres_schema
from training.cluster.datagen import generate

BLOCK = 256  # predictions per block: with requests of one prediction the 3.6k-request log spans 15 blocks

FEATURES = CREDIT_FEATURES


@pytest.fixture(scope="module")
def profile() -> Profile:
    return credit_profile(seed=101)


def documents(n: int, seed: int) -> list[dict[str, Any]]:
    cols = generate(n, seed=seed)
    return [{f: plain(cols[f][i]) for f in FEATURES} for i in range(n)]


AWKWARD: list[tuple[dict[str, Any], list[str]]] = [
    # (changes, keys removed): the last four cannot be typed (their request is logged with its documents)
    ({"region": None}, ["age"]),  # an absent key, a null category
    ({"income": 2**60, "age": 41, "debt_to_income": -0.0}, []),  # ints (one beyond 2**53), -0.0
    ({"home_ownership": "", "loan_purpose": "brand_new"}, []),  # empty and unseen categories
    ({"credit_score": None, "loan_amount": 1e9}, ["region"]),  # null; beyond the reference
    ({"loan_amount": math.inf, "income": math.nan}, []),  # the log writes null for both
    ({"extra": 1.5, "loan_purpose": 'quote " and \\ and \n and é'}, []),  # a key no layout has
    ({"age": "1.5"}, []),  # text in a numeric feature (counts as 1.5)
    ({"age": "abc"}, []),  # text that is no number (missing)
    ({"income": True}, []),  # a bool in a numeric feature
    ({"region": 7}, []),  # a number in a categorical feature
]


def awkward(docs: list[dict[str, Any]], at: int) -> None:
    for i, (changes, removed) in enumerate(AWKWARD):
        doc = docs[at + i]
        doc.update(changes)
        for key in removed:
            del doc[key]


def layouts(profile: Profile) -> tuple[typed.Layout, typed.Layout, typed.Layout]:
    """The contract's layout (one category the contract does not know), the same in another order, and one
    lacking a categorical feature the profile asks for."""
    numeric = [n for n in FEATURES if isinstance(profile.features[n], NumericProfile)]
    categorical = [n for n in FEATURES if isinstance(profile.features[n], CategoricalProfile)]
    known = {c: sorted(cast(CategoricalProfile, profile.features[c]).categories) for c in categorical}
    known["loan_purpose"] = known["loan_purpose"][1:]
    contract = typed.make_layout(numeric, categorical, [known[c] for c in categorical])
    reordered = typed.make_layout(
        numeric[::-1], categorical[::-1], [known[c][::-1] for c in categorical[::-1]]
    )
    lacking = typed.make_layout(numeric, [c for c in categorical if c != "region"])  # every text as text
    return contract, reordered, lacking


def _mixed_log(url: str, profile: Profile) -> tuple[Database, list[str], typed.Layout]:
    """3,000 predictions of ``credit`` (batch ids 1..3000, one per request): documents only, then typed in a
    layout lacking a feature, then typed in the contract's order with every awkward value, then typed in
    another order (the newest 500); two thirds labelled. Returns the database, the prediction ids (oldest
    first) and the contract's layout."""
    db = open_database(url)
    contract, reordered, lacking = layouts(profile)
    docs = documents(3_000, seed=5)
    awkward(docs, 10)  # in the documents-only part too
    awkward(docs, 1_600)
    p = np.random.default_rng(6).random(3_000)
    p[1_700:1_705] = np.nan  # predictions without a value
    ids: list[str] = []
    for (lo, hi), layout in zip(
        [(0, 1_000), (1_000, 1_500), (1_500, 2_500), (2_500, 3_000)],
        [None, lacking, contract, reordered],
        strict=True,
    ):
        ids += log_inputs(db.engine, docs[lo:hi], layout=layout, probability=p[lo:hi])
    labels = [(pid, float(i % 2)) for i, pid in enumerate(ids) if i % 3]
    with db.session() as s:
        record_feedback(session=s, model_name="credit", labels=labels)
    return db, ids, contract


def assert_grids(a: GridCounts | None, b: GridCounts | None, *, exact: bool, what: str) -> None:
    assert (a is None) == (b is None), what
    if a is None or b is None:
        return
    assert np.array_equal(a.cells, b.cells), what
    assert (a.missing, a.outside) == (b.missing, b.outside), what
    if exact:
        assert np.array_equal(a.sums, b.sums), what
    else:
        assert np.allclose(a.sums, b.sums, rtol=1e-12, atol=1e-9), what


def assert_sketches(a: WindowSketch, b: WindowSketch, *, exact: bool) -> None:
    """Every field; ``exact``: floats to the bit (else float sums and the detector's floats to rounding)."""
    assert a.rows == b.rows and a.threshold == b.threshold
    assert set(a.numeric) == set(b.numeric)
    for name in a.numeric:
        assert_grids(a.numeric[name], b.numeric[name], exact=exact, what=name)
    assert {k: dict(v) for k, v in a.categorical.items()} == {k: dict(v) for k, v in b.categorical.items()}
    assert_grids(a.prediction, b.prediction, exact=exact, what="prediction")
    assert_grids(a.pca_error, b.pca_error, exact=exact, what="pca_error")
    la, lb = a.labels, b.labels
    assert (la.rows, la.true_pos, la.false_pos, la.false_neg, la.true_neg) == (
        lb.rows,
        lb.true_pos,
        lb.false_pos,
        lb.false_neg,
        lb.true_neg,
    )
    for cells in ("positive_cells", "negative_cells"):
        x, y = getattr(la, cells), getattr(lb, cells)
        assert (x is None) == (y is None) and (x is None or np.array_equal(x, y)), cells
    ea, eb = dataclasses.asdict(a.errors), dataclasses.asdict(b.errors)
    if exact:
        assert ea == eb
    else:
        for key in ("n", "seen", "alarms", "delta", "threshold", "min_instances"):
            assert ea[key] == eb[key], key
        for key in ("mean", "cumulative", "minimum"):
            assert ea[key] == pytest.approx(eb[key], rel=1e-9, abs=1e-9), key


@dataclasses.dataclass
class Reads:
    """Reads one window three ways: through the cache under test, through an emptied cache, without one."""

    engine: Engine
    cache: SketchCache
    scratch: Database  # the emptied cache lives in a SQLite file of its own

    def check(
        self, profile: Profile, spec: WindowSpec, *, now: datetime | None = None, threshold: float = 0.5
    ) -> Window:
        args: dict[str, Any] = dict(
            engine=self.engine, profile=profile, model_name="credit", spec=spec, now=now, threshold=threshold
        )
        cached = read_window(**args, cache=self.cache, chunk_rows=100)
        with self.scratch.session() as s:
            s.execute(delete(WindowSketchBlock))
        cold = read_window(**args, cache=SketchCache(self.scratch.engine, BLOCK), chunk_rows=100)
        full = read_window(**args)
        assert cold.cached_blocks == 0 and full.cached_blocks is None
        assert cached.rows == cold.rows == full.rows > 0
        assert (cached.first_id, cached.last_id, cached.start, cached.end, cached.skip) == (
            full.first_id,
            full.last_id,
            full.start,
            full.end,
            full.skip,
        )
        assert cold.skip == full.skip
        assert cached.labelled == full.labelled
        assert_sketches(cached.sketch, cold.sketch, exact=True)
        assert_sketches(cached.sketch, full.sketch, exact=False)
        ours, theirs = (
            evaluate(profile=profile, sketch=cached.sketch),
            evaluate(profile=profile, sketch=full.sketch),
        )
        assert [f.drifted for f in ours.features] == [f.drifted for f in theirs.features]
        assert ours.drifted == theirs.drifted
        return cached


def _retime(engine: Engine, base: datetime) -> None:
    """``logged_at`` = base + batch id seconds, on the batches and their labels (a log written over an
    hour)."""
    with engine.begin() as conn:
        conn.execute(
            text("UPDATE prediction_batches SET logged_at = :b + id * interval '1 second'"), {"b": base}
        )
        conn.execute(
            text(
                "UPDATE prediction_feedback f SET logged_at = p.logged_at FROM prediction_batches p "
                "WHERE p.id = f.log_id AND f.logged_at <> p.logged_at"
            )
        )


# One log and its cache through a sequence of runs with the log changing in between. Each scenario is a test
# of its own; the tests share the story (a module fixture): a test takes its step after the steps before it,
# which in file order are the tests before it, so each step runs once. A test run alone, out of order or
# after a failed step gets a fresh log on which the earlier steps are replayed (their actions, not their
# assertions).
SPEC = WindowSpec(rows=2_500)
TIMED = WindowSpec(minutes=20)  # since = id 2701's time (at NOW below): block 10 (2560..2815) is cut
V2_SPEC = WindowSpec(rows=300, version=2)  # ids 3301..3600: block 13 sealed, 12 and 14 edges
BOTH = WindowSpec(rows=500, minutes=20)


class Story:
    """The log of ``_mixed_log`` with ``other``'s rows and version 2's, logged over an hour, read through a
    cache of ``BLOCK`` ids as the steps below change it; ``seen`` holds each step's result."""

    def __init__(self, base_url: str, profile: Profile, folder: Path) -> None:
        self.base_url, self.profile, self.folder = base_url, profile, folder
        self.done: list[str] = []
        self.seen: dict[str, Any] = {}
        self.broken = False
        self._schema: contextlib.ExitStack | None = None
        self.fresh()

    def fresh(self) -> None:
        self.close()
        self._schema = contextlib.ExitStack()
        url = self._schema.enter_context(postgres_schema(self.base_url))
        # credit: ids 1..3000 (requests of one prediction: documents, awkward values, three layouts, labels)
        self.db, self.rows, self.contract = _mixed_log(url, self.profile)
        log_inputs(self.db.engine, documents(200, seed=8), layout=self.contract, model="other")  # 3001..3200
        self.v2 = log_inputs(
            self.db.engine, documents(400, seed=9), layout=self.contract, version=2
        )  # ..3600
        self.base = datetime.now(UTC).replace(microsecond=0) - timedelta(hours=3)
        self.now = self.base + timedelta(seconds=3_901)
        _retime(self.db.engine, self.base)
        self.reads = Reads(
            self.db.engine,
            SketchCache(self.db.engine, BLOCK),
            open_database(f"sqlite:///{self.folder}/cache.db"),
        )
        self.done, self.seen, self.broken = [], {}, False

    def take(self, name: str) -> Any:
        """Step ``name``'s result, taken after every step before it (and only once)."""
        at = [step for step, _ in STEPS].index(name)
        if self.broken or self.done != [step for step, _ in STEPS[: len(self.done)]] or len(self.done) > at:
            self.fresh()
        for step, action in STEPS[len(self.done) : at + 1]:
            self.broken = True  # until the step is through: a failure leaves the log in between steps
            with pytest.MonkeyPatch.context() as mp:
                mp.setattr(
                    cache_module, "_FETCH_BLOCKS", 3
                )  # stored counts read and written 3 blocks a query
                self.seen[step] = action(self)
            self.done.append(step)
            self.broken = False
        return self.seen[name]

    def close(self) -> None:
        if self._schema is not None:
            self.reads.scratch.dispose()
            self.db.dispose()
            self._schema.close()
            (self.folder / "cache.db").unlink(missing_ok=True)
            self._schema = None


def _first(story: Story) -> Window:
    return story.reads.check(story.profile, SPEC)


def _moved(story: Story) -> Window:
    """300 new rows (ids 3601..3900)."""
    log_inputs(
        story.db.engine, documents(300, seed=10), layout=story.contract, probability=np.linspace(0, 1, 300)
    )
    _retime(story.db.engine, story.base)
    return story.reads.check(story.profile, SPEC)


def _labelled(story: Story) -> tuple[int, int, Window]:
    """Feedback for rows of cached blocks and of version 2: (labels sent, labels stored, the window)."""
    labels = [(pid, 1.0) for i, pid in enumerate(story.rows[1_500:1_800]) if i % 3 == 0]
    labels += [(pid, 0.0) for pid in story.v2[:50]]
    with story.db.session() as s:
        stored = record_feedback(session=s, model_name="credit", labels=labels)[0]
    return len(labels), stored, story.reads.check(story.profile, SPEC)


def _changed(story: Story) -> Window:
    """A row appears in an old block (committed late, lower id) and another leaves one."""
    with story.db.engine.begin() as conn:
        conn.execute(text("UPDATE prediction_batches SET model_name = 'credit' WHERE id = 3100"))
        conn.execute(text("DELETE FROM prediction_batches WHERE id = 2000"))
    return story.reads.check(story.profile, SPEC)


def _twice(spec: WindowSpec) -> Callable[[Story], tuple[Window, Window]]:
    def action(story: Story) -> tuple[Window, Window]:
        now = None if spec.minutes is None else story.now
        return story.reads.check(story.profile, spec, now=now), story.reads.check(
            story.profile, spec, now=now
        )

    return action


def _replayed(story: Story) -> tuple[Window, Window]:
    """A row of block 13 logged long before (a replayed spool); then the time bound moves 150 s on."""
    with story.db.engine.begin() as conn:
        conn.execute(
            text("UPDATE prediction_batches SET logged_at = :at WHERE id = 3400"),
            {"at": story.base + timedelta(seconds=10)},
        )
    replayed = story.reads.check(story.profile, TIMED, now=story.now)
    later = story.reads.check(story.profile, TIMED, now=story.now + timedelta(seconds=150))
    return replayed, later


def _other(story: Story) -> tuple[Window, Window, Window, tuple[int, int]]:
    """A new profile read twice, then with a new threshold; (fingerprints, lowest block) stored after."""
    other = credit_profile(seed=202)
    reads = story.reads
    windows = reads.check(other, SPEC), reads.check(other, SPEC), reads.check(other, SPEC, threshold=0.3)
    with story.db.session() as s:
        keys = s.execute(
            select(
                func.count(func.distinct(WindowSketchBlock.fingerprint)), func.min(WindowSketchBlock.block)
            )
        ).one()
    return (*windows, (keys[0], keys[1]))


STEPS: list[tuple[str, Callable[[Story], Any]]] = [
    ("first", _first),
    ("second", _first),
    ("moved", _moved),
    ("labelled", _labelled),
    ("changed", _changed),
    ("version", _twice(V2_SPEC)),
    ("timed", _twice(TIMED)),
    ("replayed", _replayed),
    ("both", _twice(BOTH)),
    ("other", _other),
]


@pytest.fixture(scope="module")
def story(postgres_url: str, profile: Profile, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Story]:
    story = Story(postgres_url, profile, tmp_path_factory.mktemp("sketch-cache"))
    yield story
    story.close()


def test_a_first_run_counts_every_block(story: Story) -> None:
    first = story.take("first")
    assert first.cached_blocks == 0 and first.first_id == 901


def test_the_second_run_takes_every_sealed_block_from_the_cache(story: Story) -> None:
    second = story.take("second")
    sealed = (3600 + 1) // BLOCK - (901 + BLOCK - 1) // BLOCK  # blocks 4..13 lie wholly inside 901..3600
    assert second.cached_blocks == sealed == 10 and second.counted_blocks == 2  # the two edges


def test_a_moving_window_reads_only_the_new_blocks_and_the_edges(story: Story) -> None:
    moved = story.take("moved")
    assert moved.first_id == 1_201 and moved.cached_blocks == 9  # blocks 5..13 from the cache


def test_feedback_for_rows_of_cached_blocks_is_counted_and_the_blocks_stay_cached(story: Story) -> None:
    sent, stored, labelled = story.take("labelled")
    assert stored == sent
    # (two of the rows have no probability: rows 1701 and 1704, see _mixed_log)
    assert labelled.labelled == story.seen["moved"].labelled + sent - 2 and labelled.cached_blocks == 10


def test_a_row_appearing_in_and_one_leaving_an_old_block_are_recounted(story: Story) -> None:
    changed = story.take("changed")
    _, _, labelled = story.seen["labelled"]
    assert changed.rows == labelled.rows and changed.first_id == labelled.first_id  # one in, one out
    assert changed.cached_blocks == 8  # blocks 7 (id 2000) and 12 (id 3100) recounted


def test_a_version_filter_keys_its_own_blocks(story: Story) -> None:
    first, again = story.take("version")
    assert first.cached_blocks == 0
    assert again.cached_blocks == 1


def test_the_blocks_a_time_bound_cuts_are_edges_read_with_the_bound(story: Story) -> None:
    first_timed, again = story.take("timed")
    assert first_timed.first_id == 2_701
    assert again.cached_blocks == 4  # 11, 12, 13, 14


def test_an_old_row_inside_a_sealed_block_makes_it_an_edge(story: Story) -> None:
    replayed, later = story.take("replayed")
    first_timed, _ = story.seen["timed"]
    assert replayed.rows == first_timed.rows - 1 and replayed.cached_blocks == 3  # 11, 12, 14
    assert later.first_id == 2_851 and later.cached_blocks == 2  # since = 2851: block 11 is cut; 12, 14


def test_a_window_bounded_by_rows_and_time_takes_its_sealed_blocks(story: Story) -> None:
    _, again = story.take("both")
    assert again.cached_blocks == 1  # 3400..3900: block 14 (3584..3839)


def test_a_new_profile_or_threshold_never_reuses_old_counts(story: Story) -> None:
    first, again, threshold, keys = story.take("other")
    assert first.cached_blocks == 0
    assert again.cached_blocks == 10  # 5..14
    assert threshold.cached_blocks == 0
    assert keys == (1, 5)  # the old key's blocks are deleted


def test_a_block_stored_while_a_row_was_committing_is_not_stored(pg_url: str, profile: Profile) -> None:
    """A block whose read finds another row count than its statistics (a commit in between) is counted for
    this run but not stored, so the next run recounts it."""
    db, _, _ = _mixed_log(pg_url, profile)
    cache = SketchCache(db.engine, BLOCK)
    real = WindowReader.plan

    def stale(self: WindowReader, **kw: Any) -> tuple[Any, list[BlockStat]]:  # block 5 one row more
        summary, stats = real(self, **kw)
        return summary, [dataclasses.replace(st, rows=st.rows + (st.block == 5)) for st in stats]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(WindowReader, "plan", stale)
        read_window(engine=db.engine, profile=profile, model_name="credit", spec=WindowSpec(), cache=cache)
    with db.session() as s:
        stored = set(s.scalars(select(WindowSketchBlock.block)))
    assert 5 not in stored and {4, 6} <= stored
    db.dispose()


def test_the_newest_blocks_are_read_while_the_summary_scans(
    pg_url: str, profile: Profile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The newest blocks the cache lacks are read before the summary is known, bounded by the newest id seen
    first: rows arriving meanwhile stay out of the window, the counts equal a run that reads every block
    after the summary, and a block whose row count changed in between is read again."""
    db, _, contract = _mixed_log(pg_url, profile)  # credit: ids 1..3000, blocks 0..11 of 256 ids
    scratch = open_database(f"sqlite:///{tmp_path}/cache.db")
    args: dict[str, Any] = dict(engine=db.engine, profile=profile, model_name="credit", chunk_rows=100)
    early: list[list[int]] = []
    read_early, summarize = cache_module._read_early, WindowReader.plan

    def spy(**kw: Any) -> Any:
        got = read_early(**kw)
        early.append(sorted(got))
        return got

    def arriving(self: WindowReader, **kw: Any) -> Any:  # rows logged while the run is under way
        log_inputs(db.engine, documents(40, seed=12), layout=contract)
        return summarize(self, **kw)

    def cold(spec: WindowSpec) -> Window:  # every block read, after the summary (no early reads)
        with scratch.session() as s:
            s.execute(delete(WindowSketchBlock))
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(cache_module, "_EARLY_BLOCKS", 0)
            return read_window(**args, spec=spec, cache=SketchCache(scratch.engine, BLOCK))

    spec = WindowSpec(rows=2_500)
    before = cold(spec)  # ids 501..3000
    monkeypatch.setattr(cache_module, "_read_early", spy)
    monkeypatch.setattr(WindowReader, "plan", arriving)
    first = read_window(**args, spec=spec, cache=SketchCache(db.engine, BLOCK))
    assert early[-1] == [7, 8, 9, 10, 11]  # the five newest: 1792..3000, all inside ids 501..3000
    assert (first.first_id, first.last_id, first.rows) == (501, 3_000, 2_500)  # the 40 new rows: not yet
    monkeypatch.setattr(WindowReader, "plan", summarize)
    assert_sketches(first.sketch, before.sketch, exact=True)

    # the next run: the cache holds the sealed blocks; the newest (partial) one is read early
    second = read_window(**args, spec=spec, cache=SketchCache(db.engine, BLOCK))
    assert early[-1] == [11] and second.last_id == 3_040 and second.cached_blocks == 8  # 3..10
    assert_sketches(second.sketch, cold(spec).sketch, exact=True)

    # a window within the newest block: nothing is read early (its first id is not known yet)
    small = WindowSpec(rows=100)
    assert read_window(**args, spec=small, cache=SketchCache(db.engine, BLOCK)).rows == 100
    assert early[-1] == []

    # a row committed between the early count and the summary: the block is read again
    stats = WindowReader.blocks
    monkeypatch.setattr(
        WindowReader,
        "blocks",
        lambda self, **kw: [dataclasses.replace(st, rows=st.rows - 1) for st in stats(self, **kw)],
    )
    reads: list[tuple[int, int]] = []
    read_block = BlockReader.read

    def counted(self: BlockReader, summary: Any, **kw: Any) -> Any:
        reads.append((kw["low"], kw["high"]))
        return read_block(self, summary, **kw)

    monkeypatch.setattr(BlockReader, "read", counted)
    with scratch.session() as s:
        s.execute(delete(WindowSketchBlock))
    again = read_window(**args, spec=spec, cache=SketchCache(scratch.engine, BLOCK))
    assert early[-1] == [7, 8, 9, 10, 11] and reads.count((2_304, 2_559)) == 2  # early, then again
    monkeypatch.setattr(WindowReader, "blocks", stats)
    assert_sketches(again.sketch, cold(spec).sketch, exact=True)
    scratch.dispose()
    db.dispose()


def test_encoded_counts_round_trip(profile: Profile) -> None:
    cols = generate(2_000, seed=3)
    cols["region"][:5] = None
    sketch = WindowSketch().update(profile, cols, predictions=true_probability(cols))
    back = decode_counts(encode_counts(sketch))
    assert_sketches(back, sketch, exact=True)
    assert back.categorical["region"][None] == 5
    sketch.categorical["region"][7] += 1  # type: ignore[index]
    with pytest.raises(TypeError, match="not text"):
        encode_counts(sketch)


def test_sqlite_runs_without_the_cache_and_an_explicit_one_reads_the_same(
    tmp_path: Path, profile: Profile
) -> None:
    """The monitor runs use no sketch cache on SQLite (setting ``monitor_sketch_cache``: no effect there); the
    one reader takes a cache it is handed on SQLite too, with the counts of a read without it."""
    db = open_database(f"sqlite:///{tmp_path}/log.db")
    settings = Settings.model_validate(
        {"database_url": f"sqlite:///{tmp_path}/log.db", "monitor_sketch_cache": True}
    )
    assert sketch_cache(db=db, settings=settings) is None
    log_inputs(db.engine, documents(300, seed=4), per_request=3)
    log_inputs(db.engine, documents(300, seed=5), layout=layouts(profile)[0], per_request=7)
    args: dict[str, Any] = dict(engine=db.engine, profile=profile, model_name="credit", chunk_rows=50)
    for spec in (WindowSpec(), WindowSpec(rows=500)):  # the second cuts inside a request of 3
        full = read_window(**args, spec=spec)
        assert full.reader == "columnar" and full.cached_blocks is None
        with db.session() as s:
            s.execute(delete(WindowSketchBlock))
        cold = read_window(**args, spec=spec, cache=SketchCache(db.engine, 64))
        warm = read_window(**args, spec=spec, cache=SketchCache(db.engine, 64))
        # the second read takes the sealed blocks from the cache and counts only the others
        assert cold.cached_blocks == 0 and cold.counted_blocks is not None and warm.cached_blocks
        assert warm.cached_blocks + (warm.counted_blocks or 0) == cold.counted_blocks
        assert full.rows == cold.rows == warm.rows == (spec.rows or 600)
        assert full.skip == cold.skip == warm.skip == (100 % 3 if spec.rows else 0)
        assert_sketches(cold.sketch, full.sketch, exact=False)
        assert_sketches(warm.sketch, cold.sketch, exact=True)
    db.dispose()


def test_requests_of_several_predictions_and_windows_cutting_inside_one(
    pg_url: str, profile: Profile, tmp_path: Path
) -> None:
    """Requests of 3 and of 5 predictions (typed, a few with their documents) and of one (documents only): a
    last-N window whose first request is cut (``skip``) reads that block as an edge, also when the cut
    request is a block's first id; the cached read equals an uncached one, labels of the left-out
    predictions stay out."""
    db = open_database(pg_url)
    contract = layouts(profile)[0]
    docs = documents(4_300, seed=21)
    awkward(docs, 2_000)  # requests of 5 with a value that cannot be typed: logged with their documents
    p = np.random.default_rng(22).random(4_300)
    ids = log_inputs(db.engine, docs[:1_500], layout=contract, probability=p[:1_500], per_request=3)
    ids += log_inputs(
        db.engine, docs[1_500:4_000], layout=contract, probability=p[1_500:4_000], per_request=5
    )
    ids += log_inputs(db.engine, docs[4_000:], probability=p[4_000:], per_request=1)
    with db.engine.connect() as conn:
        shape = conn.execute(
            text("SELECT count(*), max(id), sum(size), count(inputs) FROM prediction_batches")
        ).one()
    # batch ids 1..500: requests of 3; 501..1000: of 5; 1001..1300: of 1 (documents)
    assert tuple(shape) == (1_300, 1_300, 4_300, 300 + 1)  # (the untyped awkward values: one request)
    labelled = {i: float(i % 2) for i in range(0, 4_300, 4)}
    with db.session() as s:
        stored = record_feedback(
            session=s, model_name="credit", labels=[(ids[i], y) for i, y in labelled.items()]
        )
    assert stored[0] == len(labelled)
    # blocks of about BLOCK predictions: the newest 256 requests hold one each, so a block spans BLOCK ids
    reads = Reads(db.engine, SketchCache(db.engine, BLOCK), open_database(f"sqlite:///{tmp_path}/cache.db"))

    def check(rows: int, first_id: int, skip: int, cached: int) -> Window:
        total = len(ids)
        window = reads.check(profile, WindowSpec(rows=rows))
        assert (window.first_id, window.skip, window.rows) == (first_id, skip, rows)
        assert window.labelled == sum(1 for i in labelled if i >= total - rows)
        assert window.cached_blocks == cached, (rows, window.cached_blocks)
        return window

    # 301 predictions left out: 100 requests of 3 and one of the next request's (batch 101)
    assert check(3_999, 101, 1, 0).counted_blocks == 6  # blocks 0..5, nothing cached yet
    assert check(3_999, 101, 1, 4).counted_blocks == 2  # blocks 1..4 sealed; 0 and 5 are the edges
    check(2_750, 511, 0, 3)  # from batch 511 (1,500 + 10 x 5 left out): blocks 2..4 sealed
    # from the third prediction of batch 512, a block's first id: block 2 is an edge now, read, not taken
    check(2_743, 512, 2, 2)
    check(2_745, 512, 0, 3)  # the whole of batch 512: block 2 is sealed again, and its counts still valid

    # new requests (batch ids 1301..1314) move the window; labels arrive for the cut request's predictions,
    # two of them left out of the window
    ids += log_inputs(db.engine, documents(40, seed=23), layout=contract, per_request=3)
    # (the newest 256 requests' mean size moves from 1 to 1.1: the blocks stay 256 batch ids)
    new = {1_595 + k: 1.0 for k in range(5)}  # batch 520's five predictions
    with db.session() as s:
        assert record_feedback(session=s, model_name="credit", labels=[(ids[i], y) for i, y in new.items()])[
            0
        ] == len(new)
    labelled.update(new)
    check(2_743, 520, 2, 2)  # 1,597 left out: 1,500, 19 requests of 5 and 2; blocks 3 and 4 sealed
    reads.scratch.dispose()
    db.dispose()


def test_stored_blocks_are_compressed_with_lz4_where_the_server_offers_it(
    pg_url: str, profile: Profile
) -> None:
    """Migration 0016: pglz made storing a cold run's blocks a step of its own; lz4 is ~6x quicker."""
    db, _, _ = _mixed_log(pg_url, profile)
    with db.engine.connect() as conn:
        offered = conn.execute(
            text("SELECT 'lz4' = ANY(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'")
        ).scalar()
    if not offered:
        pytest.skip("this PostgreSQL was built without lz4")
    first = read_window(
        engine=db.engine,
        profile=profile,
        model_name="credit",
        spec=WindowSpec(),
        cache=SketchCache(db.engine, BLOCK),
    )
    with db.engine.connect() as conn:
        methods = (
            conn.execute(text("SELECT DISTINCT pg_column_compression(sketch) FROM monitor_window_sketches"))
            .scalars()
            .all()
        )
    assert methods == ["lz4"]
    again = read_window(
        engine=db.engine,
        profile=profile,
        model_name="credit",
        spec=WindowSpec(),
        cache=SketchCache(db.engine, BLOCK),
    )
    assert again.cached_blocks and again.cached_blocks > 0
    assert_sketches(again.sketch, first.sketch, exact=True)
    db.dispose()
