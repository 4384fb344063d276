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
