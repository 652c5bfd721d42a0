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


# The model keys of records written before placement and norm had groups: key -> (group, field)
# (python -m scripts.migrate converts them; the readers take the current layout only).
FLAT_FIELDS = {
    "placement": ("placement", "name"),
    "deepnorm_alpha": ("placement", "alpha"),
    "deepnorm_beta": ("placement", "beta"),
    "mix_fraction": ("placement", "mix_fraction"),
    "norm": ("norm", "name"),
    "norm_eps": ("norm", "eps"),
    "dyt_alpha": ("norm", "alpha"),
    "norm_groups": ("norm", "groups"),
}


def older_layout(settings: dict) -> list[str]:
    """The keys of a run record that only an older layout writes (``model.norm_eps``, ...)."""
    return sorted(k for k in settings if k.startswith("model.") and k[6:] in FLAT_FIELDS)
