"""Which versions are loaded and which one answers: follows the registry without a restart.

For every served model the manager keeps the version in state ``serving`` and every labelled version
loaded. It polls the registry; a newly promoted (or re-labelled) version is loaded and warmed up beside the
old one, then the pointer is swapped. Requests resolve their version once, so in-flight requests finish on
the version they started with; a replaced version is unloaded after a grace period, once its queue is empty.
If a new version fails to load, the old one keeps serving and the failure is reported in the status.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from pathlib import Path

import numpy as np

from core.database import Database
from core.scheduling import every
from registry.schema import FeatureKind, FeatureSpec, ModelSchema
from registry.service import ServingPlan, read_schema, read_signature, serving_plans
from registry.signature import SourceSignature, output_key
from service.serving.batcher import MicroBatcher, Runner, Traffic
from service.serving.metrics import Metrics, NullMetrics

log = logging.getLogger("driftwarden.serving.manager")

RETIRE_GRACE_S = 5.0
FLOAT32_MAX = float(np.finfo(np.float32).max)


class NotServed(LookupError):
    """The requested model, version or label is not loaded (answered with 404)."""


@dataclass
class LoadedVersion:
    """A version ready to answer."""

    model_name: str
    version: int
    path: Path
    schema: ModelSchema
    runner: Runner
    batcher: MicroBatcher
    loaded_at: datetime
    signature: SourceSignature | None = None  # an imported model's own signature (None: driftwarden's API)


@dataclass
class ServedModel:
    """One model's loaded versions and the pointers into them."""

    name: str
    versions: dict[int, LoadedVersion] = field(default_factory=dict)
    serving: int | None = None
    labels: dict[str, int] = field(default_factory=dict)
    loading: set[int] = field(default_factory=set)
    failed: dict[int, str] = field(default_factory=dict)
    elsewhere: dict[int, ModelSchema] = field(default_factory=dict)  # versions without a model: contracts


def warmup_columns(schema: ModelSchema) -> dict[str, np.ndarray]:
    """One plausible row, to trace and warm the signature before it takes traffic (and the health checks'
    canary): a numeric feature's observed minimum, unless it is not finite as the model's float32 (a reference
    holding -inf), then its observed maximum, then its allowed range's ends, then 0."""
    cols: dict[str, np.ndarray] = {}
    for f in schema.features:
        if f.kind is FeatureKind.NUMERIC:
            cols[f.name] = np.array([_plausible(f)], dtype=np.float32)
        else:
            cols[f.name] = np.array([f.categories[0] if f.categories else ""], dtype=object)
    return cols


def _plausible(spec: FeatureSpec) -> float:
    """A value of a numeric feature for the warm-up row: the first of its observed and allowed ends that is
    finite as a float32 (to an infinite input a small Keras network answers NaN: the canary would fail)."""
    for end in (spec.observed_min, spec.observed_max, spec.allowed_min, spec.allowed_max):
        if end is not None and math.isfinite(end) and abs(end) <= FLOAT32_MAX:
            return float(end)
    return 0.0


