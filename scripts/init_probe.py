"""F1's quantities at initialization (Xiong et al. 2020), on real batches, without training.

    python -m scripts.init_probe                                  # post, pre, deepnorm x depths
    python -m scripts.init_probe init_probe.depths=[6,12,24,48] init_probe.seeds=[0,1]
    python -m scripts.init_probe -m experiment=f1_init            # F1's sweep (reproduce.py f1)

The same configs as train.py (model, norm, data, ...); ``init_probe.*`` picks the placements,
depths, seeds and the K train batches of the configured data per seed. Each run dir gets
probe.json (training/init_probe.py describes it) and summary.json, and the run dir behaves as
train.py's does: a finished probe is skipped, one writer at a time, one-line errors.
"""

from __future__ import annotations

import sys  # noqa: I001
from pathlib import Path

# This checkout's packages, never an installed copy of another (python scripts/x.py puts
# scripts/ first on sys.path, not the checkout).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


import hydra
import lightning.pytorch as L
from omegaconf import DictConfig

from runs import runfiles
from runs.errors import ConfigError
from training.arms import drop_inapplicable
from training.attempt import Attempt
from training.build import build_data, model_config
from training.errors import BUILD_ERRORS, one_line_errors
from training.init_probe import format_table, init_probe, write_probe_json
from training.launch import preflight
from training.run_config import typed_config
from training.sweep import job_outcome
from training.threads import set_threads


def probe(cfg: DictConfig) -> dict:
    """The probe's result for the run dir's summary (placements, depths, seeds, slopes)."""
    run = typed_config(cfg)
    grid = run.init_probe
    try:
        dm = build_data(run)
        base = model_config(run, dm)
        batches = [dm.train_batch(step, grid.batch_size) for step in range(grid.batches)]
        return init_probe(base, batches, grid.placements, grid.depths, grid.seeds)
    except BUILD_ERRORS as err:
        raise ConfigError(str(err)) from err


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
@one_line_errors
def main(cfg: DictConfig) -> dict:
    drop_inapplicable(cfg)  # an arm's key in a sweep across a group's options (preflight)
    with Attempt(cfg) as this:
        if this.done_before is None:
            set_threads(cfg.num_threads)
            L.seed_everything(cfg.seed, workers=True, verbose=False)
            result = probe(cfg)
            write_probe_json(result, this.run_dir / runfiles.PROBE)
            print(format_table(result), flush=True)
            # The probed placements, not the config's placement node (it plays no part here).
            placements = ",".join(result["placements"])
            this.record.results.update(result, steps=0, placement=placements)
            this.record.complete()
    return job_outcome(this.summary, skipped=this.done_before is not None)


if __name__ == "__main__":
    sys.argv[1:] = preflight(sys.argv[1:])
    main()
