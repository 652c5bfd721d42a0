"""scripts/coord_check.py at tiny sizes: the shape Yang et al. 2022 (Fig. 5) and Dey et al. 2025
show. After a few Adam steps each site's change grows with width under SP and stays flat under
muP; the residual stream's change grows with depth under SP and stays flat under CompleteP. The
slopes are of log change against log size (1: proportional, 0: flat), measured here on one seed."""

from __future__ import annotations

import csv

from scripts import coord_check
from scripts.coord_check import Setup, coord_data, slopes


def test_width_sp_grows_mup_stays_flat_and_the_plot_is_written(tmp_path, capsys):
    out = tmp_path / "coord"
    argv = ["--widths", "16", "32", "64", "--depth", "1", "--steps", "3", "--seeds", "1",
            "--batch-size", "4", "--out", str(out)]  # fmt: skip
    assert coord_check.main(argv) == 0
    assert (out / "coord.png").stat().st_size > 10_000
    with (out / "coord.csv").open() as f:
        rows = [
            {**r, "size": int(r["size"]), "step": int(r["step"]), "change": float(r["change"])}
            for r in csv.DictReader(f)
        ]
    assert {r["param"] for r in rows} == {"sp", "mup"} and {r["size"] for r in rows} == {16, 32, 64}
    fitted = slopes(rows, 3)
    hidden = ("block0.attn", "block0.mlp", "block0", "stream")
    # measured 2026-12-04: sp logits +0.67, hidden +0.31..+0.35; mup -0.13..+0.09
    assert fitted[("sp", "logits")] > 0.4
    assert min(fitted[("sp", s)] for s in hidden) > 0.2
    assert all(abs(fitted[("mup", s)]) < 0.2 for s in (*hidden, "logits", "embedding"))
    assert "slope of log change against log width" in capsys.readouterr().out


def test_depth_sp_stream_grows_completep_stays_flat():
    setup = Setup(axis="depth", width=16, depth=0, base_width=16, base_depth=1, placement="pre",
                  norm="layernorm", lr=1e-2, steps=3, batch_size=4)  # fmt: skip
    fitted = slopes(coord_data(setup, ["sp", "completep"], [1, 2, 4], 1), 3)
    # measured 2026-12-04 (depths 1-8): sp stream +0.89, completep stream -0.11
    assert fitted[("sp", "stream")] > 0.5
    assert abs(fitted[("completep", "stream")]) < 0.3
    # a single Block's change under CompleteP falls with depth: each adds a 1/L share
    assert fitted[("completep", "block0")] < -0.5 < fitted[("sp", "block0")]


def test_bad_sizes_are_one_line(capsys):
    assert coord_check.main(["--widths", "32"]) == 2
    assert capsys.readouterr().out.count("\n") == 1
