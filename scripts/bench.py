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
import csv
import inspect
import io
import json
import math
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

if __package__ in (None, ""):  # run as a file: make the repository root importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.nn.functional as F
from torch import nn

from models.gpt import GPT, GPTConfig
from models.norms import NORMS, build_norm
from models.placement import PLACEMENTS
from models.vit import ViT, ViTConfig

ROOT = Path(__file__).resolve().parents[1]
PEAK_BF16_FLOPS = 989e12  # H100/H200 SXM dense bf16: the MFU denominator


@dataclass(frozen=True)
class BenchConfig:
    device: str = "cpu"
    quick: bool = False
    warmup: int = 2  # untimed calls per contender
    reps: int = 7  # timed rounds; in each, every contender runs `iters` calls
    iters: int = 1
    clock: str = "wall"  # wall | cpu (this process's CPU time: immune to other jobs)
    precision: str = "32"  # 32 | bf16 (autocast; the default on CUDA)
    compile: bool = False  # torch.compile the forward and loss of the compared models (CUDA)

    @property
    def size(self) -> str:
        return "quick" if self.quick else self.device


@dataclass
class Result:
    section: str
    name: str
    value: float | None  # None unless status is "ok"
    unit: str = ""
    ratio: float | None = None  # speed relative to the section's baseline, medians (>1: faster)
    best: float | None = None  # the same ratio from each contender's fastest round
    note: str = ""
    status: str = "ok"  # ok | skipped (an optional piece is absent) | error


@dataclass(frozen=True)
class LMSize:
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    vocab_size: int
    batch_size: int


GPT_SIZES = {
    "quick": LMSize(2, 2, 32, 32, 64, 4),
    "cpu": LMSize(6, 8, 256, 256, 256, 16),
    "cuda": LMSize(12, 12, 768, 1024, 50304, 12),  # GPT-2 small
}
GRID_SIZES = {  # placement x norm: the default job's model on CPU, eager bf16 on a GPU
    "quick": LMSize(2, 2, 32, 32, 64, 4),
    "cpu": LMSize(6, 4, 128, 128, 256, 32),
    "cuda": LMSize(6, 12, 768, 1024, 50304, 8),
}
VIT_SIZES = {  # (ViTConfig fields, batch size)
    "quick": (dict(image_size=8, patch_size=2, in_chans=1, n_layer=2, n_head=2, n_embd=32), 8),
    "cpu": (dict(image_size=32, patch_size=4, in_chans=3, n_layer=6, n_head=8, n_embd=256), 64),
    "cuda": (
        dict(image_size=224, patch_size=16, in_chans=3, n_layer=12, n_head=12, n_embd=768),
        64,
    ),
}
NORM_SHAPES = {"quick": [(4, 32, 32)], "cpu": [(16, 256, 256), (12, 1024, 768)]}
NORM_SHAPES["cuda"] = NORM_SHAPES["cpu"]


# ---------------------------------------------------------------- timing
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def synchronize(bc: BenchConfig) -> None:
    if bc.device == "cuda":
        torch.cuda.synchronize()


def warm(fn: Callable[[], object], bc: BenchConfig, own_bytes: int = 0) -> float | None:
    """Run the warmup calls. On CUDA return this contender's peak memory in GiB: the peak above
    what was allocated before (other contenders' state), plus its own weights."""
    if bc.device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    for _ in range(max(bc.warmup, 1)):
        fn()
    if bc.device != "cuda":
        return None
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base + own_bytes) / 2**30


def interleaved(fns: dict[str, Callable[[], object]], bc: BenchConfig) -> dict[str, list[float]]:
    """Seconds per call of each (already warm) function in every round, timed in alternation."""
    clock, times = CLOCKS[bc.clock], {name: [] for name in fns}
    for _ in range(bc.reps):
        for name, fn in fns.items():
            synchronize(bc)
            start = clock()
            for _ in range(bc.iters):
                fn()
            synchronize(bc)
            times[name].append((clock() - start) / bc.iters)
    return times


