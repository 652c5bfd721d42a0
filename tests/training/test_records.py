"""A run's record says what ran: its data's identity, the precision and kernels that ran, no key
that was accepted and ignored; resumes compare the settings that change the numbers, with
defaults for keys an older record lacks; bad values stop in one line before anything runs."""

from __future__ import annotations

import json

import pytest

import train
from runs.errors import ConfigError, Refused

pytestmark = pytest.mark.usefixtures("one_thread")


def corpus_run(tmp_path, tiny_run, extra=()) -> list[str]:
    corpus = tmp_path / "corpus.txt"
    if not corpus.exists():
        corpus.write_text("the quick brown fox jumps over the lazy dog. " * 80)
    return [
        *tiny_run,
        "data=text_files",
        f"data.paths=[{corpus}]",
        f"data.cache_dir={tmp_path / 'cache'}",
        f"run_dir={tmp_path / 'run'}",
        *extra,
    ]


def test_a_changed_corpus_refuses_the_resume_and_keeps_the_vocab(tmp_path, tiny_run, compose_cfg):
    over = corpus_run(tmp_path, tiny_run)
    first = train.run(compose_cfg(over))
    assert first["run_config"]["data.identity"].startswith("text_files-char")
    run = tmp_path / "run"
    (run / "summary.json").unlink()  # killed before its record: the rerun resumes last.ckpt
    vocab = (run / "vocab.json").read_text()
    (tmp_path / "corpus.txt").write_text("A different corpus, with new letters: XYZ! " * 80)
    with pytest.raises(Refused, match=r"data\.identity: text_files-char.*resume=false"):
        train.run(compose_cfg(over))
    assert (run / "vocab.json").read_text() == vocab
    fresh = train.run(compose_cfg([*over, "resume=false"]))
    assert (
        fresh["status"] == "completed"
        and fresh["run_config"]["data.identity"] != (first["run_config"]["data.identity"])
    )
    assert (run / "vocab.json").read_text() != vocab  # the fresh run's own vocabulary


def test_an_older_record_resumes_with_defaults_for_the_keys_it_lacks(
    tmp_path, tiny_run, compose_cfg
):
    over = corpus_run(tmp_path, tiny_run)
    train.run(compose_cfg(over))
    path = tmp_path / "run" / "summary.json"
    summary = json.loads(path.read_text())
    for key in ("optim.z_loss", "kernels.fused", "data.identity", "data.num_proc"):
        summary["run_config"].pop(key, None)  # written before these were recorded
    path.write_text(json.dumps(summary))
    again = train.run(compose_cfg([*over, "data.num_proc=2", f"data.cache_dir={tmp_path}/c2"]))
    assert again == summary  # skipped: the same run
    with pytest.raises(Refused, match=r"optim\.z_loss: 0\.0 -> 0\.0001"):
        train.run(compose_cfg([*over, "optim.z_loss=1e-4"]))


def test_the_fused_kernel_switch_is_part_of_the_settings(
    tmp_path, tiny_run, compose_cfg, monkeypatch
):
    over = corpus_run(tmp_path, tiny_run, ["norm=rmsnorm"])
    done = train.run(compose_cfg(over))
    assert done["precision"] == "32-true" and done["run_config"]["kernels.fused"] is True
    assert done["fused_rmsnorm"] in (True, False)  # RMSNorm ran: through the kernel or not
    monkeypatch.setenv("NORMLAB_FUSED_KERNELS", "0")
    with pytest.raises(Refused, match=r"kernels\.fused: True -> False"):
        train.run(compose_cfg(over))


@pytest.mark.parametrize(
    "override,fix",
    [
        ("+model.placement=post", "set it as placement=post"),
        ("+model.norm=rmsnorm", "set it as norm=rmsnorm"),
    ],
)
def test_a_model_key_another_group_sets_is_refused_naming_it(
    override, fix, tmp_path, tiny_run, compose_cfg
):
    with pytest.raises(ConfigError, match=fix):
        train.run(compose_cfg([*tiny_run, override, f"run_dir={tmp_path}"]))


