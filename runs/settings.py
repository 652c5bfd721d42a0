"""Which config keys decide a run's result: all but the operational ones (runs/schema.py).

Kept apart from training/attempt.py (which needs torch and Lightning for checkpoints) so that the
command line's checks and sweep dir names can use it before anything heavy is imported.
"""

from __future__ import annotations

from runs.schema import operational_keys

# Config keys that do not change a run's result: they may differ between attempts (marked on
# the root keys in runs/schema.py).
OPERATIONAL = operational_keys()


def is_operational(key: str) -> bool:
    """Whether a dotted config key is (or lies under) one of the OPERATIONAL keys."""
    return any(key == s or key.startswith(s + ".") for s in OPERATIONAL)
