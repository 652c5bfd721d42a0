"""The training harness: builds a run from the composed config and trains it with Lightning.

models/ holds the networks and data/ the batches; this package joins them, writing run dirs by
the contract in runs/ (file names, the record and summary.json, metric names). One owner each:
an attempt at a run in its dir (attempt.py), the typed config tree (run_config.py and
sections.py, checked with runs/checks.py), the model kinds (specs.py), the build and the fit
(build.py), the optimizers (optim.py), training (task.py), watching (probes/,
divergence.py), logging (loggers.py), what Lightning and the OS leave to us for surviving kills
(reliability/) and the launchers (launch.py, sweep.py). Nothing in models/ or data/ imports it.
"""
