"""Throughput benchmarks: normlab's GPT against Hugging Face GPT-2 and a plain GPT (and its ViT
against timm's, where timm is installed) at identical configurations, the GPT's variants, norm
kernels, every placement x norm, Lightning's overhead, probes, peak memory.

Each comparison runs in one process and alternates its contenders (A, B, A, B, ...) after warmup,
then takes medians, so a busy machine slows every contender alike: read the ratios. On a machine
shared with other jobs, `--threads 1 --clock cpu` counts only this process's own CPU time.

    python -m scripts.bench                         # CPU, default sizes (~12 minutes, 16 GB)
    python -m scripts.bench --quick                 # tiny sizes, seconds (what the tests run)
    python -m scripts.bench --device cuda           # GPT-2 small: bf16, torch.compile, fused AdamW
    python -m scripts.bench --only gpt,norms --out bench.json
    python -m scripts.bench --threads 1 --clock cpu # a busy shared CPU
    python -m scripts.bench --only gpt --threads 1,2 --modes eager,compiled   # 4 runs of gpt
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path

import torch

from scripts.bench.core import CLOCKS, BenchConfig, Result, keep_freed_memory, one_line
from scripts.bench.harness import bench_lightning, bench_memory, bench_optimizer, bench_probes
from scripts.bench.models import (
    bench_gpt,
    bench_norms,
    bench_placements,
    bench_variants,
    bench_vit,
)

SECTIONS: dict[str, Callable[[BenchConfig], list[Result]]] = {
    "gpt": bench_gpt,
    "variants": bench_variants,
    "vit": bench_vit,
    "norms": bench_norms,
    "placements": bench_placements,
    "lightning": bench_lightning,
    "optimizer": bench_optimizer,
    "probes": bench_probes,
    "memory": bench_memory,
}


# ---------------------------------------------------------------- reporting and CLI
def print_table(results: list[Result]) -> None:
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"

    def span(r: Result) -> str:
        return "-" if r.spread is None else f"{r.spread[0]:.3f}-{r.spread[1]:.3f}"

    head = ("section", "thr", "name", "value", "unit", "x base", "rounds", "best", "note")
    rows = [
        (
            r.section,
            str(r.threads or "-"),
            r.name,
            fmt(r.value),
            r.unit,
            fmt(r.ratio),
            span(r),
            fmt(r.best),
            r.note if r.status == "ok" else f"{r.status}: {r.note}"[:90],
        )
        for r in results
    ]
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        for row in (head, *rows):
            print(" | ".join(row))
        return
    title = (
        "x base: speed vs the section's baseline (medians); rounds: the lowest and highest "
        "per-round ratio; best: from the fastest rounds"
    )
    table = Table(*head, title=title)
    for row in rows:
        table.add_row(*row)
    Console(width=None if sys.stdout.isatty() else 180).print(table)


def cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return None


def cpu_flags() -> list[str]:
    """The vector-instruction flags of /proc/cpuinfo (what decides the CPU kernels' speed)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = line.split(":", 1)[1].split()
                return sorted(f for f in flags if f.startswith(("avx", "fma", "amx")))
    return []


def metadata(bc: BenchConfig, threads: list[int]) -> dict:
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "cpu": cpu_model(),
        "cpu_flags": cpu_flags(),
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cores": os.cpu_count(),
        "threads": threads,
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if bc.device == "cuda" else None,
    }
    with contextlib.suppress(ImportError):
        import transformers

        meta["transformers"] = transformers.__version__
    return meta


def parse_threads(text: str) -> list[int]:
    try:
        threads = [int(n) for n in text.split(",") if n.strip()]
    except ValueError:
        threads = []
    if not threads or min(threads) < 1:
        raise argparse.ArgumentTypeError(f"--threads takes counts like 1 or 1,2; got {text!r}")
    return threads


MODES = {"eager": False, "compiled": True}


def parse_modes(text: str) -> tuple[bool, ...]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names or any(n not in MODES for n in names):
        raise argparse.ArgumentTypeError(f"--modes takes eager, compiled or both; got {text!r}")
    return tuple(MODES[n] for n in names)


def parse_sections(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown section {unknown[0]!r}; choose from {', '.join(SECTIONS)}"
        )
    return names


