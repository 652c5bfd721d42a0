"""Hugging Face GPT-2 checkpoints load into normlab's Pre-LN GPT (the logits of a random
GPT2LMHeadModel, both file formats), hub ids come from the local cache or fail in one line, and
scripts.probe_model profiles the loaded model against GPT-2's own hidden states."""

from __future__ import annotations

import json

import pytest
import torch

from models.gpt import GPT

transformers = pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def gpt2(tmp_path_factory):
    """A random 3-layer GPT-2 in eval mode and the directory save_pretrained wrote it to."""
    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=300, n_positions=32, n_embd=48, n_layer=3, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    hf = transformers.GPT2LMHeadModel(config).eval()
    path = tmp_path_factory.mktemp("gpt2")
    hf.save_pretrained(path)
    return hf, path


def test_a_saved_gpt2_loads_with_the_same_logits(gpt2, tmp_path):
    hf, path = gpt2
    idx = torch.randint(0, 300, (2, 32))
    with torch.no_grad():
        expected = hf(idx).logits
        got = GPT.from_hf(str(path)).eval()(idx)[0]
    assert (got - expected).abs().max() <= 1e-4
    hf.save_pretrained(tmp_path / "bin", safe_serialization=False)
    if (tmp_path / "bin" / "pytorch_model.bin").is_file():  # the older format, where written
        with torch.no_grad():
            got = GPT.from_hf(str(tmp_path / "bin")).eval()(idx)[0]
        assert (got - expected).abs().max() <= 1e-4


def test_hub_ids_come_from_the_local_cache_or_fail_in_one_line(gpt2, tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"nobody/gpt2 is neither a local directory") as e:
        GPT.from_hf("nobody/gpt2")
    assert "\n" not in str(e.value)
    snapshot = tmp_path / "models--somebody--gpt2" / "snapshots" / "0123abc"
    snapshot.mkdir(parents=True)
    for f in gpt2[1].iterdir():
        (snapshot / f.name).write_bytes(f.read_bytes())
    assert GPT.from_hf("somebody/gpt2").cfg.n_layer == 3


def skip(module, args, kwargs, output):
    """A GPT-2 block's output replaced by its input (as a tuple when the block returns one)."""
    hidden = args[0] if args else kwargs["hidden_states"]
    return (hidden, *output[1:]) if isinstance(output, tuple) else hidden


def test_probe_model_profiles_match_gpt2s_hidden_states(gpt2, tmp_path):
    from scripts import probe_model

    hf, path = gpt2
    text = tmp_path / "text.txt"
    text.write_text("The residual stream of a Pre-LN model grows with depth. " * 20)
    out = tmp_path / "probe"
    result = probe_model.main([str(path), "--text", str(text), "--tokenizer", "bytes",
                               "--windows", "4", "--out", str(out)])  # fmt: skip
    assert json.loads((out / "profile.json").read_text()) == result
    assert (out / "profile.png").read_bytes()[:4] == b"\x89PNG"
    ids = torch.tensor(list(text.read_text().encode()))
    batch = probe_model.windows(ids, 32, 4)
    with torch.no_grad():
        hidden = hf(batch, output_hidden_states=True).hidden_states  # embeddings, blocks, ln_f
    rms = [h.float().square().mean().sqrt().item() for h in hidden[1:-1]]  # after blocks 0, 1
    assert result["act_norm"][:2] == pytest.approx(rms, rel=1e-4)
    assert len(result["attn/entropy"]) == 3 and all(0 < h < 3.5 for h in result["attn/entropy"])
    # the instruments, against GPT-2's own hidden states and its own loss without a block
    a = [h.abs().flatten() for h in hidden[1:-1]]
    ratio = [float(x.max() / x.median()) for x in a]
    assert result["act_massive"][:2] == pytest.approx(ratio, rel=1e-4)
    channel = [int(h.abs().flatten(0, 1).max(0).values.argmax()) for h in hidden[1:-1]]
    assert result["act_massive/channel"][:2] == channel
    s = [h.reshape(-1, 48).square().mean(0) for h in hidden[1:-1]]  # the neurons' RMS^2
    kurtosis = [float(x.square().mean() / x.mean().square()) for x in s]
    assert result["act_kurtosis"][:2] == pytest.approx(kurtosis, rel=1e-4)
    with torch.no_grad():
        full = hf(batch, labels=batch).loss
        handle = hf.transformer.h[1].register_forward_hook(skip, with_kwargs=True)
        try:
            without = hf(batch, labels=batch).loss
        finally:
            handle.remove()
    assert result["layer_drop"][1] == pytest.approx(float(without - full), abs=1e-4)
    assert result["headroom_fp16"] > 0 and 0 <= result["attn_sink"] <= 1
    with pytest.raises(SystemExit):
        probe_model.main([str(tmp_path / "missing"), "--text", str(text)])


