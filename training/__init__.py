"""Training, by subject: ``cluster/`` (a model trained on a TensorFlow cluster and exported into the
registry), ``retraining/`` (the job queue, its workers and the validation gate) and ``imports/`` (a model
trained elsewhere registered: ``driftwarden models import``)."""
