"""A researcher's own sweep answered like a finding: every swept key tells the report's rows
apart, compare --baseline gives differences with intervals, Holm and seeds-needed, a user's claim
is decided by the findings' judge (as the equivalent registered claim is), and its freeze ->
confirm path runs the fresh seeds once."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from analysis import claims as user
from analysis.findings.judge import judge_finding
from analysis.findings.registry import F17
from analysis.report import table_cells, write_report
from analysis.wandb_report import wandb_sync_pattern
from runs.errors import ConfigError
from scripts import compare
from tests.helpers import settings_run

LRS = (1e-3, 3e-3, 1e-2)


def param_width_lr(root: Path) -> Path:
    """param x width x lr x 3 seeds: muP flat in width, SP's best rate moving."""
    for param in ("sp", "mup"):
        for width in (32, 64):
            for lr in LRS:
                for seed in range(3):
                    best = 3e-3 if param == "mup" or width == 32 else 1e-3
                    loss = 2.0 + abs(lr - best) * 20 + 0.01 * seed - width / 1000
                    over = {"param.name": param, "model.n_embd": width, "optim.lr": lr}
                    settings_run(root, f"p{param}-w{width}-lr{lr}-s{seed}", seed, loss, **over)
    return root


def test_no_two_rows_of_a_param_width_lr_sweep_read_alike(tmp_path: Path) -> None:
    report = write_report(param_width_lr(tmp_path / "sweep"), plots=False)
    head, rows = table_cells(report)
    assert head[:3] == ["param", "width", "lr"]  # the swept keys lead, the shared one is said
    shown = [tuple(r[: head.index("seeds")]) for r in rows]
    assert len(rows) == 12 and len(set(shown)) == 12
    assert report["shared"] == "Every run: gpt, pre, layernorm, depth 2."
    labels = [e["label"] for e in report["lr_sweep"]]
    assert len(labels) == len(set(labels)) == 4


def hc_sweep(root: Path, seeds=range(4), gap: float = 0.05) -> Path:
    """hc vs the plain residual sum over three rates; hc ``gap`` lower at every seed."""
    for conn in ("hc", "residual"):
        for lr in LRS:
            for seed in seeds:
                loss = 2.0 + abs(lr - 3e-3) * 20 + 0.02 * (seed % 3) - (gap if conn == "hc" else 0)
                settings_run(root, f"{conn}-lr{lr}-s{seed}", seed, loss, summary={"params": 100},
                             **{"model.connection": conn, "optim.lr": lr})  # fmt: skip
    return root


def test_the_baseline_comparison_gives_the_paired_difference_holm_and_seeds(tmp_path, capsys):
    sweep = hc_sweep(tmp_path / "sweep")
    assert compare.main([str(sweep), "--no-wandb", "--no-plots",
                         "--baseline", "model.connection=residual"]) == 0  # fmt: skip
    record = json.loads((sweep / "report" / "comparisons.json").read_text())
    (diff,) = record["differences"]
    ((_, effect),) = diff["effects"].items()
    # equal parameter counts and seeds: paired by seed; every seed's difference is -0.05
    assert effect["method"].startswith("paired") and effect["effect"] == pytest.approx(-0.05)
    assert diff["holm_status"] == "FAIL"  # outside ±0: the decision reads "lower"
    out = capsys.readouterr().out
    assert "hc | residual | 0.003 / 0.003 | -0.0500 [-0.0500, -0.0500] (paired)" in out
    assert "| lower |" in out and "0/12 [0.00, 0.26] vs 0/12 [0.00, 0.26]" in out


def test_seeds_needed_and_unresolved_when_the_interval_straddles(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    for conn, losses in (("hc", (2.00, 2.10, 1.95)), ("residual", (2.05, 2.00, 2.08))):
        for seed, loss in enumerate(losses):  # one rate, three seeds, noisy
            settings_run(sweep, f"{conn}-s{seed}", seed, loss, summary={"params": 100},
                         **{"model.connection": conn})  # fmt: skip
    assert compare.main([str(sweep), "--no-wandb", "--no-plots", "--baseline",
                         "connection=residual", "--margin", "0.01"]) == 0  # fmt: skip
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("hc |"))
    cells = row.split(" | ")
    assert cells[5] == "unresolved" and int(cells[6]) > 3


