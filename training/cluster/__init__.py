"""A model trained on a TensorFlow cluster and exported into the registry: the run's spec and data, the
preprocessing and network, the trainers, the cluster's processes, calibration and the SavedModel export.

Nothing here knows the retraining job queue (:mod:`training.retraining`) or the import of models trained
elsewhere (:mod:`training.imports`); both build on this package (an import-linter contract keeps it so).
"""
