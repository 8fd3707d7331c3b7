"""The one typed settings object, read from ``DRIFTWARDEN_*`` environment variables."""

from __future__ import annotations

import ipaddress
import re
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from core.bounds import MAX_CLUSTER_WORKERS, MAX_EPOCHS

MAX_LINK_TTL_S = 90 * 86400.0
"""The longest lifetime of a signed report link (a link is a bearer credential for one report)."""
MIN_LINK_KEY_CHARS = 32
ENV_PREFIX = "DRIFTWARDEN_"


def env_var(field: str) -> str:
    """The environment variable of the settings field ``field``: ``monitor_interval_s`` ->
    ``DRIFTWARDEN_MONITOR_INTERVAL_S``."""
    return ENV_PREFIX + field.upper()


class Settings(BaseSettings):
    """Effective configuration; every field maps to ``DRIFTWARDEN_<FIELD>``."""

    # an invalid setting's error names it but never echoes the input: several inputs are secrets
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore", hide_input_in_errors=True)

    # storage
    database_url: SecretStr = Field(
        default=SecretStr("sqlite:///./var/driftwarden.db"),
        description="SQLAlchemy URL; sqlite:///... (embedded default) or postgresql+psycopg://...",
    )
    database_auto_upgrade: bool = Field(
        default=False,
        description=(
            "Apply pending migrations when a server database (PostgreSQL) is opened; off: an old schema "
            "stops the command with a message naming `driftwarden db upgrade`. SQLite always upgrades."
        ),
    )
    registry_path: Path = Field(
        default=Path("./var/models"), description="Model registry root (TF Serving layout)."
    )
    checkpoint_path: Path = Field(default=Path("./var/checkpoints"), description="Training checkpoints root.")
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR"] = "INFO"

    # cluster
    cluster_host: str = Field(
        default="127.0.0.1", description="Address the local launcher binds TF servers to."
    )
    cluster_start_timeout_s: float = Field(default=120.0, gt=0, description="Wait for every node to listen.")
    checkpoint_every_steps: int = Field(
        default=50, gt=0, description="Chief saves a checkpoint every N steps."
    )
    steps_per_closure: int = Field(
        default=10, gt=0, description="Async: training steps per scheduled closure."
    )
    ps_max_restarts: int = Field(
        default=0,
        ge=0,
        description="Async on a local cluster: relaunch a lost parameter server (and the chief, which "
        "restores the latest checkpoint) up to this many times; 0: a lost parameter server ends the run.",
    )
    ps_min_shard_bytes: int = Field(
        default=256 << 10,
        gt=0,
        description="Async with several parameter servers: a variable is split into shards of at least this "
        "many bytes (ParameterServerStrategy's variable_partitioner); a smaller one stays whole on one ps.",
    )
    ps_max_shards: int = Field(
        default=0,
        ge=0,
        description="Async: at most this many shards per variable (0: one per parameter server).",
    )
    ps_max_shard_bytes: int = Field(
        default=1 << 30,
        gt=0,
        description="Async: the largest shard (bytes, with its optimizer slot) one parameter server may "
        "hold; a run whose largest shard would be bigger is refused before any process starts.",
    )
    embed_min_levels: int = Field(
        default=1000,
        gt=0,
        description="A categorical feature with more distinct levels than this is hashed into buckets and "
        "looked up in a trainable embedding (as if named by `train --embed`).",
    )
    embed_buckets: int | None = Field(
        default=None,
        gt=1,
        description="Hash buckets of an embedded feature (unset: the power of two above twice its levels).",
    )
    embed_dim: int = Field(default=8, gt=0, le=512, description="Embedding width when --embed gives no DIM.")
    worker_restart_delay_s: float = Field(
        default=2.0, ge=0, description="Async: wait before relaunching a lost worker."
    )
    max_restarts: int = Field(
        default=3, ge=0, description="Relaunches of a lost async chief, or of all sync workers after a loss."
    )
    cluster_spec: str | None = Field(
        default=None,
        description="The training cluster to watch in the health checks: a JSON file path, JSON text or a "
        "TF_CONFIG document (unset: no cluster check).",
    )

    # serving
    api_host: str = "127.0.0.1"
    api_port: int = Field(default=8501, ge=1, le=65535)

    # serving / prediction log (service/serving, predictions/)
    serve_models: list[str] = Field(
        default_factory=list, description="Models to serve (empty: every model that has a serving version)."
    )
    model_poll_interval_s: float = Field(
        default=2.0, gt=0, description="How often the server checks the registry for promotions and labels."
    )
    batch_max_rows: int = Field(default=512, gt=0, description="Micro-batcher: most rows per model call.")
    batch_max_wait_ms: float = Field(
        default=0.0, ge=0, description="Micro-batcher: extra wait for company under load (0: none)."
    )
    batch_inline_rows: int = Field(
        default=256,
        ge=0,
        description="Micro-batcher: a lone request of at most this many rows runs the model on the event "
        "loop's thread instead of handing it to the model thread and back (two thread wake-ups); requests "
        "arriving together still share a call through the model thread. 0: every call on the model thread.",
    )
    model_threads: int = Field(
        default=1,
        ge=0,
        le=1024,
        description="`serve`: threads one model call may use (TensorFlow's intra-op parallelism); 0: "
        "TensorFlow's default, one per core. 1 keeps a small model's call off the cores that the event loop, "
        "the prediction log and its database need (a call split over two busy cores waits for the slower "
        "one); raise it for a large model served by fewer workers than cores.",
    )
    max_body_bytes: int = Field(default=4 * 1024 * 1024, gt=0, description="Largest request body accepted.")
    max_rows_per_request: int | None = Field(
        default=None, gt=0, description="Row limit per request (default: the version schema's limit)."
    )
    prediction_log_enabled: bool = Field(default=True, description="Log every prediction (off: none).")
    metrics_enabled: bool = Field(default=True, description="Prometheus counters at /metrics.")
    api_workers: int | None = Field(
        default=None,
        ge=1,
        le=MAX_CLUSTER_WORKERS,
        description="`serve`: worker processes sharing the port (--workers overrides); unset: one per CPU "
        "core this process may run on. Each worker loads every served model.",
    )
    malloc_mmap_threshold_kb: int = Field(
        default=128,
        ge=0,
        le=32 * 1024,
        description="`serve` and `monitor` (glibc): a buffer of this many KiB or more gets its own mapping, "
        "returned to the system when freed, with no dynamic adjustment (keeps the monitor's freed window "
        "buffers out of the serving worker's heap; see core/memory.py); 0: glibc's default.",
    )
    metrics_dir: Path | None = Field(
        default=None,
        description="Folder shared by the workers of `serve --workers N`: per-process metric snapshots "
        "summed at each scrape, and the lock that runs periodic jobs in one worker; `serve` creates and "
        "removes one (unset: one process, metrics in memory only).",
    )
    log_durability: Literal["durable", "fast"] = Field(
        default="fast",
        description="fast: answer first, write within log_flush_interval_ms (a hard crash loses that much); "
        "durable: answer after the row is committed or fsynced to the spool (group commit; slower).",
    )
    log_queue_max_rows: int = Field(default=100_000, gt=0, description="Writer queue bound (beyond: spool).")
    log_batch_max_rows: int = Field(default=2000, gt=0, description="Most rows per database write.")
    log_flush_interval_ms: float = Field(default=25.0, gt=0, description="fast mode: time between writes.")
    log_commit_timeout_s: float = Field(
        default=1.0, gt=0, description="durable mode: a commit slower than this spools the rows instead."
    )
    log_retry_interval_s: float = Field(default=1.0, gt=0, description="Retry a failed database after this.")
    spool_path: Path = Field(
        default=Path("./var/spool"),
        description="Local spool of unwritten log rows (default: `spool` beside the registry, in the same "
        "data folder: ./var/spool, or /var/lib/driftwarden/spool when the registry is there).",
    )
    spool_max_bytes: int | None = Field(
        default=None,
        gt=0,
        description="Cap on the spool's bytes not yet replayed, per process, and on the spool of KServe's "
        "CloudEvents halves (unset: the disk's free space). "
        "Past it, with the database down, new log rows are lost: counted in "
        "driftwarden_prediction_log_rows_dropped_total and failing the prediction_log health check (fast "
        "mode still answers; durable mode answers 503).",
    )
    cloudevents_wait_s: float = Field(
        default=120.0,
        gt=0,
        description="POST /v1/cloudevents: how long a request event waits for its response (and a response "
        "for its request) before the pair is settled: a request alone is logged with its inputs and no "
        "prediction (input drift counts it), a response alone is counted as expired.",
    )
    cloudevents_keep_s: float = Field(
        default=3600.0,
        gt=0,
        description="How long a settled pair's tombstone is kept: a copy of one of its events arriving "
        "within this time is known as a duplicate.",
    )
    cloudevents_sweep_interval_s: float = Field(
        default=10.0,
        ge=0,
        description="Seconds between passes that settle CloudEvent pairs whose wait is over and replay "
        "halves spooled while the database was down (0: off).",
    )
    retention_days: float = Field(
        default=30.0,
        gt=0,
        description="Prediction log retention window (PostgreSQL: the server's job drops whole partitions, "
        "so a row stays up to log_partition_days longer; `predictions purge` cuts exactly).",
    )
    retention_interval_s: float = Field(
        default=3600.0,
        ge=0,
        description="Seconds between retention passes in the server (0: off). On PostgreSQL a pass also "
        "creates the log's partitions ahead: with it off, new rows land in the DEFAULT partition once the "
        "migration's run out, until `predictions purge` runs.",
    )
    log_partition_days: int = Field(
        default=1,
        ge=1,
        le=366,
        description="PostgreSQL: days of prediction log per partition (retention drops whole partitions; "
        "the retention job creates them a week ahead). New partitions only: existing ones keep their range.",
    )
    shutdown_timeout_s: float = Field(default=30.0, gt=0, description="Graceful shutdown: time to flush.")

    # the lake (predictions/lake/): the prediction log as Parquet files, beside or instead of the database
    lake_url: str | None = Field(
        default=None,
        description="Where the prediction log's Parquet lake lies: a local folder or s3://bucket/prefix "
        "(credentials from the usual AWS_* variables; AWS_ENDPOINT_URL for an S3-compatible server). "
        "Unset: no lake. See docs/operations.md, 'Beyond one database'.",
    )
    lake_mode: Literal["off", "also", "only"] = Field(
        default="off",
        description="also: every logged prediction and label goes to the database and the lake; only: to the "
        "lake alone (the database keeps registry, runs, alerts and jobs); off: the database alone.",
    )
    lake_roll_bytes: int = Field(
        default=128 * 1024 * 1024,
        gt=0,
        description="A writer's open lake file is committed once it holds about this many bytes of rows.",
    )
    lake_roll_s: float = Field(
        default=300.0,
        gt=0,
        description="A writer's open lake file is committed at the latest this many seconds after its first "
        "row (and at every hour's end: a file holds one partition's rows).",
    )

    # monitors (monitors/): scheduled drift evaluation of every serving model
    monitor_enabled: bool = Field(
        default=True, description="Drift scheduler in the serving process (off: `driftwarden monitor`)."
    )
    monitor_interval_s: float = Field(default=300.0, gt=0, description="Seconds between runs of a model.")
    monitor_window_rows: int | None = Field(
        default=100_000, gt=0, description="Default window: the last N predictions (None: no row limit)."
    )
    monitor_window_minutes: float | None = Field(
        default=None, gt=0, description="Default window: the last T minutes (with rows: both limits apply)."
    )
    monitor_read_database_url: SecretStr | None = Field(
        default=None,
        description="Read the monitors' windows from this database (a read replica of database_url); runs "
        "are still stored on, and due checks read from, database_url (unset: database_url for both).",
    )
    monitor_min_rows: int = Field(default=100, gt=0, description="Fewer predictions in a window: no run.")
    monitor_chunk_rows: int = Field(default=25_000, gt=0, description="Rows read from the log per chunk.")
    monitor_sketch_cache: bool = Field(
        default=True,
        description="PostgreSQL: keep each sealed block of the log's ids counted once (the table "
        "monitor_window_sketches) and merge the stored counts, so a run reads only new or changed blocks, "
        "the window's edges and the labelled rows (off: every run recounts the whole window).",
    )
    monitor_sample_rows: int = Field(
        default=5_000,
        ge=0,
        description="Rows of each monitor window read raw, drawn uniformly (seeded by the window), for "
        "root-cause analysis: harmful drift, attribution, segments, weak slices; also the most rows of "
        "CURRENT that `driftwarden drift`'s comparison keeps (monitors.offline.compare; 0: no sample).",
    )
    monitor_sketch_block_ids: int = Field(
        default=65_536,
        ge=1024,
        description=(
            "Predictions per block of the sketch cache, about: a block spans this many log ids divided by "
            "the model's mean request size, rounded to a power of two (ids are global across models; "
            "blocks are aligned)."
        ),
    )
    monitor_engine: Literal["database", "spark"] = Field(
        default="database",
        description="Where a monitor run computes its window's sketch: database (the prediction log's "
        "tables) or spark (the lake's Parquet files, on the Spark cluster of spark_master; needs lake_url).",
    )
    spark_master: str = Field(
        default="local[2]",
        description="The Spark master of monitor_engine=spark: spark://host:7077, local[N], yarn, ...",
    )
    drift_min_rows: int = Field(
        default=30,
        gt=0,
        description=(
            "`driftwarden drift`: fewer rows than this in REFERENCE or CURRENT is 'insufficient data' "
            "(exit 2), never a verdict; `--min-rows` overrides it per run."
        ),
    )
    range_chance: float = Field(
        default=1e-9,
        gt=0,
        lt=0.05,
        description="The chance per value that a legitimate value of a numeric feature falls outside the "
        "allowed range a new version's contract infers from a tail estimate of its training data (a value "
        "outside is refused); see docs/monitoring.md.",
    )
    admin_token: SecretStr | None = Field(
        default=None,
        description="A bootstrap admin credential: this bearer token has every scope (unset: only tokens "
        "made by `driftwarden tokens create` get in; see docs/security.md).",
    )
    predict_requires_token: bool = Field(
        default=False,
        description="Predictions, model status and metadata need a token with scope 'predict' (off: open "
        "to anyone who reaches the port, as TF Serving is; every other data route always needs a token).",
    )
    token_cache_s: float = Field(
        default=5.0,
        ge=0,
        description="A verified token is trusted this long without a database read (a revocation or an "
        "expiry takes effect within it; 0: read every time).",
    )
    token_grace_s: float = Field(
        default=900.0,
        ge=0,
        le=86400,
        description="While the database is unreachable, a token the database verified (or refused) within "
        "this many seconds more than token_cache_s keeps that answer, so the routes that spool keep taking "
        "predictions; a token not seen in that time is a 503 (at most 1 day; 0: none).",
    )
    link_signing_key: SecretStr | None = Field(
        default=None,
        description="Key of the signed report links (`/reports/{name}/drift?expires=...&signature=...`), at "
        "least 32 characters (e.g. `openssl rand -base64 32`); unset: a random key made once and kept in "
        "the database, shared by every process using it (`driftwarden tokens rotate-link-key`). Changing "
        "it invalidates every link signed before.",
    )
    report_link_ttl_s: float = Field(
        default=7 * 86400.0,
        gt=0,
        le=MAX_LINK_TTL_S,
        description="Lifetime of the signed report link in each webhook message (at most 90 days).",
    )

    # observability (core/health.py, monitors/metrics.py, service/serving/operations.py)
    metrics_max_features: int = Field(
        default=100,
        gt=0,
        description="Most features per model exported as labelled series (the rest: a log line).",
    )
    metrics_max_segments: int = Field(
        default=10,
        ge=0,
        le=1000,
        description="Most segments per model exported with their own `segment` label, the most rows first "
        '(the rest summed as `segment="other"`; 0: only `other`).',
    )
    drift_metrics_cache_s: float = Field(
        default=5.0, ge=0, description="Drift/quality series are re-read from the database this often."
    )
    health_interval_s: float = Field(
        default=10.0,
        ge=0,
        description="Seconds between runs of the health checks in the server (0: only /readyz).",
    )
    health_timeout_s: float = Field(default=5.0, gt=0, description="A health check slower than this fails.")
    health_disk_min_free_mb: float = Field(
        default=256.0,
        ge=0,
        description="A data folder's disk with less free space than this fails its check.",
    )

    # alerts (alerts/): rules, lifecycle, outgoing webhooks, the Alertmanager receiver
    alert_rules_file: Path | None = Field(
        default=None,
        description="YAML file of alert rules seeded into the database at start (unset: the default rules "
        "for every model; rules edited over the API stay until the file names that model again).",
    )
    alert_repeat_interval_s: float = Field(
        default=4 * 3600.0, gt=0, description="A firing alert is notified again after this long."
    )
    public_url: str | None = Field(
        default=None,
        description="Base URL of this API in webhook links (report, retrain, silence) and in "
        "`driftwarden reports link`; unset: "
        "http://<api_host>:<api_port>.",
    )
    webhook_timeout_s: float = Field(default=5.0, gt=0, description="Timeout of one webhook delivery.")
    webhook_allow_private_urls: bool = Field(
        default=False,
        description="Allow webhook URLs on loopback, private, link-local and other non-public addresses "
        "(off: refused when subscribed and when sent, against server-side request forgery).",
    )
    webhook_allowed_networks: list[str] = Field(
        default_factory=list,
        description="Non-public networks webhooks may reach while webhook_allow_private_urls is off, e.g. "
        '["10.20.0.0/16"] for an in-house receiver (a JSON list of CIDRs; empty: none).',
    )
    webhook_max_attempts: int = Field(
        default=8, gt=0, description="Deliveries of one webhook message before it is dead-lettered."
    )
    webhook_backoff_s: float = Field(
        default=2.0, gt=0, description="First retry delay of a failed delivery (doubles, with jitter)."
    )
    webhook_backoff_max_s: float = Field(default=600.0, gt=0, description="Longest retry delay.")
    webhook_send_interval_s: float = Field(
        default=1.0, gt=0, description="How often the sender looks for due deliveries (0 < s)."
    )
    webhook_retention_days: float = Field(
        default=30.0,
        gt=0,
        description="Delivered and dead webhook messages older than this leave the outbox (pending stay).",
    )
    webhook_sender_enabled: bool = Field(
        default=True,
        description="Send webhook deliveries from the API process (the `monitor` daemon sends none).",
    )
    alertmanager_token: SecretStr | None = Field(
        default=None,
        description="Bearer token Alertmanager sends to POST /v1/alerts/alertmanager (http_config "
        "authorization); unset with no basic auth: a token with scope admin (or the admin token) is needed.",
    )
    alertmanager_basic_auth: SecretStr | None = Field(
        default=None, description="user:password Alertmanager sends as basic auth (http_config basic_auth)."
    )

    # retraining (training/): the job queue, its workers and the validation gate
    worker_embedded: bool | None = Field(
        default=None,
        description="Run a retraining worker inside the API process (unset: yes on SQLite, no on "
        "PostgreSQL, where `driftwarden worker` runs on the training machines).",
    )
    job_lease_s: float = Field(
        default=60.0,
        gt=0,
        description="A running job whose worker stopped heartbeating this long is taken over.",
    )
    job_poll_interval_s: float = Field(
        default=2.0, gt=0, description="How often an idle worker looks for jobs."
    )
    retrain_cooldown_s: float = Field(
        default=3600.0,
        ge=0,
        description="After a job of a model ends, alert-triggered retrains of it wait this long.",
    )
    retrain_window_rows: int = Field(
        default=50_000, gt=0, description="Retraining set: the last N labelled predictions of the model."
    )
    retrain_window_minutes: float | None = Field(
        default=None, gt=0, description="Retraining set: only predictions of the last T minutes (unset: any)."
    )
    retrain_min_rows: int = Field(
        default=500, gt=0, description="Fewer labelled predictions than this: the job refuses to train."
    )
    retrain_wait_for_rows_s: float = Field(
        default=300.0,
        ge=0,
        le=86_400,
        description="A job an alert started, whose window holds fewer labelled predictions than it needs "
        "(retrain_min_rows, and twice retrain_holdout_min_rows), waits up to this long for more (and at most "
        "30 s without a new one) before reading it; 0: no wait.",
    )
    retrain_holdout_fraction: float = Field(
        default=0.2, gt=0, lt=1, description="The newest share of labelled rows kept out for the gate."
    )
    retrain_holdout_min_rows: int = Field(
        default=2000,
        gt=0,
        description="Hold out at least this many rows for the gate (at most half the window), so that its "
        "intervals are narrower than its tolerances.",
    )
    retrain_include_previous_data: bool = Field(
        default=False, description="Mix the serving version's training data into the retraining set."
    )
    retrain_epochs: float = Field(default=3.0, gt=0, le=MAX_EPOCHS, description="Epochs of a retraining job.")
    retrain_auto_promote: bool = Field(
        default=True,
        description="A candidate that passes the gate is promoted (off: held for `models promote`).",
    )
    gate_metric: Literal["roc_auc", "accuracy", "f1", "precision", "recall", "macro_f1", "rmse", "mae"] = (
        Field(
            default="roc_auc",
            description="The gate's quality metric, compared with the serving version's; the default stands "
            "for each task's own (binary roc_auc, multi-class macro_f1, regression rmse).",
        )
    )
    gate_metric_tolerance: float = Field(
        default=0.02, ge=0, description="The candidate may be worse than the serving version by this much."
    )
    gate_calibration_tolerance: float = Field(
        default=0.02, ge=0, description="Expected calibration error may be worse by this much."
    )
    gate_slice_tolerance: float = Field(
        default=0.05, ge=0, description="No categorical slice's metric may be worse by more than this."
    )
    gate_slice_min_rows: int = Field(
        default=100, gt=0, description="A slice (one value of a categorical feature) needs this many rows."
    )
    gate_confidence: float = Field(
        default=0.95,
        ge=0.5,
        lt=1,
        description="A check fails only when the candidate is worse than the tolerance with this confidence.",
    )
    gate_bootstrap_reps: int = Field(
        default=1000, ge=100, le=100_000, description="Paired bootstrap replicates of a gate comparison."
    )
    auto_rollback: bool = Field(
        default=True,
        description="Roll back a version promoted by a job when its performance alert fires in the watch.",
    )
    rollback_watch_s: float = Field(
        default=3600.0, gt=0, description="How long after an automatic promotion the rollback watch lasts."
    )

    @model_validator(mode="before")
    @classmethod
    def _spool_in_the_data_folder(cls, data: Any) -> Any:
        """An unset ``spool_path`` follows the registry's data folder (never the working directory's)."""
        if isinstance(data, dict) and not data.get("spool_path"):
            registry = data.get("registry_path") or cls.model_fields["registry_path"].default
            data = {**data, "spool_path": Path(registry).parent / "spool"}
        return data

    @field_validator("webhook_allowed_networks")
    @classmethod
    def _networks(cls, networks: list[str]) -> list[str]:
        """Each a network in CIDR form (host bits allowed: ``10.0.0.7/8`` is ``10.0.0.0/8``)."""
        out = []
        for network in networks:
            try:
                out.append(str(ipaddress.ip_network(network, strict=False)))
            except ValueError:
                raise ValueError(
                    f"{network!r} is not a network: write e.g. 10.20.0.0/16 or fd00::/8"
                ) from None
        return out

    @model_validator(mode="after")
    def _link_key_long_enough(self) -> Settings:
        """A link key shorter than :data:`MIN_LINK_KEY_CHARS` is refused (the error names its length only)."""
        key = self.link_signing_key
        length = 0 if key is None else len(key.get_secret_value())
        if key is not None and length < MIN_LINK_KEY_CHARS:
            raise ValueError(
                f"DRIFTWARDEN_LINK_SIGNING_KEY has {length} characters; it needs at least "
                f"{MIN_LINK_KEY_CHARS} (e.g. `openssl rand -base64 32`)"
            )
        return self

    def masked(self) -> dict[str, Any]:
        """Settings as plain values, secrets and URL passwords masked."""
        out: dict[str, Any] = {}
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, SecretStr) and not name.endswith("database_url"):
                out[name] = "***"
            elif isinstance(value, SecretStr):
                out[name] = mask_url(value.get_secret_value())
            elif isinstance(value, Path):
                out[name] = str(value)
            else:
                out[name] = value
        return out


