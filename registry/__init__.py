"""Versioned model registry: files in TF Serving's layout, one row per version."""
