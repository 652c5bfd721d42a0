"""What exists because Lightning, Hydra, torch or the OS fall short for a run that must survive
kills, full disks and reruns; each module's docstring names the upstream limit it works around.

- ``checkpoints``: digests, one-line errors for unreadable files, a run's model rebuilt
  without Lightning; ``checkpoint_io``: last.ckpt written whole or not at all.
- ``resume``: when last.ckpt is written (after a due validation, at a signal's step boundary)
  and what it remembers.
- ``metrics_csv``: metrics.csv continued across attempts, never duplicated or gapped.
- ``progress``: a progress bar over optimizer steps.

Every private hook these modules use has a contract test in
tests/training/reliability/test_library_contracts.py, which fails loudly when an upgrade changes
it; with those tests, the dependency ranges in pyproject.toml (lightning >=2.4,<3) stay open to
new minor versions.
"""