def mask_url(url: str) -> str:
    """Hide the password of a URL like ``scheme://user:pw@host``, and every credential-bearing query
    parameter (``password``, ``sslpassword``, ``passwd``, ``pwd``; any ``*secret``, ``*token``, ``*key``):
    the one masking of a URL shown (settings, webhook subscriptions, their errors, alert evidence)."""
    url = _PASSWORD_PARAM.sub(r"\1***", url)
    if "://" not in url or "@" not in url:
        return url
    scheme, rest = url.split("://", 1)
    creds, host = rest.rsplit("@", 1)
    user = creds.split(":", 1)[0]
    return f"{scheme}://{user}:***@{host}" if ":" in creds else url


_PASSWORD_PARAM = re.compile(
    r"([?&](?:[a-z_]*pass(?:word|wd)?|pwd|[a-z_]*secret|[a-z_]*token|[a-z_]*key)=)[^&]*", re.IGNORECASE
)


MIN_ADMIN_TOKEN_CHARS = 32


def weak_admin_token(settings: Settings) -> str | None:
    """A warning when ``admin_token`` is short enough to guess (it opens every route), else None."""
    if settings.admin_token is None:
        return None
    n = len(settings.admin_token.get_secret_value())
    if n >= MIN_ADMIN_TOKEN_CHARS:
        return None
    return (
        f"DRIFTWARDEN_ADMIN_TOKEN has {n} characters: a guessable credential that opens every route; use at "
        f"least {MIN_ADMIN_TOKEN_CHARS} random ones (e.g. `openssl rand -base64 32`), or scoped tokens "
        "(`driftwarden tokens create`)"
    )


def base_url(settings: Settings) -> str:
    """This API's address in the links it hands out: ``public_url``, else ``http://<api_host>:<api_port>``."""
    return (settings.public_url or f"http://{settings.api_host}:{settings.api_port}").rstrip("/")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The process-wide settings (read once from the environment)."""
    return Settings()
