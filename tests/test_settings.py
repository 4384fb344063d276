from pathlib import Path

import pytest

from app.settings import Settings

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


@pytest.mark.parametrize("name", list(Settings.model_fields))
def test_every_setting_is_documented(name):
    assert f"`TINYGPT_{name.upper()}`" in README


def test_settings_read_from_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("TINYGPT_HOME", str(tmp_path))
    monkeypatch.setenv("TINYGPT_MAX_UPLOAD_MB", "7")
    s = Settings()
    assert s.home_dir == tmp_path and s.max_upload_mb == 7
    assert s.db_url == f"sqlite:///{tmp_path / 'tinygpt.db'}"
    monkeypatch.setenv("TINYGPT_DATABASE_URL", "postgresql+psycopg://u@h/db")
    assert Settings().db_url == "postgresql+psycopg://u@h/db"


def test_bad_setting_is_a_clear_error(monkeypatch):
    monkeypatch.setenv("TINYGPT_PORT", "eighty")
    with pytest.raises(ValueError, match="port"):
        Settings()


def test_an_app_built_with_its_own_settings_uses_them_everywhere(tmp_path, monkeypatch, slice_path):
    """Routes, pages and streams read the settings the app was built with, not the environment's."""
    from fastapi.testclient import TestClient
    from sqlalchemy import text

    from app.db import engine_for
    from app.main import create_app
    from app.settings import get_settings

    monkeypatch.setenv("TINYGPT_HOME", str(tmp_path / "from-environment"))
    get_settings.cache_clear()
    try:
        own = Settings(home=tmp_path / "own", holmes_path=slice_path)
        with TestClient(create_app(own), base_url="http://127.0.0.1") as client:
            created = client.post("/api/runs", json={"preset": "tiny", "device": "cpu", "steps": 2})
            assert created.status_code == 201, created.text
            assert client.get("/api/runs").json()["total"] == 1
            assert "tiny-holmes" in client.get("/").text
        with engine_for(own.db_url).connect() as conn:
            assert conn.execute(text("SELECT count(*) FROM runs")).scalar() == 1
        assert not (tmp_path / "from-environment" / "tinygpt.db").exists()
    finally:
        get_settings.cache_clear()


def test_the_access_log_is_written_only_when_asked_for(tmp_path, slice_path):
    """``TINYGPT_ACCESS_LOG=true``: a line per request in the app's output (off by default: see
    tests/test_event_loop.py, whose app answers many requests and logs none of them)."""
    import httpx

    from .service_helpers import AppServer, Home

    app = AppServer(Home(tmp_path, slice_path, {"TINYGPT_ACCESS_LOG": "true"}))
    try:
        assert httpx.get(f"{app.url}/api/presets", timeout=30).status_code == 200
        assert httpx.get(f"{app.url}/api/runs/12345", timeout=30).status_code == 404
    finally:
        app.stop()
    assert '"GET /api/presets HTTP/1.1" 200' in app.output()
    assert '"GET /api/runs/12345 HTTP/1.1" 404' in app.output()
