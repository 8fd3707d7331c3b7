"""The plain FastAPI endpoint that ``bench/serve.py --compare-fastapi`` measures driftwarden against.

What a team would write without driftwarden: load the SavedModel with ``tf.saved_model.load``, decode the
TF Serving row format (``{"instances": [{feature: value}, ...]}``) into one tensor per input of the
``serving_default`` signature, call it, answer ``{"predictions": ...}``. No contract checks, no prediction
log, no metrics, no micro-batching, no garbage-collector tuning: a plain synchronous FastAPI route (run in
FastAPI's thread pool), so the side-by-side prices what driftwarden adds on the same model.

It is an app factory in an importable module so that ``uvicorn --workers N`` can build it in every worker
process; the model's folder comes from the environment (``DW_BENCH_MODEL_PATH``):

    DW_BENCH_MODEL_PATH=<version dir> .venv/bin/uvicorn bench.plain_fastapi:create_app --factory \\
        --workers 2 --port 8600 --no-access-log
"""

from __future__ import annotations

import math
import os
from typing import Annotated, Any

from fastapi import Body, FastAPI

MODEL_ENV = "DW_BENCH_MODEL_PATH"


def create_app() -> FastAPI:
    """Load the SavedModel named by ``DW_BENCH_MODEL_PATH`` and build the app around it."""
    import tensorflow as tf

    path = os.environ.get(MODEL_ENV)
    if not path:
        raise RuntimeError(f"{MODEL_ENV} is not set: it must name a SavedModel folder")
    module = tf.saved_model.load(path)
    signature = module.signatures["serving_default"]
    _, specs = signature.structured_input_signature
    dtypes = {name: spec.dtype for name, spec in specs.items()}
    outputs = sorted(signature.structured_outputs)

    def run(instances: list[dict[str, Any]]) -> list[Any]:
        feeds = {}
        for name, dtype in dtypes.items():
            column = [row.get(name) for row in instances]
            if dtype == tf.string:
                feeds[name] = tf.constant(["" if v is None else str(v) for v in column], dtype=dtype)
            else:
                feeds[name] = tf.constant([math.nan if v is None else v for v in column], dtype=dtype)
        out = {name: value.numpy().tolist() for name, value in signature(**feeds).items()}
        if len(outputs) == 1:
            return list(out[outputs[0]])
        return [{name: out[name][i] for name in outputs} for i in range(len(instances))]

    run([{}])  # trace once before the first request (every feature missing: NaN / "")
    app = FastAPI()

    @app.get("/health")
    def health() -> dict[str, str]:
        return {"status": "ok", "pid": str(os.getpid())}

    @app.post("/v1/models/bench:predict")
    def predict(body: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
        return {"predictions": run(body["instances"])}

    return app
