"""Every part of a checkpoint is bounded before anything is built from it (``tinygpt.checkpoint.checked_parts``):
a forged tokenizer whose merges double a token at each step, sizes past the run options' bounds, a vocabulary
the model does not have. Refused with a message, on upload (the app's memory unchanged: measured) and on
every load (the sample box, nearest tokens, the command line)."""

from __future__ import annotations

import os

import pytest

from tinygpt.checkpoint import CheckpointError, load_model, verify_checkpoint
from tinygpt.tokenizer import MAX_TOKEN_BYTES, Tokenizer, TokenizerError

from .conftest import IMPORTED_RUN
from .service_helpers import AppServer, Home, run_tinygpt

DOUBLINGS = 30  # a 2**30-byte token if built: a gigabyte (few enough that a regression shows, not crashes)


def doubling_tokenizer(base: dict, doublings: int = DOUBLINGS) -> dict:
    """'a', then merges (k, k): each new token is the previous one twice."""
    merges = [[97, 97]] + [[256 + i, 256 + i] for i in range(doublings)]
    return {**base, "merges": merges, "vocab_size": 256 + len(merges)}


def forged(write_checkpoint, small_tokenizer, path):  # noqa: ANN001, ANN201
    tokenizer = doubling_tokenizer(small_tokenizer.to_dict())
    return write_checkpoint(path, tokenizer=tokenizer, vocab_size=tokenizer["vocab_size"], context=8, d_model=8,
                            n_heads=1)


def test_a_token_past_the_bound_is_refused_before_it_is_built():
    with pytest.raises(TokenizerError) as refused:
        Tokenizer([(97, 97)] + [(256 + i, 256 + i) for i in range(DOUBLINGS)])
    assert str(refused.value) == f"merge 10 makes a token of 2048 bytes; a token is at most {MAX_TOKEN_BYTES}"
    longest = Tokenizer([(97, 97)] + [(256 + i, 256 + i) for i in range(9)])  # 1,024 bytes: allowed
    assert len(longest.token_bytes(longest.vocab_size - 1)) == MAX_TOKEN_BYTES


def test_too_many_merges_are_refused(small_tokenizer):
    data = {**small_tokenizer.to_dict(), "merges": [[97, 98]] * 65_281, "vocab_size": 256 + 65_281}
    with pytest.raises(TokenizerError, match=r"^tokenizer data is corrupt: 65281 merges: a tokenizer has at most 65280$"):
        Tokenizer.from_dict(data)


@pytest.mark.parametrize("sizes, message", [
    ({"d_model": 8192, "n_heads": 8}, "ValueError: d_model must be in [8, 4096], got 8192"),
    ({"n_layers": 65}, "ValueError: n_layers must be in [1, 64], got 65"),
    ({"context": 16_384}, "ValueError: context must be in [8, 8192], got 16384"),
])
def test_model_sizes_past_the_run_options_bounds_are_refused(tmp_path, small_tokenizer, sizes, message):
    """Written by hand: the trainer could not write these (its options are bounded the same way)."""
    import torch

    from tinygpt.checkpoint import save_checkpoint

    config = {"vocab_size": 512, "context": 16, "d_model": 16, "n_heads": 2, "n_layers": 1, "dropout": 0.0,
              "pos": "rope", "norm": "layernorm", "mlp": "gelu", "bias": True, "attn_bias": False, "rope_base": 1e4,
              **sizes}
    path = tmp_path / "huge.pt"
    save_checkpoint(path, {"model": {"w": torch.zeros(1)}, "model_config": config, "tokenizer": small_tokenizer.to_dict()})
    with pytest.raises(CheckpointError) as refused:
        verify_checkpoint(path)
    assert str(refused.value) == f"huge.pt is not a checkpoint of a tinygpt model ({message})"


def test_a_tokenizer_with_more_ids_than_the_model_is_refused(tmp_path, write_checkpoint):
    path = write_checkpoint(tmp_path / "best.pt", vocab_size=300)  # the slice's tokenizer has 512 ids
    with pytest.raises(CheckpointError) as refused:
        load_model(path)
    assert str(refused.value) == ("best.pt is not a checkpoint of a tinygpt model (ValueError: the tokenizer has 512 "
                                  "ids but the model's vocabulary is 300)")


