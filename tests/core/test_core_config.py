import dataclasses
from typing import Literal

import pytest

from core import config as config_lib
from core.config import ConfigError, apply_overrides, check


@dataclasses.dataclass(frozen=True, kw_only=True)
class Optim:
    lr: float = 1e-3
    schedule: Literal["constant", "cosine"] = "constant"

    def __post_init__(self):
        check(self.lr > 0, "optim.lr", self.lr, "a positive learning rate")


@dataclasses.dataclass(frozen=True, kw_only=True)
class Config:
    steps: int = 10
    use_kernel: bool = False
    widths: tuple[int, ...] = (8, 16)
    name: str = "x"
    dropout: float | None = None
    optim: Optim = Optim()


def test_overrides_parse_each_type():
    c = apply_overrides(Config(), ["steps=20", "use_kernel=true", "widths=4,5,6", "name=abc", "dropout=0.1",
                                   "optim.lr=3e-4", "optim.schedule=cosine"])
    assert c == Config(steps=20, use_kernel=True, widths=(4, 5, 6), name="abc", dropout=0.1,
                       optim=Optim(lr=3e-4, schedule="cosine"))
    assert apply_overrides(c, ["dropout=none"]).dropout is None
    assert apply_overrides(c, ["steps=1e3"]).steps == 1000


@pytest.mark.parametrize("override, message", [
    ("stpes=3", "unknown config field 'stpes' in Config (fields: steps, use_kernel, widths, name, dropout, optim); "
                "did you mean steps?"),
    ("steps=abc", "steps='abc': expected an integer"),
    ("use_kernel=maybe", "use_kernel='maybe': expected a boolean (true/false)"),
    ("optim.schedule=linear", "optim.schedule='linear': expected one of 'constant', 'cosine'"),
    ("optim.lr=-1", "optim.lr=-1.0: expected a positive learning rate"),
    ("optim=3", "optim='3': optim is a group of fields; set one of lr, schedule (e.g. optim.<field>=...)"),
    ("steps", "override 'steps': expected KEY=VALUE, e.g. train.lr=3e-4"),
])
def test_bad_overrides_name_field_value_and_expectation(override, message):
    with pytest.raises(ConfigError) as err:
        apply_overrides(Config(), [override])
    assert str(err.value) == message


def test_dict_round_trip_and_fingerprint():
    c = Config(widths=(1, 2), optim=Optim(lr=0.5))
    d = config_lib.to_dict(c)
    assert d == {"steps": 10, "use_kernel": False, "widths": [1, 2], "name": "x", "dropout": None,
                 "optim": {"lr": 0.5, "schedule": "constant"}}
    assert config_lib.from_dict(Config, d) == c
    assert config_lib.fingerprint(c) != config_lib.fingerprint(Config())
    with pytest.raises(ConfigError, match="unknown fields"):
        config_lib.from_dict(Config, {**d, "extra": 1})
