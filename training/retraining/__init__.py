"""Retraining: the job queue (``training_jobs``: its table, service, routes, commands, metrics), the workers
that claim and run its jobs (``job/``: one job from claim to final state), and the validation gate that
judges a candidate (``gate/``, with the paired statistics of ``comparison.py``).

A job trains through :mod:`training.cluster`; nothing there imports this package.
"""