def speed_results(
    section: str, times: dict[str, list[float]], base: str, work: float, unit: str, note: str
) -> list[Result]:
    """`work` units per call / median seconds, with ratios to `base` (medians and best rounds)."""
    med = {k: statistics.median(v) for k, v in times.items()}
    fast = {k: min(v) for k, v in times.items()}
    out = []
    for k in times:
        ratio = med[base] / med[k] if base in med else None
        best = fast[base] / fast[k] if base in fast else None
        value = work / med[k] if work else med[k] * 1e3
        out.append(Result(section, k, value, unit, ratio, best, note))
    return out


def autocast(bc: BenchConfig):
    return torch.autocast(bc.device, dtype=torch.bfloat16, enabled=bc.precision == "bf16")


def train_step(model: nn.Module, loss_fn: Callable[[], torch.Tensor], bc: BenchConfig):
    """forward + backward + AdamW step, the same optimizer settings for every contender."""
    fused = True if bc.device == "cuda" else None  # CPU: torch's default implementation
    opt = torch.optim.AdamW(
        model.parameters(), lr=3e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=fused
    )

    def step() -> None:
        with autocast(bc):
            loss = loss_fn()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step


def maybe_compile(fn: Callable, bc: BenchConfig) -> Callable:
    return torch.compile(fn) if bc.compile else fn


def nbytes(model: nn.Module) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())


def check_same(ours: dict, ref: dict, what: str) -> None:
    diff = {k: (ours[k], ref.get(k)) for k in ours if ours[k] != ref.get(k)}
    if diff:
        raise RuntimeError(f"{what}: configurations differ as (normlab, reference): {diff}")


# ---------------------------------------------------------------- GPT vs Hugging Face GPT-2
# One MLP activation on both sides, as (normlab model.activation, GPT2Config activation_function):
# GPT-2's own tanh GELU ("gelu_new", GPT2Config's default) and the exact GELU.
GPT_PAIRS = {"": ("gelu_tanh", "gelu_new"), " (exact gelu)": ("gelu", "gelu")}
GELU_FORMS = {"gelu": "exact", "gelu_new": "tanh", "gelu_tanh": "tanh", "gelu_pytorch_tanh": "tanh"}


def normlab_gpt(
    s: LMSize, placement: str = "pre", norm: str = "layernorm", activation: str = "gelu"
) -> GPT:
    return GPT(
        GPTConfig(
            vocab_size=s.vocab_size,
            block_size=s.block_size,
            n_layer=s.n_layer,
            n_head=s.n_head,
            n_embd=s.n_embd,
            placement=placement,
            norm=norm,
            init="gpt2",
            activation=activation,
        )
    )


def hf_gpt2(s: LMSize, activation: str = "gelu") -> nn.Module:
    """GPT2LMHeadModel shaped as normlab's Pre-LN GPT: no dropout, tied head, SDPA."""
    from transformers import GPT2Config, GPT2LMHeadModel

    cfg = GPT2Config(
        vocab_size=s.vocab_size,
        n_positions=s.block_size,
        n_embd=s.n_embd,
        n_layer=s.n_layer,
        n_head=s.n_head,
        n_inner=4 * s.n_embd,
        activation_function=activation,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        layer_norm_epsilon=1e-5,
        tie_word_embeddings=True,
        use_cache=False,
        bos_token_id=None,  # GPT-2's 50256 lies outside small vocabularies
        eos_token_id=None,
    )
    try:
        return GPT2LMHeadModel._from_config(cfg, attn_implementation="sdpa")
    except ValueError as err:
        raise RuntimeError(f"{err}; GPT-2 runs on SDPA from transformers 4.42 on") from err


