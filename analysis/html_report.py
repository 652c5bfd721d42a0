"""report.html: the sweep's report as one self-contained page to share (figures embedded as
base64 PNGs, no external file or script), and the captions report.md and the page give each
figure: what it shows and what to look for.
"""

from __future__ import annotations

import base64
import html
from pathlib import Path
from typing import Any

from analysis import lr_sweep

# Figure name -> (what it shows, what to look for).
CAPTIONS: dict[str, tuple[str, str]] = {
    "loss_curves.png": (
        "Train loss (EMA-smoothed, raw points faint) and val loss against the optimizer step, "
        "one line per variant (the mean over seeds, ± std band), one panel per depth.",
        "Which variants leave the plateau, how early, and whether one stalls or diverges.",
    ),
    "best_val_vs_depth.png": (
        "Best val loss against depth per variant; diverged runs are x marks above the data.",
        "A variant whose loss rises with depth, or stops training at the deepest stacks.",
    ),
    "lr_transfer.png": (
        "Each group's best learning rate against the width or depth the sweep ran (log-log), a "
        "panel per size axis; a circled point is a best lr at the grid's edge.",
        "A flat line is a rate that transfers as the model grows (muP across width, CompleteP "
        "across depth); a falling one is SP's drift.",
    ),
    "lr_sensitivity.png": (
        "Final val loss against the peak learning rate (log axis) per variant, each variant's "
        "best lr circled; the loss axis fits the rates where every run trained, and a rate "
        "where a run diverged is an x at its top edge.",
        "A flat, low curve is a variant that tolerates a range of lrs (low LR sensitivity); a "
        "best lr at the grid's edge means the grid should be widened.",
    ),
    "init_grid.png": (
        "F1 at a glance: the last FFN's gradient against depth (fitted slopes, 1/sqrt(L) dashed), "
        "each layer's gradient and residual norm at the deepest depth, and the residual norm's "
        "last/first-layer ratio against depth, one colour per placement.",
        "Post-LN flat in every panel; Pre-LN's fc2 gradient on the dashed line and its residual "
        "ratio rising with depth.",
    ),
    "grad_norm_init.png": (
        "Gradient norm of each layer at initialization, per placement and depth.",
        "Pre-LN's last-layer gradient shrinking like 1/sqrt(L); Post-LN's flat in depth.",
    ),
    "act_norm_init.png": (
        "Residual-stream norm after each layer at initialization.",
        "Growth with the layer index (Pre-LN) against a flat profile (Post-LN).",
    ),
    "model_update.png": (
        "DeepNet's model update ||F(x, θ_t) − F(x, θ_0)|| on a fixed batch over training.",
        "An early jump that then stalls (Post-LN at depth) against a bounded rise.",
    ),
    "log_z.png": (
        "Mean log Z of the output logits over training, on a y range holding every logged value.",
        "A late fall after warmup, below 0, at high lr: output-logit divergence (an early rise "
        "is the softmax sharpening), which z-loss holds back.",
    ),
    "sharpness.png": (
        "Top Hessian eigenvalue, plain and Adam-preconditioned, over training.",
        "The preconditioned sharpness settling near 38/lr (the edge of stability for Adam).",
    ),
}
# Heat maps: one probe per layer (rows) over training (columns), one panel per variant.
HEATMAPS: dict[str, tuple[str, str]] = {
    "heat_act_norm.png": (
        "the residual stream's RMS after each layer",
        "rows brightening with depth and over training: the Pre-LN growth that Peri-LN bounds",
    ),
    "heat_max_logit.png": (
        "each layer's largest attention logit q.k / sqrt(d_head)",
        "logits climbing past ~100 (QK-clip's tau) before a divergence (Wortsman et al. 2023)",
    ),
    "heat_act_max.png": (
        "the largest |value| in the residual stream after each layer",
        "a few layers orders of magnitude above the rest: massive activations (Sun et al. 2024)",
    ),
    "heat_block_cos.png": (
        "the cosine between each block's input and output",
        "late layers near 1: blocks that barely change the stream (Sun et al. 2025)",
    ),
    "heat_attn_entropy.png": (
        "the mean attention entropy of each layer",
        "a layer falling towards 0: entropy collapse, which comes with instability "
        "(Zhai et al. 2023)",
    ),
    "heat_attn_entropy_min.png": (
        "the lowest attention entropy among each layer's heads",
        "one head collapsing while the layer's mean looks healthy",
    ),
    "heat_update_ratio.png": (
        "each layer's update size relative to its weights, per optimizer step",
        "layers whose relative update runs far above the rest (too high an lr for them)",
    ),
    "heat_attn_sink.png": (
        "the share of each layer's heads whose attention on the first token exceeds 0.3",
        "layers turning into sinks as training goes on (Gu et al. 2025)",
    ),
    "heat_attn_first_token.png": (
        "the mean attention each layer's heads put on the first token",
        "a rise well above the uniform share: a sink forming",
    ),
    "heat_act_massive.png": (
        "the largest |value| of each layer's output over its median",
        "ratios of 1e3 and more: massive activations (Sun et al. 2024)",
    ),
    "heat_act_kurtosis.png": (
        "the kurtosis of the neurons' RMS in each layer's output",
        "values far above 1: a few channels carrying outlier features (He et al. 2024)",
    ),
    "heat_linear_out_fc2.png": (
        "the RMS of each layer's FFN output (fc2)",
        "steady growth before a divergence (Rybakov et al. 2024)",
    ),
    "heat_spectral_fc2.png": (
        "the largest singular value of each layer's fc2 weight",
        "layers whose spectral norm runs away from the rest",
    ),
    "heat_adam_update.png": (
        "the norm of each layer's Adam update",
        "update spikes in the lower layers before the loss spikes (Marin's 32B run)",
    ),
    "heat_layer_drop.png": (
        "the loss increase when the layer is skipped",
        "layers whose removal costs nothing: depth the model does not use (Sun et al. 2025)",
    ),
}


