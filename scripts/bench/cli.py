"""Throughput benchmarks: normlab's GPT and ViT against Hugging Face GPT-2 and timm at identical
configurations, norm kernels, every placement x norm, Lightning's overhead, probes, peak memory.

Each comparison runs in one process and alternates its contenders (A, B, A, B, ...) after warmup,
then takes medians, so a busy machine slows every contender alike: read the ratios. On a machine
shared with other jobs, `--threads 1 --clock cpu` counts only this process's own CPU time.

    python -m scripts.bench                         # CPU, default sizes (~12 minutes, 16 GB)
    python -m scripts.bench --quick                 # tiny sizes, seconds (what the tests run)
    python -m scripts.bench --device cuda           # GPT-2 small: bf16, torch.compile, fused AdamW
    python -m scripts.bench --only gpt,norms --out bench.json
    python -m scripts.bench --threads 1 --clock cpu # a busy shared CPU
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
from scripts.bench.harness import bench_lightning, bench_memory, bench_probes
from scripts.bench.models import bench_gpt, bench_norms, bench_placements, bench_vit

SECTIONS: dict[str, Callable[[BenchConfig], list[Result]]] = {
    "gpt": bench_gpt,
    "vit": bench_vit,
    "norms": bench_norms,
    "placements": bench_placements,
    "lightning": bench_lightning,
    "probes": bench_probes,
    "memory": bench_memory,
}


# ---------------------------------------------------------------- reporting and CLI
def print_table(results: list[Result]) -> None:
    def fmt(v: float | None) -> str:
        return "-" if v is None else f"{v:.3g}" if abs(v) < 1000 else f"{v:,.0f}"

    head = ("section", "name", "value", "unit", "x base", "best", "note")
    rows = [
        (
            r.section,
            r.name,
            fmt(r.value),
            r.unit,
            fmt(r.ratio),
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
    table = Table(
        *head, title="x base: speed vs the section's baseline (medians; best: fastest rounds)"
    )
    for row in rows:
        table.add_row(*row)
    Console(width=None if sys.stdout.isatty() else 180).print(table)


def cpu_model() -> str | None:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return None


def metadata(bc: BenchConfig) -> dict:
    meta = {
        "date": time.strftime("%Y-%m-%d"),
        "cpu": cpu_model(),
        "cores": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if bc.device == "cuda" else None,
    }
    with contextlib.suppress(ImportError):
        import transformers

        meta["transformers"] = transformers.__version__
    return meta


def parse_sections(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in SECTIONS]
    if unknown:
        raise argparse.ArgumentTypeError(
            f"unknown section {unknown[0]!r}; choose from {', '.join(SECTIONS)}"
        )
    return names


def main(argv: list[str] | None = None) -> dict:
    """Run the selected sections, print the table, write JSON if asked; returns the report."""
    p = argparse.ArgumentParser(prog="python -m scripts.bench", description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--quick", action="store_true", help="tiny sizes, few rounds")
    p.add_argument(
        "--only",
        type=parse_sections,
        default=list(SECTIONS),
        help=f"comma list of: {', '.join(SECTIONS)}",
    )
    p.add_argument("--reps", type=int, default=None, help="timed rounds (default 7; quick 3)")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (quick: 1)")
    p.add_argument("--clock", choices=tuple(CLOCKS), default="wall", help="cpu needs --threads 1")
    p.add_argument(
        "--precision", choices=("32", "bf16"), default=None, help="default: bf16 on cuda, else 32"
    )
    p.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile the compared models (default: on cuda only)",
    )
    p.add_argument("--out", type=Path, default=None, help="write the report as JSON here")
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda needs a CUDA GPU; use --device cpu")
    threads = args.threads or (1 if args.quick else None)  # tiny ops: threads only contend
    if args.clock == "cpu" and (threads != 1 or args.device == "cuda"):
        p.error("--clock cpu counts every thread's time; use it with --threads 1 on the CPU")
    cuda = args.device == "cuda"
    precision = args.precision or ("bf16" if cuda else "32")
    compile_ = cuda if args.compile is None else args.compile
    bc = BenchConfig(args.device, args.quick, clock=args.clock, precision=precision)
    bc = replace(bc, compile=compile_)
    bc = replace(bc, warmup=1, reps=3) if args.quick else bc
    bc = replace(bc, iters=5) if args.device == "cuda" else bc  # amortize the syncs
    bc = replace(bc, reps=args.reps) if args.reps else bc
    if args.device == "cuda":  # TF32 for the fp32 matmuls left outside autocast
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    by_section, seconds, saved_threads = {}, {}, torch.get_num_threads()
    torch.set_num_threads(threads or saved_threads)
    # The norms run last, under keep_freed_memory: tiny kernels would otherwise pay page faults
    # that depend on which contender freed memory before them. The model sections run with the
    # allocator's defaults, as training does.
    order = sorted((n for n in SECTIONS if n in args.only), key=lambda n: n == "norms")
    kept = None
    try:
        for name in order:
            kept = keep_freed_memory() if name == "norms" else kept
            start = time.perf_counter()
            try:
                by_section[name] = SECTIONS[name](bc)
            except Exception as err:
                by_section[name] = [Result(name, name, None, note=one_line(err), status="error")]
            seconds[name] = round(time.perf_counter() - start, 1)
        meta = {**metadata(bc), "norms_keep_freed_memory": kept, "section_s": seconds}
    finally:
        torch.set_num_threads(saved_threads)
    results = [r for name in SECTIONS if name in by_section for r in by_section[name]]
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
