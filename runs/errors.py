"""The two refusals of the run-dir contract, for every entry point to say in one line:
``ConfigError`` (a config or run dir that cannot run) and ``Refused`` (a run dir this attempt may
not write: other settings, or another writer). training/errors.py holds the policy that prints
them."""

from __future__ import annotations


class ConfigError(ValueError):
    """A config or run dir that cannot run; the message names the fix."""


class Refused(ConfigError):
    """A run dir that this attempt may not write: other settings, or another writer."""
