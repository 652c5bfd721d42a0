"""Resuming a run in its own directory: when ``last.ckpt`` is written and what it remembers.

Running the same command into the same run dir again picks up where the last attempt stopped
(training/attempt.py decides which): a finished run is skipped, an unfinished one continues from
``last.ckpt``, an empty dir starts at step 0.

Everything resume needs travels in the checkpoint, in the state of one callback,
``ResumeCheckpoint``: the run's settings (checked against a rerun's), and which metrics.csv rows
were on disk when it was written. A checkpoint taken at optimizer step G is written after every
metric row of steps < G (the task and the probes log a step's rows before its
``on_train_batch_end``; the loggers are flushed just before the write) and before any row of a
later step. When a validation runs at G, the checkpoint waits for it (a resumed fit does not
repeat a validation that was due at its starting step), so the val rows at G are on disk too. A
resumed run keeps exactly those rows (``step < metrics_below``, plus val rows at ``val_done_at``)
and logs the rest again: rows a killed attempt wrote after its checkpoint are superseded, never
duplicated, and no step goes missing. (Lightning's CSVLogger deletes metrics.csv when it starts,
hence ``ResumableCSVLogger``.)

SIGTERM (SLURM, ``timeout``) and SIGINT stop the fit at the next step boundary with a fresh
checkpoint; the run is recorded as ``interrupted`` and the same command resumes it.

Upstream limits: Lightning's ModelCheckpoint saves at a step before that step's validation (a
resumed fit would then skip the validation) and knows nothing of metrics.csv; Lightning 2.6 stops
on SIGTERM by raising ``SIGTERMException`` at the next batch without writing a checkpoint, and
leaves SIGINT to ``KeyboardInterrupt``. ``ResumeCheckpoint`` registers its handlers after
Lightning's, so both signals end at a step boundary with a checkpoint. It reads the epoch loop's
``total_batch_idx`` (a private counter, guarded in
tests/training/reliability/test_library_contracts.py).
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Checkpoint

from runs.record import record_of
from training.reliability.checkpoints import STATE_KEY


# --- when to write, and what the checkpoint remembers ----------------------------------------
class ResumeCheckpoint(Checkpoint):
    """``last.ckpt`` every ``every_n_steps`` optimizer steps, also once ``every_s`` seconds have
    passed since the last write (None: steps only), and at the step boundary after a SIGTERM or
    SIGINT (then the fit stops and ``interrupted`` holds the signal number).

    Not written at the last step (the run saves the final weights after their validation) nor
    once the run is stopping for another reason (a diverged run leaves no checkpoint that looks
    like a good model). ``last_model_path`` (as on ModelCheckpoint) lets the Divergence callback
    set the file aside, a resumed run's too.
    """

    def __init__(
        self,
        path: str | Path,
        every_n_steps: int,
        every_s: float | None = None,
        run_config: dict | None = None,
    ) -> None:
        self.path = str(path)
        self.every_n_steps, self.every_s = every_n_steps, every_s
        self.run_config = run_config  # the settings that produced this run
        self.metrics_below, self.val_done_at = 0, None
        self.interrupted: int | None = None
        self.last_model_path = ""
        self.best_model_path = ""
        self.best_k_models: dict[str, Any] = {}
        self._saved_step = -1
        self._after_validation = False
        self._last_save = time.monotonic()
        self._handlers: dict[int, Any] = {}

    @property
    def state_key(self) -> str:
        return STATE_KEY

    # --- signals: note them, act at the step boundary ------------------------------------
    def _on_signal(self, signum: int, frame: Any) -> None:
        self.interrupted = signum

    def on_train_start(self, trainer, pl_module) -> None:
        self._last_save = time.monotonic()
        self._saved_step = trainer.global_step  # a resumed run's starting point is saved already
        if os.path.isfile(self.path):
            self.last_model_path = self.path
        # After Lightning's own handlers (registered after on_fit_start): ours stop at a step
        # boundary with a checkpoint instead of raising out of the fit.
        for signum in (signal.SIGTERM, signal.SIGINT):
            try:
                self._handlers[signum] = signal.signal(signum, self._on_signal)
            except ValueError:  # not the main thread: leave the signals alone
                break

    def on_train_end(self, trainer, pl_module) -> None:
        for signum, handler in self._handlers.items():
            signal.signal(signum, handler)
        self._handlers = {}

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        stop = trainer.strategy.reduce_boolean_decision(self.interrupted is not None, all=False)
        if stop:  # every rank stops here together, whichever was signalled
            self.interrupted = self.interrupted or signal.SIGTERM
            trainer.should_stop = True
            if step != self._saved_step and validation_follows(trainer):
                self._after_validation = True  # a regular validation: checkpoint after it
            else:
                if step != self._saved_step:
                    self.save(trainer)
                # the stop's extra validation is not a result
                record_of(pl_module).interrupt(self.interrupted)
            return
        if step == self._saved_step or trainer.should_stop or step >= trainer.max_steps:
            return
        due = step % self.every_n_steps == 0
        if self.every_s is not None:  # one verdict for all ranks: they all take part in a save
            late = time.monotonic() - self._last_save >= self.every_s
            due = trainer.strategy.reduce_boolean_decision(due or late, all=False)
        if due and validation_follows(trainer):
            self._after_validation = True
        elif due:
            self.save(trainer)

    def on_validation_end(self, trainer, pl_module) -> None:
        if self._after_validation and not trainer.sanity_checking:
            self._after_validation = False
            stopping = trainer.should_stop and self.interrupted is None
            if trainer.state.fn == "fit" and not stopping:
                self.save(trainer, val_done=True)
            if self.interrupted is not None:
                record_of(pl_module).interrupt(self.interrupted)

    def save(self, trainer, val_done: bool = False, final: bool = False) -> None:
        """Write the checkpoint after every metric row it covers is on disk. ``final``: after
        the last validation, so every row of the run is covered."""
        step = trainer.global_step
        self.metrics_below = step + 1 if final else step
        self.val_done_at = step if val_done and not final else None
        for logger in trainer.loggers:
            logger.save()
        trainer.save_checkpoint(self.path, weights_only=False)
        self.last_model_path, self._saved_step = self.path, step
        self._last_save = time.monotonic()

    def state_dict(self) -> dict:
        keys = ("run_config", "metrics_below", "val_done_at")
        return {k: getattr(self, k) for k in keys}

    def load_state_dict(self, state_dict: dict) -> None:
        pass  # read up front by the run dir's plan; this run's own config is the one recorded


def validation_follows(trainer) -> bool:
    """Whether the fit validates right after this batch: the trainer's batch-count rule for an
    endless train loader (validation every ``val_check_batch`` batches, counted across epochs)."""
    every = trainer.val_check_batch
    if not trainer.enable_validation or every in (None, float("inf")):
        return False
    done = trainer.fit_loop.epoch_loop.total_batch_idx + 1
    return trainer.check_val_every_n_epoch is None and done % int(every) == 0


def default_every_n_steps(max_steps: int) -> int:
    """A tenth of the run: a kill loses at most ~10% of it (every_s bounds the time lost)."""
    return max(1, max_steps // 10)