def describe_gpt(m: GPT) -> dict:
    b = m.blocks[0]
    return dict(
        n_layer=len(m.blocks),
        n_head=b.attn.n_head,
        n_embd=m.tok_emb.embedding_dim,
        block_size=m.pos_emb.num_embeddings,
        vocab_size=m.tok_emb.num_embeddings,
        mlp_hidden=b.mlp.fc1.out_features,
        tied=m.lm_head.weight is m.tok_emb.weight,
        gelu=GELU_FORMS.get(b.mlp.activation, b.mlp.activation),
        attention="sdpa",
        params=m.num_params(),
    )


def describe_hf_gpt2(m: nn.Module) -> dict:
    t, cfg = m.transformer, m.config
    return dict(
        n_layer=len(t.h),
        n_head=cfg.n_head,
        n_embd=t.wte.embedding_dim,
        block_size=t.wpe.num_embeddings,
        vocab_size=t.wte.num_embeddings,
        mlp_hidden=t.h[0].mlp.c_fc.weight.shape[1],  # Conv1D weights are (in, out)
        tied=m.lm_head.weight is t.wte.weight,
        gelu=GELU_FORMS.get(cfg.activation_function, cfg.activation_function),
        attention=cfg._attn_implementation,
        params=sum(p.numel() for p in m.parameters()),
    )


@torch.no_grad()
def copy_gpt_to_hf(ours: GPT, hf: nn.Module) -> None:
    """Load normlab's weights into GPT-2 (Conv1D stores W^T; c_attn is [q; k; v])."""
    t = hf.transformer
    t.wte.weight.copy_(ours.tok_emb.weight)
    t.wpe.weight.copy_(ours.pos_emb.weight)
    t.ln_f.load_state_dict(ours.final_norm.state_dict())
    for b, h in zip(ours.blocks, t.h, strict=True):
        a = b.attn
        h.ln_1.load_state_dict(b.attn_pre.state_dict())
        h.ln_2.load_state_dict(b.mlp_pre.state_dict())
        h.attn.c_attn.weight.copy_(torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]).T)
        h.attn.c_attn.bias.copy_(torch.cat([a.q_proj.bias, a.k_proj.bias, a.v_proj.bias]))
        pairs = ((h.attn.c_proj, a.out_proj), (h.mlp.c_fc, b.mlp.fc1), (h.mlp.c_proj, b.mlp.fc2))
        for conv, linear in pairs:
            conv.weight.copy_(linear.weight.T)
            conv.bias.copy_(linear.bias)


def flops_per_token(m: GPT) -> float:
    """6N + 12 L T d (PaLM, appendix B); N leaves out the position table, a lookup."""
    c = m.cfg
    n = m.num_params() - m.pos_emb.weight.numel()
    return 6 * n + 12 * c.n_layer * c.block_size * c.n_embd


def gpt_contenders(s: LMSize, ours_act: str, hf_act: str, bc: BenchConfig):
    """normlab's GPT and GPT-2 with one activation: configurations and logits checked equal."""
    torch.manual_seed(0)
    ours, hf = normlab_gpt(s, activation=ours_act), hf_gpt2(s, hf_act)
    check_same(describe_gpt(ours), describe_hf_gpt2(hf), "GPT vs GPT2LMHeadModel")
    copy_gpt_to_hf(ours, hf)
    probe = torch.randint(0, s.vocab_size, (1, min(64, s.block_size)))
    with torch.no_grad():  # no dropout anywhere, so train mode computes the same function
        gap = (ours(probe)[0] - hf(input_ids=probe).logits).abs().max().item()
    if gap > 1e-4:
        raise RuntimeError(f"GPT and GPT2LMHeadModel disagree on the same weights by {gap:.2e}")
    return ours.to(bc.device), hf.to(bc.device)