def test_a_user_claim_is_decided_as_the_registered_claim_is(tmp_path, capsys):
    """F17a (Derf ends below LayerNorm, Welch, each at its stable best lr) and the same claim in
    one line, on the same runs: the same effect, interval, p and verdict."""
    sweep = tmp_path / "sweep"
    for norm, params in (("derf", 102), ("layernorm", 100)):
        for lr in LRS:
            for seed in range(4):
                loss = 2.0 + abs(lr - 3e-3) * 20 + 0.03 * ((seed * 7) % 4)
                loss -= 0.01 * (norm == "derf")
                summary = {"params": params, "norm": norm}
                settings_run(sweep, f"{norm}-lr{lr}-s{seed}", seed, loss, summary=summary,
                             **{"norm.name": norm, "optim.lr": lr})  # fmt: skip
    assert compare.main([str(sweep), "--no-wandb", "--no-plots",
                         "--claim", "F17a: norm=derf - norm=layernorm < 0"]) == 0  # fmt: skip
    mine = json.loads((sweep / "report" / "claims.json").read_text())
    (claim,) = mine["claims"]
    f17a = next(c for c in F17.claims if c.id == "F17a")
    (theirs,) = judge_finding(type(F17)("x", "x", (f17a,)), mine["table"])
    assert claim["effects"] and list(claim["effects"].values()) == list(theirs["effects"].values())
    assert (claim["status"], claim["holm_status"]) == (theirs["status"], theirs["holm_status"])


def test_claim_lines_and_files_and_their_errors(tmp_path):
    (entry,) = user.read_entries(lines=["diverged: lr=0.01 - lr=0.001 > 0"])
    assert entry["estimand"] == "rate2" and entry["event"] == "diverged" and entry["lr"] == "curve"
    (entry,) = user.read_entries(lines=["mine: final_val_loss: a=1 / b=2 ~ 1.5"])
    assert (entry["id"], entry["measure"], entry["estimand"]) == ("mine", "final_val_loss",
                                                                  "ratio2")  # fmt: skip
    with pytest.raises(ConfigError, match="write it as"):
        user.read_entries(lines=["a=1 b=2"])
    path = tmp_path / "c.yaml"
    path.write_text("claims:\n  - {id: x, arms: [a=1, a=2]}\n  - {id: x, arms: [a=1, a=2]}\n")
    with pytest.raises(ConfigError, match="share an id"):
        user.read_entries(path)
    rows = [{"arm": {"lr": lr, "norm": "x"}, "seed": 0, "values": {}} for lr in LRS]
    with pytest.raises(ConfigError, match="does not vary model.connection"):
        user.declare({"id": "c", "arms": ["model.connection=hc", "model.connection=x"]}, rows)


def test_the_sync_line_is_a_glob_that_leaves_the_reports_run_out(tmp_path: Path) -> None:
    for run in ("a=1,seed=0", "a=2,seed=0"):
        (tmp_path / run / "wandb" / "offline-run-x").mkdir(parents=True)
    (tmp_path / "report" / "wandb" / "offline-run-r").mkdir(parents=True)
    assert wandb_sync_pattern(tmp_path, skip=tmp_path / "report") == str(
        tmp_path / "*=*" / "wandb" / "offline-run-*"
    )
    for k in range(12):  # more runs than a line should list, names without "="
        (tmp_path / f"r{k}" / "wandb" / "offline-run-x").mkdir(parents=True)
    assert wandb_sync_pattern(tmp_path, skip=tmp_path / "report").count(" ") == 0


def test_freeze_then_a_decision_on_the_fresh_seeds_is_confirmatory(tmp_path) -> None:
    """The protocol without the launches (tests/test_claims_protocol.py runs them): frozen on
    the pilot, decided on the fresh seeds alone once they ran, exploratory once changed."""
    from experiments import claims as protocol

    sweep = hc_sweep(tmp_path / "sweep", seeds=range(3))
    line = ["hc: connection=hc - connection=residual < 0"]
    entries = user.read_entries(lines=line)
    frozen = protocol.freeze(sweep, write_report(sweep, plots=False), entries)
    fresh = protocol.fresh(frozen)
    assert fresh[0] == 100 and len(fresh) == frozen["seeds"] == frozen["claims"]["hc"]["seeds"]
    with pytest.raises(ConfigError, match="were frozen before"):
        protocol.freeze(sweep, write_report(sweep, plots=False), entries)
    hc_sweep(sweep, seeds=fresh)  # as --confirm's launches leave them (every rate: the rule's)
    _, (verdict,) = protocol.judge(write_report(sweep, plots=False), entries, frozen)
    assert verdict["mode"] == "confirmatory" and verdict["decided_on"] == fresh
    assert verdict["status"] == "PASS"  # hc 0.05 below at every seed
    changed = user.read_entries(lines=["hc: connection=hc - connection=residual < -0.01"])
    _, (again,) = protocol.judge(write_report(sweep, plots=False), changed, frozen)
    assert again["mode"] == "exploratory"
