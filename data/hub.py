"""Hugging Face hub and wandb access that fails in seconds, in one line, when out of reach.

``datasets`` and ``huggingface_hub`` retry for minutes on a blackholed network and print pages of
traceback offline; a researcher needs one line saying what to do instead. So every hub load first
checks the offline flags, then probes the endpoint with a short TCP connect.
"""

from __future__ import annotations

import os
import socket
import threading
from urllib.parse import urlparse

HUB_TIMEOUT_S = 3.0
_TRUE = {"1", "ON", "YES", "TRUE"}


def offline_flag() -> bool:
    """HF_HUB_OFFLINE or HF_DATASETS_OFFLINE is set to a true value."""
    return any(
        os.environ.get(v, "").upper() in _TRUE for v in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")
    )


def hub_address() -> tuple[str, int]:
    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    return url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)


def reachable(host: str, port: int, timeout: float) -> bool:
    """TCP connect within ``timeout`` seconds, in a thread so that slow DNS cannot stall us."""
    ok: list[bool] = []

    def probe() -> None:
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            ok.append(True)
        except OSError:
            pass

    thread = threading.Thread(target=probe, daemon=True)
    thread.start()
    thread.join(timeout + 0.5)
    return bool(ok)


def check_hub(where: str, fallback: str) -> bool:
    """Raise ConnectionError unless the hub can be used; returns whether we are offline (then
    only the local cache may serve ``where``)."""
    if offline_flag():
        return True
    if not reachable(*hub_address(), HUB_TIMEOUT_S):
        raise ConnectionError(
            f"{where}: cannot reach {hub_address()[0]} (tried {HUB_TIMEOUT_S:g}s); "
            f"go online, or {fallback}"
        )
    return False


def load_hub_dataset(
    hf_id: str, hf_config: str | None, split: str, fallback: str, streaming: bool = False
):
    """``datasets.load_dataset`` that fails in seconds, in one line, when the hub is out of reach.

    Offline mode (HF_HUB_OFFLINE / HF_DATASETS_OFFLINE) still serves datasets already in the local
    cache when ``datasets`` itself runs offline; otherwise it fails at once. ``fallback`` is the
    local alternative named in the message.
    """
    import datasets

    where = f"hub dataset {hf_id!r} (split {split!r})"
    not_cached = f"{where}: HF_HUB_OFFLINE is set and it is not cached; go online, or {fallback}"
    offline = check_hub(where, fallback)
    # A flag set after `datasets` was imported is unknown to it: it would still use the network.
    # A stream reads the hub every time: no cache can serve it.
    if offline and (streaming or not datasets.config.HF_HUB_OFFLINE):
        raise ConnectionError(not_cached)
    try:
        return datasets.load_dataset(hf_id, hf_config, split=split, streaming=streaming)
    except Exception as err:  # datasets raises many types; the user needs one line either way
        if offline:
            raise ConnectionError(not_cached) from err
        reason = (str(err).strip() or type(err).__name__).splitlines()[0]
        raise ValueError(
            f"{where}: {reason}; check data.hf_id, data.hf_config and the split"
        ) from err


# --- wandb online --------------------------------------------------------------------------------
WANDB_TIMEOUT_S = 3.0


class Unreachable(ValueError):
    """A service a run was told to reach online is out of reach; the message names the fix."""


def check_wandb_online(mode: str | None) -> None:
    """wandb online without a network would retry for minutes: fail in seconds instead."""
    if (mode or os.environ.get("WANDB_MODE", "online")) != "online":
        return
    url = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai"))
    host, port = url.hostname or "api.wandb.ai", url.port or (80 if url.scheme == "http" else 443)
    if not reachable(host, port, WANDB_TIMEOUT_S):
        raise Unreachable(
            f"logger.wandb.mode=online but {host} is unreachable (tried {WANDB_TIMEOUT_S:g}s); "
            "use logger.wandb.mode=offline and `wandb sync <run_dir>/wandb/offline-run-*` later"
        )