def bench_gpt(bc: BenchConfig) -> list[Result]:
    """Training steps of normlab's GPT and GPT-2, once per activation pair, all alternating."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return [skip("gpt", "hf_gpt2", "transformers missing: pip install -e '.[bench]'")]
    s = GPT_SIZES[bc.size]
    x = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), device=bc.device)
    y = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), device=bc.device)
    models, steps, mem = {}, {}, {}
    for suffix, (ours_act, hf_act) in GPT_PAIRS.items():
        ours, hf = gpt_contenders(s, ours_act, hf_act, bc)

        def hf_loss(x: torch.Tensor, y: torch.Tensor, hf: nn.Module = hf) -> torch.Tensor:
            # The loss normlab's forward computes: mean cross-entropy over all (B, T) positions.
            return F.cross_entropy(hf(input_ids=x).logits.flatten(0, 1), y.flatten())

        for name, model, loss in (
            ("normlab", ours, lambda x, y, ours=ours: ours(x, y)[1]),
            ("hf_gpt2", hf, hf_loss),
        ):
            loss = maybe_compile(loss, bc)
            models[name + suffix] = model
            steps[name + suffix] = train_step(model, lambda loss=loss: loss(x, y), bc)
            mem[name + suffix] = warm(steps[name + suffix], bc, nbytes(model))
    tokens, fpt = s.batch_size * s.block_size, flops_per_token(models["normlab"])
    size = f"L{s.n_layer} H{s.n_head} d{s.n_embd} T{s.block_size} V{s.vocab_size} B{s.batch_size}"
    times, out = interleaved(steps, bc), []
    for suffix, (ours_act, hf_act) in GPT_PAIRS.items():
        pair = {k: times[k] for k in (f"normlab{suffix}", f"hf_gpt2{suffix}")}
        note = f"{size}, {bc.precision}, activation {ours_act} / {hf_act}"
        out += speed_results("gpt", pair, f"hf_gpt2{suffix}", tokens, "tok/s", note)
    for r in list(out):
        out.append(Result("gpt", f"{r.name} model", r.value * fpt / 1e12, "TFLOP/s"))
        if bc.device == "cuda":
            mfu = r.value * fpt / PEAK_BF16_FLOPS
            out.append(Result("gpt", f"{r.name} MFU", mfu, "", note="of 989 TFLOP/s"))
            out.append(Result("gpt", f"{r.name} peak memory", mem[r.name], "GiB"))
    params = float(models["normlab"].num_params())
    out.append(Result("gpt", "params (each)", params, "", note="identical: checked"))
    return out


# ---------------------------------------------------------------- ViT vs timm
def bench_vit(bc: BenchConfig) -> list[Result]:
    try:  # timm imports torchvision at import time
        from timm.models.vision_transformer import VisionTransformer
    except Exception as err:
        return [skip("vit", "timm", f"timm not importable ({one_line(err)})")]
    fields, batch = VIT_SIZES[bc.size]
    torch.manual_seed(0)
    ours = ViT(ViTConfig(**fields, num_classes=10, norm_eps=1e-6))  # timm's LayerNorm eps
    ref = VisionTransformer(
        img_size=fields["image_size"],
        patch_size=fields["patch_size"],
        in_chans=fields["in_chans"],
        num_classes=10,
        global_pool="token",
        embed_dim=fields["n_embd"],
        depth=fields["n_layer"],
        num_heads=fields["n_head"],
        mlp_ratio=4.0,
        qkv_bias=True,
    )  # dropouts default to 0; final norm before the cls pool, as normlab's Pre-LN ViT

    def describe(m: nn.Module, pos: torch.Tensor) -> dict:
        b = m.blocks[0]
        n = sum(p.numel() for p in m.parameters())
        return dict(
            layers=len(m.blocks), pos=tuple(pos.shape), mlp=b.mlp.fc1.out_features, params=n
        )

    check_same(describe(ours, ours.pos_emb), describe(ref, ref.pos_embed), "ViT vs timm")
    ours.to(bc.device), ref.to(bc.device)
    shape = (batch, fields["in_chans"], fields["image_size"], fields["image_size"])
    images = torch.randn(shape, device=bc.device)
    labels = torch.randint(0, 10, (batch,), device=bc.device)
    ours_loss = maybe_compile(lambda: ours(images, labels)[1], bc)
    ref_loss = maybe_compile(lambda: F.cross_entropy(ref(images), labels), bc)
    steps = {"normlab": train_step(ours, ours_loss, bc), "timm": train_step(ref, ref_loss, bc)}
    for step in steps.values():
        warm(step, bc)
    f = fields
    note = f"{f['image_size']}px/{f['patch_size']} L{f['n_layer']} d{f['n_embd']} B{batch}"
    return speed_results("vit", interleaved(steps, bc), "timm", batch, "img/s", note)


# ---------------------------------------------------------------- norms and placements
class NaiveRMSNorm(nn.Module):
    """RMSNorm in elementary ops: the unfused reference for F.rms_norm."""

    def __init__(self, dim: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class RMSNormFunction(torch.autograd.Function):
    """y = x r w with r = 1/sqrt(mean(x^2) + eps), and the closed-form backward
    dx = r (g w - xhat mean(g w xhat)): what an unfused RMSNorm backward can cost."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        r = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        xhat = x * r
        ctx.save_for_backward(xhat, r, weight)
        return xhat * weight

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        xhat, r, weight = ctx.saved_tensors
        gw = (grad * xhat).flatten(0, -2).sum(0)
        gxhat = grad * weight
        return r * (gxhat - xhat * (gxhat * xhat).mean(-1, keepdim=True)), gw, None


