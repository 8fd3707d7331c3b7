"""A model's builder function: the one place that loads it from a reference, hashes its file, probes it,
and holds the default (the built-in MLP).

A builder is called as ``FUNC(input_dim=D, outputs=K, task=T)`` (``T``: ``"binary"``, ``"multiclass"`` or
``"regression"``; ``K``: 1 for binary and regression, the number of classes for multi-class) and returns an
uncompiled ``keras.Model`` from the encoded float32 ``[batch, D]`` matrix (:mod:`training.cluster.features`)
to ``[batch, K]`` logits (classification) or values (regression); an embedded feature (``train --embed``,
:mod:`training.cluster.embedded_net`) fills its embedding's DIM columns of that matrix, after the others. A
reference is ``FILE.py:FUNC`` or ``package.module:FUNC``; ``None`` (or :data:`BUILTIN_REF`) is the built-in
MLP.

Keras loads inside the functions only, never at import (the CLI and the API import this module).
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from core.errors import Conflict, Invalid
from registry.schema import Task
from registry.service import SERVED_ELSEWHERE

if TYPE_CHECKING:
    import keras

BUILTIN_REF = "builtin:mlp"
HIDDEN = (64, 32)
PROBE_ROWS = 2


class ModelFnError(Invalid, ValueError):
    """A builder function that cannot be loaded or does not build a fitting model (one line: exit 2)."""


def mlp(*, input_dim: int, outputs: int, task: str) -> keras.Model:
    """The built-in builder: an MLP (64, 32 relu units) from the encoded matrix to ``outputs`` logits."""
    import keras

    inputs = keras.Input(shape=(input_dim,), dtype="float32", name="encoded")
    x = inputs
    for i, units in enumerate(HIDDEN):
        x = keras.layers.Dense(units, activation="relu", name=f"hidden_{i}")(x)
    out = keras.layers.Dense(outputs, name="logit" if task != "regression" else "value")(x)
    return keras.Model(inputs, out, name="driftwarden_mlp")


def output_width(task: Task, classes: int = 0) -> int:
    """``K``: the number of classes of a multi-class model, else 1."""
    return classes if task is Task.MULTICLASS else 1


def is_builtin(ref: str | None) -> bool:
    return ref is None or ref == BUILTIN_REF


def _split(ref: str) -> tuple[str, str]:
    target, sep, attr = ref.rpartition(":")
    if not sep or not target or not attr or not attr.isidentifier():
        raise ModelFnError(
            f"--model-fn {ref!r}: give FILE.py:FUNC or package.module:FUNC (e.g. models/net.py:build)"
        )
    return target, attr


def _is_file(target: str) -> bool:
    return target.endswith(".py") or os.sep in target


def normalize(ref: str | None) -> str | None:
    """The reference as jobs keep it: a file's path made absolute (cluster processes and later retraining
    jobs may run elsewhere); ``None`` for the built-in."""
    if is_builtin(ref):
        return None
    assert ref is not None
    target, attr = _split(ref)
    if _is_file(target):
        return f"{Path(target).expanduser().resolve()}:{attr}"
    return ref


def source_file(ref: str | None) -> Path | None:
    """The file that defines the builder (None for the built-in or a module without a file)."""
    if is_builtin(ref):
        return None
    assert ref is not None
    target, _ = _split(ref)
    if _is_file(target):
        return Path(target)
    try:
        spec = importlib.util.find_spec(target)
    except (ImportError, ValueError):
        spec = None
    origin = spec.origin if spec is not None else None
    return Path(origin) if origin and origin not in {"built-in", "frozen"} else None


def file_sha256(ref: str | None) -> str | None:
    """SHA-256 of the builder's file (None for the built-in, or when the file cannot be read)."""
    path = source_file(ref)
    if path is None:
        return None
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError:
        return None


def describe(ref: str | None) -> dict[str, Any]:
    """The lineage's ``model_fn``: ``{"ref": ..., "sha256": ...}`` (the built-in has no file hash)."""
    if is_builtin(ref):
        return {"ref": BUILTIN_REF, "sha256": None}
    return {"ref": ref, "sha256": file_sha256(ref)}


def load_function(ref: str | None) -> Callable[..., Any]:
    """The builder function of ``ref`` (the built-in MLP for None); :class:`ModelFnError` if it cannot be."""
    if is_builtin(ref):
        return mlp
    assert ref is not None
    target, attr = _split(ref)
    where = f"--model-fn {ref}"
    if _is_file(target):
        path = Path(target)
        if not path.is_file():
            raise ModelFnError(f"{where}: the file {path} does not exist")
        digest = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:12]
        spec = importlib.util.spec_from_file_location(f"driftwarden_model_fn_{digest}", path)
        if spec is None or spec.loader is None:
            raise ModelFnError(f"{where}: {path} is not a Python file")
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
        except Exception as exc:
            raise ModelFnError(f"{where}: importing {path} failed: {_one_line(exc)}") from None
    else:
        try:
            module = _import(target)
        except Exception as exc:
            raise ModelFnError(f"{where}: importing module {target} failed: {_one_line(exc)}") from None
    fn = getattr(module, attr, None)
    if fn is None:
        raise ModelFnError(f"{where}: {target} has no attribute {attr!r}")
    if not callable(fn):
        raise ModelFnError(f"{where}: {target}.{attr} is not a function")
    return fn


