"""Model FLOPs utilization: the share of the device's peak that a run's training step achieves.

    MFU = throughput x training FLOPs per token (or per sample) / peak FLOP/s

The FLOPs per token come from the model config (``flops_per_token``: 6N + 12 L T d, PaLM's
appendix B; N leaves out the position table, a lookup, and counts tied weights once). The peak
is the device's: on a GPU the datasheet's dense figure for the precision (``GPU_PEAKS``, bf16 /
fp16 tensor cores, or TF32 for fp32 matmuls, which the GPU trainer turns on); on a CPU a large
matrix product measured once per machine, thread count, dtype and torch version, and cached
in the data cache's directory (``cpu_peak.json``), since CPUs have no datasheet figure that
torch reaches.
"""

from __future__ import annotations

import json
import os
import platform
import time
from pathlib import Path

import torch

# Dense (no sparsity) peaks in FLOP/s: (bf16/fp16 tensor, tf32 tensor), by a name fragment of
# torch.cuda.get_device_name(); the first fragment found wins (more specific names first).
GPU_PEAKS: dict[str, tuple[float, float]] = {
    "H200": (989e12, 494e12),
    "H100 PCIe": (756e12, 378e12),
    "H100": (989e12, 494e12),
    "GH200": (989e12, 494e12),
    "A100": (312e12, 156e12),
    "A10G": (70e12, 35e12),
    "L40S": (362e12, 183e12),
    "L4": (121e12, 60e12),
    "RTX 4090": (165e12, 83e12),
    "RTX 3090": (71e12, 36e12),
    "V100": (125e12, 125e12),  # no TF32: fp32 matmuls run at 15.7e12, fp16 tensor cores 125e12
    "T4": (65e12, 8e12),
}
CPU_GEMM = 2048  # side of the square matrices the CPU peak is measured with


def gpu_peak(name: str, precision: str) -> float | None:
    """The datasheet peak of the GPU called ``name`` for ``precision``, or None if unknown."""
    for fragment, (half, tf32) in GPU_PEAKS.items():
        if fragment in name:
            return half if precision.startswith(("bf16", "16")) else tf32
    return None


def cpu_peak(threads: int, precision: str, cache_dir: Path) -> float:
    """FLOP/s of a large matrix product on this CPU at ``threads`` in the run's dtype, measured
    once (about a second) and cached."""
    dtype = torch.bfloat16 if precision.startswith("bf16") else torch.float32
    key = f"{cpu_name()}|{platform.machine()}|{threads}|{dtype}|{torch.__version__}"
    path = cache_dir / "cpu_peak.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, ValueError):
        known = {}
    if key not in known:
        known[key] = measure_gemm(threads, dtype)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
            tmp.write_text(json.dumps(known, indent=1))
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only cache: measured again next time
    return known[key]


def measure_gemm(
    threads: int, dtype: torch.dtype, seconds: float = 0.5, size: int = CPU_GEMM
) -> float:
    """The best FLOP/s of size^3 products over ``seconds`` (after one warmup product)."""
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        a = torch.randn(size, size).to(dtype)
        b = torch.randn(size, size).to(dtype)
        torch.mm(a, b)
        best, end = 0.0, time.perf_counter() + seconds
        while time.perf_counter() < end:
            start = time.perf_counter()
            torch.mm(a, b)
            best = max(best, 2 * size**3 / (time.perf_counter() - start))
        return best
    finally:
        torch.set_num_threads(before)


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "cpu"


def peak_flops(device: torch.device, precision: str, threads: int, cache_dir: Path):
    """(peak FLOP/s, where it comes from) for the device a run trained on."""
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        peak = gpu_peak(name, precision)
        return peak, f"{name} datasheet" if peak else f"{name}: not in GPU_PEAKS"
    return cpu_peak(
        threads, precision, cache_dir
    ), f"measured {CPU_GEMM}^3 matmul, {threads} threads"


def utilization(model: torch.nn.Module, unit: str, throughput: float | None, precision: str):
    """Training FLOPs per token (``unit`` tokens) or per image (samples), the device's peak and
    the MFU of ``throughput`` (units/s) against it; the peak of a CPU is cached in the data
    cache's directory."""
    from data.cache import default_cache_dir

    unit_flops = model.flops_per_unit()
    device = next(model.parameters()).device
    peak, source = peak_flops(device, precision, torch.get_num_threads(), default_cache_dir())
    return {
        f"flops_per_{unit[:-1]}": unit_flops,
        "peak_flops": peak,
        "peak_flops_source": source,
        "mfu": throughput * unit_flops / peak if throughput and peak else None,
    }
