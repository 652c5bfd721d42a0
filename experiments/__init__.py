"""Reproducing the findings: each finding's sweep (sweep.py: its jobs, their runs on disk, the
estimate and the launch), its verdicts (verdicts.py: verdict.md / .json, the console table, the
published copy) and the command's flow (reproduce.py), behind scripts/reproduce.py. It reads runs
through analysis/ and launches train.py in a subprocess: it never imports the Lightning harness.
"""
