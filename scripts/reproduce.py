"""One command per finding: run its sweep, compare the runs, decide each published claim.

    python scripts/reproduce.py f3                  # CPU size, into multirun/reproduce/f3_depth
    python scripts/reproduce.py f3 --size gpu       # the GPU size (experiment f3_depth_gpu)
    python scripts/reproduce.py f2 --dry-run        # show the sweep and the claims, run nothing
    python scripts/reproduce.py f5 --out DIR trainer.max_steps=100   # extra Hydra overrides
    python scripts/reproduce.py f3 --publish docs/findings/f3   # also copy verdict, report, plots
    python scripts/reproduce.py all --publish docs/findings     # every finding (hours: --dry-run)

Findings: f1 (init probe, no training), f2 (warmup), f3 (depth; F4 is its shallow arm, alias f4),
f5 (LayerNorm vs RMSNorm), vit (ViT depth), f6 (attention logits, QK-norm and LR sensitivity),
f7 (BatchNorm vs LayerNorm and RMSNorm across batch sizes), placements (every placement at
depth), f8 (the residual stream, Pre-LN vs Peri-LN), f9 (deep Pre-LN's later blocks and LayerNorm
Scaling), f10 (attention entropy, QK-norm), f11 (Admin at depth), f12 (log Z and z-loss), f13
(LR sensitivity under qk-layernorm and z-loss, read from f6's sweep), f14 (learning-rate
transfer under muP and CompleteP), f15 (sigmaReparam and entropy collapse), f16 (the logit
controls), f17 (the norm-free layers), f18 (the instruments), f19 (the residual topologies), f20
(DyT and the token budget), f13mu (F13's combined interventions with muParam);
``--dry-run`` lists them all with their claims and time estimates. Each sweep runs as
``python train.py -m experiment=<name> hydra.sweep.dir=<out>`` (f1 with scripts/init_probe.py). Then
analysis/report.py writes <out>/report/ and analysis/findings decides the claims
into <out>/verdict.md and <out>/verdict.json, from the runs that completed or diverged only (a
failed run is no divergence). Exit status 0 when every run completed or diverged, whatever the
verdicts; 1 when the sweep could not run or any of its runs failed. Running the same command
again resumes: a sweep whose runs all finished is not launched again, and train.py skips
finished runs of an unfinished sweep.
"""

import sys  # noqa: I001
from pathlib import Path

# This checkout's packages, never an installed copy of another (python scripts/x.py puts
# scripts/ first on sys.path, not the checkout).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from experiments.reproduce import main

if __name__ == "__main__":
    sys.exit(main())
