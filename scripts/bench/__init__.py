"""Throughput benchmarks of normlab against reference models: ``python -m scripts.bench``.

core.py (settings, rows, timing discipline) <- models.py (GPT, ViT, norms, placements against
Hugging Face GPT-2, timm and plain_gpt.py) and harness.py (Lightning's overhead, the probe
callbacks via probe_set.py, peak memory) <- cli.py (sections, table, JSON); __main__.py runs cli,
or one of the tools beside it: anchor.py (quality against nanoGPT), concurrent.py (runs at once).
"""
