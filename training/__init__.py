"""The training harness: builds a run from the composed config and trains it with Lightning.

models/ holds the networks and data/ the batches; this package joins them. One owner each:
the run's outcome and summary.json (record.py), the run dir (rundir.py), the typed config tree
(run_config.py, checked with config.py's primitives), the model kinds (specs.py), the build and
the fit (build.py), the optimizers (optim.py), training (task.py), watching (probes/,
divergence.py), logging (loggers.py), what Lightning and the OS leave to us for surviving kills
(reliability/) and the launchers (launch.py, sweep.py). Nothing in models/ or data/ imports it.
"""
