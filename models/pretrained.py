"""Hugging Face GPT-2 checkpoints as normlab GPTs: ``GPT.from_hf(path_or_id)``.

GPT-2 is a Pre-LN GPT: LayerNorm (eps 1e-5) before attention and MLP, a final LayerNorm, learned
positions, biases everywhere, the tanh GELU and a head tied to the token embedding, which is
normlab's ``placement=pre norm=layernorm activation=gelu_tanh bias=true tie_weights=true``. Its
Conv1D layers store weights as (in, out), the transpose of nn.Linear's, and attention's q, k and
v as one (d, 3d) matrix.

Read with the standard library and torch alone: config.json, and model.safetensors (its
8-byte header length, JSON header and raw little-endian tensors) or pytorch_model.bin (loaded
with ``weights_only=True``). A hub id is looked up in the local Hugging Face cache
($HF_HUB_CACHE, $HF_HOME/hub or ~/.cache/huggingface/hub), never downloaded here.
"""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import torch

SAFETENSORS_DTYPES = {
    "F32": torch.float32,
    "F16": torch.float16,
    "BF16": torch.bfloat16,
    "F64": torch.float64,
    "I64": torch.int64,
    "U8": torch.uint8,
    "BOOL": torch.bool,
}


def hub_cache() -> Path:
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = os.environ.get("HF_HOME") or Path.home() / ".cache" / "huggingface"
    return Path(home) / "hub"


def checkpoint_dir(path_or_id: str | os.PathLike) -> Path:
    """A local checkpoint directory, or the cached snapshot of a hub id; one line otherwise."""
    path = Path(path_or_id).expanduser()
    if path.is_dir():
        return path
    repo = hub_cache() / ("models--" + str(path_or_id).replace("/", "--"))
    snapshots = sorted((repo / "snapshots").glob("*"), key=lambda p: p.stat().st_mtime)
    if snapshots:
        return snapshots[-1]
    raise FileNotFoundError(
        f"{path_or_id} is neither a local directory nor in the Hugging Face cache "
        f"({hub_cache()}); download it once online (huggingface-cli download {path_or_id}) "
        "or pass the directory save_pretrained wrote"
    )


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        data = bytearray(f.read())
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        dtype, shape = SAFETENSORS_DTYPES[spec["dtype"]], spec["shape"]
        count = 1
        for n in shape:
            count *= n
        start = spec["data_offsets"][0]
        flat = torch.frombuffer(data, dtype=dtype, count=count, offset=start) if count else None
        tensors[name] = torch.empty(shape, dtype=dtype) if flat is None else flat.reshape(shape)
    return tensors


def read_checkpoint(directory: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config.json, tensors) of a Hugging Face checkpoint directory."""
    config = json.loads((directory / "config.json").read_text())
    if (directory / "model.safetensors").is_file():
        return config, read_safetensors(directory / "model.safetensors")
    if (directory / "pytorch_model.bin").is_file():
        state = torch.load(directory / "pytorch_model.bin", map_location="cpu", weights_only=True)
        return config, state
    raise FileNotFoundError(f"{directory} holds no model.safetensors or pytorch_model.bin")


def gpt2_fields(config: dict) -> dict:
    """GPTConfig fields of a GPT-2 config.json (refusing what normlab's GPT cannot mirror)."""
    if config.get("model_type", "gpt2") != "gpt2":
        raise ValueError(f"model_type {config.get('model_type')!r}: GPT.from_hf reads GPT-2 only")
    activation = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}
    act = config.get("activation_function", "gelu_new")
    if act not in activation:
        raise ValueError(f"activation_function {act!r} has no normlab counterpart")
    n_embd = config["n_embd"]
    inner = config.get("n_inner") or 4 * n_embd
    if inner % n_embd:
        raise ValueError(f"n_inner={inner} is not a multiple of n_embd={n_embd}")
    return dict(
        vocab_size=config["vocab_size"],
        block_size=config["n_positions"],
        n_layer=config["n_layer"],
        n_head=config["n_head"],
        n_embd=n_embd,
        mlp_ratio=inner // n_embd,
        activation=activation[act],
        placement="pre",
        norm={"name": "layernorm", "eps": config.get("layer_norm_epsilon", 1e-5)},
        bias=True,
        tie_weights=config.get("tie_word_embeddings", True),
        qk_norm=False,
        dropout=0.0,
    )


@torch.no_grad()
def load_gpt2_weights(model: torch.nn.Module, tensors: dict[str, torch.Tensor]) -> None:
    """Copy GPT-2's tensors (with or without the ``transformer.`` prefix) into ``model``."""
    t = {k.removeprefix("transformer."): v.float() for k, v in tensors.items()}
    model.tok_emb.weight.copy_(t["wte.weight"])
    model.pos_emb.weight.copy_(t["wpe.weight"])
    d = model.cfg.n_embd
    for i, block in enumerate(model.blocks):
        p = f"h.{i}."
        block.attn_pre.weight.copy_(t[p + "ln_1.weight"])
        block.attn_pre.bias.copy_(t[p + "ln_1.bias"])
        qkv_w, qkv_b = t[p + "attn.c_attn.weight"].T, t[p + "attn.c_attn.bias"]  # (3d, d), (3d,)
        for j, proj in enumerate((block.attn.q_proj, block.attn.k_proj, block.attn.v_proj)):
            proj.weight.copy_(qkv_w[j * d : (j + 1) * d])
            proj.bias.copy_(qkv_b[j * d : (j + 1) * d])
        block.attn.out_proj.weight.copy_(t[p + "attn.c_proj.weight"].T)
        block.attn.out_proj.bias.copy_(t[p + "attn.c_proj.bias"])
        block.mlp_pre.weight.copy_(t[p + "ln_2.weight"])
        block.mlp_pre.bias.copy_(t[p + "ln_2.bias"])
        block.mlp.fc1.weight.copy_(t[p + "mlp.c_fc.weight"].T)
        block.mlp.fc1.bias.copy_(t[p + "mlp.c_fc.bias"])
        block.mlp.fc2.weight.copy_(t[p + "mlp.c_proj.weight"].T)
        block.mlp.fc2.bias.copy_(t[p + "mlp.c_proj.bias"])
    model.final_norm.weight.copy_(t["ln_f.weight"])
    model.final_norm.bias.copy_(t["ln_f.bias"])
    if not model.cfg.tie_weights:
        model.lm_head.weight.copy_(tensors.get("lm_head.weight", t["wte.weight"]))