def test_loading_for_sampling_goes_through_the_same_checks(tmp_path, write_checkpoint, small_tokenizer, slice_path):
    path = forged(write_checkpoint, small_tokenizer, tmp_path / "forged.pt")
    with pytest.raises(CheckpointError, match="merge 10 makes a token of 2048 bytes"):
        load_model(path)
    env = {"PATH": "/usr/bin:/bin", "TINYGPT_HOME": str(tmp_path / "home"), "TINYGPT_HOLMES_PATH": str(slice_path)}
    result = run_tinygpt("sample", path, "--prompt", "a", env=env, module="tinygpt", timeout=120)
    assert result.returncode == 2
    assert result.stderr.strip() == ("tinygpt sample: error: forged.pt is not a checkpoint of a tinygpt model "
                                     "(TokenizerError: the checkpoint's tokenizer is corrupt: merge 10 makes a token "
                                     "of 2048 bytes; a token is at most 1024)")


def test_a_forged_checkpoint_in_a_run_folder_is_a_422_for_the_sample_box(make_app, imported_run, write_checkpoint,
                                                                          small_tokenizer, tmp_path):
    client = make_app()
    run = imported_run(client, write_checkpoint(tmp_path / "real.pt"))
    forged(write_checkpoint, small_tokenizer, client.app.state.settings.runs_dir / str(run) / "best.pt")
    response = client.get(f"/api/runs/{run}/neighbors", params={"word": " the"})
    assert response.status_code == 422
    assert response.json()["detail"][0]["msg"].startswith("the run's checkpoint cannot be loaded: best.pt is not a "
                                                          "checkpoint of a tinygpt model (TokenizerError: ")


def rss_mib(pid: int) -> float:
    line = next(x for x in open(f"/proc/{pid}/status") if x.startswith("VmRSS:"))  # noqa: SIM115
    return int(line.split()[1]) / 1024


def test_an_uploaded_forged_checkpoint_is_refused_and_the_app_allocates_nothing(tmp_path, slice_path, write_checkpoint,
                                                                                small_tokenizer):
    """The 17 KB file of the report: before, it took the app from 390 MB to 521 MB (and 36 merges would have asked
    for 128 GB). Measured on a real app process."""
    path = forged(write_checkpoint, small_tokenizer, tmp_path / "forged.pt")
    assert os.path.getsize(path) < 64_000
    # refused too, cheaply (the tokenizer has more ids than the model): pays the app's first-use costs of reading
    # a checkpoint (torch.load, a model on the meta device), so that what is measured is the forged file alone
    warm_up = write_checkpoint(tmp_path / "warm-up.pt", vocab_size=300)
    (tmp_path / "home").mkdir()
    app = AppServer(Home(tmp_path / "home", slice_path))
    try:
        with app.client() as c:
            run = c.post("/api/runs/import", json=IMPORTED_RUN).json()["id"]
            upload = lambda p: c.put(f"/api/runs/{run}/checkpoint", content=p.read_bytes(),  # noqa: E731
                                     headers={"Content-Type": "application/octet-stream"})
            assert upload(warm_up).status_code == 422
            before = rss_mib(app.popen.pid)
            response = upload(path)
            after = rss_mib(app.popen.pid)
            assert response.status_code == 422
            assert response.json()["detail"] == [{"loc": ["body", "body"], "type": "value_error", "msg": (
                "not a checkpoint this dashboard can load: the upload is not a checkpoint of a tinygpt model "
                "(TokenizerError: the checkpoint's tokenizer is corrupt: merge 10 makes a token of 2048 bytes; a "
                "token is at most 1024)")}]
            assert after - before < 30, f"the app grew from {before:.0f} to {after:.0f} MiB"
            assert c.get(f"/api/runs/{run}").json()["has_checkpoint"] is False
    finally:
        app.stop()
