"""The bounds of the command-line options that size work (rows, epochs, windows, workers, seeds, ...).

One list, read by the commands' ``typer`` options (``min=``/``max=``: click words the refusal, naming the
option and the range, exit 2) and by the checks behind them (``alerts.backtest_flows`` checks what a
combination of options makes, e.g. the rows a backtest counts). Each bound is picked from what one machine
does in a sitting, measured where it says so; docs/operations.md ("Bounds of the command line") lists them.
Importing this module costs nothing (the CLI imports it before any command runs).
"""

from __future__ import annotations

import os

MAX_SEED = 2**32 - 1
"""Seeds are 0 to 2**32-1: numpy's legacy seeding rule (``np.random.seed``), which TensorFlow and the data
generator keep too; a negative seed is refused by numpy's ``default_rng``."""

MAX_PROCESSES = min(64, 4 * (os.cpu_count() or 1))
"""Worker processes a command starts on this machine: 4 per CPU, at most 64 (each loads numpy and the
model's data: more than the cores only waits)."""

# --- alerts backtest (measured on 2 cores: bench/alert_backtest.py and docs/alerts.md "The cost") ---------
BACKTEST_MAX_WINDOW = 1_000_000
"""Rows in a backtest's window: filling one costs about 9 µs and 65 bytes a row (10 million rows: 88 s and
900 MB), the error stream is read whole on every run (about 0.15 s a million rows)."""
BACKTEST_MAX_RUNS = 100_000
"""Runs of a backtest (30 days every 30 s is 86,400): 15-35 ms each for 25 features, about an hour."""
BACKTEST_MAX_COUNTED_ROWS = 100_000_000
"""Rows a backtest draws and counts in all (the first window, then each run's new rows, at most its
window): about 15 minutes at 9 µs a row."""
BACKTEST_MAX_RATE = 10_000_000.0
"""Predictions a minute of a backtest's traffic (about 170,000 a second)."""

# --- models import ------------------------------------------------------------------------------------------
MAX_REFERENCE_COLUMNS = 2_000
"""Columns of a reference (features, target and prediction column together), counted from its header or
Parquet metadata before its rows are read: a contract and profile take about 1.4 ms a column (10,000
columns: 13.6 s and 1.8 GB)."""

# --- training (the retraining API's bounds, training/retraining/models.py RetrainRequest, are these too) ----
MAX_EPOCHS = 1_000
"""Passes over the training rows (`train`, `jobs submit`, `demo`, DRIFTWARDEN_RETRAIN_EPOCHS)."""
MAX_CLUSTER_WORKERS = 64
"""Worker processes of a training cluster (`train`, `jobs submit`, `demo`), and of `serve --workers`."""
MAX_PARAMETER_SERVERS = 16
"""Parameter servers of an async training cluster (`train --ps`, `jobs submit --ps`)."""
MAX_BATCH_SIZE = 65_536
"""Rows of one training step (`train --batch-size`)."""
MAX_GENERATED_ROWS = 5_000_000
"""Rows of a generated table (`data generate --rows`, `demo --rows`): about 200 bytes a row while it is
built (1 million rows: 1.3 s and 230 MB)."""

# --- waits and windows of time ------------------------------------------------------------------------------
MAX_PASS_INTERVAL_S = 30 * 86_400.0
"""Seconds between the passes of `driftwarden monitor --interval` (a model's own monitor interval_s has the
same bound)."""
MAX_POLL_S = 3_600.0
"""Seconds between an idle `driftwarden worker`'s looks for a job (`--poll`)."""
MAX_KEEP_DAYS = 36_500.0
"""Days `predictions purge --days` keeps (100 years: the cutoff stays a time both backends store)."""
