"""How train.py meets its launchers: the command line, DDP's child processes, and sweeps.

- ``check_choices``: an unknown config-group option on the command line fails in one line that
  lists the valid ones (Hydra's own message spans a page).
- ``launch_scope``: Lightning's DDP launcher starts each extra process by re-running the
  command line. Under ``-m`` that line is the whole sweep, so every child would start a sweep of
  its own in new dirs. While a multirun job trains, the line it replays is the job's own
  overrides (no ``-m``) and Hydra's run dir is the job's dir, so each child joins that one job.
  After the job, the process group and the launcher's environment go, so the next job of the
  sweep launches its own processes.
- The sweep as a whole (its grid, its checks, its status line, a search's objective):
  training/sweep.py.
- The ``job_dir`` resolver: a sweep job's directory is named by its overrides
  (runs/jobs.py: ``model.n_layer=6,seed=0``), not its job number, so a sweep extended by a seed
  or a depth finds its finished runs.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf, read_write

from runs.checks import closest
from runs.jobs import job_dir, path_safe, recorded_constants
from runs.schema import ROOT
from training.arms import (
    CHECKED_GROUPS,
    CONF,
    CONNECTION_KEYS,
    DROPPED,
    OPTION_GROUPS,
    check_connection_key,
    check_option_key,
    group_keys,
    group_options,
    overrides_of,
)
from training.context import SWEEP_GONE, in_multirun


class ChoiceError(ValueError):
    """An unknown config-group option; the message lists the valid ones."""


def check_choices(args: Sequence[str], conf: Path = CONF) -> None:
    """Raise ChoiceError for the first ``group=option`` (or sweep ``group=a,b``) naming an option
    that ``conf/<group>/`` lacks. Hydra's own groups (hydra/...) and malformed overrides are
    left to Hydra."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    candidates = [a for a in overrides_of(args) if "=" in a]
    try:
        overrides = OverridesParser.create().parse_overrides(candidates)
    except Exception:  # Hydra reports syntax errors itself
        return
    for override in overrides:
        group = override.key_or_group
        if override.is_delete() or group.startswith("hydra") or not (conf / group).is_dir():
            continue
        if override.is_sweep_override():
            values = list(override.sweep_string_iterator())
        else:
            values = [override.get_value_element_as_str()]
        options = group_options(group, conf)
        for value in values:
            if value not in options and value != "null":
                near = closest(value, options).replace("(did you mean ", f"(did you mean {group}=")
                raise ChoiceError(
                    f"unknown {group} '{value}'{near}; choose one of: {', '.join(options)} "
                    f"({group}=<name>)"
                )


def job_dir_resolver(overrides: Sequence[str], *, _root_: Any) -> str:
    """``${job_dir:${hydra.overrides.task}}``: job_dir with the job's own config, without the
    constants its sweep dir recorded (training/sweep.py records them as the launch starts)."""
    constants = recorded_constants(OmegaConf.select(_root_, "hydra.sweep.dir"))
    return job_dir(overrides, _root_, constants)


# Group folders that are no option of the command line: experiment/size is composed by the
# experiments themselves, wandb_sweep is read by `wandb sweep`.
NOT_OPTIONS = ("experiment/size", "wandb_sweep")


def help_groups(conf: Path = CONF) -> str:
    """``--help``'s list: each config group a user picks from, with its options."""
    groups = sorted(
        str(p.relative_to(conf))
        for p in conf.rglob("*")
        if p.is_dir() and not str(p.relative_to(conf)).startswith("hydra")
    )
    return "\n".join(
        f"{g}: {', '.join(group_options(g, conf))}" for g in groups if g not in NOT_OPTIONS
    )


for _name, _resolver in (
    ("path_safe", path_safe),
    ("job_dir", job_dir_resolver),
    ("help_groups", lambda: help_groups()),
):
    if not OmegaConf.has_resolver(_name):
        OmegaConf.register_new_resolver(_name, _resolver)


def root_keys() -> set[str]:
    """The keys a plain ``key=value`` may set at the root (runs/schema.py: ROOT)."""
    return set(ROOT)