def test_model_init_from_starts_training_from_the_checkpoint(tmp_path, compose_cfg, tiny_run):
    """The first train loss of a run started from a GPT-2 checkpoint is GPT-2's own loss on the
    run's first batch; an architecture the config does not state is refused, naming the keys."""
    import csv

    import train
    from data.config import TextDataConfig
    from data.text import TextDataModule
    from runs.errors import ConfigError

    torch.manual_seed(0)
    config = transformers.GPT2Config(
        vocab_size=256, n_positions=16, n_embd=32, n_layer=2, n_head=2,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
    )  # fmt: skip
    hf = transformers.GPT2LMHeadModel(config).eval()
    hf.save_pretrained(tmp_path / "ckpt")
    arch = ["model.n_head=2", "model.n_layer=2", "model.n_embd=32", "model.block_size=16",
            "model.activation=gelu_tanh", "model.qk_norm=false", "data.tokenizer=bytes",
            f"model.init_from={tmp_path / 'ckpt'}", f"data.cache_dir={tmp_path / 'c'}"]  # fmt: skip
    run = [o for o in tiny_run if not o.startswith(("model.", "data.val"))]
    with pytest.raises(ConfigError, match=r"another architecture; state it .* model.n_head=2"):
        train.run(compose_cfg([*run, *arch[1:], f"run_dir={tmp_path / 'bad'}"]))
    train.run(compose_cfg([*run, *arch, f"run_dir={tmp_path / 'run'}"]))
    with open(tmp_path / "run" / "metrics.csv") as f:
        first = next(float(r["train/loss"]) for r in csv.DictReader(f) if r["train/loss"])
    dm = TextDataModule(TextDataConfig(tokenizer="bytes", cache_dir=str(tmp_path / "c")),
                        block_size=16, batch_size=4, seed=0)  # fmt: skip
    dm.setup()
    x, y = dm.train_batch(0)
    with torch.no_grad():
        expected = hf(x, labels=None).logits.flatten(0, 1).log_softmax(-1)
        expected = -expected[torch.arange(y.numel()), y.flatten()].mean().item()
    assert first == pytest.approx(expected, rel=1e-4)


def copy_of(path, tmp_path, name: str):
    dest = tmp_path / name
    dest.mkdir()
    for f in path.iterdir():
        (dest / f.name).write_bytes(f.read_bytes())
    return dest


def test_a_tensor_of_another_shape_or_dtype_is_refused_naming_file_and_tensor(gpt2, tmp_path):
    """copy_ would broadcast a (1,) gain over every feature and a (1, C) embedding over every
    row: each tensor must have exactly its parameter's shape, and a floating dtype."""
    from models.pretrained import WeightError, read_safetensors

    _, path = gpt2
    tensors = read_safetensors(path / "model.safetensors")
    safetensors = pytest.importorskip("safetensors.torch")
    for name, bad in (("h.1.ln_2.weight", torch.ones(1)), ("wpe.weight", torch.zeros(1, 48)),
                      ("h.0.ln_1.bias", torch.zeros(48, dtype=torch.int32))):  # fmt: skip
        broken = copy_of(path, tmp_path, name)
        key = next(k for k in tensors if k.endswith(name))
        safetensors.save_file({**tensors, key: bad}, broken / "model.safetensors")
        with pytest.raises(WeightError) as err:
            GPT.from_hf(str(broken))
        message = str(err.value)
        assert "\n" not in message and name in message and str(broken) in message
    cut = copy_of(path, tmp_path, "cut")
    data = (path / "model.safetensors").read_bytes()
    (cut / "model.safetensors").write_bytes(data[: len(data) // 2])
    with pytest.raises(WeightError, match="cut or damaged"):
        GPT.from_hf(str(cut))


@pytest.mark.parametrize(
    ("field", "value"),
    [("scale_attn_weights", False), ("scale_attn_by_inverse_layer_idx", True),
     ("add_cross_attention", True)],
)  # fmt: skip
def test_a_config_field_that_changes_the_forward_pass_is_refused_by_name(
    gpt2, tmp_path, field, value
):
    _, path = gpt2
    other = copy_of(path, tmp_path, field)
    config = json.loads((other / "config.json").read_text())
    (other / "config.json").write_text(json.dumps({**config, field: value}))
    with pytest.raises(ValueError, match=f"{field}={value}, which changes the forward pass"):
        GPT.from_hf(str(other))


def test_a_pickle_that_is_not_plain_tensors_is_refused_without_advising_unsafe_loading(tmp_path):
    from models.pretrained import WeightError

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "gpt2"}))
    torch.save(
        {"wte.weight": torch.zeros(2), "x": torch.nn.Linear(1, 1)}, tmp_path / "pytorch_model.bin"
    )
    with pytest.raises(WeightError) as err:
        GPT.from_hf(str(tmp_path))
    assert "weights_only=False" not in str(err.value) and "refused" in str(err.value)


def test_the_init_checkpoint_is_part_of_the_runs_identity(tmp_path, compose_cfg, tiny_run):
    """A resume checks the init checkpoint's digest when the file is there (a swapped file is
    refused, naming the key) and needs no init dir once its own checkpoint exists."""
    import shutil

    import train
    from runs.errors import Refused

    def save(seed: int, where):
        torch.manual_seed(seed)
        config = transformers.GPT2Config(vocab_size=256, n_positions=16, n_embd=32, n_layer=2,
                                         n_head=2)  # fmt: skip
        transformers.GPT2LMHeadModel(config).save_pretrained(where)

    save(0, tmp_path / "ckpt")
    arch = ["model.n_head=2", "model.n_layer=2", "model.n_embd=32", "model.block_size=16",
            "model.activation=gelu_tanh", "model.qk_norm=false", "data.tokenizer=bytes",
            f"model.init_from={tmp_path / 'ckpt'}", f"data.cache_dir={tmp_path / 'c'}"]  # fmt: skip
    over = [*(o for o in tiny_run if not o.startswith(("model.", "data.val"))), *arch]
    over.append(f"run_dir={tmp_path / 'run'}")
    first = train.run(compose_cfg(over))
    assert len(first["run_config"]["model.init_from.sha256"]) == 64
    (tmp_path / "run" / "summary.json").unlink()  # as if killed after its last checkpoint
    save(1, tmp_path / "ckpt")  # another checkpoint under the same path
    with pytest.raises(Refused, match=r"model\.init_from\.sha256"):
        train.run(compose_cfg(over))
    shutil.rmtree(tmp_path / "ckpt")  # gone: the resume reads its own last.ckpt only
    again = train.run(compose_cfg(over))
    assert again["status"] == "completed" and again["resumed_from_step"] == first["steps"]
