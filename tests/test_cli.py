"""The ``tinygpt`` command: training end to end as a real process; its messages, tables and the commands
that read what training wrote, run inside the test process (``tinygpt_here``)."""

import http.server
import json
import os
import threading

import pytest

from tinygpt.bench import CELL_FIELDS
from tinygpt.device import cpu_has_bf16, cpu_name, cpu_speed_flags, cpu_summary
from tinygpt.gutenberg import HOLMES_BOOKS, strip_gutenberg
from tinygpt.presets import model_config

from .service_helpers import run_tinygpt, tinygpt_here


def tinygpt(*args, env=None, check=True):
    """The library's own command (``tinygpt.cli``) in this process, with more environment variables."""
    return tinygpt_here(*args, env={**os.environ, **(env or {})}, module="tinygpt.cli", check=check)


def test_info_holmes_breakdown_and_untrained_loss():
    out = tinygpt("info", "--preset", "holmes").stdout
    assert "5,781,504" in out and "788,736" in out and "262,144" in out and "525,568" in out
    assert "(ln 4096 = 8.318): ok" in out


def test_info_lists_presets_and_devices():
    out = tinygpt("info").stdout
    for name in ("holmes", "tiny", "student", "small"):
        assert name in out
    recipes = out.split("recipes (tinygpt train --recipe NAME; the options given win):\n")[1]
    assert recipes.startswith("  series     the series' recipe") and "\n             the defaults\n  fast       " in recipes
    assert "\n  fast-best  the best model within" in recipes
    assert "optimizer muon, lr 0.002, lr_schedule wsd" in recipes
    assert "cpu" in out and "unavailable" in out
    assert f"CPU flags: {cpu_summary()}" in out


@pytest.mark.parametrize("args, message", [
    (["train", "--out", "x", "--steps", "-3"], "argument --steps: steps must be in [1, 10000000], got -3"),
    (["train", "--out", "x", "--preset", "huge"],
     "argument --preset: preset must be one of holmes, tiny, student, small; got 'huge'"),
    (["sample", "nope.pt"], "tinygpt sample: error: checkpoint not found: nope.pt"),
    (["train", "--out", "x", "--corpus", "missing.txt"], "tinygpt train: error: corpus file not found: missing.txt"),
    (["train", "--out", "x", "--device", "gpu"], "tinygpt train: error: unknown device 'gpu'"),
    (["tokenizer", "train", "--corpus", "missing.txt", "--vocab-size", "300", "--out", "t.json"], "corpus file not found"),
    (["bench", "--batch-sizes", "8,0"], "argument --batch-sizes: must be comma-separated positive integers, got '8,0'"),
    (["bench", "--precisions", "fp8"], "argument --precisions: precisions are auto, fp32, bf16, fp16; got 'fp8'"),
    (["bench", "--device", "tpu"], "tinygpt bench: error: unknown device 'tpu'"),
])
def test_bad_arguments_get_one_line_errors(tmp_path, args, message):
    proc = tinygpt_here(*args, module="tinygpt.cli", cwd=tmp_path)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert "Traceback" not in proc.stderr
    assert len([line for line in proc.stderr.splitlines() if "error" in line]) == 1


def test_train_sample_neighbors_end_to_end(tmp_path, slice_path):
    env = {"TINYGPT_HOME": str(tmp_path / "home")}
    out = tmp_path / "run"
    proc = run_tinygpt("train", "--preset", "tiny", "--corpus", slice_path, "--device", "cpu", "--precision", "fp32",
                       "--steps", "20", "--batch-size", "4", "--eval-every", "10", "--seed", "3", "--vocab-size", "400",
                       "--out", out, "--no-progress", env={**os.environ, **env}, module="tinygpt", check=True)
    assert "done: 20 steps on cpu (fp32)" in proc.stdout
    assert "step     20: train" in proc.stdout
    header = (out / "metrics.csv").read_text().splitlines()[0]
    assert header == "step,train_loss,val_loss,lr,tokens_per_sec,elapsed_sec,tokens_seen,epochs,peak_mem_mib,val_loss_full"
    assert (out / "best.pt").exists() and (out / "config.json").exists()
    assert list((tmp_path / "home" / "cache" / "tokenizers").glob("*-400.json"))  # cached for the next run

    a = tinygpt("sample", out / "best.pt", "--prompt", "Holmes", "--max-tokens", "20", "--seed", "1").stdout
    b = tinygpt("sample", out / "best.pt", "--prompt", "Holmes", "--max-tokens", "20", "--seed", "1", "--no-cache").stdout
    assert a == b and a.startswith("Holmes")

    proc = tinygpt("neighbors", out / "best.pt", " the", "-k", "3")
    assert len(proc.stdout.strip().splitlines()) == 3
    proc = tinygpt("neighbors", out / "best.pt", "Sherlock Holmes and", check=False)
    assert proc.returncode == 2 and "not one" in proc.stderr