# Hydra's bash completion knows the command `python script.py`; the README runs
# `.venv/bin/python train.py`, which its script and its query both mistake for an app's name.
PYTHON_WORD = re.compile(r"^\s*\S*python[\d.]*(?=\s)")


def shell_completion(args: Sequence[str]) -> None:
    """``-sc install=bash`` prints Hydra's script with its python test widened to any path to
    a Python; ``-sc query=bash`` reads the line as ``python train.py ...``; a query outside the
    shell's completion (no COMP_LINE) is one line."""
    flags = [i for i, a in enumerate(args) if a in ("-sc", "--shell-completion")]
    if not flags or flags[0] + 1 >= len(args):
        return
    value = args[flags[0] + 1]
    if value.startswith("query="):
        line = os.environ.get("COMP_LINE")
        if line is None:
            raise SystemExit(
                "error: -sc query=bash is what the shell's completion runs (it sets COMP_LINE); "
                'install completion with: eval "$(.venv/bin/python train.py -sc install=bash)"'
            )
        os.environ["COMP_LINE"] = PYTHON_WORD.sub("python", line)
    elif value == "install=bash":
        import io

        from hydra._internal.core_plugins.bash_completion import BashCompletion

        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            BashCompletion(None).install()  # needs no config: it prints a fixed script
        script = out.getvalue()
        test = 'if [ "${words[0]}" == "python" ]; then'
        if test not in script:  # another Hydra: leave its script as it is
            return
        print(script.replace(test, 'if [[ "${words[0]##*/}" =~ ^python[0-9.]*$ ]]; then'), end="")
        raise SystemExit(0)


def preflight(args: Sequence[str], conf: Path = CONF) -> list[str]:
    """Command-line mistakes Hydra would answer with a page, as one line before it composes:
    an unknown group option, or an unknown root key (with the closest valid one), or a group
    key the chosen option lacks (added with ``+`` or not); and shell completion in the README's
    ``.venv/bin/python train.py`` form. Returns the command line Hydra is to read: an arm's key
    in a sweep across a group's options (``check_option_key``) becomes ``++key=value``, so the
    jobs of the options without it compose, and its note is printed once."""
    shell_completion(args)
    try:
        check_choices(args, conf)
    except ChoiceError as err:
        raise SystemExit(f"error: {err}") from None
    valid = root_keys()
    out, notes = list(args), []
    for i, arg in enumerate(args):
        if arg not in overrides_of(args) or "=" not in arg or arg.startswith("~"):
            continue  # flags, and keys the user deletes on purpose
        key = arg.split("=", 1)[0].lstrip("+")
        root = key.split(".", 1)[0].split("/", 1)[0]
        if arg.startswith("+") and root not in OPTION_GROUPS:
            continue  # keys the user adds on purpose (callbacks, probe intervals)
        if root not in valid:
            raise SystemExit(
                f"error: unknown setting '{root}'{closest(root, valid)} in '{arg}'; "
                f"valid settings: {', '.join(sorted(valid))}"
            )
        sub = key.split(".")[1] if key.count(".") >= 1 and root in CHECKED_GROUPS else None
        if sub is not None and sub not in (known := group_keys(root, conf)):
            near = closest(sub, known).replace("(did you mean ", f"(did you mean {root}.")
            raise SystemExit(
                f"error: unknown setting '{root}.{sub}'{near} in '{arg}'; valid {root} "
                f"settings: {', '.join(sorted(known))}"
            )
        if sub is not None and (note := check_option_key(root, sub, arg, args, conf)):
            out[i] = "++" + arg.lstrip("+")
            notes += [note] if note not in notes else []
        elif (
            root == "model" and sub in CONNECTION_KEYS and (note := check_connection_key(sub, args))
        ):
            notes += [note] if note not in notes else []
    check_writable(overrides_of(args))  # last: a refused command line creates no dir
    for note in notes:
        print(note, file=sys.stderr, flush=True)
    return out


OUTPUT_KEYS = ("hydra.run.dir", "hydra.sweep.dir")


