"""Deployment files, checked without a Docker engine: the compose file's services, profiles,
volumes, ports and commands, and the Dockerfile's commands, against what the project runs and
what the README says."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import yaml

from app.cli import extra_commands
from tinygpt.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
DOCKERFILE = (ROOT / "Dockerfile").read_text()
README = (ROOT / "README.md").read_text()
SERVICES = COMPOSE["services"]


def dockerfile_instructions() -> list[tuple[str, str]]:
    joined = re.sub(r"\\\n\s*", " ", DOCKERFILE)
    lines = [line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1] if " " in line else "") for line in lines]


def parses_as_tinygpt(argv: list[str]) -> None:
    assert argv[0] == "tinygpt", argv
    build_parser(extra_commands()).parse_args(argv[1:])  # raises SystemExit on anything the command does not take


def test_default_services_are_app_and_cpu_worker_sharing_one_home_volume():
    default = sorted(name for name, s in SERVICES.items() if not s.get("profiles"))
    assert default == ["app", "worker"]
    for name in ("app", "worker", "worker-gpu"):
        service = SERVICES[name]
        assert "tinygpt-home:/data" in service["volumes"]
        assert service["environment"]["TINYGPT_HOME"] == "/data"
        assert service["depends_on"]["postgres"] == {"condition": "service_healthy", "required": False}
    assert "ENV" in dict(dockerfile_instructions()) and "TINYGPT_HOME=/data" in DOCKERFILE
    assert set(COMPOSE["volumes"]) == {"tinygpt-home", "postgres-data"}


def test_app_publishes_port_8000_on_localhost_and_commands_are_the_projects():
    assert SERVICES["app"]["ports"] == ["127.0.0.1:8000:8000"]
    assert SERVICES["app"]["command"] == ["tinygpt", "app", "--host", "0.0.0.0", "--port", "8000"]
    assert SERVICES["worker"]["command"][:4] == ["tinygpt", "worker", "--devices", "cpu"]
    assert SERVICES["worker-gpu"]["command"][:4] == ["tinygpt", "worker", "--devices", "cuda:0"]
    for service in ("app", "worker", "worker-gpu"):
        parses_as_tinygpt(SERVICES[service]["command"])


def test_app_in_its_container_requires_an_api_token():
    """It binds 0.0.0.0 inside the container: compose refuses to start it without a token."""
    assert SERVICES["app"]["environment"]["TINYGPT_API_TOKEN"].startswith("${TINYGPT_API_TOKEN:?")
    assert "TINYGPT_API_TOKEN" not in SERVICES["worker"]["environment"]  # workers never serve HTTP
    assert "export TINYGPT_API_TOKEN=" in README


def test_gpu_profile_worker_reserves_nvidia_devices_from_the_cuda_image():
    gpu = SERVICES["worker-gpu"]
    assert gpu["profiles"] == ["gpu"]
    assert gpu["build"]["args"]["VARIANT"] == "cuda" and gpu["image"].endswith(":cuda")
    device = gpu["deploy"]["resources"]["reservations"]["devices"][0]
    assert device["driver"] == "nvidia" and device["capabilities"] == ["gpu"]


def test_postgres_profile_runs_postgresql_that_app_and_worker_can_point_at():
    pg = SERVICES["postgres"]
    assert pg["profiles"] == ["postgres"] and pg["image"].startswith("postgres:")
    env = pg["environment"]
    url = f"postgresql+psycopg://{env['POSTGRES_USER']}:{env['POSTGRES_PASSWORD']}@postgres:5432/{env['POSTGRES_DB']}"
    assert f"TINYGPT_DATABASE_URL={url}" in README  # the README's command points app and worker at it
    assert SERVICES["app"]["environment"]["TINYGPT_DATABASE_URL"] == "${TINYGPT_DATABASE_URL:-}"
    assert "pg_isready" in " ".join(pg["healthcheck"]["test"])


@pytest.mark.parametrize("command", [
    "docker compose up",
    "docker compose --profile gpu up",
    "docker compose --profile postgres up",
    "docker build -t tinygpt-dashboard:cpu .",
    "docker build --build-arg VARIANT=cuda -t tinygpt-dashboard:cuda .",
])
def test_readme_shows_each_way_to_start(command):
    assert command in README


def test_dockerfile_cpu_by_default_cuda_by_argument_non_root_with_health_check():
    instructions = dockerfile_instructions()
    args = [v for k, v in instructions if k == "ARG"]
    assert "VARIANT=cpu" in args
    user = [v for k, v in instructions if k == "USER"]
    assert user and user[-1] not in ("root", "0")
    health = next(v for k, v in instructions if k == "HEALTHCHECK")
    assert "http://127.0.0.1:8000/healthz" in health
    cmd = next(v for k, v in instructions if k == "CMD")
    parses_as_tinygpt(eval(cmd))  # a JSON-form CMD: the app on all interfaces, port 8000  # noqa: S307
    runs = " ".join(v for k, v in instructions if k == "RUN")
    assert "download.pytorch.org/whl/cpu" in runs and 'if [ "$VARIANT" = "cuda" ]' in runs


def test_dockerfile_fetches_the_corpus_with_the_projects_command_and_survives_offline():
    run = next(v for k, v in dockerfile_instructions() if k == "RUN" and "data holmes" in v)
    command, fallback = run.split("||")
    argv = shlex.split(command)
    assert argv[:3] == ["python", "-m", "tinygpt"]
    build_parser().parse_args(argv[3:])
    assert "echo" in fallback  # an offline build goes on, with a message
    entrypoint = (ROOT / "docker" / "entrypoint.sh").read_text()
    assert "/opt/tinygpt/holmes.txt" in entrypoint and 'exec "$@"' in entrypoint


def test_dockerfile_copies_everything_the_app_needs():
    copied = {v.split()[0] for k, v in dockerfile_instructions() if k == "COPY"}
    for needed in ("pyproject.toml", "tinygpt", "app", "worker", "templates", "static"):
        assert needed in copied, needed
