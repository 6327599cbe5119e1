"""Issue #49 in PhaseFormer's own epoch loop: a diverging epoch is refused before its checkpoint, with one line naming
the epoch and the last finite checkpoint, and a rerun resumes from that checkpoint."""

import dataclasses

import jax
import numpy as np
import pytest

from core.checkpoint import Checkpointer
from forecasting import data as data_lib
from forecasting.phaseformer import EXPERIMENT, train


def test_a_diverging_epoch_writes_no_checkpoint_and_a_rerun_resumes_from_the_last_finite_one(tmp_path, monkeypatch):
    # quick: the tiny preset with the DLinear baseline (the same epoch loop and checkpoints as PhaseFormer's, compiled
    # in 4 s instead of 20 s), on one device (the sharded epoch has its own test), with short val / test series
    config = dataclasses.replace(EXPERIMENT.presets["tiny"], model="dlinear", epochs=2, patience=2, plot=False,
                                 data_parallel=False)
    data = data_lib.load(config.dataset, config.seq_len, config.pred_len, split=config.split)
    n = config.seq_len + config.pred_len + 255  # 256 windows each
    data = dataclasses.replace(data, val=data.val[:n], test=data.test[:n])
    real_lr = train.lr_for_epoch
    monkeypatch.setattr(train, "lr_for_epoch", lambda c, epoch: real_lr(c, epoch) if epoch < 1 else 1e38)
    folder = tmp_path / "checkpoints"
    with pytest.raises(FloatingPointError) as err:
        train.train(config, data=data, show_progress=False, checkpoint_dir=folder)
    message = str(err.value)
    assert "\n" not in message and message.startswith("non-finite ")
    assert "at epoch 2 " in message or "after epoch 2 " in message
    assert f"the last finite checkpoint is epoch 1 ({folder.absolute()}), which a rerun resumes from" in message

    checkpointer = Checkpointer(folder, config=config)
    assert checkpointer.latest_step() == 1
    model = train.build_model(config, jax.random.key(0))
    _, params = train.nnx.split(model, train.nnx.Param)
    opt_state = train.make_optimizer(config).init(params)
    restored, progress_state = checkpointer.restore({"params": params, "opt_state": opt_state, "best_params": params})
    assert all(np.isfinite(np.asarray(x)).all() for x in jax.tree.leaves((restored["params"], restored["best_params"])))
    assert [row["epoch"] for row in progress_state["history"]] == [1]
    checkpointer.close()

    monkeypatch.setattr(train, "lr_for_epoch", real_lr)  # the rerun (with a sane learning rate) resumes at epoch 1
    result = train.train(config, data=data, show_progress=False, checkpoint_dir=folder)
    assert result.metrics["resumed_at_epoch"] == 1 and result.metrics["epochs_run"] == 2
    assert np.isfinite(result.metrics["mse"])

