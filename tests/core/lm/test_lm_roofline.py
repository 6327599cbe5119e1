"""benchmarks/lm_roofline.py: its floor multiplies exactly the model's weight matrices, and the floor and
bound are computed from the recorded peer times as stated."""

import jax
import numpy as np

from benchmarks import lm_decode, lm_roofline, lm_train
from core.lm import model as model_lib


def _matrix_sizes(config):
    """Sizes of the model's weight matrices: every parameter but the biases and norm scales."""
    _, params = model_lib.abstract(config)
    leaves = jax.tree_util.tree_flatten_with_path(params)[0]
    return sorted(int(np.prod(x.shape)) for path, x in leaves
                  if not any(w in jax.tree_util.keystr(path) for w in ("bias", "norm")))


def test_the_floor_counts_every_weight_matrix_of_the_model_once():
    """The (in, out) shapes of the floor are the model's linear maps plus the tied head: no matrix is missed
    or counted twice (norms and biases, being vectors, are not products)."""
    for config in (lm_decode.lm_config("4x256"), lm_decode.lm_config("8x512"), lm_train.lm_config()):
        ours = sorted([a * b for a, b in lm_roofline.linear_shapes(config)] +
                      [config.hidden_size * config.vocab_size])
        assert ours == _matrix_sizes(config)


def test_the_train_floor_reports_its_flops(monkeypatch):
    from core.lm.configs import LMConfig

    config = LMConfig(architecture="qwen2", vocab_size=16, hidden_size=8, intermediate_size=12, num_layers=1,
                      num_heads=2, num_kv_heads=1, head_dim=4, tie_word_embeddings=True)
    rng = np.random.default_rng(0)
    full = lm_roofline.train_floor(config, tokens=5, lora=False, repeats=1, rng=rng)
    lora = lm_roofline.train_floor(config, tokens=5, lora=True, repeats=1, rng=rng)
    products = sum(a * b for a, b in lm_roofline.linear_shapes(config)) + 8 * 16
    assert full["gflop"] == 2 * 5 * products * 3 / 1e9 and lora["gflop"] == 2 * 5 * products * 2 / 1e9
    assert 0 < full["floor_min_s"] <= full["floor_s"] <= full["floor_max_s"]
