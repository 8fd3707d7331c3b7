"""Drift, data-quality, health and performance monitors."""
