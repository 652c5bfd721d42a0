"""The run-dir contract, below both the harness (training/) and the readers (analysis/,
experiments/, the benchmarks): a run dir's file names (runfiles.py), the run's record and its
statuses (record.py), the summary's fields (summary.py), the metric names (metric_names.py),
number formats (numbers.py), the config's root keys and which of them decide a result
(schema.py, settings.py), a sweep's jobs and their dir names (jobs.py), the directory lock
(dirlock.py), its two refusals (errors.py) and the type checks they need (checks.py).

It imports no other package of this project and neither torch nor Lightning
(tests/test_layout.py holds both rules): reading a run dir never waits on torch's import.
"""
