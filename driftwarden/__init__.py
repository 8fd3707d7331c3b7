"""driftwarden's Python API: compare data frames, profile a reference, read reports, call the server.

>>> import driftwarden
>>> report = driftwarden.compare(reference_frame, current_frame, target="default")  # doctest: +SKIP
>>> report.summary()  # doctest: +SKIP

Everything public is in ``__all__``; it follows semantic versioning (docs/python-api.md): a minor version
adds, only a major version removes or changes. Importing this package is light (no TensorFlow, no
database driver): the engine loads on the first comparison.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError as _NotInstalled
from importlib.metadata import version as _version

from core.numpy_settings import numpy_settings as _numpy_settings
from driftwarden.client import Client, Predictions
from driftwarden.comparing import Profile, compare, profile
from driftwarden.errors import (
    ApiError,
    BadRequest,
    Conflict,
    DriftwardenError,
    InvalidInput,
    NotFound,
    ServerError,
    Unauthorized,
    Unreachable,
)
from driftwarden.report import Report

_numpy_settings()  # none of the above loads numpy: as driftwarden drift, one OpenBLAS thread (docs)

try:
    __version__ = _version("driftwarden")
except _NotInstalled:  # run from a checkout that is not installed
    __version__ = "0+unknown"

__all__ = [
    "ApiError",
    "BadRequest",
    "Client",
    "Conflict",
    "DriftwardenError",
    "InvalidInput",
    "NotFound",
    "Predictions",
    "Profile",
    "Report",
    "ServerError",
    "Unauthorized",
    "Unreachable",
    "__version__",
    "compare",
    "profile",
]
