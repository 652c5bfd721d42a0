"""scripts/reproduce.py: F1 runs end to end, the exit status and verdicts leave failed runs out,
publish keeps what it did not write, recompute and the freeze hold, and the deciding launches run
their fresh seeds."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analysis.findings import FINDINGS
from experiments import registry, reproduce
from experiments import sweep as reproduce_sweep
from runs.errors import ConfigError
from tests.helpers import F2_SMALL, f2_runs, fake_run


def job_values(job: list[str]) -> dict[str, str]:
    """A planned job's overrides as key -> value."""
    return dict(item.split("=", 1) for item in job)


def f2_sweep(out: Path, failed: set[tuple[str, int]]) -> None:
    """The 8 job dirs of F2_SMALL as train.py leaves them; (placement, warmup) in ``failed``:
    both seeds failed on a config error."""
    f2_runs(out, F2_SMALL, failed)


@pytest.mark.parametrize("sweep_code", [1, 0])
def test_a_sweep_with_failed_runs_exits_non_zero(tmp_path: Path, monkeypatch, sweep_code) -> None:
    """Pre-LN with warmup failed in both seeds: F2b says NO DATA (not PASS on an "inf"), and
    reproduce exits 1 whatever train.py -m returned."""
    out = tmp_path / "f2"
    f2_sweep(out, failed={("pre", 100)})
    launched = []
    monkeypatch.setattr(reproduce, "run_sweep", lambda *a: launched.append(a) or sweep_code)
    assert reproduce.main(["f2", "--out", str(out), *F2_SMALL]) == 1
    assert len(launched) == 1  # a failed run is no finished run: the sweep runs again
    record = json.loads((out / "verdict.json").read_text())
    claims = {c["id"]: c for c in record["claims"]}
    assert (
        claims["F2b"]["status"] == "NO DATA" and "2 failed runs left out" in claims["F2b"]["note"]
    )
    # post: 3.0 with and without warmup: worse in 0 of 2 seeds, [0, 0.84] straddles 0.5
    f2a = next(iter(claims["F2a"]["effects"].values()))
    assert claims["F2a"]["status"] == "INCONCLUSIVE" and (f2a["k"], f2a["n"]) == ([0], [2])
    assert record["table"]["left_out"] == {"failed": 2}
    assert record["run_status"] == {"completed": 6, "failed": 2}
    assert (
        "Left out of every verdict (neither completed nor diverged): failed=2"
        in (out / "verdict.md").read_text()
    )