class ClosedFormRMSNorm(NaiveRMSNorm):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return RMSNormFunction.apply(x, self.weight, self.eps)


# Reference norms next to the registry's: unfused elementary ops, and a closed-form backward.
EXTRA_NORMS = {"naive_rmsnorm": NaiveRMSNorm, "closed_form_rmsnorm": ClosedFormRMSNorm}


def bench_norms(bc: BenchConfig) -> list[Result]:
    """Forward + backward of every registered norm and the reference RMSNorms on (B, T, C)."""
    out = []
    for shape in NORM_SHAPES[bc.size]:
        x, grad = torch.randn(shape, device=bc.device), torch.randn(shape, device=bc.device)
        fns, skipped = {}, []
        for name in [*NORMS, *EXTRA_NORMS]:
            try:
                make = EXTRA_NORMS.get(name) or (lambda dim, name=name: build_norm(name, dim))
                norm = make(shape[-1]).to(bc.device)

                def fn(norm: nn.Module = norm, x: torch.Tensor = x, g: torch.Tensor = grad) -> None:
                    norm(x.detach().requires_grad_()).backward(g)

                warm(fn, bc)
                fns[f"{name} {shape}"] = fn
            except Exception as err:
                skipped.append(skip("norms", f"{name} {shape}", one_line(err)))
        note = "forward+backward, vs layernorm"
        out += speed_results("norms", interleaved(fns, bc), f"layernorm {shape}", 0, "ms", note)
        out += skipped
    return out


