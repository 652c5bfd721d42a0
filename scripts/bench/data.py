"""The data section of the benchmarks: a generated corpus of at least 500 MB, prepared once, read
in windows; memory of a training run on it against the same run on pydocs.

    python -m scripts.bench data                      # 512 MB corpus in /tmp, BPE 8192, 2 procs
    python -m scripts.bench data --mb 64 --out data.json
    python -m scripts.bench data --only batches,memory  # reuse the last prepared cache

Figures:
  prepare     wall seconds to tokenize the corpus into the token cache with ``--procs`` processes
              (BPE training on the first ``bpe_train_chars`` of train reported apart), MB of text
              per second, the token files' size and the tokens per UTF-8 byte
  batches     train batches assembled from the memmap (random windows, int64), tokens per second
              at the default job's shape (32 x 128) and GPT-2 small's (64 x 1024)
  memory      peak anonymous RSS (polled /proc/<pid>/status RssAnon: the process's own memory,
              not the page cache behind the memmap) and peak RSS of the same short train.py run
              on the generated corpus and on pydocs

The corpus is pydocs' paragraphs shuffled with a seeded generator and written until the size is
reached: nothing is downloaded. It stays in ``--workdir`` for reruns; the cache is rebuilt each run.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

from runs import runfiles
from runs.record import read_summary

ROOT = Path(__file__).resolve().parents[2]
SHAPES = ((32, 128), (64, 1024))  # (batch, block): the default job, GPT-2 small


def write_corpus(path: Path, megabytes: int, seed: int = 0) -> int:
    """pydocs paragraphs in seeded random order until ``megabytes`` MiB; returns the bytes."""
    from pydoc_data.topics import topics

    paragraphs = [p for t in topics.values() for p in t.split("\n\n") if p.strip()]
    target = megabytes * 2**20
    if path.exists() and path.stat().st_size >= target:
        return path.stat().st_size
    rng, written = random.Random(seed), 0
    with open(path, "w", encoding="utf-8") as f:
        while written < target:
            rng.shuffle(paragraphs)
            for p in paragraphs:
                block = p + "\n\n"
                f.write(block)
                written += len(block.encode("utf-8"))
                if written >= target:
                    break
    return path.stat().st_size


def text_cfg(corpus: Path | None, cache: Path, procs: int, vocab: int):
    from data.config import TextDataConfig

    source = {"source": "text_files", "paths": [str(corpus)]} if corpus else {"source": "pydocs"}
    return TextDataConfig(
        **source, tokenizer="bpe", vocab_size=vocab, cache_dir=str(cache), num_proc=procs
    )


def cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the tokenizing workers)."""
    me, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def bench_prepare(corpus: Path, cache: Path, procs: int, vocab: int) -> dict:
    import data.tokens
    from data.tokens import prepare_text

    fit, seconds = data.tokens.fit_bpe, {}

    def timed_fit(*args, **kwargs):  # BPE training apart from tokenizing
        start = time.perf_counter()
        try:
            return fit(*args, **kwargs)
        finally:
            seconds["bpe_train_s"] = time.perf_counter() - start

    data.tokens.fit_bpe = timed_fit
    try:
        start, cpu = time.perf_counter(), cpu_seconds()
        entry, tok = prepare_text(text_cfg(corpus, cache, procs, vocab), log=lambda s: None)
        total, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    finally:
        data.tokens.fit_bpe = fit
    mb = corpus.stat().st_size / 2**20
    files = sum((entry.path / f"{s}.bin").stat().st_size for s in ("train", "val"))
    tokens = sum(s["tokens"] for s in entry.meta["splits"].values())
    text_bytes = sum(s["bytes"] for s in entry.meta["splits"].values())
    rest = total - seconds.get("bpe_train_s", 0.0)
    return {
        "corpus_mb": round(mb, 1),
        "procs": procs,
        "vocab_size": tok.vocab_size,
        "prepare_s": round(total, 1),
        "bpe_train_s": round(seconds.get("bpe_train_s", 0.0), 1),
        "tokenize_s": round(rest, 1),
        "cpu_s": round(cpu, 1),
        "mb_per_s": round(mb / total, 2),
        "mb_per_cpu_s": round(mb / cpu, 2),
        "tokenize_mb_per_s": round(mb / rest, 2),
        "token_files_mb": round(files / 2**20, 1),
        "tokens": tokens,
        "tokens_per_byte": round(tokens / text_bytes, 4),
        "dtype": entry.meta["arrays"]["train"]["dtype"],
    }


