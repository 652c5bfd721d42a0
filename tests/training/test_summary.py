"""summary.json's fields declared once (runs/summary.py): the check finds an undeclared field
and a value of another type, the wandb table and the report's result columns derive from the
declaration, and every field a kind, the init probe or a probe records is declared.
(tests/training/test_train.py holds a GPT and a ViT run's summary.json to it.)"""

from __future__ import annotations

from analysis.runs import PROBE_RESULTS, RESULTS
from runs.summary import FIELDS, problems
from training.loggers import SUMMARY_FIELDS
from training.specs import MODELS


def test_problems_name_an_undeclared_field_and_a_wrong_type() -> None:
    good = {"status": "completed", "steps": 3, "lr": 1e-3, "best_val_loss": None, "derived": {}}
    assert problems(good) == []
    bad = {**good, "stpes": 3, "steps": "3", "runs": {"a": 1}}
    assert sorted(problems(bad)) == [
        "runs={'a': 1}: not of type list[Any]",
        "steps='3': not of type int",
        "stpes: not a declared summary field (runs/summary.py)",
    ]


def test_the_readers_lists_derive_from_the_declaration() -> None:
    assert set(SUMMARY_FIELDS) == {n for n, f in FIELDS.items() if f.wandb}
    assert {"status", "lr", "did_not_train", "best_val_loss"} <= set(SUMMARY_FIELDS)
    for name, (metric, how) in RESULTS.items():
        assert FIELDS[name].metric == (metric, how)
    assert set(PROBE_RESULTS) == {n for n, f in FIELDS.items() if f.probe}


def test_every_field_a_writer_names_is_declared() -> None:
    for spec in MODELS.values():
        assert set(spec.summary_fields) <= set(FIELDS)
    # the init probe's result keys (training/init_probe.py) and the probes' summary scalars
    init_probe = {"finding", "model", "config", "placements", "depths", "seeds", "k_batches"}
    assert init_probe | {"batch_shape", "depth_slopes", "runs", "loss_spikes"} <= set(FIELDS)