def bench_placements(bc: BenchConfig) -> list[Result]:
    """Whole-model training step of every registered placement x norm the GPT accepts."""
    s = GRID_SIZES[bc.size]
    x = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), device=bc.device)
    y = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), device=bc.device)
    combos, refused = [], {}
    for norm in NORMS:
        for placement in PLACEMENTS:
            try:
                normlab_gpt(replace(s, n_layer=1), placement, norm)
                combos.append((placement, norm))
            except ValueError as err:
                refused.setdefault((norm, one_line(err)), []).append(placement)

    def build(placement: str, norm: str) -> Callable[[], None]:
        torch.manual_seed(0)
        model = normlab_gpt(s, placement, norm).to(bc.device)
        step = train_step(model, lambda: model(x, y)[1], bc)
        warm(step, bc)
        return step

    if bc.device == "cuda":  # one model at a time (memory); GPU timings need no alternation
        times = {}
        for p, n in combos:
            times.update(interleaved({f"{p}/{n}": build(p, n)}, bc))
            torch.cuda.empty_cache()
    else:
        times = interleaved({f"{p}/{n}": build(p, n) for p, n in combos}, bc)
    note = f"L{s.n_layer} d{s.n_embd} T{s.block_size} B{s.batch_size}, vs pre/layernorm"
    out = speed_results(
        "placements", times, "pre/layernorm", s.batch_size * s.block_size, "tok/s", note
    )
    for (norm, why), places in refused.items():
        where = "*" if len(places) == len(PLACEMENTS) else ",".join(places)
        out.append(skip("placements", f"{where}/{norm}", f"refused: {why}"))
    return out


# ---------------------------------------------------------------- Lightning overhead
def compose_train_cfg(overrides: list[str]):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        return compose(config_name="config", overrides=overrides)


def raw_loop(cfg) -> None:
    """train.run's work without Lightning: the same data, model, AdamW groups, LR schedule,
    device and precision, for trainer.max_steps steps."""
    from models.run import (
        build_data,
        build_model,
        build_optim,
        compile_mode,
        model_spec,
        set_threads,
    )
    from models.tasks import OPTIMIZERS, lr_multiplier, param_groups

    set_threads(cfg.num_threads)
    torch.use_deterministic_algorithms(bool(cfg.trainer.get("deterministic")))  # as the Trainer
    torch.manual_seed(cfg.seed)
    spec = model_spec(cfg)
    dm = build_data(cfg, spec)
    device = "cuda" if cfg.trainer.accelerator == "gpu" else "cpu"
    model = build_model(cfg, spec, dm).to(device)
    if compile_mode(cfg.compile):
        model.compile(mode=compile_mode(cfg.compile))
    optim, steps = build_optim(cfg), cfg.trainer.max_steps
    opt = OPTIMIZERS[optim.name](param_groups(model, optim.weight_decay), optim)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda i: lr_multiplier(i, optim, steps))
    bf16 = "bf16" in str(cfg.trainer.precision)
    batches = iter(dm.train_dataloader())
    for _ in range(steps):
        inputs, targets = (t.to(device) for t in next(batches))
        with torch.autocast(device, torch.bfloat16, enabled=bf16):
            _, loss = model(inputs, targets)
        loss.backward()
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        float(loss.detach())  # the task logs the loss: one sync per step either way


def logged_throughput(run_dir: Path, from_step: int) -> float:
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    key = "throughput/tokens_per_s"
    return statistics.median(
        float(r[key]) for r in rows if r.get(key) and int(r["step"]) >= from_step
    )