def test_a_finished_sweep_exits_zero_without_launching(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "f2"
    f2_sweep(out, failed=set())
    monkeypatch.setattr(reproduce, "run_sweep", lambda *a: pytest.fail("launched"))
    assert reproduce.main(["f2", "--out", str(out), *F2_SMALL]) == 0
    claims = json.loads((out / "verdict.json").read_text())["claims"]
    assert [c["status"] for c in claims] == ["INCONCLUSIVE", "PASS"]  # a rate of 2 seeds


def test_a_sweep_dir_of_another_experiment_or_overrides_is_refused(tmp_path, monkeypatch) -> None:
    """The sweep dir records the experiment and overrides that made it: another finding's or
    another setting's command is refused, so its runs are not pooled nor its verdicts replaced."""
    out = tmp_path / "f2"
    f2_sweep(out, failed=set())
    monkeypatch.setattr(reproduce, "run_sweep", lambda *a: pytest.fail("launched"))
    assert reproduce.main(["f2", "--out", str(out), *F2_SMALL]) == 0  # adopted, recorded
    before = (out / "verdict.json").read_text()
    assert json.loads((out / ".reproduce.json").read_text())["experiment"] == "f2_warmup"
    assert reproduce.main(["f2", "--out", str(out), *F2_SMALL, "trainer.max_steps=7"]) == 1
    assert reproduce.main(["f5", "--out", str(out)]) == 1
    assert (out / "verdict.json").read_text() == before
    assert not (out / "verdict_f5.json").exists()


def test_publish_keeps_what_it_did_not_write_and_names_what_it_replaces(
    tmp_path, monkeypatch, capsys
) -> None:
    out = tmp_path / "f2"
    f2_sweep(out, failed=set())
    monkeypatch.setattr(reproduce, "run_sweep", lambda *a: pytest.fail("launched"))
    dest = tmp_path / "docs" / "f2"
    (dest / "report").mkdir(parents=True)
    (dest / "report" / "mine.png").write_bytes(b"a figure of someone else's")
    (dest / "verdict.md").write_text("an older verdict")
    argv = ["f2", "--out", str(out), *F2_SMALL]
    assert reproduce.main([*argv, "--publish", str(dest)]) == 0
    assert (
        dest / "report" / "mine.png"
    ).is_file() and "replaced: verdict.md" in capsys.readouterr().out
    assert json.loads((dest / ".published.json").read_text())["experiment"] == "f2_warmup"
    # The per-seed values travel with the report, the sweep dir written in its canonical form.
    published = json.loads((dest / "report" / "report.json").read_text())
    seeds = {r["seed"] for v in published["variants"] for r in v["runs"]}
    assert seeds == {0, 1} and str(out) not in (dest / "report" / "report.json").read_text()
    assert json.loads((dest / "verdict.json").read_text())["claims"][0]["id"] == "F2a"
    with pytest.raises(SystemExit, match="inside the sweep dir"):
        reproduce.main([*argv, "--publish", str(out / "published")])
    other = tmp_path / "docs" / "f5"
    other.mkdir()
    (other / ".published.json").write_text(json.dumps({"experiment": "f5_norms", "files": []}))
    with pytest.raises(SystemExit, match="holds the published experiment=f5_norms"):
        reproduce.main([*argv, "--publish", str(other)])


# --- F1 end to end -------------------------------------------------------------------------------
@pytest.mark.slow  # 22 s; fast versions: test_f1_pass_and_fail (test_analysis_findings.py) and
# test_all_runs_every_finding_once_and_f13_shares_f6s_sweep
def test_f1_end_to_end(tmp_path: Path, capsys) -> None:
    """reproduce.py f1 runs train.py's init-probe sweep, compares, and decides the F1 claims;
    the same command again finds every run finished, launches nothing and publishes."""
    out = tmp_path / "f1"
    small = ["init_probe.depths=[6,12,24]", "init_probe.seeds=[0,1]", "init_probe.batches=2"]
    argv = ["f1", "--out", str(out), "hydra/launcher=basic", *small]  # one process: one import
    assert reproduce.main(argv) == 0
    record = json.loads((out / "verdict.json").read_text())
    claims = {c["id"]: c for c in record["claims"]}
    assert list(claims) == ["F1a", "F1b", "F1c", "F1d"]
    assert all(c["status"] in ("PASS", "FAIL", "INCONCLUSIVE") for c in claims.values())
    assert all(c["effects"] for c in claims.values())
    effect = {k: next(iter(c["effects"].values())) for k, c in claims.items()}
    assert record["n_runs"] == 3 and record["sweep_returncode"] == 0
    # The slope is the mean over seeds of each seed's least-squares fit (numpy's) of log grad
    # norm against log depth, from the per-seed values the probe recorded.
    slopes = {}
    for probe in out.glob("*/probe.json"):
        runs = sorted(json.loads(probe.read_text())["runs"], key=lambda r: r["n_layer"])
        x = np.log([r["n_layer"] for r in runs])
        per_seed = zip(*(r["per_seed"]["last_fc2"] for r in runs), strict=True)
        slopes[runs[0]["placement"]] = np.mean([np.polyfit(x, np.log(y), 1)[0] for y in per_seed])
    assert effect["F1a"]["effect"] == pytest.approx(slopes["post"], abs=1e-3)
    assert effect["F1b"]["effect"] == pytest.approx(slopes["pre"], abs=1e-3)
    assert effect["F1a"]["n"] == [2]
    # LayerNorm output has RMS 1 after every Post-LN block; Pre-LN's stream grows.
    assert effect["F1c"]["effect"] == pytest.approx(1.0, abs=0.01)
    assert claims["F1c"]["status"] == claims["F1d"]["status"] == "PASS"
    assert "| F1a |" in (out / "verdict.md").read_text()
    report_md = (out / "report" / "report.md").read_text()  # what the probe measured
    assert "| series | depth | seeds |" in report_md and "| warmup |" not in report_md
    assert "![init_grid.png](init_grid.png)" in report_md  # F1's four claims in one figure
    capsys.readouterr()
    docs = tmp_path / "docs"
    assert reproduce.main([*argv, "--publish", str(docs)]) == 0
    assert "not launching the sweep again" in capsys.readouterr().out
    again = json.loads((out / "verdict.json").read_text())
    assert again["wall_s"] == record["wall_s"]  # the sweep's own time, not the re-evaluation's
    published = sorted(str(p.relative_to(docs)) for p in docs.rglob("*") if p.is_file())
    assert published == [
        ".published.json",
        "report/act_norm_init.png",
        "report/cards.md",
        "report/grad_norm_init.png",
        "report/init_grid.png",
        "report/report.json",
        "report/report.md",
        "verdict.json",
        "verdict.md",
    ]
    for name in ("report/report.md", "report/report.json", "report/cards.md", "verdict.json"):
        assert str(out) not in (docs / name).read_text()


def test_recompute_finds_every_verdict_identical_from_its_file(
    tmp_path: Path, monkeypatch, capsys
) -> None:
    """verdict.json holds every per-run value its verdicts read: --recompute decides them again
    from the file alone and says identical; a value changed in the table is caught."""
    out = tmp_path / "f2"
    f2_sweep(out, failed=set())
    monkeypatch.setattr(reproduce, "run_sweep", lambda *a: pytest.fail("launched"))
    assert reproduce.main(["f2", "--out", str(out), *F2_SMALL]) == 0
    record = json.loads((out / "verdict.json").read_text())
    assert record["registry"] and len(record["table"]["rows"]) == 8
    assert reproduce.main(["--recompute", str(out)]) == 0
    row = next(r for r in record["table"]["rows"] if r["arm"]["placement"] == "pre")
    row["values"]["best_val_loss"] += 0.5
    (out / "verdict.json").write_text(json.dumps(record))
    assert reproduce.main(["--recompute", str(out / "verdict.json")]) == 1
    # a claim whose hash in the file is not its declaration's (declared anew since, or the
    # file edited) is never identical; a glob's other entries (a README, a finding not yet
    # run) are passed over
    row["values"]["best_val_loss"] -= 0.5
    for claim in record["claims"]:
        claim["hash"] = "0" * 16
    (out / "verdict.json").write_text(json.dumps(record))
    (tmp_path / "README.md").write_text("# findings\n")
    (tmp_path / "f99").mkdir()
    paths = [str(out), str(tmp_path / "README.md"), str(tmp_path / "f99")]
    assert reproduce.main(["--recompute", *paths]) == 1
    said = capsys.readouterr().out
    assert "DIFFERENT (F2a, F2b)" in said and "F2a, F2b: the declaration's hash differs" in said
    assert "f99: no verdict yet" in said


def all_frozen_at(first: int):
    from analysis.findings.declare import Frozen, claim_hash

    claims = {c.id: {"hash": claim_hash(c), "first_seed": first}
              for f in FINDINGS.values() for c in f.claims}  # fmt: skip
    return Frozen("x", claims, first + 1000)


def test_once_frozen_the_deciding_launches_run_fresh_seeds(monkeypatch) -> None:
    import analysis.findings as findings

    grid = [["optim.lr=1e-3"], ["placement=pre", "optim.lr=3e-2"]]  # the grid, one widening
    arms = [["placement=post,deepnorm", "optim.lr=1e-3", "seed=2,3,4"]]
    assert reproduce.fresh(FINDINGS["f3"], grid + arms, 2) == grid + arms  # not frozen
    monkeypatch.setattr(findings, "frozen", lambda: all_frozen_at(1000))
    seeds = "seed=" + ",".join(str(1000 + i) for i in range(FINDINGS["f3"].seeds))
    # F3 chooses rates: the grid keeps its seeds, the fixed-rate arm runs the fresh ones
    assert reproduce.fresh(FINDINGS["f3"], grid + arms, 2) == [
        *grid, ["placement=post,deepnorm", "optim.lr=1e-3", seeds]
    ]  # fmt: skip
    # F2 chooses none: its whole sweep runs the fresh seeds; F1's probe takes them as its own
    f2 = reproduce.fresh(FINDINGS["f2"], [["seed=0,1"]], 1)
    assert f2 == [["seed=" + ",".join(str(1000 + i) for i in range(FINDINGS["f2"].seeds))]]
    (f1,) = reproduce.fresh(FINDINGS["f1"], [[]], 1)
    assert f1 == [f"init_probe.seeds=[{','.join(str(1000 + i) for i in range(5))}]"]


@pytest.fixture
def frozen_file(tmp_path: Path, monkeypatch) -> Path:
    """frozen.json in a temporary dir, for the freeze and its readers alike."""
    import analysis.findings as findings

    path = tmp_path / "frozen.json"
    monkeypatch.setattr(findings, "FROZEN", path)
    monkeypatch.setattr(registry, "FROZEN", path)
    monkeypatch.setattr(registry, "PUBLISHED", tmp_path / "published")  # no verdicts yet
    return path


def test_freeze_records_the_claims_and_a_refreeze_moves_the_fresh_seeds(frozen_file) -> None:
    import analysis.findings as findings
    from analysis.findings.declare import claim_hash

    path = frozen_file
    assert reproduce.main(["--freeze"]) == 0
    record = json.loads(path.read_text())
    f2b = FINDINGS["f2"].claims[1]
    assert record["claims"]["F2b"] == {"hash": claim_hash(f2b), "first_seed": 1000}
    assert findings.fresh_seeds(FINDINGS["f2"]) == list(range(1000, 1000 + FINDINGS["f2"].seeds))
    assert reproduce.main(["--freeze"]) == 0  # nothing changed: every entry stands
    assert json.loads(path.read_text()) | {"date": "", "commit": ""} == record | {
        "date": "",
        "commit": "",
    }
    record["claims"]["F2b"]["hash"] = "changed since"  # as if F2b's entry had moved
    path.write_text(json.dumps(record))
    assert reproduce.main(["--freeze"]) == 0  # a changed claim gets seeds never handed out
    again = json.loads(path.read_text())
    assert again["claims"]["F2b"]["first_seed"] == 2000 and again["next_seed"] == 3000
    assert again["claims"]["F2a"]["first_seed"] == 2000  # F2 runs again: all of it on new seeds
    assert again["claims"]["F3a"]["first_seed"] == 1000  # another finding: its seeds stand


def test_a_freeze_of_named_findings_leaves_the_others_as_they_were(frozen_file) -> None:
    path = frozen_file
    assert reproduce.main(["--freeze", "f2"]) == 0
    claims = json.loads(path.read_text())["claims"]
    assert set(claims) == {c.id for c in FINDINGS["f2"].claims}  # the rest unfrozen: pilots
    assert reproduce.main(["--freeze", "f4"]) == 0  # an alias: F3's sweep, F2's entries stand
    again = json.loads(path.read_text())
    assert again["claims"]["F2a"] == claims["F2a"]
    assert again["claims"]["F3a"]["first_seed"] == 2000 and "F5" not in str(again["claims"])
    with pytest.raises(SystemExit, match="no such finding"):
        reproduce.main(["--freeze", "f99"])


def test_an_arm_on_the_grids_rates_keeps_the_grid_seeds(monkeypatch) -> None:
    """The league's OLMo 2 arm runs on the grid's rates: it chooses its rate like the grid, so
    it keeps the grid's seeds after the freeze; only an arm at one fixed rate decides."""
    import analysis.findings as findings

    monkeypatch.setattr(findings, "frozen", lambda: all_frozen_at(1000))
    cfg = reproduce_sweep.compose("placements_depth", [])
    launches = reproduce_sweep.launch_overrides(cfg, [])
    grid = 1 + len(reproduce_sweep.read_reproduce(cfg).widen)
    assert reproduce.fresh(FINDINGS["placements"], launches, grid) == launches


def test_a_confirming_launch_pins_what_the_report_leaves_out(tmp_path) -> None:
    """The report names nGPT's two arms by their positions alone (rope vs learned), which also
    differ in the tied head: the control's confirming launch must still tie it (the experiment
    would untie an nGPT), and the rotary arm's keeps the experiment's untied head unnamed."""
    root = tmp_path / "sweep"
    for pos, tie, seeds in (
        ("learned", True, (0, 1)),
        ("rope", False, (0, 1)),
        ("learned", False, (1000,)),
    ):  # a stray fresh run: not the arm's
        for seed in seeds:
            fake_run(
                root / f"pos={pos},tie={tie},seed={seed}",
                f"seed: {seed}\nmodel: {{name: gpt, n_layer: 12, pos: {pos}, "
                f"tie_weights: {str(tie).lower()}}}\nplacement: {{name: ngpt}}\n"
                "norm: {name: layernorm}\noptim: {lr: 0.03}\n",
                "step,train/loss\n0,4.0\n1,3.0\n",
                {"status": "completed", "model": "gpt", "lr": 0.03, "n_layer": 12, "seed": seed,
                 "final_val_loss": 2.0},
            )  # fmt: skip
    by = {"placement": "placement", "model.pos": "model.pos",
          "model.tie_weights": "model.tie_weights"}  # fmt: skip
    arm = {"placement": "ngpt", "model.pos": "learned", "model.tie_weights": None, "lr": 0.03}
    from analysis.runs import load_runs

    runs, _ = load_runs(root)
    pinned = reproduce_sweep.arm_overrides("placements_depth", runs, arm, by, {1000})
    assert pinned == ["placement=ngpt", "model.pos=learned", "model.tie_weights=true"]
    rope = {**arm, "model.pos": "rope"}
    assert reproduce_sweep.arm_overrides("placements_depth", runs, rope, by, {1000}) == [
        "placement=ngpt",
        "model.pos=rope",
    ]
    with pytest.raises(ConfigError, match="model.tie_weights"):  # the stray run joins: two heads
        reproduce_sweep.arm_overrides("placements_depth", runs, arm, by, set())


def test_an_arm_whose_value_is_null_is_told_from_the_arm_that_sets_it(tmp_path) -> None:
    """F19's plain residual arm has no attention gate (null), its gated arm a head-wise one: the
    report names the plain arm's gate as None, and its confirming launch is the plain runs'."""
    from analysis.runs import load_runs

    root = tmp_path / "sweep"
    for gate in ("null", "headwise"):
        for seed in (0, 1):
            fake_run(
                root / f"gate={gate},seed={seed}",
                f"seed: {seed}\nmodel: {{name: gpt, n_layer: 12, attn_gate: {gate}}}\n"
                "placement: {name: pre}\nnorm: {name: layernorm}\noptim: {lr: 0.003}\n",
                "step,train/loss\n0,4.0\n1,3.0\n",
                {"status": "completed", "model": "gpt", "lr": 0.003, "n_layer": 12, "seed": seed,
                 "final_val_loss": 2.0},
            )  # fmt: skip
    by = {"placement": "placement", "model.attn_gate": "model.attn_gate"}
    runs, _ = load_runs(root)
    plain = {"placement": "pre", "model.attn_gate": None, "lr": 0.003}
    assert reproduce_sweep.arm_overrides("f19_topologies", runs, plain, by, set()) == [
        "placement=pre"
    ]
    gated = {**plain, "model.attn_gate": "headwise"}
    assert reproduce_sweep.arm_overrides("f19_topologies", runs, gated, by, set()) == [
        "placement=pre",
        "model.attn_gate=headwise",
    ]


def write_norm_run(out: Path, name: str, job: list[str], loss: float) -> None:
    """One F5 job's run dir as train.py leaves it (its norm, rate and seed, a best val loss)."""
    o = job_values(job)
    config = (
        f"seed: {o['seed']}\nplacement: {{name: pre}}\nnorm: {{name: {o['norm']}}}\n"
        f"optim: {{lr: {o['optim.lr']}}}\n"
    )
    summary = {"status": "completed", "best_val_loss": loss, "seed": int(o["seed"])}
    fake_run(out / name, config, "step\n", summary)


def test_reproduce_confirms_each_variants_best_lr_on_the_fresh_seeds(tmp_path, monkeypatch):
    """Select, then confirm: once the grid (seeds 0-2) has finished, one launch per norm at the
    rate its grid seeds chose (LayerNorm 3e-3, RMSNorm 1e-3) runs the frozen fresh seeds, and F5
    is decided on those alone (confirmatory); a second command launches nothing."""
    import analysis.findings as findings

    monkeypatch.setattr(findings, "frozen", lambda: all_frozen_at(1000))
    small = ["placement=pre", "optim.lr=1e-3,3e-3"]  # 2 norms x 2 lrs x 3 grid seeds
    out = tmp_path / "f5"
    cfg = reproduce_sweep.compose("f5_norms", small)
    grid = reproduce_sweep.planned_jobs(cfg, small)
    best = {"layernorm": 3e-3, "rmsnorm": 1e-3}
    for job, name in zip(grid, reproduce_sweep.job_dirs(cfg, grid), strict=True):
        o = job_values(job)
        write_norm_run(out, name, job, 2.4 if float(o["optim.lr"]) == best[o["norm"]] else 2.6)
    launched = []

    def train(experiment, jobs, dirs, sweep_out, overrides, mode="train"):
        launched.append(overrides)
        for job, name in zip(jobs, dirs, strict=True):
            seed = int(job_values(job)["seed"])
            write_norm_run(sweep_out, name, job, 2.40 + 0.001 * (seed % 7))
        return 0

    monkeypatch.setattr(reproduce, "run_sweep", train)
    assert reproduce.main(["f5", "--out", str(out), *small]) == 0
    seeds = list(range(1000, 1000 + FINDINGS["f5"].claims[0].seeds))
    fresh = "seed=" + ",".join(map(str, seeds))
    assert sorted(tuple(o[len(small) :]) for o in launched) == [
        ("placement=pre", "norm=layernorm", "optim.lr=0.003", fresh),
        ("placement=pre", "norm=rmsnorm", "optim.lr=0.001", fresh),
    ]
    (claim,) = json.loads((out / "verdict.json").read_text())["claims"]
    assert claim["mode"] == "confirmatory" and claim["status"] == "PASS", claim["note"]
    assert claim["decided_on"] == seeds
    launched.clear()
    assert reproduce.main(["f5", "--out", str(out), *small]) == 0 and launched == []
