"""A server the suite did not start (``--batchperf-server-url``): what it serves, and which cells it stands for.

A cell is measured on a given server only when the server runs that cell:
the same model (``/v1/models``: ``root`` is the path or hub id the server
loaded), a context long enough for the cell's longest request, and the cell's
batch size. vLLM 0.32 publishes its ``max_num_seqs`` only on the development
endpoint ``/server_info`` (servers started with ``VLLM_SERVER_DEV_MODE=1``);
``/metrics`` carries the cache config, not the scheduler's. So the batch size
comes from there, or from the user: ``BS=URL`` says the server runs
``--max-num-seqs BS``. Several servers may be given, one per batch size; a cell
whose batch size no server runs is skipped with the reason, so one server is
never measured under several batch-size labels.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any

from batchperf.measure.urls import url_problem

PROBE_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class ServerEntry:
    """One ``--batchperf-server-url`` entry: ``URL`` or ``BS=URL``."""

    url: str
    batch_size: int | None = None  # as the user gave it; None: ask the server

    @classmethod
    def parse(cls, text: str) -> ServerEntry:
        size, sep, url = text.strip().partition("=")
        if not sep or "://" in size:  # a plain URL (a query string may hold '=')
            size, url = "", text.strip()
        url = url.strip().rstrip("/")
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"server {text!r}: expected URL or BATCH_SIZE=URL, e.g. 8=http://127.0.0.1:8000")
        if why := url_problem(url):
            raise ValueError(f"server {text!r}: the URL is {why}; e.g. 8=http://127.0.0.1:8000")
        if not size:
            return cls(url)
        if not size.strip().isdigit() or int(size) < 1:
            raise ValueError(f"server {text!r}: the batch size before '=' must be a whole number >= 1")
        return cls(url, int(size))


def parse_entries(text: str) -> list[ServerEntry]:
    """Comma-separated entries (the form ``$BATCHPERF_SERVER_URL`` holds)."""
    return [ServerEntry.parse(part) for part in text.split(",") if part.strip()]


@dataclass(frozen=True, slots=True)
class ServedModel:
    """What a server says it runs. ``max_num_seqs`` is None when it does not say."""

    url: str
    model_id: str  # the name requests must use
    root: str  # the path or hub id it loaded
    max_model_len: int | None
    max_num_seqs: int | None
    dtype: str | None

    def describe(self) -> dict[str, Any]:
        """The server's figures as a run records them (``RunTrace.kv``)."""
        return {"server_model": self.root, "server_max_model_len": self.max_model_len,
                "server_max_num_seqs": self.max_num_seqs, "server_dtype": self.dtype}


def _get_json(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=PROBE_TIMEOUT_S) as response:
        return json.load(response)


def probe(url: str) -> ServedModel:
    """Ask the server at ``url`` what it serves; RuntimeError naming the URL if it cannot say (unreachable, or
    an answer not shaped as an OpenAI-compatible server's)."""
    try:
        answer = _get_json(f"{url}/v1/models")
    except (OSError, ValueError) as exc:  # URLError is an OSError; bad JSON a ValueError
        raise RuntimeError(f"server {url}: GET /v1/models failed ({exc}); is it an OpenAI-compatible server?") from exc
    try:
        return _served(url, answer, _server_config(url))
    except ValueError as exc:
        raise RuntimeError(f"server {url}: {exc}; is it an OpenAI-compatible server?") from None


def _served(url: str, answer: Any, config: dict[str, Any]) -> ServedModel:
    """The server's answers as a ServedModel; ValueError naming the field that is not shaped as vLLM's."""
    models = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(models, list):
        raise ValueError(f"/v1/models answered a {type(answer).__name__}, not an object with a 'data' list")
    if not models:
        raise ValueError("/v1/models lists no model")
    first = models[0]
    if not isinstance(first, dict):
        raise ValueError("/v1/models lists a model that is not an object")
    if not isinstance(first.get("id"), str) or not first["id"]:
        raise ValueError("/v1/models lists a model without an 'id'")
    scheduler = _section(config, "scheduler_config")
    # the admission limit, when set below max_num_seqs, is what bounds a batch
    max_seqs = _whole("max_num_seqs", scheduler.get("max_num_active_seqs") or scheduler.get("max_num_seqs"))
    dtype = _section(config, "model_config").get("dtype")
    return ServedModel(url, first["id"], str(first.get("root") or first["id"]),
                       _whole("max_model_len", first.get("max_model_len")), max_seqs,
                       None if dtype is None else str(dtype).removeprefix("torch."))


def _section(config: dict[str, Any], key: str) -> dict[str, Any]:
    value = config.get(key) or {}
    if not isinstance(value, dict):
        raise ValueError(f"/server_info's {key} is a {type(value).__name__}, not an object")
    return value


def _whole(name: str, value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} is {value!r}, not a whole number >= 1")
    return value


def _server_config(url: str) -> dict[str, Any]:
    """vLLM's config from ``/server_info`` (development mode only); empty when the server does not publish it."""
    try:
        info = _get_json(f"{url}/server_info?config_format=json")
    except (OSError, ValueError):
        return {}
    config = info.get("vllm_config") if isinstance(info, dict) else None
    return config if isinstance(config, dict) else {}


def same_model(root: str, path: str, source: str) -> bool:
    """Whether a server's ``root`` names the cell's model: its folder (any path to it) or its hub id."""
    if root in (path, source):
        return True
    return os.path.exists(root) and os.path.exists(path) and os.path.samefile(root, path)


def batch_size_of(entry: ServerEntry, served: ServedModel) -> tuple[int | None, str | None]:
    """(the batch size the server runs, or a reason it is unknown or contradicts the user)."""
    if entry.batch_size is None:
        if served.max_num_seqs is None:
            return None, (f"server {entry.url} does not publish its max_num_seqs (vLLM does on /server_info only "
                          f"with VLLM_SERVER_DEV_MODE=1); give it as --batchperf-server-url BATCH_SIZE={entry.url}")
        return served.max_num_seqs, None
    if served.max_num_seqs is not None and served.max_num_seqs != entry.batch_size:
        return None, (f"server {entry.url} was given as batch size {entry.batch_size} but runs "
                      f"max_num_seqs={served.max_num_seqs}")
    return entry.batch_size, None


def mismatch(served: ServedModel, *, model_path: str, model_source: str, dtype: str, longest_request: int) -> str | None:
    """Why ``served`` does not run the cell's model, or None when it does."""
    if not same_model(served.root, model_path, model_source):
        return f"server {served.url} serves {served.root!r}; the cell's model is {model_path!r} ({model_source})"
    if served.dtype is not None and served.dtype != dtype:
        return f"server {served.url} runs the model in {served.dtype}; the cell's dtype is {dtype}"
    if served.max_model_len is not None and served.max_model_len < longest_request:
        return (f"server {served.url} has max_model_len {served.max_model_len}; the cell's longest request "
                f"needs {longest_request} tokens")
    return None


def server_for(entries: list[ServerEntry], served: dict[str, ServedModel], batch_size: int) -> ServedModel:
    """The given server that runs ``batch_size`` (``served``: each entry's probe, by URL).

    ValueError with the reason when none does; the caller turns it into a skip.
    """
    reasons, sizes = [], []
    for entry in entries:
        size, reason = batch_size_of(entry, served[entry.url])
        if reason:
            reasons.append(reason)
        elif size == batch_size:
            return served[entry.url]
        else:
            sizes.append(f"{entry.url} runs batch size {size}")
    found = "; ".join(sizes + reasons)
    raise ValueError(f"no given server runs batch size {batch_size} ({found})")