@pytest.mark.parametrize(
    "override,match",
    [
        ("trainer.precision=16-mixed", r"needs a GPU.*trainer\.precision=bf16-mixed"),
        ("trainer.precision=64", r"trainer\.precision=64 is not one normlab runs"),
        ("optim.lr=nan", r"optim.lr must be a finite number"),
        ("optim.lr=inf", r"optim.lr must be a finite number"),
        ("trainer.gradient_clip_val=nan", r"gradient_clip_val must be a finite number, got nan"),
        ("trainer.gradient_clip_val=-1", r"gradient_clip_val=-1 must be a finite number"),
        ("seed=4294967296", r"seed must be in \[0, 4294967295\]"),
    ],
)
def test_values_that_would_crash_or_run_otherwise_stop_in_one_line(
    override, match, tmp_path, tiny_run, compose_cfg
):
    with pytest.raises(ConfigError, match=match) as err:
        train.run(compose_cfg([*tiny_run, override, f"run_dir={tmp_path}"]))
    assert "\n" not in str(err.value)


def test_a_superseded_checkpoint_evaluates_with_its_own_settings(tmp_path, tiny_run, compose_cfg):
    from scripts import evaluate

    over = corpus_run(tmp_path, tiny_run)
    first = train.run(compose_cfg(over))
    train.run(compose_cfg([*over, "resume=false", "model.block_size=8", "data.val_batches=2"]))
    (old,) = (tmp_path / "run" / "checkpoints").glob("superseded-*/last.ckpt")
    metrics = evaluate.main([str(tmp_path / "run"), "--ckpt", str(old), "--threads", "1"])
    assert metrics["val/loss"] == pytest.approx(first["final_val_loss"], abs=1e-6)


def test_evaluate_says_when_the_data_changed_and_bad_files_are_one_line(
    tmp_path, tiny_run, compose_cfg, capsys
):
    from scripts import evaluate, migrate, sample

    over = corpus_run(tmp_path, tiny_run)
    train.run(compose_cfg(over))
    run = tmp_path / "run"
    (tmp_path / "corpus.txt").write_text("the quick brown fox jumps over the lazy cat. " * 80)
    evaluate.main([str(run), "--threads", "1"])
    assert "warning: the data changed since" in capsys.readouterr().err
    (tmp_path / "corpus.txt").unlink()
    cut = tmp_path / "cut.ckpt"
    cut.write_bytes((run / "last.ckpt").read_bytes()[:2000])
    for main, argv in (
        (evaluate.main, [str(run)]),  # its corpus is gone
        (evaluate.main, [str(run), "--ckpt", str(cut)]),
        (sample.main, [str(tmp_path / "nowhere")]),
    ):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        err = capsys.readouterr().err
        assert exit_.value.code == 1 and err.startswith("error: ") and err.count("\n") == 1, err
    (run / "last.ckpt").write_bytes(cut.read_bytes())  # not the file its digest was taken of
    with pytest.raises(SystemExit):
        sample.main([str(run)])
    err = capsys.readouterr().err
    assert "is damaged" in err and "pass a run dir whose last.ckpt is whole" in err
    (run / "last.ckpt.sha256").unlink()  # no digest: refused, naming the migration
    with pytest.raises(SystemExit):
        sample.main([str(run)])
    assert "no digest file (last.ckpt.sha256)" in capsys.readouterr().err
    assert migrate.main([str(run)]) == 0  # it records no digest for a file it cannot read
    assert "last.ckpt: unreadable: left alone" in capsys.readouterr().out
    assert not (run / "last.ckpt.sha256").exists()


@pytest.mark.parametrize(
    "placement,alpha,beta", [("deepnorm", 12**0.25, 48**-0.25), ("admin", 1.0, 1.0)]
)
def test_derived_constants_are_recorded(placement, alpha, beta, tmp_path, tiny_run, compose_cfg):
    """DeepNet's decoder formulas at depth 6: alpha = (2N)^(1/4), beta = (8N)^(-1/4); Admin's
    omegas as the run ends (profiled at init to sqrt(1 + sum of variance ratios) >= 1, then
    trained for 3 steps)."""
    over = [*tiny_run, f"placement={placement}", "model.n_layer=6", f"run_dir={tmp_path}"]
    derived = train.run(compose_cfg(over))["derived"]
    assert derived["alpha"] == pytest.approx(alpha) and derived["beta"] == pytest.approx(beta)
    if placement == "admin":
        assert derived["omega_min"] <= derived["omega_mean"] <= derived["omega_max"]
        assert derived["omega_max"] > 1.5  # the deepest sub-layers' profiled omegas
    else:
        assert "omega_mean" not in derived
