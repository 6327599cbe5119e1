"""FedFTRL: best-of-both-worlds federated bandits over gossip networks (paper 8), and its baselines."""

from core.registry import Experiment

from .configs import PRESETS, Config
from .envs import FTLTrapEnv, RatingsEnv, StochasticEnv, SwitchingEnv, make_env, read_movielens
from .ftrl import ftrl_argmin, ftrl_log_argmin, kkt_residual, regulariser, regulariser_grad
from .model import ALGORITHMS, AlgoConfig, make_algorithm
from .networks import build_network, check_gossip, make_network
from .train import make_simulator, run_experiment, train_and_evaluate

EXPERIMENT = Experiment(
    name="fedftrl",
    paper=8,
    title="FedFTRL: near-optimal best-of-both-worlds federated bandits",
    presets=PRESETS,
    run=train_and_evaluate,
    demo_preset="demo",
    runtimes={"tiny": "~15 s on 2 CPU cores", "demo": "~40 s on 2 CPU cores",
              "paper": "~2 min on 2 CPU cores", "adversarial_sweep": "~3 min on 2 CPU cores"},
)

__all__ = ["EXPERIMENT", "Config", "PRESETS", "ALGORITHMS", "AlgoConfig", "make_algorithm", "make_env", "make_network",
           "build_network", "check_gossip", "ftrl_argmin", "ftrl_log_argmin", "kkt_residual", "regulariser",
           "regulariser_grad", "make_simulator", "run_experiment", "train_and_evaluate", "StochasticEnv",
           "SwitchingEnv", "FTLTrapEnv", "RatingsEnv", "read_movielens"]
