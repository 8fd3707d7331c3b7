"""HTTP in: serving API, model registry and prediction log."""
