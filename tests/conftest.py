"""Shared fixtures: the Holmes corpus (read through TINYGPT_HOLMES_PATH), slices of it,
a small tokenizer trained once per session, and a factory for tiny training configs."""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import pytest
import torch

from tinygpt.corpus import load_or_train_tokenizer
from tinygpt.data import Splits, encode_corpus
from tinygpt.run_config import TrainConfig
from tinygpt.tokenizer import Tokenizer

from .browser import browser, page  # noqa: F401 (fixtures for the page tests: Chromium)

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_HOLMES = ROOT.parent / "shared" / "data" / "holmes.txt"


@pytest.fixture(autouse=True, scope="session")
def one_tls_context() -> Iterator[None]:
    """httpx builds a TLS context for every client it makes (26 ms here: it reads the CA bundle), and the tests
    make over a thousand clients (``httpx.get`` is one each) of the plain-HTTP servers they start: the context is
    made once for each set of TLS arguments and shared, as one client would share it."""
    from httpx._transports import default

    with mock.patch.object(default, "create_ssl_context", functools.cache(default.create_ssl_context)):
        yield


@pytest.fixture(scope="session")
def holmes_path() -> Path:
    path = Path(os.environ.get("TINYGPT_HOLMES_PATH") or DEFAULT_HOLMES)
    if not path.exists():
        pytest.fail(f"Holmes corpus not found at {path}: set TINYGPT_HOLMES_PATH")
    return path


@pytest.fixture(scope="session")
def holmes_text(holmes_path: Path) -> str:
    return holmes_path.read_text(encoding="utf-8")


@pytest.fixture(scope="session")
def slice_path(holmes_text: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The first 300,000 characters of the corpus, as a file."""
    path = tmp_path_factory.mktemp("corpus") / "holmes-slice.txt"
    path.write_text(holmes_text[:300_000], encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def small_tokenizer(slice_path: Path) -> Tokenizer:
    return Tokenizer.train(slice_path.read_text(encoding="utf-8"), 512)


@pytest.fixture(scope="session")
def slice_tokens(slice_path: Path, small_tokenizer: Tokenizer) -> torch.Tensor:
    return torch.tensor(small_tokenizer.encode(slice_path.read_text(encoding="utf-8")))


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def tiny_config(slice_path: Path):
    """Factory: a tiny-preset config on the corpus slice with a 512-token vocabulary."""

    def make(**overrides: object) -> TrainConfig:
        base = dict(
            preset="tiny", corpus=str(slice_path), device="cpu", precision="fp32", steps=40, batch_size=8,
            eval_every=20, eval_batches=4, log_every=5, seed=1337, vocab_size=512, sample_tokens=8, threads=2,
        )
        return TrainConfig(**{**base, **overrides})

    return make


@pytest.fixture
def splits(slice_tokens: torch.Tensor) -> Splits:
    return Splits.from_tokens(slice_tokens, 128)


def checkpoint_file(path: Path, tokenizer: dict, **sizes: object) -> Path:
    """A small but real checkpoint (a 1-layer model over ``tokenizer``), written as the trainer writes them."""
    from tinygpt.checkpoint import save_checkpoint
    from tinygpt.config import GPTConfig
    from tinygpt.model import GPT

    config = GPTConfig(**{"vocab_size": 512, "context": 16, "d_model": 16, "n_heads": 2, "n_layers": 1, **sizes})
    torch.manual_seed(0)
    save_checkpoint(path, {"model": GPT(config).state_dict(), "model_config": config.to_dict(), "step": 10,
                           "best_val_loss": 4.5, "tokenizer": tokenizer})
    return path


@pytest.fixture
def write_checkpoint(small_tokenizer: Tokenizer):
    """Factory: :func:`checkpoint_file` over the slice's 512-token tokenizer, or ``tokenizer`` (a dict as a
    checkpoint holds it)."""

    def write(path: Path, *, tokenizer: dict | None = None, **sizes: object) -> Path:
        return checkpoint_file(path, tokenizer or small_tokenizer.to_dict(), **sizes)

    return write


IMPORTED_RUN = {"name": "imported", "device": "cpu", "precision": "fp32",
                "config": {"preset": "tiny", "steps": 10, "eval_every": 10},
                "metrics": [{"step": s, "train_loss": 5.0 - s / 10, "val_loss": 4.5 if s == 10 else None, "lr": 1e-3,
                             "tokens_per_sec": 1000.0, "elapsed_sec": s / 10, "tokens_seen": 100 * s, "epochs": 0.0,
                             "peak_mem_mib": 100.0} for s in range(11)],
                "samples": [{"step": 10, "prompt": "Holmes", "text": "Holmes said"}]}


@pytest.fixture
def imported_run():
    """Factory: an imported run on an in-process app (``make_app``'s client), with ``checkpoint`` uploaded
    when given; its id."""

    def make(client, checkpoint: Path | None = None, headers: dict | None = None, **fields: object) -> int:  # noqa: ANN001
        response = client.post("/api/runs/import", json={**IMPORTED_RUN, **fields}, headers=headers)
        assert response.status_code == 201, response.text
        run_id = response.json()["id"]
        if checkpoint is not None:
            uploaded = client.put(f"/api/runs/{run_id}/checkpoint", content=checkpoint.read_bytes(),
                                  headers={**(headers or {}), "Content-Type": "application/octet-stream"})
            assert uploaded.status_code == 200, uploaded.text
        return run_id

    return make


@pytest.fixture(scope="session")
def warm_cache(slice_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny preset's 4,096-token tokenizer on the slice, trained once; service homes copy it."""
    cache = tmp_path_factory.mktemp("service-cache")
    text = slice_path.read_text(encoding="utf-8")
    tok = load_or_train_tokenizer(text, 4096, cache)
    encode_corpus(text, tok, cache)
    return cache


@pytest.fixture
def make_app(tmp_path: Path, slice_path: Path):  # noqa: ANN201
    """Factory: the app built in this process (``create_app``) over a real SQLite file in a fresh home, with
    these settings, and a client for it (Starlette's, started: the app's start-up and shut-down run). For
    request/response behaviour; what is about processes starts real ones (tests/service_helpers.py)."""
    from fastapi.testclient import TestClient

    from app.main import create_app
    from app.settings import Settings

    homes = itertools.count()
    with contextlib.ExitStack() as stack:

        def make(**settings: object) -> TestClient:
            home = tmp_path / f"home-{next(homes)}"  # each app its own, unless ``home`` is given
            app = create_app(Settings(**{"home": home, "holmes_path": slice_path, **settings}))
            return stack.enter_context(TestClient(app, base_url="http://127.0.0.1"))

        yield make


@pytest.fixture(scope="module")
def start_service(tmp_path_factory: pytest.TempPathFactory, slice_path: Path, warm_cache: Path):  # noqa: ANN201
    """Factory for a module's real service: a fresh home (``TINYGPT_*`` settings as keywords), its app process
    and a worker process per name in ``workers``; all stopped when the module's tests are done (or sooner:
    ``Service.stop``)."""
    from .service_helpers import AppServer, Service, Worker, make_home

    started: list[Service] = []

    def start(name: str, *, workers: tuple[str, ...] = (), **env: object) -> Service:
        home = make_home(tmp_path_factory.mktemp(name), slice_path, warm_cache, **env)
        service = Service(home, AppServer(home), [Worker(home, w) for w in workers])
        started.append(service)
        return service

    yield start
    for service in reversed(started):
        service.stop()


@pytest.fixture(scope="session")
def postgres():  # noqa: ANN201
    """A PostgreSQL server for this test session (CI installs Debian's package; elsewhere skipped if absent)."""
    from .postgres import PostgresServer, pg_bin

    if pg_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("PostgreSQL is not installed (scripts/install-postgresql.sh); CI must run these tests")
        pytest.skip("PostgreSQL is not installed (scripts/install-postgresql.sh)")
    # not under pytest's temporary folder: that one is private to root, and the server runs as postgres
    root = Path(tempfile.mkdtemp(prefix="tinygpt-postgres-"))
    server = PostgresServer(root)
    yield server
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


def database_env(request: pytest.FixtureRequest) -> dict:
    if request.param == "sqlite":
        return {}
    return {"TINYGPT_DATABASE_URL": request.getfixturevalue("postgres").create_database()}


@pytest.fixture(params=["sqlite", "postgresql"], scope="module")
def database(request: pytest.FixtureRequest) -> dict:
    """Extra environment for a service home: the default SQLite file, or a fresh PostgreSQL database."""
    return database_env(request)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=[pytest.mark.slow, pytest.mark.scale])])