def bench_lightning(bc: BenchConfig) -> list[Result]:
    """Steady-state step of train.run vs a raw loop, both as marginal time per step: a long run
    minus a short one, so setup cancels and everything Lightning adds per step stays. The run's
    own throughput metric (training_step through the optimizer step, wall clock) is listed too."""
    if not (ROOT / "train.py").exists():
        return [skip("lightning", "train.run", "train.py not found")]
    import train

    short, long = (3, 10) if bc.quick else (5, 25)  # both end before the first validation (100)
    # Short runs: a warmup longer than the run is refused; the LR never changes the step's cost.
    base = ["logger=csv", "trainer.enable_checkpointing=false", "optim.warmup_steps=1"]
    base.append(f"num_threads={torch.get_num_threads()}")  # else train.run takes every core
    s = GPT_SIZES[bc.size]  # the gpt section's model, on the default job's text
    base += [f"model.{k}={getattr(s, k)}" for k in ("n_layer", "n_head", "n_embd", "block_size")]
    base += [f"data.batch_size={s.batch_size}", "model.init=gpt2"]
    base += ["trainer.log_every_n_steps=1"] if bc.quick else []
    base += ["trainer=gpu"] if bc.device == "cuda" else []
    base += ["trainer.precision=bf16-mixed"] if bc.precision == "bf16" else []
    base += ["compile=true"] if bc.compile else []
    clock = CLOCKS[bc.clock]
    deterministic, threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    secs: dict[tuple[str, int], list[float]] = {}
    logged = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for rep in range(1 if bc.quick else 2):
                for steps in (short, long):
                    run_dir = Path(tmp) / f"{rep}-{steps}"
                    over = [*base, f"trainer.max_steps={steps}", f"run_dir={run_dir}"]
                    cfg = compose_train_cfg(over)
                    for name, fn in (("train.run", train.run), ("raw loop", raw_loop)):
                        start = clock()
                        fn(cfg)
                        secs.setdefault((name, steps), []).append(clock() - start)
                        torch.use_deterministic_algorithms(deterministic)  # both turn it on
                logged.append(logged_throughput(run_dir, from_step=short))
    finally:
        torch.use_deterministic_algorithms(deterministic)
        torch.set_num_threads(threads)
    tokens = cfg.data.batch_size * cfg.model.block_size
    size = f"L{s.n_layer} H{s.n_head} d{s.n_embd} T{s.block_size} B{s.batch_size}"
    note = f"{size}, {cfg.trainer.precision}, marginal per step over {short}-{long}"
    out, tps = [], {}
    for name in ("raw loop", "train.run"):
        extra = statistics.median(secs[name, long]) - statistics.median(secs[name, short])
        if extra <= 0:  # a tiny quick run: setup noise can exceed the extra steps
            out.append(skip("lightning", name, "run-length difference lost in noise"))
        else:
            tps[name] = tokens * (long - short) / extra
    tps["train.run logged"] = statistics.median(logged)
    raw = tps.get("raw loop")
    for name, value in tps.items():
        ratio = raw and value / raw
        if name == "train.run logged":  # a wall-clock rate: no ratio to CPU-time rates
            note = "throughput/tokens_per_s: training_step to optimizer step, wall clock"
            ratio = ratio if bc.clock == "wall" else None
        out.append(Result("lightning", name, value, "tok/s", ratio, None, note))
    return out


# ---------------------------------------------------------------- probes and memory
def bench_probes(bc: BenchConfig) -> list[Result]:
    """scripts/bench_probes.py's plain vs probed step, read from what it prints."""
    if not (ROOT / "scripts" / "bench_probes.py").exists():
        return [skip("probes", "bench_probes", "scripts/bench_probes.py not found")]
    from scripts import bench_probes

    args = ["--device", bc.device]
    if bc.quick:
        args += ["--n-layer", "1", "--n-embd", "32", "--block-size", "32", "--batch-size", "4"]
        args += ["--steps-per-block", "2", "--blocks", "2"]
    buf, argv = io.StringIO(), sys.argv
    with contextlib.redirect_stdout(buf):
        if inspect.signature(bench_probes.main).parameters:
            bench_probes.main(args)
        else:  # it parses sys.argv
            sys.argv = ["bench_probes", *args]
            try:
                bench_probes.main()
            finally:
                sys.argv = argv
    text = buf.getvalue()
    ms = dict(re.findall(r"^(plain|probed)\s+([\d.]+) ms/step", text, re.M))
    if set(ms) != {"plain", "probed"}:
        raise RuntimeError(f"bench_probes printed no plain/probed ms/step lines: {text[-200:]!r}")
    plain, probed = float(ms["plain"]), float(ms["probed"])
    return [
        Result("probes", "plain step", plain, "ms", 1.0, note="bench_probes defaults"),
        Result(
            "probes",
            "probed step",
            probed,
            "ms",
            plain / probed,
            note="probes at default intervals",
        ),
    ]


