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

import dataclasses
import json
import math
import os
import struct
from pathlib import Path
from typing import Any

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
        f"({hub_cache()}); download it once online (.venv/bin/hf download {path_or_id}) "
        "or pass the directory save_pretrained wrote"
    )


class ArchitectureMismatch(ValueError):
    """A checkpoint's architecture is not the one a run asked for; ``fields``: each differing
    config field (dotted, e.g. ``placement.name``) -> the checkpoint's value."""

    def __init__(self, fields: dict[str, Any]) -> None:
        self.fields = fields
        super().__init__(", ".join(f"{k}={v}" for k, v in fields.items()))


def differing_fields(loaded: Any, wanted: Any, prefix: str = "") -> dict[str, Any]:
    """The fields of two config dataclasses that differ, nested ones by their dotted name, with
    ``loaded``'s values."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(loaded):
        a, b = getattr(loaded, f.name), getattr(wanted, f.name, None)
        if dataclasses.is_dataclass(a) and dataclasses.is_dataclass(b):
            out.update(differing_fields(a, b, f"{prefix}{f.name}."))
        elif a != b:
            out[f"{prefix}{f.name}"] = a
    return out


def check_architecture(loaded: Any, wanted: Any) -> None:
    """Weights load only into the architecture they were trained as, and a run's record says
    what runs: every field of ``wanted`` (the run's model config) must equal the checkpoint's
    (``loaded``), vocab_size included (the tokenizer's ids must be the checkpoint's)."""
    if differ := differing_fields(loaded, wanted):
        raise ArchitectureMismatch(differ)


class WeightError(ValueError):
    """A checkpoint tensor that is missing or does not fit; the message names file and tensor."""


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """The tensors of a .safetensors file (header: JSON of name -> dtype, shape, offsets);
    a cut or malformed file is one WeightError naming it and the tensor."""
    try:
        with open(path, "rb") as f:
            (length,) = struct.unpack("<Q", f.read(8))
            header = json.loads(f.read(length))
            data = bytearray(f.read())
    except (OSError, struct.error, ValueError) as err:
        why = "cut short" if isinstance(err, struct.error) else type(err).__name__
        raise WeightError(f"{path} is not a readable safetensors file ({why})") from err
    tensors = {}
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        try:
            dtype, shape = SAFETENSORS_DTYPES[spec["dtype"]], [int(n) for n in spec["shape"]]
            start, end = (int(x) for x in spec["data_offsets"])
        except (KeyError, TypeError, ValueError) as err:
            raise WeightError(f"{path}: tensor {name} has a malformed header entry") from err
        count = math.prod(shape)
        if end - start != count * dtype.itemsize or end > len(data):
            raise WeightError(
                f"{path}: tensor {name} claims {end - start} bytes for shape {shape} "
                f"({count * dtype.itemsize} needed; the file has {len(data)}): cut or damaged"
            )
        flat = torch.frombuffer(data, dtype=dtype, count=count, offset=start) if count else None
        tensors[name] = torch.empty(shape, dtype=dtype) if flat is None else flat.reshape(shape)
    return tensors


def checkpoint_digest(path_or_id: str) -> str | None:
    """SHA-256 over the checkpoint's config.json and weight file (a run records it, so a file
    swapped under the same path is noticed); None when the checkpoint is not on this machine."""
    import hashlib

    try:
        directory = checkpoint_dir(path_or_id)
    except FileNotFoundError:
        return None
    h = hashlib.sha256()
    for name in ("config.json", "model.safetensors", "pytorch_model.bin"):
        if (directory / name).is_file():
            h.update(name.encode())
            with open(directory / name, "rb") as f:
                while chunk := f.read(1 << 22):
                    h.update(chunk)
    return h.hexdigest()


def read_hf_checkpoint(directory: Path) -> tuple[dict, dict[str, torch.Tensor]]:
    """(config.json, tensors) of a Hugging Face checkpoint directory."""
    try:
        config = json.loads((directory / "config.json").read_text())
    except (OSError, ValueError) as err:
        raise WeightError(
            f"{directory / 'config.json'} cannot be read ({type(err).__name__}); pass the "
            "directory save_pretrained wrote"
        ) from err
    if not isinstance(config, dict):
        raise WeightError(f"{directory / 'config.json'} is not a JSON object")
    if (directory / "model.safetensors").is_file():
        return config, read_safetensors(directory / "model.safetensors")
    if (path := directory / "pytorch_model.bin").is_file():
        try:  # tensors only: a pickle carrying code is refused, never run
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as err:  # torch's message suggests weights_only=False: never do that
            raise WeightError(
                f"{path} is not a plain tensor file ({type(err).__name__}); it is refused "
                "rather than unpickled with code; save it as model.safetensors "
                "(save_pretrained(..., safe_serialization=True)) from a trusted copy"
            ) from err
        if not isinstance(state, dict) or not all(
            isinstance(v, torch.Tensor) for v in state.values()
        ):
            raise WeightError(f"{path} holds no name -> tensor mapping; is it a GPT-2 checkpoint?")
        return config, state
    raise FileNotFoundError(f"{directory} holds no model.safetensors or pytorch_model.bin")


# GPT-2 config fields that change the forward pass and the value normlab computes (Hugging
# Face's defaults): a checkpoint with another value would be loaded into the wrong function.
FORWARD_FIELDS = {
    "scale_attn_weights": True,  # q.k / sqrt(d_head)
    "scale_attn_by_inverse_layer_idx": False,  # an extra 1 / (layer + 1)
    "add_cross_attention": False,  # encoder-decoder attention
}


def gpt2_fields(config: dict) -> dict:
    """GPTConfig fields of a GPT-2 config.json (refusing what normlab's GPT cannot mirror)."""
    if config.get("model_type", "gpt2") != "gpt2":
        raise ValueError(f"model_type {config.get('model_type')!r}: GPT.from_hf reads GPT-2 only")
    for key, computed in FORWARD_FIELDS.items():
        if config.get(key, computed) != computed:
            raise ValueError(
                f"config.json sets {key}={config[key]}, which changes the forward pass; "
                f"normlab's GPT computes {key}={computed} only, so this checkpoint cannot load"
            )
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
def load_gpt2_weights(model: torch.nn.Module, tensors: dict[str, torch.Tensor], source="") -> None:
    """Copy GPT-2's tensors (with or without the ``transformer.`` prefix) into ``model``. Every
    tensor must be present, floating point and exactly the shape its parameter has (``copy_``
    would broadcast a (1, C) embedding over every row); ``source`` names the file in errors."""
    t = {k.removeprefix("transformer."): v for k, v in tensors.items()}
    where = f"{source}: " if source else ""

    def tensor(name: str, shape: tuple[int, ...]) -> torch.Tensor:
        """The file's tensor ``name``, checked: present, floating point, exactly ``shape``."""
        if name not in t:
            raise WeightError(f"{where}tensor {name} is missing; is this a GPT-2 checkpoint?")
        value = t[name]
        if not value.is_floating_point():
            raise WeightError(f"{where}tensor {name} is {value.dtype}, not a floating dtype")
        if tuple(value.shape) != tuple(shape):
            raise WeightError(
                f"{where}tensor {name} has shape {list(value.shape)} where the model (from its "
                f"config.json) wants {list(shape)}; the file and config.json disagree"
            )
        return value

    def put(param: torch.Tensor, name: str, conv1d: bool = False) -> None:
        """Conv1D weights are stored (in, out); a Linear holds (out, in)."""
        shape = tuple(reversed(param.shape)) if conv1d else tuple(param.shape)
        value = tensor(name, shape)
        param.copy_((value.t() if conv1d else value).float())

    put(model.tok_emb.weight, "wte.weight")
    put(model.pos_emb.weight, "wpe.weight")
    d = model.cfg.n_embd
    for i, block in enumerate(model.blocks):
        p = f"h.{i}."
        put(block.attn_pre.weight, p + "ln_1.weight")
        put(block.attn_pre.bias, p + "ln_1.bias")
        qkv_w = tensor(p + "attn.c_attn.weight", (d, 3 * d)).t().float()  # (3d, d)
        qkv_b = tensor(p + "attn.c_attn.bias", (3 * d,)).float()
        for j, proj in enumerate((block.attn.q_proj, block.attn.k_proj, block.attn.v_proj)):
            proj.weight.copy_(qkv_w[j * d : (j + 1) * d])
            proj.bias.copy_(qkv_b[j * d : (j + 1) * d])
        put(block.attn.out_proj.weight, p + "attn.c_proj.weight", conv1d=True)
        put(block.attn.out_proj.bias, p + "attn.c_proj.bias")
        put(block.mlp_pre.weight, p + "ln_2.weight")
        put(block.mlp_pre.bias, p + "ln_2.bias")
        put(block.mlp.fc1.weight, p + "mlp.c_fc.weight", conv1d=True)
        put(block.mlp.fc1.bias, p + "mlp.c_fc.bias")
        put(block.mlp.fc2.weight, p + "mlp.c_proj.weight", conv1d=True)
        put(block.mlp.fc2.bias, p + "mlp.c_proj.bias")
    put(model.final_norm.weight, "ln_f.weight")
    put(model.final_norm.bias, "ln_f.bias")
    if not model.cfg.tie_weights:
        put(model.lm_head.weight, "lm_head.weight" if "lm_head.weight" in t else "wte.weight")