def check_writable(overrides: Sequence[str]) -> None:
    """An output dir named on the command line that cannot be written (a read-only or forbidden
    directory) is one line here: Hydra creates it before any of normlab's code runs, and would
    answer with a traceback."""
    for arg in overrides:
        key, _, value = arg.partition("=")
        value = value.strip().strip("'\"")
        if key not in OUTPUT_KEYS or not value or "${" in value:
            continue
        path = Path(value).expanduser()
        try:  # what Hydra does first, and one file: the same errors, said in one line
            path.mkdir(parents=True, exist_ok=True)
            with tempfile.TemporaryFile(dir=path):
                pass
        except OSError as err:
            raise SystemExit(
                f"error: {key}={value} cannot be written ({err.strerror or err}); pick another "
                f"{key}=... or fix the permissions there"
            ) from None


# --- DDP child processes under -m ----------------------------------------------------------
# What Lightning's DDP launcher sets in its own process's environment, and never unsets: left
# there, the next job of a sweep would take LOCAL_RANK for a process started from outside and
# wait for ranks that nobody starts.
LAUNCH_ENV = ("MASTER_ADDR", "MASTER_PORT", "NODE_RANK", "LOCAL_RANK", "WORLD_SIZE")


@contextlib.contextmanager
def launch_scope(run_dir: Path) -> Iterator[None]:
    """One job's distributed lifetime: inside, a multirun job's sys.argv and hydra.run.dir
    describe that job alone (see the module docstring); on the way out the DDP process group
    is torn down and the launcher's environment variables are restored."""
    env = {k: os.environ.get(k) for k in LAUNCH_ENV}
    argv = sys.argv
    hydra_cfg = None
    if in_multirun():
        from hydra.core.hydra_config import HydraConfig

        follow_the_sweep()

        hydra_cfg = HydraConfig.get()
        task = [o for o in hydra_cfg.overrides.task if o.lstrip("+~").split("=")[0] not in DROPPED]
        sys.argv = [argv[0], *task]
        with read_write(hydra_cfg):
            old_dir, hydra_cfg.run.dir = hydra_cfg.run.dir, str(run_dir)
    try:
        yield
    finally:
        end_process_group()
        for key, value in env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        sys.argv = argv
        if hydra_cfg is not None:
            with read_write(hydra_cfg):
                hydra_cfg.run.dir = old_dir


SWEEP_PID = "NORMLAB_SWEEP_PID"  # the sweep's own process, for its workers to follow
_following = False  # this process watches its sweep already


def follow_the_sweep() -> None:
    """In a worker process of a parallel sweep (joblib's, started by the sweep's process): a
    SIGTERM once the sweep's process is gone, so a killed sweep (or a killed reproduce.py above
    it) leaves no job training on its own; the job stops at its next step boundary, interrupted
    and resumable. A daemon thread looks at the parent PID every second (a parent-death signal
    would fire when the thread that started the worker ends, which joblib's may do early). Jobs
    in the sweep's own process, or started by other launchers, are left alone."""
    global _following
    sweep_pid = int(os.environ.get(SWEEP_PID, "0") or 0)
    if _following or not sweep_pid or os.getppid() != sweep_pid:
        return

    def watch() -> None:
        while os.getppid() == sweep_pid:
            time.sleep(1.0)
        SWEEP_GONE.set()
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="follow-the-sweep", daemon=True).start()
    _following = True


def end_process_group() -> None:
    """Lightning leaves the DDP process group up after a fit; the next job of a sweep starts
    new processes, which must not meet the old group."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


@contextlib.contextmanager
def packed(cfg: Any) -> Iterator[None]:
    """A sweep job under ``pack.gpus``: its GPU slot held while it runs (training/packing.py);
    anything else runs as it is."""
    from runs.errors import ConfigError
    from training.packing import gpu_slot, read_pack

    pack = read_pack(cfg)
    if not pack.gpus or not in_multirun():
        yield
        return
    if cfg.trainer.get("devices") not in (1, "auto"):
        raise ConfigError(
            f"pack.gpus shares the node's GPUs among single-device jobs, and "
            f"trainer.devices={cfg.trainer.devices}: set trainer.devices=1, or drop pack"
        )
    from hydra.core.hydra_config import HydraConfig

    with gpu_slot(HydraConfig.get().sweep.dir, pack):
        yield
