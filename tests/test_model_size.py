"""GET /api/model-size, in-process: what the new-run form shows before a run starts, its query being the
library's declaration of the options that shape the model."""

from __future__ import annotations

import pytest

from tinygpt.presets import model_size
from tinygpt.run_config import TrainConfig


def test_sizes_and_switches_given_override_the_preset(make_app):
    client = make_app()
    response = client.get("/api/model-size", params={"preset": "tiny", "batch_size": 16, "d_model": 96,
                                                     "n_heads": 6, "untied_head": "true", "dropout": 0.2})
    assert response.status_code == 200, response.text
    config = TrainConfig(preset="tiny", d_model=96, n_heads=6, untied_head=True, dropout=0.2).model_config()
    assert response.json() == model_size(config, 16)
    assert client.get("/api/model-size").json() == model_size(TrainConfig().model_config(), 32)  # holmes, 32


@pytest.mark.parametrize("params, field, message", [
    ({"d_model": 7}, "d_model", "d_model must be in [8, 4096], got 7"),
    ({"batch_size": 0}, "batch_size", "batch_size must be in [1, 4096], got 0"),
    ({"mlp": "swish"}, "mlp", "mlp must be one of gelu, swiglu, relu2; got 'swish'"),
    ({"n_heads": 7}, "d_model", "d_model (256) must be divisible by n_heads (7)"),
    ({"n_layer": 4}, "n_layer", "unknown field 'n_layer': did you mean 'n_layers'?"),
])
def test_a_bad_option_is_refused_naming_it(make_app, params, field, message):
    response = make_app().get("/api/model-size", params=params)
    assert response.status_code == 422
    assert [(e["loc"][-1], e["msg"]) for e in response.json()["detail"]] == [(field, message)]
