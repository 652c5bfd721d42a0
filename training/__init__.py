"""The training harness: builds a run from the composed config and trains it with Lightning.

models/ holds the networks and data/ the batches; this package joins them (build.py), trains
(task.py), watches (probes/, divergence.py), logs (loggers.py), survives kills (resume.py) and
meets the launchers (launch.py). Nothing in models/ or data/ imports it.
"""
