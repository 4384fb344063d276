"""Other trainers' files uploaded from a browser: the import page and ``POST /api/runs/import-files`` read
TensorBoard event files (a SummaryWriter's folder, its subfolders too) and speedrun logs as ``tinygpt import``
does, with exact values; bad uploads are refused naming what is wrong; the page in Chromium."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from .browser import open_page, shot
from .test_foreign_logs import NANOGPT_LOG


def summary_writer_folder(folder: Path) -> Path:
    """A SummaryWriter log folder: train/val loss and mfu at every third step, and an ``add_scalars`` subfolder."""
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(folder))
    for step in range(0, 30, 3):
        writer.add_scalar("train/loss", 5.0 - step / 64, step, walltime=1_700_000_000 + step)
        writer.add_scalar("val/loss", 5.25 - step / 64, step, walltime=1_700_000_000 + step)
        writer.add_scalar("mfu", step / 128, step, walltime=1_700_000_000 + step)
    writer.add_scalars("grad", {"norm": 0.5}, 27, walltime=1_700_000_027)
    writer.close()
    return folder


def folder_upload(folder: Path) -> list[tuple[str, tuple[str, bytes]]]:
    """The folder's files as a browser sends a picked folder: each named ``folder/sub/file``."""
    return [("files", (f"{folder.name}/{p.relative_to(folder).as_posix()}", p.read_bytes()))
            for p in sorted(folder.rglob("*")) if p.is_file()]


def test_a_nanogpt_log_uploads_as_a_run_with_its_values(make_app):
    client = make_app()
    response = client.post("/api/runs/import-files", files=[("files", ("train.log", NANOGPT_LOG.encode()))],
                           data={"tokens_per_step": "16384", "device": "cuda", "config": '{"max_iters": 250}'})
    assert response.status_code == 201, response.text
    run = response.json()
    assert (run["name"], run["origin"], run["status"], run["steps"], run["best_val_loss"], run["device"]) == (
        "train", "log_file", "succeeded", 250, 2.0645, "cuda")
    assert run["config"]["max_iters"] == 250
    rows = client.get(f"/api/runs/{run['id']}/metrics").json()
    assert [(r["step"], r["train_loss"], r["val_loss"], r["tokens_seen"]) for r in rows] == [
        (0, 4.2654, 4.2823, 0), (10, 3.2410, None, 163840), (250, 2.0411, 2.0645, 4096000)]


def test_a_summarywriter_folder_uploads_with_its_subfolders(make_app, tmp_path):
    client = make_app()
    folder = summary_writer_folder(tmp_path / "Dec06_exp1")
    response = client.post("/api/runs/import-files", files=folder_upload(folder))
    assert response.status_code == 201, response.text
    run = response.json()
    assert (run["name"], run["origin"], run["last_step"], run["best_val_loss"], run["best_step"]) == (
        "Dec06_exp1", "tensorboard", 27, 5.25 - 27 / 64, 27)
    series = {s["name"]: s for s in client.get(f"/api/runs/{run['id']}/series").json()}
    assert sorted(series) == ["grad_norm/grad", "mfu", "train/loss", "val/loss"]
    assert (series["mfu"]["steps"], series["mfu"]["values"]) == (list(range(0, 30, 3)), [s / 128 for s in range(0, 30, 3)])
    assert (series["grad_norm/grad"]["steps"], series["grad_norm/grad"]["values"]) == ([27], [0.5])


@pytest.mark.parametrize("files, data, status, field, message", [
    ([("files", ("notes.txt", b"hello\nworld\n"))], {}, 422, "files",
     "notes.txt: no line of nanoGPT (step N: train loss X, val loss Y / iter N: loss X, time Tms), llm.c (s:N trl:X "
     "/ s:N tel:X) or modded-nanogpt (step:S/T val_loss:X ...) format"),
    ([("files", ("../../etc/train.log", NANOGPT_LOG.encode()))], {}, 422, "files",
     "file name '../../etc/train.log' is not a plain file name or a path inside the folder picked"),
    ([("files", ("run/events.out.tfevents.1", b"x")), ("files", ("run/train.log", b"x"))], {}, 422, "files",
     "several files are read as one TensorBoard log folder: train.log is not an event file (events.out.tfevents.*); "
     "a log file comes alone"),
    ([("files", ("train.log", NANOGPT_LOG.encode()))], {"config": "[1, 2]"}, 422, "config",
     "config must be a JSON object of its script's options"),
    ([("files", ("train.log", NANOGPT_LOG.encode()))], {"device": "quantum"}, 422, "device", None),
    ([("files", ("train.log", NANOGPT_LOG.encode() * 20))], {}, 413, "files",
     "the files are larger than the upload limit of 0.001 MB (TINYGPT_MAX_UPLOAD_MB)"),
])
def test_bad_uploads_are_refused_naming_what_is_wrong(make_app, files, data, status, field, message):
    client = make_app(max_upload_mb=0.001)
    response = client.post("/api/runs/import-files", files=files, data=data)
    assert response.status_code == status, response.text
    detail = response.json()["detail"][0]
    assert detail["loc"][-1] == field
    if message is not None:
        assert detail["msg"] == message
    assert client.get("/api/runs").json()["items"] == []  # nothing half-made


def test_the_import_page_uploads_a_folder_and_links_the_run(start_service, browser, tmp_path):
    service = start_service("import-page")
    url = service.app.url
    folder = summary_writer_folder(tmp_path / "Dec06_exp1")
    page = open_page(browser)
    page.goto(f"{url}/import")
    page.set_input_files("#import-files", [str(p) for p in sorted(folder.rglob("events.out.tfevents.*"))
                                           if p.parent == folder])
    page.fill("input[name=name]", "my SummaryWriter run")
    page.fill("input[name=device]", "mps")
    page.click("#import-btn")
    page.wait_for_selector("#imported")
    run = next(r for r in httpx.get(f"{url}/api/runs", timeout=30).json()["items"]
               if r["name"] == "my SummaryWriter run")
    assert page.inner_text("#imported") == (
        f"Imported my SummaryWriter run #{run['id']} from its TensorBoard event files: 27 steps, best val "
        f"{5.25 - 27 / 64:.4f}.")
    shot(page, "import-page")
    page.click("#imported a")
    page.wait_for_selector("#series-mapping")
    assert page.inner_text("#series-mapping").splitlines() == [
        "train/loss -> training loss", "val/loss -> validation loss"]
    assert (run["device"], run["origin"]) == ("mps", "tensorboard")
    page.goto(f"{url}/import")
    page.set_input_files("#import-files", files=[{"name": "notes.txt", "mimeType": "text/plain",
                                                  "buffer": b"hello\n"}])
    page.click("#import-btn")
    page.wait_for_selector("#import-result .error-box")
    assert page.inner_text("#import-result .error-box").startswith("422 notes.txt: no line of nanoGPT (")
    page.context.close()
    assert page.js_errors == [], page.js_errors