def bench_batches(corpus: Path, cache: Path, vocab: int, seconds: float = 3.0) -> list[dict]:
    from data.text import TextDataModule

    rows = []
    for batch, block in SHAPES:
        dm = TextDataModule(text_cfg(corpus, cache, 1, vocab), block, batch, seed=0)
        dm.setup()
        for step in range(20):  # warm the page cache over the memmap's random windows
            dm.train_batch(step)
        steps, start, cpu = 0, time.perf_counter(), time.process_time()
        while time.perf_counter() - start < seconds:
            dm.train_batch(1000 + steps)
            steps += 1
        elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
        rows.append(
            {
                "batch": batch,
                "block": block,
                "steps": steps,
                "tokens_per_s": round(steps * batch * block / elapsed),
                "tokens_per_cpu_s": round(steps * batch * block / cpu),
                "ms_per_batch": round(1000 * elapsed / steps, 3),
            }
        )
    return rows


def peak_memory(overrides: list[str], run_dir: Path) -> dict:
    """Peak RssAnon and VmHWM of a train.py child, polled every 20 ms."""
    cmd = [sys.executable, "train.py", *overrides, f"hydra.run.dir={run_dir}"]
    env = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    peak_anon = hwm = 0
    while proc.poll() is None:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
        except OSError:
            break
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        peak_anon = max(peak_anon, int(fields.get("RssAnon", "0 kB").split()[0]))
        hwm = max(hwm, int(fields.get("VmHWM", "0 kB").split()[0]))
        time.sleep(0.02)
    out = proc.communicate()[0].decode(errors="replace")
    if proc.returncode != 0:
        raise RuntimeError(f"train.py failed:\n{out[-3000:]}")
    summary = read_summary(run_dir / runfiles.SUMMARY) or {}
    return {
        "peak_anon_mb": round(peak_anon / 1024, 1),
        "peak_rss_mb": round(hwm / 1024, 1),
        "steps": summary["steps"],
        "final_val_bpb": summary.get("final_val_bpb"),
    }


def bench_memory(corpus: Path, cache: Path, vocab: int, steps: int, work: Path) -> dict:
    """Both runs read token files prepared beforehand: only training is measured."""
    from data.tokens import prepare_text

    for source in (None, corpus):
        prepare_text(text_cfg(source, cache, 2, vocab), log=lambda s: None)
    base = [
        f"trainer.max_steps={steps}",
        f"trainer.val_check_interval={steps}",
        "optim.warmup_steps=1",
        "logger=csv",
        "num_threads=1",
        "trainer.enable_progress_bar=false",
        "data.tokenizer=bpe",
        f"data.vocab_size={vocab}",
        f"data.cache_dir={cache}",
    ]
    runs = {
        "pydocs": ["data=pydocs"],
        "corpus": ["data=text_files", f"data.paths=[{corpus}]"],
    }
    result = {}
    for name, extra in runs.items():
        shutil.rmtree(work / f"run-{name}", ignore_errors=True)  # a finished run would be skipped
        result[name] = peak_memory([*base, *extra], work / f"run-{name}")
    return result


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=512, help="corpus size in MiB (>= 500 counts)")
    parser.add_argument("--procs", type=int, default=2, help="tokenizing processes")
    parser.add_argument("--vocab", type=int, default=8192)
    parser.add_argument("--steps", type=int, default=40, help="train.py steps for the memory runs")
    parser.add_argument("--workdir", type=Path, default=Path("/tmp/normlab-bench-data"))
    parser.add_argument("--out", type=Path, help="write the figures as JSON")
    parser.add_argument(
        "--only", default="prepare,batches,memory", help="sections (comma-separated)"
    )
    args = parser.parse_args(argv)
    args.workdir.mkdir(parents=True, exist_ok=True)
    corpus = args.workdir / f"corpus-{args.mb}mb.txt"
    cache = args.workdir / "cache"
    sections = args.only.split(",")
    if "prepare" in sections:  # measured from scratch; the others reuse what it built
        shutil.rmtree(cache, ignore_errors=True)
    size = write_corpus(corpus, args.mb)
    print(f"corpus: {corpus} ({size / 2**20:.0f} MiB)", flush=True)
    result = {"corpus": str(corpus), "corpus_bytes": size}
    runs = {
        "prepare": lambda: bench_prepare(corpus, cache, args.procs, args.vocab),
        "batches": lambda: bench_batches(corpus, cache, args.vocab),
        "memory": lambda: bench_memory(corpus, cache, args.vocab, args.steps, args.workdir),
    }
    for name in sections:
        result[name] = runs[name]()
        print(json.dumps(result[name]), flush=True)
    result["machine"] = {
        "cpus": os.cpu_count(),
        "python": sys.version.split()[0],
        "load_average": os.getloadavg(),
    }
    if args.out:
        args.out.write_text(json.dumps(result, indent=2) + "\n")
    return result


if __name__ == "__main__":
    main()
