"""Distributed training on a TensorFlow cluster, export into the model registry."""
