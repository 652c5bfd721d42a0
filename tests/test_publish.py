"""Publishing a finding cannot delete what it did not write, replace another finding's copy, or
leave a half-written one; a verdict record is written whole and a cut one is one line."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from experiments import reproduce, verdicts
from experiments.verdicts import PUBLISHED, publish, read_verdict, write_verdicts
from tests.helpers import sweep_out


def published(dest: Path, finding: str, experiment: str, files: list[str]) -> None:
    dest.mkdir(parents=True)
    (dest / "report").mkdir()
    (dest / "verdict.json").write_text(json.dumps({"finding": finding}))
    (dest / "README.md").write_text("kept by hand")
    (dest / "report" / "lr_sweep.png").write_bytes(b"old figure")
    record = {"experiment": experiment, "files": files}
    (dest / PUBLISHED).write_text(json.dumps(record))


def test_a_manifest_naming_paths_outside_dest_or_not_publishs_deletes_nothing(tmp_path) -> None:
    out = sweep_out(tmp_path)
    victim, absolute = tmp_path / "victim", tmp_path / "absolute.txt"
    victim.write_text("someone's file")
    absolute.write_text("another")
    dest = tmp_path / "docs" / "f6"
    stale = ["../../victim", str(absolute), "README.md", "report/../../../victim", "verdict.md"]
    published(dest, "f6", "f6_lr_sensitivity", stale)
    publish(out, dest, "f6", ("lr_sensitivity.png",), "verdict")
    assert victim.read_text() == "someone's file" and absolute.read_text() == "another"
    assert (dest / "README.md").read_text() == "kept by hand"
    assert (dest / "report" / "lr_sensitivity.png").read_bytes() == b"new figure"
    manifest = json.loads((dest / PUBLISHED).read_text())
    assert manifest["finding"] == "f6" and manifest["experiment"] == "f6_lr_sensitivity"


def test_the_stability_cards_the_report_links_are_published(tmp_path) -> None:
    out = sweep_out(tmp_path)
    (out / "report" / "cards.md").write_text(f"# Stability cards\n{out}/run0\n")
    dest = tmp_path / "docs" / "f6"
    publish(out, dest, "f6", ("lr_sensitivity.png",), "verdict")
    cards = (dest / "report" / "cards.md").read_text()
    assert cards == "# Stability cards\nmultirun/reproduce/f6_lr_sensitivity/run0\n"
    assert "report/cards.md" in json.loads((dest / PUBLISHED).read_text())["files"]


def test_another_finding_of_the_same_experiment_is_refused_and_its_figures_kept(tmp_path) -> None:
    out = sweep_out(tmp_path, "f13")
    dest = tmp_path / "docs" / "f6"
    published(dest, "f6", "f6_lr_sensitivity", ["verdict.json", "report/lr_sweep.png"])
    with pytest.raises(SystemExit, match=r"holds the published f6; publish f13 into its own"):
        publish(out, dest, "f13", ("lr_sensitivity.png",), "verdict_f13")
    assert (dest / "report" / "lr_sweep.png").read_bytes() == b"old figure"
    assert json.loads((dest / "verdict.json").read_text()) == {"finding": "f6"}


@pytest.mark.parametrize("fail_at", [1, 3, 5])
def test_a_full_disk_while_publishing_leaves_the_published_copy_as_it_was(
    tmp_path, monkeypatch, fail_at
) -> None:
    out = sweep_out(tmp_path)
    dest = tmp_path / "docs" / "f6"
    published(dest, "f6", "f6_lr_sensitivity", ["verdict.json", "report/lr_sweep.png"])
    (dest / "report" / "report.json").write_text('{"old": "whole"}')
    before = {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    writes = {"n": 0}
    real = Path.write_text

    def write_text(self, text, *args, **kwargs):
        writes["n"] += 1
        if writes["n"] == fail_at:
            real(self, text[: len(text) // 3])  # cut, as a full disk cuts it
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, text, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", write_text)
    with pytest.raises(SystemExit, match=r"^error: publishing into .* failed .*is as it was"):
        publish(out, dest, "f6", ("lr_sensitivity.png",), "verdict")
    after = {p.relative_to(dest): p.read_bytes() for p in dest.rglob("*") if p.is_file()}
    assert after == before
    assert [p.name for p in dest.parent.iterdir()] == ["f6"]  # no staging dir left behind


def test_a_verdict_record_is_written_whole_and_a_cut_one_is_one_line(tmp_path, monkeypatch):
    out = tmp_path / "sweep"
    out.mkdir()
    record = {"finding": "f2", "claims": [], "wall_s": 60.0, "launches": 2}
    monkeypatch.setattr(verdicts, "verdict_markdown", lambda r: "# verdicts\n")
    write_verdicts(out, record)
    assert read_verdict(out / "verdict.json") == record
    real = Path.write_text

    def full(self, text, *args, **kwargs):
        real(self, text[:10])
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(Path, "write_text", full)
    with pytest.raises(OSError):
        write_verdicts(out, {**record, "wall_s": 1.0})
    monkeypatch.undo()
    assert read_verdict(out / "verdict.json") == record  # the earlier record, whole
    assert not list(out.glob("*.tmp"))
    (out / "verdict.json").write_text('{"finding": "f2", "cla')
    with pytest.raises(SystemExit, match=r"^error: .*verdict.json cannot be read .*move it aside"):
        read_verdict(out / "verdict.json")


def test_reproduce_on_a_sweep_dir_with_a_cut_verdict_is_one_line(tmp_path, monkeypatch) -> None:
    from tests.helpers import F2_SMALL, f2_runs

    out = tmp_path / "f2"
    f2_runs(out, F2_SMALL, set())
    monkeypatch.setattr(reproduce, "run_sweep", lambda *a: pytest.fail("launched"))
    (out / "verdict.json").write_text('{"finding": "f2", "wall')
    with pytest.raises(SystemExit, match="cannot be read"):
        reproduce.main(["f2", "--out", str(out), *F2_SMALL])


def test_a_finding_re_declared_on_another_experiment_replaces_its_published_files(
    tmp_path, capsys
) -> None:
    """The same finding from a new experiment (a re-declaration) replaces the old publish, with a
    note naming both experiments; another finding is still refused (above)."""
    out = sweep_out(tmp_path)
    dest = tmp_path / "docs" / "f6"
    published(dest, "f6", "f6_old_design", ["verdict.json", "report/lr_sweep.png"])
    publish(out, dest, "f6", ("lr_sensitivity.png",), "verdict")
    assert "held f6 from experiment=f6_old_design" in capsys.readouterr().out
    manifest = json.loads((dest / PUBLISHED).read_text())
    assert manifest["experiment"] == "f6_lr_sensitivity"
    assert json.loads((dest / "verdict.json").read_text()) != {"finding": "f6"}
