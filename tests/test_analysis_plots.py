"""The report's figures (analysis/plots.py, xy.py): the EMA and the seed band against
hand-computed values, and what each figure draws, read back from the matplotlib objects."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import numpy as np
import pytest

from analysis import init_figures, plots, runs, variants, xy
from scripts import compare
from tests.helpers import fake_run

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture
def drawn(monkeypatch) -> dict:
    """name -> the figure as saved (still open), instead of closing it after writing."""
    figures: dict = {}

    def keep(fig, out_dir, name):
        figures[name] = fig
        fig.savefig(out_dir / name, dpi=40)
        return name

    monkeypatch.setattr(xy, "save", keep)
    return figures


def run(seed: int, status: str = "completed", metrics=None, **config) -> runs.Run:
    """A run as load_run builds it, from a flat config and a summary."""
    summary = {"status": status, "seed": seed, **config.pop("summary", {})}
    r = runs.Run(Path(f"run-{seed}-{sorted(config.items())}"), summary, config, metrics or {})
    r.params = runs.run_params(r)
    return r


def grouped(all_runs: list[runs.Run]) -> tuple[list[variants.Variant], list[str]]:
    fields = variants.variant_fields(all_runs)
    return variants.group_variants(all_runs, fields), fields


# --- the numbers drawn ---------------------------------------------------------------------------
def test_ema_is_the_normalized_exponential_weighting() -> None:
    points = [(0, 1.0), (1, 3.0), (3, 0.0), (4, 2.0)]
    tau = 1.5
    expected = []
    for i, (t, _) in enumerate(points):
        w = [math.exp(-(t - tj) / tau) for tj, _ in points[: i + 1]]
        expected.append(sum(wj * x for wj, (_, x) in zip(w, points, strict=False)) / sum(w))
    smoothed = plots.ema(points, tau)
    assert [s for s, _ in smoothed] == [0, 1, 3, 4]
    assert [v for _, v in smoothed] == pytest.approx(expected)
    assert smoothed[0][1] == 1.0  # debiased: the first point is not pulled toward 0


def test_seed_band_interpolates_and_drops_runs_outside_their_steps() -> None:
    a, b = [(0, 1.0), (10, 3.0)], [(0, 3.0), (5, 3.0), (10, 5.0)]
    steps, mean, std, n = plots.seed_band([a, b])
    assert steps.tolist() == [0, 5, 10] and n.tolist() == [2, 2, 2]
    assert mean.tolist() == pytest.approx([2.0, 2.5, 4.0])  # a at step 5: 2.0 by interpolation
    assert std.tolist() == pytest.approx([math.sqrt(2), math.sqrt(0.5), math.sqrt(2)])
    # A run that stopped at step 5 (diverged) no longer counts at step 10.
    steps, mean, std, n = plots.seed_band([[(0, 1.0), (5, 1.0)], [(0, 3.0), (10, 3.0)]])
    assert n.tolist() == [2, 2, 1] and mean.tolist() == [2.0, 2.0, 3.0] and std[-1] == 0.0
    # log: geometric mean, and the std of the logs as a factor
    _, mean, std, _ = plots.seed_band([[(0, 1.0)], [(0, 4.0)]], log=True)
    assert mean[0] == pytest.approx(2.0)
    assert std[0] == pytest.approx(math.exp(statistics.stdev([0.0, math.log(4)])))


def test_loss_curves_draw_smoothed_seed_means_with_bands(tmp_path: Path, drawn: dict) -> None:
    rng = np.random.default_rng(0)
    all_runs = []
    for placement, level in (("post", 3.0), ("pre", 2.0)):
        for seed in range(3):
            loss = [(s, level + rng.normal(0, 0.1)) for s in range(100)]
            metrics = {"train/loss": loss, "val/loss": [(49, level), (99, level - 0.1)]}
            all_runs.append(run(seed, metrics=metrics, **{"placement.name": placement}))
    vs, fields = grouped(all_runs)
    assert plots.plot_curves(vs, fields, tmp_path, ["train/loss", "val/loss"], "c.png", "loss")
    fig = drawn["c.png"]
    train, val = fig.axes
    assert "EMA, τ = 4 steps" in train.get_ylabel()  # 99 steps / 25, rounded
    assert "EMA" not in val.get_ylabel()
    faint = [line for line in train.get_lines() if line.get_alpha() == 0.2]
    assert len(faint) == 6 and all(len(line.get_xdata()) == 100 for line in faint)
    # the bold line of post: the mean over seeds of each seed's EMA
    (post,) = [line for line in train.get_lines() if line.get_alpha() is None][:1]
    smoothed = [[v for _, v in plots.ema(r.metrics["train/loss"], 4.0)] for r in all_runs[:3]]
    assert post.get_ydata() == pytest.approx(np.mean(smoothed, axis=0))
    assert len(train.collections) == 2  # one band per variant
    legend = [t.get_text() for t in fig.legends[0].texts]
    assert legend[:3] == [
        "placement=post (3 seeds)",
        "placement=pre (3 seeds)",
        "± 1 std over seeds",
    ]


# --- any key against any result ------------------------------------------------------------------
def lr_sweep() -> list[runs.Run]:
    """best_val_loss = 2 + |log10(lr / 1e-2)| / 10 + seed / 100 for qk_norm off and on; the
    no-QK run of seed 2 at lr 1e-1 diverged."""
    out = []
    for qk in (False, True):
        for lr in (1e-3, 1e-2, 1e-1):
            for seed in range(3):
                diverged = not qk and lr == 1e-1 and seed == 2
                loss = 2 + abs(math.log10(lr / 1e-2)) / 10 + seed / 100 + 0.5 * qk
                logit = [(0, 0.01), (50, 100 * lr * (1 + seed)), (99, 50 * lr)]
                out.append(
                    run(
                        seed,
                        "diverged" if diverged else "completed",
                        {"attn/max_logit": logit},
                        **{"optim.lr": lr, "model.qk_norm": qk},
                        summary={} if diverged else {"best_val_loss": loss},
                    )
                )
    return out


def test_xy_draws_seed_means_bands_and_diverged_counts(tmp_path: Path, drawn: dict) -> None:
    vs, fields = grouped(lr_sweep())
    key = xy.resolve_key("optim.lr", vs)
    assert key == "lr"
    assert xy.plot_xy(vs, fields, key, ["best_val_loss"], tmp_path) == "best_val_loss_vs_lr.png"
    (ax,) = drawn["best_val_loss_vs_lr.png"].axes
    assert ax.get_xscale() == "log" and "learning rate" in ax.get_xlabel()
    means = [line for line in ax.get_lines() if line.get_marker() == "o"]
    off, on = (line.get_ydata() for line in means)
    # seeds 0, 1, 2 -> mean offset 0.01; at 1e-1 the diverged seed 2 is left out: 0.005
    assert list(off) == pytest.approx([2.11, 2.01, 2.105])
    assert list(on) == pytest.approx([2.61, 2.51, 2.61])
    assert [line.get_xdata()[0] for line in means] == [1e-3, 1e-3]
    (cross,) = [line for line in ax.get_lines() if line.get_marker() == "x"]
    assert cross.get_ydata()[0] == 0.95 and [t.get_text() for t in ax.texts] == ["1"]
    legend = [t.get_text() for t in drawn["best_val_loss_vs_lr.png"].legends[0].texts]
    assert legend[:2] == ["qk_norm=False (2-3 seeds)", "qk_norm=True (3 seeds)"]
    assert "diverged (count)" in legend


def test_xy_reduces_a_logged_metric_and_picks_a_log_y(tmp_path: Path, drawn: dict) -> None:
    vs, fields = grouped(lr_sweep())
    name = xy.plot_xy(vs, fields, "lr", ["max:attn/max_logit"], tmp_path, "logit.png")
    (ax,) = drawn[name].axes
    assert ax.get_yscale() == "log"  # 0.1 .. 30: a 300x span
    assert "max over steps of attn/max_logit" in ax.get_ylabel()
    off = next(line for line in ax.get_lines() if line.get_marker() == "o")
    # max over steps = 100 * lr * (1 + seed), mean over the completed seeds
    assert list(off.get_ydata()) == pytest.approx([0.2, 2.0, 15.0])


def test_x_scale_rules() -> None:
    assert xy.x_scale("lr", [1e-3, 2e-3]) == "log10"  # a learning rate: always log
    assert xy.x_scale("data.batch_size", [4, 16, 64]) == "log2"
    assert xy.x_scale("optim.weight_decay", [0.0, 0.1]) == "linear"
    assert xy.x_scale("placement", ["post", "pre"]) is None


def test_xy_refuses_an_unswept_key_and_an_unknown_reduction() -> None:
    vs, _ = grouped(lr_sweep())
    with pytest.raises(ValueError, match="not swept in this sweep; choose one of: lr, model.qk"):
        xy.resolve_key("model.n_layer", vs)
    with pytest.raises(ValueError, match="unknown reduction 'top'"):
        xy.run_value(vs[0].runs[0], "top:attn/max_logit")


def write_sweep(root: Path) -> None:
    for r in lr_sweep():
        d = root / r.path.name.replace(" ", "").replace("'", "")
        d.mkdir(parents=True)
        lr, qk = r.config["optim.lr"], r.config["model.qk_norm"]
        conf = f"seed: {r.seed}\noptim: {{lr: {lr}}}\nmodel: {{qk_norm: {str(qk).lower()}}}\n"
        (d / ".hydra").mkdir()
        (d / ".hydra/config.yaml").write_text(conf)
        (d / "summary.json").write_text(json.dumps(r.summary))


def test_compare_cli_draws_x_against_y(tmp_path: Path, capsys) -> None:
    write_sweep(tmp_path / "sweep")
    argv = [str(tmp_path / "sweep"), "--x", "optim.lr", "--y", "best_val_loss", "--no-plots"]
    assert compare.main(argv) == 0
    figure = tmp_path / "sweep/report/best_val_loss_vs_lr.png"
    assert f"figure: {figure}" in capsys.readouterr().out
    assert figure.read_bytes()[:8] == PNG_MAGIC
    assert compare.main([*argv[:1], "--x", "seed"]) == 1
    assert capsys.readouterr().err.startswith("error: --x seed is not swept")
    assert compare.main([*argv[:3], "--y", "val_ppl"]) == 1
    assert capsys.readouterr().err.startswith("error: no run has val_ppl")


def test_two_keys_map_to_colour_and_line_style():
    """Variants that differ in two keys: one colour per value of the first, one line style per
    value of the second, each mapping once in the legend; one key: a colour per variant."""
    from analysis.plots import LINESTYLES, Styles
    from analysis.variants import Variant

    grid = [Variant({"placement": p, "lr": lr, "n_layer": 2}, [], "") for p in ("post", "pre")
            for lr in (0.001, 0.003)]  # fmt: skip
    styles = Styles(grid, ["placement", "lr", "n_layer"])
    drawn = {(v.params["placement"], v.params["lr"]): styles.of(v) for v in grid}
    assert drawn["post", 0.001][1] == drawn["post", 0.003][1] != drawn["pre", 0.001][1]
    assert drawn["post", 0.001][2] == drawn["pre", 0.001][2] == LINESTYLES[0]
    assert drawn["post", 0.003][2] == LINESTYLES[1]
    assert [h.get_label() for h in styles.legend_extra()] == ["lr=0.001", "lr=0.003"]
    one = Styles(grid[:2], ["lr"])  # only lr varies: one colour, the lrs as line styles
    assert len({one.of(v)[1] for v in grid[:2]}) == 1 and len(one.legend_extra()) == 2


def legend_colours(fig) -> dict[str, tuple]:
    """Legend label's first word -> its line's colour, over every legend of ``fig``."""
    from matplotlib.colors import to_rgba

    legends = [*fig.legends, *(a.get_legend() for a in fig.axes if a.get_legend())]
    return {
        text.get_text().split(" ")[0]: to_rgba(handle.get_color())
        for legend in legends
        for handle, text in zip(legend.legend_handles, legend.get_texts(), strict=True)
        if text.get_text().startswith("placement=")
    }


def test_one_colour_per_variant_across_the_reports_figures(tmp_path: Path, drawn: dict):
    """A placement x lr x depth sweep: each placement has the same colour in the loss curves,
    the loss against depth and the loss against lr, whatever else each figure draws."""
    root = tmp_path / "sweep"
    for placement in ("post", "pre", "sandwich"):
        for lr in (1e-3, 3e-3):
            for depth in (2, 4):
                loss = 2.0 + depth / 10 + lr * 100
                fake_run(
                    root / f"lr={lr},n_layer={depth},placement={placement},seed=0",
                    f"seed: 0\nmodel: {{name: gpt, n_layer: {depth}}}\nplacement: {{name: "
                    f"{placement}}}\nnorm: {{name: layernorm}}\noptim: {{lr: {lr}}}\n",
                    f"step,train/loss,val/loss\n0,4.0,\n5,3.0,3.1\n10,{loss},{loss}\n",
                    {"status": "completed", "final_val_loss": loss, "best_val_loss": loss},
                )
    compare.main([str(root), "--out", str(tmp_path / "report"), "--no-wandb"])
    report = json.loads((tmp_path / "report" / "report.json").read_text())
    # the figure that answers an lr sweep's question first, then depth, then the curves
    assert report["plots"][:3] == ["lr_sensitivity.png", "best_val_vs_depth.png", "loss_curves.png"]
    figures = ("loss_curves.png", "best_val_vs_depth.png", "lr_sensitivity.png")
    colours = {name: legend_colours(drawn[name]) for name in figures}
    placements = {"placement=post", "placement=pre", "placement=sandwich"}
    for name in figures:
        assert set(colours[name]) == placements, name
        assert colours[name] == colours["loss_curves.png"], name
    assert len(set(colours["loss_curves.png"].values())) == 3


def test_a_metric_other_than_loss_keeps_every_logged_value_in_range(tmp_path, drawn):
    """log Z rises from -0.1 to 5.6 while the loss falls: its panel is not clipped to the
    loss's range (only loss panels cap a diverged run's spike)."""
    metrics = {"train/loss": [(0, 4.0), (50, 2.0), (100, 1.5)],
               "logits/log_z": [(0, -0.1), (50, 2.0), (100, 5.6)]}  # fmt: skip
    all_runs = [run(s, metrics=metrics, **{"placement.name": p}) for p in ("pre", "post")
                for s in (0, 1)]  # fmt: skip
    vs, fields = grouped(all_runs)
    name = plots.plot_curves(vs, fields, tmp_path, ["logits/log_z"], "log_z.png", "mean log Z")
    low, high = drawn[name].axes[0].get_ylim()
    assert low <= -0.1 and high >= 5.6


def test_two_validations_are_drawn_as_points_not_a_line(tmp_path, drawn):
    metrics = {"val/loss": [(50, 2.5), (100, 2.0)]}
    vs, fields = grouped([run(s, metrics=metrics, **{"placement.name": "pre"}) for s in (0, 1)])
    name = plots.plot_curves(vs, fields, tmp_path, ["val/loss"], "val.png", "loss")
    means = [ln for ln in drawn[name].axes[0].lines if len(ln.get_xdata()) == 2]
    assert means and all(ln.get_linestyle() == "None" for ln in means)


def test_heatmap_step_cells_start_at_the_first_logged_step():
    from analysis.heatmaps import edges

    assert edges([0, 10, 20], clamp=True).tolist() == [0, 5, 15, 20]
    assert edges([0, 1, 2]).tolist() == [-0.5, 0.5, 1.5, 2.5]  # layers: centred cells


def test_init_figures_pool_over_the_optimizer_and_wrap_into_rows(tmp_path: Path) -> None:
    """A probe at init is the same for every lr and warmup: one series per model setting, not
    one per rate, and a figure of many series wraps at 4 panels a row."""
    from PIL import Image

    from analysis.init_probes import Probe, probe_groups

    found = [
        Probe({"placement": p, "n_layer": 4, "lr": lr, "optim.warmup_steps": w, "seed": s},
              [1.0 + s, 2.0, 3.0, 4.0], [1.0, 1.5, 2.0, 2.5], 0.5, "probe")
        for p in ("post", "pre") for lr in (1e-3, 1e-2) for w in (0, 10) for s in (0, 1)
    ]  # fmt: skip
    groups = probe_groups(found)
    assert [g["series"] for g in groups] == ["placement=post", "placement=pre"]
    assert groups[0]["grad_norm"][0] == pytest.approx(1.5) and "lr" not in groups[0]["params"]
    many = [
        Probe({"placement": f"p{i}", "n_layer": 4, "seed": 0}, [1.0] * 4, [1.0] * 4, None, "probe")
        for i in range(9)
    ]
    name = init_figures.plot_per_layer(
        probe_groups(many), "grad_norm", "g", tmp_path, "g.png", False
    )
    width, height = Image.open(tmp_path / name).size
    # 9 panels: 3 rows of 4 at most, about 4 panels wide (was one strip of 9)
    assert width < 2 * height * 4 / 3 and width < 2500


def test_stability_cards_reduce_each_runs_series(tmp_path: Path) -> None:
    from analysis import cards

    metrics = {
        "grad_norm/total": [(0, 2.0), (5, 7.5), (9, 1.0)],
        "attn/entropy_min/layer_0": [(0, 1.2), (5, 0.4)],
        "attn/entropy_min/layer_1": [(0, 0.9), (5, 0.05)],
        "headroom/fp16": [(0, 9.0), (5, 3.5)],
        "attn/sink": [(0, 0.0), (5, 0.25), (9, 0.5)],
    }
    summary = {"best_val_loss": 1.234, "loss_spikes": 2, "spike_steps_loss": 1}
    summary["spike_steps_grad"] = 0
    one = run(0, metrics=metrics, summary=summary, lr=0.1)
    row = cards.card(one)
    assert row["max grad norm"] == 7.5 and row["min entropy"] == 0.05
    assert row["fp16 headroom"] == 3.5 and row["sinks"] == 0.5  # the last logged value
    assert row["6-sigma steps"] == "1 / 0" and row["loss spikes"] == 2
    assert "kurtosis" not in row and "massive" not in row  # probes that did not run: no column
    head, body = cards.cells(cards.cards([one, run(1, lr=0.1)], tmp_path))
    assert head[:3] == ["run", "outcome", "best val"] and "min entropy" in head
    assert body[1][head.index("min entropy")] == "–"


def test_the_instruments_heat_maps_are_drawn_when_logged(tmp_path: Path, drawn: dict) -> None:
    from analysis import heatmaps

    series = {f"attn/sink/layer_{i}": [(0, 0.0), (10, 0.5 * i)] for i in range(3)}
    series |= {f"act_kurtosis/layer_{i}": [(0, 1.0), (10, 1.0 + i)] for i in range(3)}
    written = heatmaps.write_heatmaps(grouped([run(0, metrics=series, lr=0.1)])[0], tmp_path)
    assert set(written) == {"heat_attn_sink.png", "heat_act_kurtosis.png"}
    mesh = drawn["heat_act_kurtosis.png"].axes[0].collections[0]
    np.testing.assert_allclose(np.asarray(mesh.get_array()).reshape(3, 2), [[1, 1], [1, 2], [1, 3]])


def test_past_six_lines_a_panel_facets_by_lr_then_in_chunks(tmp_path: Path):
    """3 placements x 5 lrs at one depth would be 15 lines in one panel: a panel per lr, three
    lines each; without an lr axis, 8 variants become panels of 6 and 2."""
    from analysis.plots import MAX_LINES, panels

    root = tmp_path / "sweep"
    lrs = (1e-3, 3e-3, 1e-2, 3e-2, 1e-1)
    for placement in ("post", "pre", "sandwich"):
        for lr in lrs:
            loss = 2.0 + lr * 10
            fake_run(
                root / f"lr={lr},placement={placement},seed=0",
                f"seed: 0\nmodel: {{name: gpt, n_layer: 2}}\nplacement: {{name: {placement}}}\n"
                f"norm: {{name: layernorm}}\noptim: {{lr: {lr}}}\n",
                f"step,train/loss,val/loss\n0,4.0,\n5,3.0,3.1\n10,{loss},{loss}\n",
                {"status": "completed", "final_val_loss": loss, "best_val_loss": loss},
            )
    assert compare.main([str(root), "--out", str(tmp_path / "report"), "--no-wandb"]) == 0
    assert (tmp_path / "report" / "loss_curves.png").stat().st_size > 10_000
    found, _ = runs.load_runs(root)
    grouped = variants.group_variants(found, ["placement", "lr"])
    facets = panels(grouped, ["placement", "lr"])
    assert [t for t, _ in facets] == [f"depth 2, lr {lr:g}" for lr in lrs]
    assert all(
        len(g) == 3 and {v.params["lr"] for v in g} == {lr}
        for (_, g), lr in zip(facets, lrs, strict=True)
    )
    chunks = panels(grouped[:8], ["placement"])
    assert [len(g) for _, g in chunks] == [MAX_LINES, 2]
    assert [t for t, _ in chunks] == ["depth 2, part 1 of 2", "depth 2, part 2 of 2"]
