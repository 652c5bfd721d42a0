"""The model sections: normlab's GPT against Hugging Face's GPT-2 and its ViT against timm's,
each at an identical configuration (checked field by field, and for GPT on logits from copied
weights); forward + backward of every registered norm next to two reference RMSNorms (unfused
elementary ops, and a closed-form backward); and the training step of every placement x norm the
GPT accepts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import torch
import torch.nn.functional as F
from torch import nn

from models.catalog import NORMS
from models.gpt import GPT, GPTConfig
from models.norms import build_norm
from models.placement import PLACEMENTS
from models.vit import ViT, ViTConfig
from scripts.bench.core import (
    GPT_SIZES,
    GRID_SIZES,
    NORM_SHAPES,
    VIT_SIZES,
    BenchConfig,
    LMSize,
    Result,
    check_same,
    interleaved,
    maybe_compile,
    nbytes,
    one_line,
    pair_result,
    skip,
    speed_results,
    train_step,
    warm,
)
from scripts.bench.plain_gpt import describe, describe_plain, plain_like

PEAK_BF16_FLOPS = 989e12  # H100/H200 SXM dense bf16: the MFU denominator


# ---------------------------------------------------------------- GPT vs Hugging Face GPT-2
# One MLP activation on both sides, as (normlab model.activation, GPT2Config activation_function):
# GPT-2's own tanh GELU ("gelu_new", GPT2Config's default) and the exact GELU.
GPT_PAIRS = {"": ("gelu_tanh", "gelu_new"), " (exact gelu)": ("gelu", "gelu")}
GELU_FORMS = {"gelu": "exact", "gelu_new": "tanh", "gelu_tanh": "tanh", "gelu_pytorch_tanh": "tanh"}


def normlab_gpt(
    s: LMSize,
    placement: str = "pre",
    norm: str = "layernorm",
    activation: str = "gelu",
    qk_norm: bool = False,
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
            qk_norm=qk_norm,
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
    gelu = GELU_FORMS.get(b.mlp.activation, b.mlp.activation)
    mlp = b.mlp.fc1.out_features
    return describe(m, m.blocks, b.attn.n_head, m.tok_emb, m.pos_emb, m.lm_head, mlp, gelu, "sdpa")


def describe_hf_gpt2(m: nn.Module) -> dict:
    t, cfg = m.transformer, m.config
    gelu = GELU_FORMS.get(cfg.activation_function, cfg.activation_function)
    mlp = t.h[0].mlp.c_fc.weight.shape[1]  # Conv1D weights are (in, out)
    return describe(
        m, t.h, cfg.n_head, t.wte, t.wpe, m.lm_head, mlp, gelu, cfg._attn_implementation
    )


@torch.no_grad()
def copy_gpt_to_hf(ours: GPT, hf: nn.Module) -> None:
    """Load normlab's weights into GPT-2 by way of the plain GPT, whose layout is GPT-2's
    (q, k, v stacked in one projection) but with Linears where GPT-2 has Conv1D (W^T)."""
    plain, t = plain_like(ours), hf.transformer
    same = [(t.wte, plain.wte), (t.wpe, plain.wpe), (t.ln_f, plain.ln_f)]
    transposed = []
    for p, h in zip(plain.blocks, t.h, strict=True):
        same += [(h.ln_1, p.ln_1), (h.ln_2, p.ln_2)]
        transposed += [(h.attn.c_attn, p.qkv), (h.attn.c_proj, p.proj)]
        transposed += [(h.mlp.c_fc, p.fc), (h.mlp.c_proj, p.out)]
    for dst, src in same:
        dst.load_state_dict(src.state_dict())
    for conv, linear in transposed:
        conv.weight.copy_(linear.weight.T)
        conv.bias.copy_(linear.bias)


def flops_per_token(m: GPT) -> float:
    return m.flops_per_unit()  # 6N + 12 L T d (models/gpt.py)


def gpt_contenders(s: LMSize, ours_act: str, hf_act: str, bc: BenchConfig):
    """normlab's GPT, a plain GPT and GPT-2 with one activation, normlab's weights in all three:
    configurations checked equal field by field, logits (GPT-2) and loss (plain) on a probe."""
    torch.manual_seed(0)
    ours, hf = normlab_gpt(s, activation=ours_act), hf_gpt2(s, hf_act)
    plain = plain_like(ours)
    check_same(describe_gpt(ours), describe_hf_gpt2(hf), "GPT vs GPT2LMHeadModel")
    check_same(describe_gpt(ours), describe_plain(plain), "GPT vs plain GPT")
    copy_gpt_to_hf(ours, hf)
    probe = torch.randint(0, s.vocab_size, (1, min(64, s.block_size)))
    with torch.no_grad():  # no dropout anywhere, so train mode computes the same function
        logits, loss = ours(probe, probe)
        gap = (logits - hf(input_ids=probe).logits).abs().max().item()
        gap = max(gap, (loss - plain(probe, probe)).abs().item())
    if gap > 1e-4:
        raise RuntimeError(f"the GPTs disagree on the same weights by {gap:.2e}")
    return ours.to(bc.device), plain.to(bc.device), hf.to(bc.device)


def bench_gpt(bc: BenchConfig) -> list[Result]:
    """Training steps of normlab's GPT, a plain GPT and GPT-2, once per activation pair, all
    alternating, in each of the run's modes (eager, compiled): ratios to GPT-2 with the same
    activation, and normlab's speed over each other contender round by round."""
    try:
        import transformers  # noqa: F401
    except ImportError:
        return [skip("gpt", "hf_gpt2", "transformers missing: pip install -e '.[bench]'")]
    out = []
    for compiled in bc.modes:
        out += gpt_mode(replace(bc, compile=compiled))
    return out