def run_sections(
    bc: BenchConfig, only: list[str], threads: list[int], clock: str
) -> tuple[list[Result], dict[str, float], bool | None]:
    """The selected sections once per thread count: rows, seconds per section and count, and
    whether glibc kept freed memory for the norms."""
    rows: dict[tuple[str, int], list[Result]] = {}
    seconds, kept, saved_threads = {}, None, torch.get_num_threads()
    # The norms run last, under keep_freed_memory: tiny kernels would otherwise pay page faults
    # that depend on which contender freed memory before them. The model sections run with the
    # allocator's defaults, as training does.
    order = sorted((n for n in SECTIONS if n in only), key=lambda n: n == "norms")
    try:
        for name in order:
            kept = keep_freed_memory() if name == "norms" else kept
            for n in threads:
                torch.set_num_threads(n)
                auto = "cpu" if n == 1 and bc.device == "cpu" else "wall"
                sub = replace(bc, clock=auto if clock == "auto" else clock)
                start = time.perf_counter()
                try:
                    rows[name, n] = SECTIONS[name](sub)
                except Exception as err:
                    rows[name, n] = [Result(name, name, None, note=one_line(err), status="error")]
                seconds[f"{name} x{n}"] = round(time.perf_counter() - start, 1)
                for r in rows[name, n]:
                    r.threads = n
    finally:
        torch.set_num_threads(saved_threads)
    results = [r for n in threads for name in SECTIONS if (name, n) in rows for r in rows[name, n]]
    return results, seconds, kept


def main(argv: list[str] | None = None) -> dict:
    """Run the selected sections, print the table, write JSON if asked; returns the report."""
    p = argparse.ArgumentParser(
        prog="python -m scripts.bench",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="tools, each with its own --help: python -m scripts.bench {probe_set, concurrent} "
        "[args]",
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--quick", action="store_true", help="tiny sizes, few rounds")
    p.add_argument(
        "--only",
        type=parse_sections,
        default=list(SECTIONS),
        help=f"comma list of: {', '.join(SECTIONS)}",
    )
    p.add_argument("--reps", type=int, default=None, help="timed rounds (default 7; quick 3)")
    p.add_argument(
        "--threads",
        type=parse_threads,
        default=None,
        help="torch CPU threads, or a list (1,2) to run the sections once per count (quick: 1)",
    )
    p.add_argument(
        "--clock",
        choices=(*CLOCKS, "auto"),
        default="wall",
        help="cpu needs --threads 1; auto: cpu at 1 thread, wall otherwise",
    )
    p.add_argument(
        "--precision", choices=("32", "bf16"), default=None, help="default: bf16 on cuda, else 32"
    )
    p.add_argument(
        "--modes",
        type=parse_modes,
        default=None,
        help="eager, compiled (torch.compile of the compared models) or eager,compiled: the gpt "
        "section runs once per mode, the vit and lightning sections compile only when compiled "
        "is the one mode (default: compiled on cuda, eager on cpu)",
    )
    p.add_argument("--out", type=Path, default=None, help="write the report as JSON here")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda needs a CUDA GPU; use --device cpu")
    threads = args.threads or [1 if args.quick else torch.get_num_threads()]
    if args.clock == "cpu" and (threads != [1] or args.device == "cuda"):
        p.error("--clock cpu counts every thread's time; use it with --threads 1 on the CPU")
    cuda = args.device == "cuda"
    precision = args.precision or ("bf16" if cuda else "32")
    modes = args.modes or ((True,) if cuda else (False,))
    bc = BenchConfig(args.device, args.quick, precision=precision, modes=modes)
    bc = replace(bc, compile=modes == (True,))
    bc = replace(bc, warmup=1, reps=3) if args.quick else bc
    bc = replace(bc, iters=5) if args.device == "cuda" else bc  # amortize the syncs
    bc = replace(bc, reps=args.reps) if args.reps else bc
    if args.device == "cuda":  # TF32 for the fp32 matmuls left outside autocast
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    before = torch.get_num_threads()
    results, seconds, kept = run_sections(bc, args.only, threads, args.clock)
    meta = {**metadata(bc, threads), "norms_keep_freed_memory": kept, "section_s": seconds}
    meta["threads_before"] = before
    print_table(results)
    ok = all(r.status != "error" for r in results) and all(
        math.isfinite(r.value) and r.value > 0 for r in results if r.status == "ok"
    )
    report = {
        "meta": meta,
        "config": asdict(bc),
        "ok": ok,
        "results": [asdict(r) for r in results],
    }
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n")
    for r in results:
        if r.status == "error":
            print(f"error in {r.section}: {r.note}", file=sys.stderr)
    return report
