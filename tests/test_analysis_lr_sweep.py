"""An lr sweep's report: per variant (the lr taken out), the final loss at each lr, the best lr,
and Wortsman et al.'s LR sensitivity, against hand-computed values."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest
from scipy import stats as sp

from scripts import compare
from tests.helpers import fake_run

# (placement, lr) -> final val loss per seed (None: diverged)
LOSSES = {
    ("pre", 1e-3): [2.0, 2.2],
    ("pre", 3e-3): [1.8, 1.8],
    ("pre", 1e-2): [1.9, 2.1],
    ("pre", 3e-2): [None, 3.0],
    ("post", 1e-3): [2.5, 2.5],
    ("post", 3e-3): [2.4, 2.6],
    ("post", 1e-2): [5.0, 5.0],
    ("post", 3e-2): [None, None],
}
L0 = 4.0  # every run's first train loss


def write_sweep(root: Path) -> Path:
    for (placement, lr), losses in LOSSES.items():
        for seed, loss in enumerate(losses):
            run = root / f"lr={lr},placement={placement},seed={seed}"
            (run / ".hydra").mkdir(parents=True)
            (run / ".hydra/config.yaml").write_text(
                f"seed: {seed}\nmodel: {{name: gpt, n_layer: 2}}\nplacement: {{name: {placement}}}"
                f"\nnorm: {{name: layernorm}}\noptim: {{lr: {lr}}}\n"
            )
            (run / "metrics.csv").write_text(f"step,train/loss\n0,{L0}\n1,{L0 - 0.5}\n")
            status = "diverged" if loss is None else "completed"
            summary = {"status": status, "model": "gpt", "placement": placement, "lr": lr,
                       "n_layer": 2, "seed": seed, "final_val_loss": loss}  # fmt: skip
            (run / "summary.json").write_text(json.dumps(summary))
    return root


def test_each_variant_gets_its_best_lr_and_lr_sensitivity(tmp_path):
    root = write_sweep(tmp_path / "sweep")
    out = tmp_path / "report"
    assert compare.main([str(root), "--out", str(out), "--no-wandb"]) == 0
    report = json.loads((out / "report.json").read_text())
    by = {e["variant"]["placement"]: e for e in report["lr_sweep"]}
    assert set(by) == {"pre", "post"} and "lr" not in by["pre"]["variant"]
    pre, post = by["pre"], by["post"]
    assert pre["lrs"] == [1e-3, 3e-3, 1e-2, 3e-2] and pre["l0"] == pytest.approx(L0)
    assert pre["best_lr"] == 3e-3 and pre["best_val_loss"] == pytest.approx(1.8)
    # mean of (2.1 - 1.8, 0, 2.0 - 1.8, (4.0 + 3.0) / 2 - 1.8): a diverged run counts at l0
    assert pre["lr_sensitivity"] == pytest.approx((0.3 + 0 + 0.2 + 1.7) / 4)
    assert pre["edge"] is False
    # post: best at the smallest lr (an edge); 5.0 is capped at l0 = 4.0
    assert post["best_lr"] == 1e-3 and post["edge"] is True
    assert post["lr_sensitivity"] == pytest.approx((0 + 0 + 1.5 + 1.5) / 4)
    md = (out / "report.md").read_text()
    assert "## Learning-rate sensitivity" in md and "| placement=pre | 0.001, 0.003" in md
    assert "lr_sensitivity.png" in report["plots"] and (out / "lr_sensitivity.png").is_file()


def test_the_report_answers_with_stability_edges_and_a_sensitivity_interval(tmp_path, capsys):
    root = write_sweep(tmp_path / "sweep")
    out = tmp_path / "report"
    assert compare.main([str(root), "--out", str(out), "--no-wandb", "--no-plots"]) == 0
    by = {e["variant"]["placement"]: e for e in json.loads((out / "report.json").read_text())[
        "lr_sweep"]}  # fmt: skip
    # pre: every run trains from its best 3e-3 up to 1e-2; at 3e-2 one diverged
    assert (by["pre"]["trains_up_to"], by["pre"]["unstable_at"]) == (1e-2, 3e-2)
    # post: at 1e-2 both runs end at 5.0, above the loss at init: they did not train
    assert (by["post"]["trains_up_to"], by["post"]["unstable_at"]) == (3e-3, 1e-2)
    # per seed: seed 0 (2.0, 1.8, 1.9, l0=4.0) -> 0.625; seed 1 (2.2, 1.8, 2.1, 3.0) -> 0.475
    per_seed = by["pre"]["lr_sensitivity_per_seed"]
    half = sp.t.ppf(0.975, 1) * statistics.stdev([0.625, 0.475]) / 2**0.5
    assert per_seed["mean"] == pytest.approx(0.55) and per_seed["n"] == 2
    # the t interval, bounded below at 0 as a sensitivity is (0.55 - half < 0 here)
    assert 0.55 - half < 0 and per_seed["lo"] == 0.0
    assert per_seed["hi"] == pytest.approx(0.55 + half)
    printed = capsys.readouterr().out  # stdout leads with the ranking, not the variant table
    assert printed.startswith("| rank | variant |") and "| 1e-2 |" not in printed
    assert "Best at the grid's smallest rate: placement=post" in printed
    assert "widen it downward (e.g. optim.lr=0.000333333,0.0001)" in printed
    assert "never reached instability" not in printed


def test_a_grid_that_never_reached_instability_says_widen_upward() -> None:
    from analysis import lr_sweep

    def entry(name: str, unstable) -> dict:
        return {"label": name, "lrs": [1e-3, 3e-3, 1e-2], "best_lr": 3e-3, "edge": False,
                "unstable_at": unstable}  # fmt: skip

    advice = lr_sweep.widen_advice([entry("pre", None), entry("peri", None)])
    assert advice == [
        "No variant diverged or stalled at any rate up to 0.01: the grid never reached "
        "instability, so it cannot tell the variants' stability apart; widen it upward "
        "(e.g. optim.lr=0.03,0.1)."
    ]
    assert lr_sweep.widen_advice([entry("pre", None), entry("post", 1e-2)]) == []


def test_a_sweep_without_lrs_has_no_lr_section(tmp_path):
    root = tmp_path / "sweep"
    write_sweep(root)
    for run in root.iterdir():
        if "lr=0.001," not in run.name:
            for f in run.rglob("*"):
                f.unlink() if f.is_file() else None
    out = tmp_path / "report"
    compare.main([str(root), "--out", str(out), "--no-wandb", "--no-plots"])
    report = json.loads((out / "report.json").read_text())
    assert report["lr_sweep"] == [] and "Learning-rate" not in (out / "report.md").read_text()


def test_report_html_is_one_self_contained_page(tmp_path):
    """report.html embeds every figure (base64 PNGs that decode to the files) with its caption,
    the variant and LR-sensitivity tables, and refers to no other file or script."""
    import base64
    from html.parser import HTMLParser

    root = write_sweep(tmp_path / "sweep")
    out = tmp_path / "report"
    compare.main([str(root), "--out", str(out), "--no-wandb"])
    report = json.loads((out / "report.json").read_text())

    class Page(HTMLParser):
        def __init__(self):
            super().__init__()
            self.images, self.rows, self.refs, self.captions = [], 0, [], []

        def handle_starttag(self, tag, attrs):
            a = dict(attrs)
            if tag == "img":
                self.images.append((a["alt"], a["src"]))
            self.rows += tag == "tr"
            self.refs += [v for k, v in attrs if k in ("href", "src") and "data:" not in v]
            self.refs += ["script"] if tag in ("script", "link") else []

        def handle_data(self, data):
            self.captions.append(data)

    parsed = Page()
    parsed.feed((out / "report.html").read_text())
    assert parsed.refs == []
    assert [alt for alt, _ in parsed.images] == report["plots"]
    for alt, src in parsed.images:
        assert base64.b64decode(src.split(",", 1)[1]) == (out / alt).read_bytes()
    # the variant table (header + 8 variants) and the lr table (header + 2 variants)
    assert parsed.rows == 1 + len(report["variants"]) + 1 + 2
    text = " ".join(parsed.captions)
    assert "Look for: A flat, low curve" in text and "Learning-rate sensitivity" in text
    assert "*Final val loss against the peak learning rate" in (out / "report.md").read_text()


def test_sensitivity_is_taken_over_the_rates_every_variant_ran() -> None:
    from analysis import lr_sweep

    def entry(losses: dict[float, float]) -> dict:
        points = [{"lr": lr, "loss": x, "std": 0.01, "n": 2} for lr, x in losses.items()]
        best = min(points, key=lambda p: p["loss"])
        return {"lrs": list(losses), "points": points, "best_lr": best["lr"],
                "best_val_loss": best["loss"], "lr_sensitivity": 0.0}  # fmt: skip

    a = entry({1e-3: 2.0, 3e-3: 1.8, 1e-2: 2.2, 3e-2: 3.0})
    widened = entry({1e-3: 2.0, 3e-3: 1.9, 1e-2: 1.9, 3e-2: 1.9, 1e-1: 1.9, 3e-1: 1.9})
    lr_sweep.on_common_grid([a, widened])
    assert a["lr_sensitivity"] == pytest.approx((0.2 + 0 + 0.4 + 1.2) / 4)
    # over 1e-3..3e-2 only: (0.1 + 0 + 0 + 0) / 4, not (0.1 + 0 * 5) / 6
    assert widened["lr_sensitivity"] == pytest.approx(0.1 / 4)
    assert widened["sensitivity_lrs"] == [1e-3, 3e-3, 1e-2, 3e-2]
    alone = entry({1e-1: 2.0, 3e-1: 2.5})
    lr_sweep.on_common_grid([a, alone])  # no two rates in common: no sensitivity
    assert a["lr_sensitivity"] is None and lr_sweep.sensitivity_text(a) == "–"
    # an arm run at one rate only (the ViT's V3 arm) has no curve and leaves the grid alone
    one_rate = entry({3e-3: 1.7})
    lr_sweep.on_common_grid([a, widened, one_rate])
    assert one_rate["lr_sensitivity"] is None
    assert a["lr_sensitivity"] == pytest.approx((0.2 + 0 + 0.4 + 1.2) / 4)


def test_a_sweep_over_widths_tabulates_and_plots_the_best_lr_per_width(tmp_path):
    """A transfer study (param x n_embd x lr): each parametrization's best lr at each width,
    flat where the rate transfers; here SP's moves down a step per doubling, muP's stays."""
    best = {("sp", 32): 1e-2, ("sp", 64): 3e-3, ("sp", 128): 1e-3}
    best |= {("mup", w): 3e-3 for w in (32, 64, 128)}
    lrs = (1e-3, 3e-3, 1e-2)
    root = tmp_path / "sweep"
    for (param, width), at in best.items():
        for lr in lrs:
            for seed in (0, 1):
                loss = 2.0 + (0 if lr == at else 0.3) + 0.01 * seed
                fake_run(
                    root / f"lr={lr},n_embd={width},param={param},seed={seed}",
                    f"seed: {seed}\nmodel: {{name: gpt, n_layer: 2, n_embd: {width}}}\n"
                    f"placement: {{name: pre}}\nnorm: {{name: layernorm}}\n"
                    f"param: {{name: {param}}}\noptim: {{lr: {lr}}}\n",
                    f"step,train/loss\n0,{L0}\n1,{L0 - 0.5}\n",
                    {"status": "completed", "model": "gpt", "lr": lr, "n_layer": 2,
                     "n_embd": width, "seed": seed, "final_val_loss": loss},
                )  # fmt: skip
    out = tmp_path / "report"
    assert compare.main([str(root), "--out", str(out), "--no-wandb"]) == 0
    report = json.loads((out / "report.json").read_text())
    from analysis import transfer

    rows = {r["label"]: r["points"] for r in transfer.best_lrs(report["lr_sweep"])}
    assert rows["param=sp"] == [(32, 1e-2, True), (64, 3e-3, False), (128, 1e-3, True)]
    assert [p[1] for p in rows["param=mup"]] == [3e-3, 3e-3, 3e-3]
    md = (out / "report.md").read_text()
    assert "| variant | width 32 | width 64 | width 128 |" in md
    assert "| param=sp | 0.01* | 0.003 | 0.001* |" in md
    assert "| param=mup | 0.003 | 0.003 | 0.003 |" in md
    assert "lr_transfer.png" in report["plots"] and (out / "lr_transfer.png").stat().st_size > 5000


def test_a_group_at_one_size_says_nothing_about_transfer():
    from analysis import transfer

    def entry(param: str, width: int, layers: int, best: float) -> dict:
        return {"variant": {"param": param, "n_embd": width, "n_layer": layers},
                "lrs": [1e-3, 1e-2], "best_lr": best, "edge": False}  # fmt: skip

    rows = transfer.best_lrs([
        entry("sp", 32, 2, 1e-2), entry("sp", 128, 2, 1e-3),  # a width pair
        entry("completep", 32, 2, 1e-2), entry("completep", 32, 8, 1e-2),  # a depth pair
    ])  # fmt: skip
    assert [(r["axis"], r["label"], len(r["points"])) for r in rows] == [
        ("width", "param=sp L=2", 2),
        ("depth", "param=completep n_embd=32", 2),
    ]
