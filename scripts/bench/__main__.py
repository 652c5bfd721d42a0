"""``python -m scripts.bench``: the one bench command. With no tool name: every benchmark section
(cli.py; exit 1 when one of them errored). With one: that tool, its arguments after it.

    python -m scripts.bench --only gpt,optimizer      # sections (cli.py)
    python -m scripts.bench probe_set                 # the default probe set's cost
    python -m scripts.bench concurrent --jobs 1,4,8   # runs an hour, several at once on a GPU
    python -m scripts.bench anchor --nanogpt DIR      # nanoGPT's CPU recipe, its model vs ours

The one-off tools whose results docs/benchmarks.md records (profile, threads, data, curves) were
retired after commit e4fa5fe; ``git show e4fa5fe:scripts/bench/<tool>.py`` is each as it ran.
"""

import runpy
import sys

TOOLS = ("probe_set", "concurrent", "anchor")

if len(sys.argv) > 1 and sys.argv[1] in TOOLS:
    tool = sys.argv.pop(1)
    sys.argv[0] = f"python -m scripts.bench {tool}"
    runpy.run_module(f"scripts.bench.{tool}", run_name="__main__", alter_sys=True)
else:
    from scripts.bench.cli import main

    sys.exit(0 if main()["ok"] else 1)
