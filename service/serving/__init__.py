"""Serving: TF Serving REST and Open Inference Protocol v2 over the registry's SavedModels."""