def _import(name: str) -> Any:
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError:
        cwd = os.getcwd()
        if cwd in sys.path:
            raise
        sys.path.append(cwd)  # `driftwarden` (a console script) does not put the working folder on the path
        return importlib.import_module(name)


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def build_model(ref: str | None, *, input_dim: int, outputs: int, task: Task, seed: int = 0) -> keras.Model:
    """Call the builder (seeded) and return its model, built for ``[batch, input_dim]`` inputs; create it
    under a strategy's scope to distribute it."""
    import keras

    fn = load_function(ref)
    where = f"--model-fn {ref or BUILTIN_REF}"
    try:
        inspect.signature(fn).bind(input_dim=input_dim, outputs=outputs, task=task.short)
    except TypeError as exc:
        raise ModelFnError(
            f"{where}: must accept FUNC(input_dim=, outputs=, task=) as keywords ({_one_line(exc)})"
        ) from None
    except ValueError:
        pass  # no signature to inspect (a builtin or C callable): the call decides
    keras.utils.set_random_seed(seed)
    try:
        net = fn(input_dim=input_dim, outputs=outputs, task=task.short)
    except Exception as exc:
        raise ModelFnError(f"{where}: calling it failed: {_one_line(exc)}") from None
    if not isinstance(net, keras.Model):
        raise ModelFnError(
            f"{where} returned {type(net).__name__}, not a keras.Model: return the (uncompiled) model"
        )
    if not net.built:
        try:
            net.build((None, input_dim))
        except Exception as exc:
            raise ModelFnError(
                f"{where}: the model cannot take [batch, {input_dim}] inputs: {_one_line(exc)}"
            ) from None
    return net


def probe(ref: str | None, *, input_dim: int, outputs: int, task: Task) -> dict[str, Any]:
    """Load the builder, build its model and run one zero batch: the output must be ``[batch, outputs]``.

    Returns the lineage's ``model_fn``; raises :class:`ModelFnError` (one line) before anything starts.
    """
    import numpy as np

    where = f"--model-fn {ref or BUILTIN_REF}"
    net = build_model(ref, input_dim=input_dim, outputs=outputs, task=task)
    try:
        out = net(np.zeros((PROBE_ROWS, input_dim), dtype=np.float32), training=False)
    except Exception as exc:
        raise ModelFnError(
            f"{where}: the model failed on a [batch, {input_dim}] float32 batch: {_one_line(exc)}"
        ) from None
    if isinstance(out, list | tuple | dict):
        raise ModelFnError(f"{where}: the model has several outputs; it must have one [batch, {outputs}]")
    shape = tuple(int(d) for d in getattr(out, "shape", ()))
    if shape != (PROBE_ROWS, outputs):
        kind = {Task.MULTICLASS: "one logit per class", Task.BINARY: "one logit"}.get(task, "one value")
        raise ModelFnError(
            f"{where}: the model's output has shape [batch, {', '.join(map(str, shape[1:])) or ''}], "
            f"expected [batch, {outputs}] ({kind} for task {task.short})"
        )
    return describe(ref)


def lineage_ref(lineage: Mapping[str, Any]) -> str | None:
    """The builder a version was trained with, from its lineage (None: the built-in)."""
    fn = lineage.get("model_fn")
    if isinstance(fn, Mapping):
        ref = fn.get("ref")
        return None if not isinstance(ref, str) or is_builtin(ref) else ref
    return None


class NotRetrainable(Conflict):
    """A version driftwarden cannot retrain (served elsewhere, or imported without its builder function):
    a job would only fail. ``why`` is the reason without the fix; the message adds the fix (409, exit 2)."""

    def __init__(self, *, model_name: str, version: int, why: str, fix: str) -> None:
        self.model_name = model_name
        self.version = version
        self.why = why
        super().__init__(f"model {model_name}:{version} {why}: {fix}")


def retrain_refusal(lineage: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """Why a version with this lineage cannot be retrained here, and the fix; None when it can.

    A version registered from a reference alone (served elsewhere: no SavedModel, no builder) and an
    imported SavedModel without its builder function cannot."""
    lineage = lineage or {}
    if lineage.get("serving") == SERVED_ELSEWHERE:
        return (
            "is served elsewhere (registered from a reference with --prediction-column): driftwarden has "
            "no model or builder function to retrain it",
            "retrain it in your own pipeline (a `retrain` action sends it the retrain.requested webhook "
            "event), then register the new version with `driftwarden models import`",
        )
    fn = lineage.get("model_fn")
    known = isinstance(fn, Mapping) and isinstance(fn.get("ref"), str) and fn["ref"]
    if lineage.get("source") == "import" and not known:
        return (
            "was imported without --model-fn, so it cannot be retrained",
            "re-import it with --model-fn FILE.py:FUNC (the function that builds its network) or train a "
            "version with `driftwarden train --model NAME --model-fn FILE.py:FUNC ...`",
        )
    return None


def require_retrainable(lineage: Mapping[str, Any] | None, *, model_name: str, version: int) -> None:
    """A version can be retrained when driftwarden has its model and builder (:func:`retrain_refusal`).

    Raises :class:`NotRetrainable` (a :class:`core.errors.Conflict`: HTTP 409, exit 2) naming the fix.
    """
    refusal = retrain_refusal(lineage)
    if refusal is not None:
        why, fix = refusal
        raise NotRetrainable(
            model_name=model_name, version=version, why=why, fix=fix.replace("NAME", model_name)
        )