class ModelManager:
    """Loads, swaps and unloads versions as the registry changes."""

    def __init__(
        self,
        *,
        db: Database,
        loader: Callable[[Path], Runner],
        only: list[str],
        poll_interval_s: float,
        batch_max_rows: int,
        batch_max_wait_s: float,
        batch_inline_rows: int = 0,
        metrics: Metrics | None = None,
    ) -> None:
        self.db = db
        self.metrics = metrics if metrics is not None else NullMetrics()
        self.loader = loader
        self.only = only
        self.poll_interval_s = poll_interval_s
        self.batch_max_rows = batch_max_rows
        self.batch_max_wait_s = batch_max_wait_s
        self.batch_inline_rows = batch_inline_rows
        self.traffic = Traffic()  # predict requests being answered (the route counts them)
        self.models: dict[str, ServedModel] = {}
        self.executor = ThreadPoolExecutor(max_workers=2, thread_name_prefix="model")
        self.started = False
        self.last_refresh_error: str | None = None
        self._task: asyncio.Task[None] | None = None
        self._retiring: set[asyncio.Task[None]] = set()
        self._lock = asyncio.Lock()

    async def start(self) -> None:
        """Load what the registry says, then follow it."""
        await self.refresh()
        self.started = True
        self._task = every(self.poll_interval_s, self.refresh, name="model manager refresh")

    async def close(self) -> None:
        """Stop polling; let every version finish its queued requests."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for served in self.models.values():
            for lv in served.versions.values():
                await lv.batcher.close()
        for task in list(self._retiring):
            task.cancel()
        self.executor.shutdown(wait=True)

    def _read_plans(self) -> dict[str, ServingPlan]:
        with self.db.session() as session:
            return serving_plans(session=session, only=self.only)

    async def refresh(self) -> None:
        """Bring loaded versions and pointers in line with the registry."""
        async with self._lock:
            try:
                wanted = await asyncio.to_thread(self._read_plans)
                self.last_refresh_error = None
            except Exception as exc:
                self.last_refresh_error = f"{type(exc).__name__}: {exc}"[:300]
                log.warning("registry unreachable, keeping the loaded versions: %s", exc)
                return
            for name, w in wanted.items():
                await self._apply(self.models.setdefault(name, ServedModel(name)), w)

    async def _apply(self, served: ServedModel, w: ServingPlan) -> None:
        for version in sorted(set(w.paths) - set(served.versions)):
            if served.failed.get(version):
                continue
            served.loading.add(version)
            try:
                lv = await asyncio.to_thread(self._load, served.name, version, Path(w.paths[version]))
            except Exception as exc:
                served.failed[version] = f"{type(exc).__name__}: {exc}"[:500]
                log.error("could not load %s:%d: %s", served.name, version, exc)
                self.metrics.model_load(served.name, ok=False, features=[])
                continue
            finally:
                served.loading.discard(version)
            self.metrics.model_load(served.name, ok=True, features=lv.schema.feature_names)
            lv.batcher.start()
            served.versions[version] = lv
            log.info("loaded %s:%d from %s", served.name, version, lv.path)
        for version, folder in w.elsewhere.items():
            if version not in served.elsewhere and not served.failed.get(version):
                try:
                    schema = await asyncio.to_thread(read_schema, path=Path(folder))
                    served.elsewhere[version] = schema
                    self.metrics.contract_features(served.name, schema.feature_names)
                except Exception as exc:  # an unreadable contract: reported by the model's health check
                    served.failed[version] = f"{type(exc).__name__}: {exc}"[:500]
                    log.error("could not read the contract of %s:%d: %s", served.name, version, exc)
        for version in set(served.elsewhere) - set(w.elsewhere):
            del served.elsewhere[version]
        if w.serving in served.versions or w.serving in w.elsewhere:
            if served.serving != w.serving:
                log.info("%s: serving version %s -> %d", served.name, served.serving, w.serving)
            served.serving = w.serving
        elif w.serving is None:
            served.serving = None
        served.labels = {
            label: v for label, v in w.labels.items() if v in served.versions or v in w.elsewhere
        }
        keep = set(w.paths) | ({served.serving} if served.serving is not None else set())
        for version in list(served.versions):
            if version not in keep:
                lv = served.versions.pop(version)
                task = asyncio.get_running_loop().create_task(self._retire(lv))
                self._retiring.add(task)
                task.add_done_callback(self._retiring.discard)
        self.metrics.model_state(served.name, serving=served.serving, loaded=sorted(served.versions))

    async def _retire(self, lv: LoadedVersion) -> None:
        await asyncio.sleep(RETIRE_GRACE_S)
        await lv.batcher.close()
        log.info("unloaded %s:%d", lv.model_name, lv.version)

    def _load(self, name: str, version: int, path: Path) -> LoadedVersion:
        t0 = time.monotonic()
        schema = read_schema(path=path)
        signature = read_signature(path=path)
        runner = self.loader(path)
        out = runner(warmup_columns(schema))
        missing = {o.name for o in schema.outputs} - set(out)
        if signature is not None:
            missing |= {output_key(i) for i in range(len(signature.outputs))} - set(out)
        if missing:
            raise ValueError(f"the signature lacks the schema's outputs {sorted(missing)}")
        batcher = MicroBatcher(
            runner,
            max_rows=self.batch_max_rows,
            max_wait_s=self.batch_max_wait_s,
            executor=self.executor,
            observer=partial(self.metrics.batch, name),
            inline_rows=self.batch_inline_rows,
            traffic=self.traffic,
        )
        log.info("%s:%d loaded and warmed up in %.2fs", name, version, time.monotonic() - t0)
        return LoadedVersion(name, version, path, schema, runner, batcher, datetime.now(UTC), signature)

    def resolve(self, name: str, *, version: int | None = None, label: str | None = None) -> LoadedVersion:
        """The loaded version a request goes to; :class:`NotServed` names what is missing."""
        served = self.models.get(name)
        if served is None:
            raise NotServed(f"Servable not found for request: model '{name}' is not served here")
        if label is not None:
            if label not in served.labels:
                raise NotServed(
                    f"model '{name}' has no label '{label}' (labels: {sorted(served.labels) or 'none'})"
                )
            version = served.labels[label]
        elif version is None:
            if served.serving is None:
                raise NotServed(f"model '{name}' has no version in state 'serving'; promote one")
            version = served.serving
        if version in served.elsewhere:
            raise NotServed(
                f"version {version} of model '{name}' is served elsewhere (registered from a reference): "
                "driftwarden monitors its predictions and does not answer requests for it"
            )
        lv = served.versions.get(version)
        if lv is None:
            loaded = ", ".join(map(str, sorted(served.versions))) or "none"
            raise NotServed(f"version {version} of model '{name}' is not loaded (loaded: {loaded})")
        return lv

    def contract(self, name: str, *, version: int | None = None) -> tuple[int, ModelSchema]:
        """The version (default: the serving one) of ``name`` and its contract, whether served here or
        elsewhere; :class:`NotServed` names what is missing."""
        served = self.models.get(name)
        if served is None:
            raise NotServed(
                f"model '{name}' has no serving or labelled version here (see `driftwarden models list`)"
            )
        chosen = served.serving if version is None else version
        if chosen is None:
            raise NotServed(f"model '{name}' has no version in state 'serving'; promote one")
        if chosen in served.elsewhere:
            return chosen, served.elsewhere[chosen]
        lv = served.versions.get(chosen)
        if lv is None:
            known = sorted({*served.versions, *served.elsewhere})
            raise NotServed(
                f"version {chosen} of model '{name}' is neither its serving nor a labelled version "
                f"(known here: {', '.join(map(str, known)) or 'none'})"
            )
        return chosen, lv.schema

    def ready(self) -> bool:
        """The first registry sync is done (versions it asked for are loaded or reported failed)."""
        return self.started