def database_faults(request: pytest.FixtureRequest) -> dict:
    """As ``database``, for the long fault tests: their PostgreSQL runs go with `make test-scale` (CI runs it)."""
    return database_env(request)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=[pytest.mark.slow, pytest.mark.scale])],
                scope="module")
def database_slow_pg(request: pytest.FixtureRequest) -> dict:
    """As ``database_faults``, for a module's shared service (the sweeps): PostgreSQL with the slow tests."""
    return database_env(request)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> pytest.TestReport:
    """When a test on the shared service fails, show the end of its app's and worker's logs (and so
    of the jobs', which log to the worker's output): CI keeps nothing else of them."""
    report = yield
    shared = getattr(item, "funcargs", {}).get("shared")
    if report.failed and call.when == "call" and shared is not None:
        for log in sorted(shared[0].path.glob("*.log")):
            lines = log.read_text(errors="replace").splitlines()[-40:]
            report.sections.append((f"{log.name} (last {len(lines)} lines)", "\n".join(lines)))
    return report


@pytest.fixture(scope="session")
def trained(tmp_path_factory: pytest.TempPathFactory, slice_path: Path, cache_dir: Path):  # noqa: ANN201
    """Run folders of a few training steps (no weight left at its initial value), made once per configuration:
    ``trained(arch, preset="tiny", **options)``."""
    from tinygpt.train import Trainer

    runs: dict[str, Path] = {}

    def train(arch: str, preset: str = "tiny", **options: object) -> Path:
        key = json.dumps([preset, arch, options], sort_keys=True)
        if key not in runs:
            runs[key] = tmp_path_factory.mktemp(f"{preset}-{arch}")
            config = TrainConfig(preset=preset, arch=arch, corpus=str(slice_path), device="cpu", precision="fp32",
                                 steps=4, batch_size=2, eval_every=2, eval_batches=1, sample_tokens=0, seed=5,
                                 **({"vocab_size": 512} | options if preset == "tiny" else options))
            Trainer(config, runs[key], cache_dir=cache_dir).run()
        return runs[key]

    return train