def gpt_mode(bc: BenchConfig) -> list[Result]:
    """bench_gpt in one mode: eager, or every contender's forward and loss compiled."""
    s = GPT_SIZES[bc.size]
    x = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), device=bc.device)
    y = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), device=bc.device)
    mode = " compiled" if bc.compile else ""
    models, steps, mem = {}, {}, {}
    for suffix, (ours_act, hf_act) in GPT_PAIRS.items():
        ours, plain, hf = gpt_contenders(s, ours_act, hf_act, bc)

        def hf_loss(x: torch.Tensor, y: torch.Tensor, hf: nn.Module = hf) -> torch.Tensor:
            # The loss normlab's forward computes: mean cross-entropy over all (B, T) positions.
            return F.cross_entropy(hf(input_ids=x).logits.flatten(0, 1), y.flatten())

        for name, model, loss in (
            ("normlab", ours, lambda x, y, ours=ours: ours(x, y)[1]),
            ("plain_gpt", plain, plain),
            ("hf_gpt2", hf, hf_loss),
        ):
            key = f"{name}{suffix}{mode}"
            loss = maybe_compile(loss, bc)
            models[key] = model
            steps[key] = train_step(model, lambda loss=loss: loss(x, y), bc)
            mem[key] = warm(steps[key], bc, nbytes(model))  # compiles here, untimed
    tokens, fpt = s.batch_size * s.block_size, flops_per_token(models[f"normlab{mode}"])
    size = f"L{s.n_layer} H{s.n_head} d{s.n_embd} T{s.block_size} V{s.vocab_size} B{s.batch_size}"
    times, out = interleaved(steps, bc), []
    for suffix, (ours_act, hf_act) in GPT_PAIRS.items():
        ours, plain, hf = (f"{m}{suffix}{mode}" for m in ("normlab", "plain_gpt", "hf_gpt2"))
        pair = {k: times[k] for k in (ours, plain, hf)}
        note = f"{size}, {bc.precision}{mode or ' eager'}, activation {ours_act} / {hf_act}"
        out += speed_results("gpt", pair, hf, tokens, "tok/s", note)
        out += [pair_result("gpt", times, ours, plain), pair_result("gpt", times, ours, hf)]
    for r in [r for r in out if r.unit == "tok/s"]:
        out.append(Result("gpt", f"{r.name} model", r.value * fpt / 1e12, "TFLOP/s"))
        if bc.device == "cuda":
            mfu = r.value * fpt / PEAK_BF16_FLOPS
            out.append(Result("gpt", f"{r.name} MFU", mfu, "", note="of 989 TFLOP/s"))
            out.append(Result("gpt", f"{r.name} peak memory", mem[r.name], "GiB"))
    params = float(models[f"normlab{mode}"].num_params())
    out.append(Result("gpt", "params (each)", params, "", note="identical: checked"))
    return out


# The variants a stability study swaps, each as (placement, norm, qk_norm), at the GPT's size.
VARIANTS = {
    "pre/layernorm": ("pre", "layernorm", False),
    "pre/rmsnorm": ("pre", "rmsnorm", False),
    "deepnorm/layernorm": ("deepnorm", "layernorm", False),
    "pre/layernorm qk_norm": ("pre", "layernorm", True),
}


def bench_variants(bc: BenchConfig) -> list[Result]:
    """Training steps of normlab's GPT at the gpt section's size for each of VARIANTS: tok/s
    against Pre-LN LayerNorm, model TFLOP/s, and on CUDA MFU and peak memory."""
    s = GPT_SIZES[bc.size]
    x = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), device=bc.device)
    y = torch.randint(0, s.vocab_size, (s.batch_size, s.block_size), device=bc.device)
    steps, mem, fpt = {}, {}, {}
    for name, (placement, norm, qk) in VARIANTS.items():
        torch.manual_seed(0)
        model = normlab_gpt(s, placement, norm, qk_norm=qk).to(bc.device)
        loss = maybe_compile(lambda model=model: model(x, y)[1], bc)
        steps[name] = train_step(model, loss, bc)
        mem[name], fpt[name] = warm(steps[name], bc, nbytes(model)), flops_per_token(model)
    mode = "compiled" if bc.compile else "eager"
    note = f"L{s.n_layer} d{s.n_embd} T{s.block_size} B{s.batch_size}, {bc.precision} {mode}"
    out = speed_results(
        "variants",
        interleaved(steps, bc),
        "pre/layernorm",
        s.batch_size * s.block_size,
        "tok/s",
        note,
    )
    for r in [r for r in out if r.unit == "tok/s"]:
        out.append(Result("variants", f"{r.name} model", r.value * fpt[r.name] / 1e12, "TFLOP/s"))
        if bc.device == "cuda":
            mfu = r.value * fpt[r.name] / PEAK_BF16_FLOPS
            out.append(Result("variants", f"{r.name} MFU", mfu, "", note="of 989 TFLOP/s"))
            out.append(Result("variants", f"{r.name} peak memory", mem[r.name], "GiB"))
    return out


# ---------------------------------------------------------------- ViT vs timm
def bench_vit(bc: BenchConfig) -> list[Result]:
    try:  # timm imports torchvision at import time
        from timm.models.vision_transformer import VisionTransformer
    except Exception as err:
        return [skip("vit", "timm", f"timm not importable ({one_line(err)})")]
    fields, batch = VIT_SIZES[bc.size]
    torch.manual_seed(0)
    ours = ViT(ViTConfig(**fields, num_classes=10, norm={"name": "layernorm", "eps": 1e-6}))
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
