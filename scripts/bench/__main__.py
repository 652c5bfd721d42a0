"""``python -m scripts.bench``: every benchmark section; exit 1 when one of them errored."""

import sys

from scripts.bench.cli import main

sys.exit(0 if main()["ok"] else 1)