def peak_rss_kib(pid: int) -> int:
    """VmHWM, the peak resident set of the process's current image (it starts at exec)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise OSError(f"no VmHWM for pid {pid}")


def peak_rss_of(args: list[str], what: str) -> float:
    """Run `args` from the repository root and return its peak RSS in MiB. The child is polled:
    its rusage would start from this process's peak (Linux copies the parent's high-water mark
    at exec)."""
    with tempfile.TemporaryFile("w+") as err:
        env = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
        proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=err)
        peak = 0
        while proc.poll() is None:
            with contextlib.suppress(OSError, ValueError):  # between exec and exit
                peak = max(peak, peak_rss_kib(proc.pid))
            time.sleep(0.05)
        err.seek(0)
        last = err.read().strip().splitlines()[-1:]
    if proc.returncode != 0 or not peak:
        raise RuntimeError(f"{what} exited with {proc.returncode}: {last}")
    return peak / 1024


def gpt_steps(size: str, steps: int = 2) -> None:
    """`steps` fp32 training steps of normlab's GPT at GPT_SIZES[size] on the CPU (AdamW's
    state exists from the first step on): what the memory section measures in a subprocess."""
    s = GPT_SIZES[size]
    model = normlab_gpt(s)
    x = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size))
    step = train_step(model, lambda: model(x, x)[1], BenchConfig())
    for _ in range(steps):
        step()


def bench_memory(bc: BenchConfig) -> list[Result]:
    """Peak RSS of this process so far, of a short default train.py job, and of CPU training
    steps of the GPU configuration (GPT-2 small), each in a subprocess."""
    mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
    out = [Result("memory", "bench process peak RSS", mib, "MiB", note="the sections run before")]
    if not (ROOT / "train.py").exists():
        return [*out, skip("memory", "train.py peak RSS", "train.py not found")]
    steps = 3 if bc.quick else 20
    with tempfile.TemporaryDirectory() as tmp:
        args = [sys.executable, "train.py", f"trainer.max_steps={steps}", f"hydra.run.dir={tmp}"]
        args.append("optim.warmup_steps=1")  # a warmup longer than the run is refused
        args += ["logger=csv", "num_threads=1"] if bc.quick else []  # seconds, not half a minute
        peak = peak_rss_of(args, "train.py")
    job = "default job, csv logger" if bc.quick else "default job"
    note = f"{job}, {steps} steps (wandb's service process not counted)"
    out.append(Result("memory", "train.py peak RSS", peak, "MiB", note=note))
    size = "quick" if bc.quick else "cuda"
    code = f"from scripts.bench import gpt_steps; gpt_steps({size!r})"
    peak = peak_rss_of([sys.executable, "-c", code], "gpt_steps")
    s = GPT_SIZES[size]
    note = f"GPU config L{s.n_layer} d{s.n_embd} T{s.block_size} B{s.batch_size}, CPU fp32, 2 steps"
    return [*out, Result("memory", "GPT steps peak RSS", peak, "MiB", note=note)]


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
def skip(section: str, name: str, why: str) -> Result:
    return Result(section, name, None, note=why, status="skipped")


def one_line(err: BaseException) -> str:
    lines = str(err).strip().splitlines()
    return f"{type(err).__name__}: {lines[0] if lines else ''}"


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
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
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
    results, seconds, saved_threads = [], {}, torch.get_num_threads()
    torch.set_num_threads(threads or saved_threads)
    try:
        for name in (n for n in SECTIONS if n in args.only):
            start = time.perf_counter()
            try:
                results += SECTIONS[name](bc)
            except Exception as err:
                results.append(Result(name, name, None, note=one_line(err), status="error"))
            seconds[name] = round(time.perf_counter() - start, 1)
        meta = {**metadata(bc), "section_s": seconds}
    finally:
        torch.set_num_threads(saved_threads)
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


if __name__ == "__main__":
    sys.exit(0 if main()["ok"] else 1)