def caption(name: str) -> str:
    if name in HEATMAPS:
        what, look = HEATMAPS[name]
        where = "Per layer (rows) over training (columns), one panel per variant"
        marks = ("A red dashed line: the step a run diverged; a white triangle: where a run's "
                 "value first crossed its threshold (the stability cards list each).")  # fmt: skip
        return f"{where}: {what}. Look for: {look}. {marks}"
    shows, look = CAPTIONS.get(name, ("", ""))
    return f"{shows} Look for: {look}" if shows else ""


def page(report: dict[str, Any], table: tuple[list[str], list[list[str]]], out_dir: Path) -> str:
    """The HTML of ``report`` (analysis/report.py) with ``table`` (report.table_cells)
    and every plot in ``out_dir`` embedded."""
    esc = html.escape
    head, rows = table
    groups = ", ".join(report["wandb_groups"])
    group = f"wandb group <code>{esc(groups)}</code>." if groups else "in no wandb group."
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'>",
        f"<title>normlab report: {esc(report['sweep_dir'])}</title>",
        "<style>body{font-family:sans-serif;max-width:1100px;margin:2em auto;color:#222}"
        "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;"
        "padding:3px 6px;text-align:right}th{background:#f3f3f3}figure{margin:2em 0}"
        "figcaption{font-size:14px;color:#444;max-width:900px}img{max-width:100%}</style>",
        "</head><body>",
        f"<h1>Sweep report</h1><p>{esc(report['sweep_dir'])}: {report['n_runs']} runs in "
        f"{len(report['variants'])} variants; {group} {esc(report.get('shared') or '')}</p>",
        "<table><tr>" + "".join(f"<th>{esc(h)}</th>" for h in head) + "</tr>",
        *("<tr>" + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>" for row in rows),
        "</table>",
    ]
    entries = lr_sweep.ranked(report.get("lr_sweep", []))
    if entries:
        parts.append("<h2>Learning-rate sensitivity</h2><table><tr><th>rank</th><th>variant</th>"
                     "<th>best lr</th><th>final val loss</th><th>LR sensitivity</th>"
                     "<th>edge</th></tr>")  # fmt: skip
        for e in entries:
            parts.append(
                f"<tr><td>{lr_sweep.rank_text(e)}</td><td>{esc(e['label'])}</td>"
                f"<td>{e['best_lr']:g}</td>"
                f"<td>{e['best_val_loss']:.4f}</td><td>{esc(lr_sweep.sensitivity_text(e))}</td>"
                f"<td>{'yes' if e['edge'] else 'no'}</td></tr>"
            )
        parts.append("</table>")
    for name in report["plots"]:
        path = out_dir / name
        if not path.is_file():
            continue
        data = base64.b64encode(path.read_bytes()).decode()
        parts.append(
            f"<figure><img alt='{esc(name)}' src='data:image/png;base64,{data}'>"
            f"<figcaption><b>{esc(name)}</b>. {esc(caption(name))}</figcaption></figure>"
        )
    if report["warnings"]:
        parts.append("<h2>Warnings</h2><ul>")
        parts += [f"<li>{esc(w)}</li>" for w in report["warnings"]]
        parts.append("</ul>")
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
