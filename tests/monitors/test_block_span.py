"""The sketch cache's blocks hold about the same number of predictions whatever the request size: a block
spans the configured predictions divided by the mean request size, as a power of two of batch ids."""

from __future__ import annotations

from monitors.sketch_cache import block_span


def test_a_block_spans_fewer_ids_when_requests_carry_more_predictions() -> None:
    assert block_span(65_536, 1.0) == 65_536
    assert block_span(65_536, 32.0) == 2048
    assert block_span(65_536, 7.3) == 8192  # 8978 ids, the nearest power of two
    assert block_span(1024, 5000.0) == 1  # never less than one id


def test_a_mean_size_that_drifts_a_little_keeps_the_span() -> None:
    spans = {block_span(65_536, mean) for mean in (29.0, 30.5, 32.0, 34.0, 38.0)}
    assert spans == {2048}