def test_tokenizer_train_command(tmp_path, slice_path):
    proc = tinygpt("tokenizer", "train", "--corpus", slice_path, "--vocab-size", "300", "--out", tmp_path / "t.json")
    assert "trained 300 ids" in proc.stdout and "bytes/token" in proc.stdout
    assert (tmp_path / "t.json").exists()


def test_strip_gutenberg_header_and_footer():
    raw = ("\ufeffThe Project Gutenberg eBook\r\n*** START OF THE PROJECT GUTENBERG EBOOK X ***\r\n\r\n"
           "Chapter 1\r\nText.\r\n\r\n*** END OF THE PROJECT GUTENBERG EBOOK X ***\r\nLicense...")
    assert strip_gutenberg(raw) == "Chapter 1\nText."


class _Books(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        book_id = self.path.strip("/").split("/")[0]
        body = (f"header\r\n*** START OF THE PROJECT GUTENBERG EBOOK {book_id} ***\r\n"
                f"Book {book_id}.\r\n*** END OF THE PROJECT GUTENBERG EBOOK ***\r\nfooter").encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_data_holmes_downloads_strips_and_joins(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Books)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        mirror = f"http://127.0.0.1:{server.server_port}/{{id}}/pg{{id}}.txt"
        tinygpt("data", "holmes", "--out", tmp_path / "h.txt", "--mirror", mirror)
    finally:
        server.shutdown()
    expected = "\n\n".join(f"Book {book_id}." for book_id, _ in HOLMES_BOOKS) + "\n"
    assert (tmp_path / "h.txt").read_text() == expected


def test_data_holmes_offline_says_how_to_supply_a_corpus(tmp_path):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Books)
    port = server.server_port
    server.server_close()  # nothing listens there now: like being offline
    proc = tinygpt("data", "holmes", "--out", tmp_path / "h.txt", "--mirror", f"http://127.0.0.1:{port}/{{id}}",
                   check=False)
    assert proc.returncode == 2
    assert "could not download 'A Study in Scarlet'" in proc.stderr and "--corpus" in proc.stderr
    assert "TINYGPT_HOLMES_PATH" in proc.stderr
    assert not (tmp_path / "h.txt").exists()


def test_bench_prints_a_table_and_json_cells():
    args = ["bench", "--preset", "tiny", "--device", "cpu", "--batch-sizes", "2,4", "--precisions", "fp32",
            "--threads", "1", "--steps", "1", "--warmup", "0"]
    header, *table = tinygpt(*args).stdout.splitlines()
    # the figures say which CPU features they were measured with, and what precision auto picks there
    assert header == f"cpu: {cpu_name()}; CPU flags: {cpu_summary()}"
    assert table[0].split() == ["precision", "batch", "threads", "tokens/s", "ms/step", "peak", "MiB"]
    assert [row.split()[:3] for row in table[1:]] == [["fp32", "2", "1"], ["fp32", "4", "1"]]
    result = json.loads(tinygpt(*args, "--json").stdout)
    assert result["device"] == "cpu"
    assert result["device_info"]["features"] == cpu_speed_flags()
    assert result["device_info"]["auto_precision"] == ("bf16" if cpu_has_bf16() else "fp32")
    cells = result["cells"]
    assert [list(c) for c in cells] == [CELL_FIELDS] * 2
    assert [(c["precision"], c["batch_size"], c["threads"], c["oom"]) for c in cells] == [
        ("fp32", 2, 1, False), ("fp32", 4, 1, False)]
    for c in cells:
        assert c["tokens_per_sec"] > 0 and c["peak_mem_mib"] > 0
        assert abs(c["tokens_per_sec"] * c["ms_per_step"] / 1000 - c["batch_size"] * model_config("tiny").context) < 1
