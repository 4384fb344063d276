"""Installed as a package, it serves: the sdist is built from the tree, the wheel from the sdist, the wheel installed
into a fresh virtual environment, and `tinygpt serve` started from an empty folder answers every page and static
file, serves its API documentation offline and trains a run to its end.

The new environment reuses this one's dependencies (torch and the rest: a path file, as --system-site-packages
would give the base interpreter's) but none of the checkout: the app that answers is the wheel's.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tarfile
import venv
import zipfile
from pathlib import Path

import httpx
import pytest

from .service_helpers import ROOT, TINY, Home, Serve, wait_for

pytestmark = pytest.mark.slow  # about 40 s: a build, an environment, a service and a run

PAGES = ("/", "/new", "/compare", "/sweeps", "/benchmarks", "/docs", "/redoc", "/openapi.json", "/healthz")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(ROOT)], check=True,
                   capture_output=True, timeout=300)
    return next(out.glob("tinygpt_dashboard-*.whl"))


def packages_in_tree() -> set[str]:
    """Every package of the checkout's three libraries (a folder with an __init__.py)."""
    return {".".join(p.parent.relative_to(ROOT).parts) for top in ("tinygpt", "app", "worker")
            for p in (ROOT / top).rglob("__init__.py")}


def test_the_sdist_and_the_wheel_hold_every_package_template_and_static_file(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for package in packages_in_tree():
        assert f"{package.replace('.', '/')}/__init__.py" in names, package
    tracked = subprocess.run(["git", "ls-files", "templates", "static", "app/migrations", "tinygpt/export",
                              "worker/slurm"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    shipped = {f"app/{name}" if name.startswith(("templates/", "static/")) else name for name in tracked}
    assert shipped <= names, sorted(shipped - names)
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    sdist = next(wheel.parent.glob("tinygpt_dashboard-*.tar.gz"))
    in_sdist = {name.split("/", 1)[1] for name in tarfile.open(sdist).getnames() if "/" in name}
    assert set(tracked) <= in_sdist, sorted(set(tracked) - in_sdist)
    assert {"CHANGELOG.md", "README.md", "pyproject.toml"} <= in_sdist


@pytest.fixture(scope="module")
def installed(wheel, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment with the wheel installed (its dependencies: this environment's); its bin folder."""
    env = tmp_path_factory.mktemp("venv")
    venv.create(env, with_pip=True)
    site = next(env.glob("lib/python*/site-packages"))
    (site / "test-environment.pth").write_text(next(p for p in sys.path if p.endswith("site-packages")) + "\n")
    subprocess.run([env / "bin" / "python", "-m", "pip", "install", "-q", "--no-deps", str(wheel)], check=True,
                   capture_output=True, timeout=300)
    return env / "bin"


def test_the_installed_command_is_the_wheel_and_says_its_version(installed, wheel, tmp_path):
    version = wheel.name.split("-")[1]
    shown = subprocess.run([installed / "tinygpt", "--version"], cwd=tmp_path, capture_output=True, text=True,
                           check=True)
    assert shown.stdout == f"tinygpt {version}\n"
    where = subprocess.run([installed / "python", "-c", "import app, tinygpt, worker; print(app.__file__, "
                            "tinygpt.__file__, worker.__file__)"], cwd=tmp_path, capture_output=True, text=True,
                           check=True).stdout.split()
    assert all(Path(path).is_relative_to(installed.parent) for path in where), where


def test_an_installed_tinygpt_serve_answers_every_page_and_trains_a_run(installed, wheel, tmp_path, slice_path,
                                                                         warm_cache):
    empty = tmp_path / "empty"
    empty.mkdir()
    home = Home(tmp_path / "home", slice_path)
    home.path.mkdir()
    home.seed_cache(warm_cache)
    version = wheel.name.split("-")[1]
    service = Serve(home, "--devices", "cpu", command=[str(installed / "tinygpt")], cwd=empty)
    try:
        with service.client() as client:
            assert client.get("/healthz").json() == {"status": "ok", "version": version}
            for path in PAGES:
                assert client.get(path).status_code == 200, path
            footer = re.search(r'<footer class="site-footer">(.*?)</footer>', client.get("/").text).group(1)
            assert footer == f"TinyGPT Dashboard {version}"
            check_static_files(client, wheel)
            check_docs_offline(client)
            run = client.post("/api/runs", json={**TINY, "steps": 20, "eval_every": 10}).json()[0]
            wait_for(lambda: client.get(f"/api/runs/{run['id']}").json()["status"] in ("succeeded", "failed"),
                     timeout=120, message="the run to end")
            ended = client.get(f"/api/runs/{run['id']}").json()
            assert (ended["status"], ended["last_step"], ended["has_checkpoint"]) == ("succeeded", 20, True)
            assert client.get(f"/runs/{run['id']}").status_code == 200
            assert len(client.get(f"/api/runs/{run['id']}/metrics").json()) >= 3
    finally:
        service.stop()
    assert not list(empty.iterdir())  # nothing written where it was started


def check_static_files(client: httpx.Client, wheel: Path) -> None:
    """Every static file the wheel holds is served, byte for byte; what makes the folder a package is not."""
    archive = zipfile.ZipFile(wheel)
    files = [n.removeprefix("app/static/") for n in archive.namelist() if n.startswith("app/static/")]
    assets = [f for f in files if f != "__init__.py"]
    assert len(assets) > 20
    for name in assets:
        response = client.get(f"/static/{name}")
        assert (response.status_code, response.content) == (200, archive.read(f"app/static/{name}")), name
    assert client.get("/static/__init__.py").status_code == 404


def check_docs_offline(client: httpx.Client) -> None:
    """The API documentation pages load nothing from another host."""
    for page in ("/docs", "/redoc"):
        html = client.get(page).text
        sources = re.findall(r'(?:src|href)="([^"]+)"', html) + re.findall(r"url: *'([^']+)'", html)
        assert sources and all(s.startswith(("/", "data:")) for s in sources), (page, sources)
        for source in sources:
            if source.startswith("/static/"):
                assert client.get(source).status_code == 200, source
