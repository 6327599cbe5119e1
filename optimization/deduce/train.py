"""Continual training of every run (arm x buffer x seed [x hyper-parameter variant]) vmapped together.

Per task t: `begin_task` (detector B's bound), then `epochs` passes of jitted `lax.scan` chunks of
`train_step` (detector G, LUM, the base learner's step, GUM, reservoir insert), then `end_task` (diagonal
Fisher, anchor theta_{t-1}), then evaluation on every task's test set. Runs differ only in scalar
hyper-parameters, so one compiled program serves ER, DER++, online EWC and every DEDUCE variant.
Checkpoints (optional) hold all runs' states (model, buffer, Fisher, GUM statistics, RNG) and the stream
position, through core.checkpoint, after every chunk.
"""

from __future__ import annotations

import dataclasses
import pathlib
import time
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from core.config import BadInputError
from optimization.continual import buffer as buffer_lib
from optimization.continual import metrics as metrics_lib
from optimization.continual.streams import stack_stream
from optimization.deduce import losses
from optimization.deduce.configs import ARMS, Config
from optimization.deduce.data import make_stream
from optimization.deduce.model import Net, make_net

HP_FIELDS = ("lr", "w_cur", "alpha", "beta", "ewc_lambda", "use_lum", "use_gum", "detector_b",
             "delta", "epsilon", "gum_rate", "gum_maturity", "buffer_size", "fisher_decay", "released", "pull",
             "weight_decay")


class RunState(NamedTuple):
    params: Any
    buffer: buffer_lib.Buffer
    fisher: Any
    anchor: Any               # theta at the end of the previous task (theta_{t-1})
    copy: Any                 # released form: the unlearned copy (last LUM's SGD copy, or theta at task end)
    gum: losses.GumState
    key: jax.Array            # typed PRNG key of this run
    step: jax.Array           # global step
    flag_b: jax.Array         # detector B's decision for the current task
    fired: jax.Array          # LUM activations in the current task
    conflicts: jax.Array      # detector G conflicts in the current task (whether or not LUM is on)
    resets: jax.Array         # GUM unit resets in the current task


def make_runs(config: Config, variants: Sequence[Mapping[str, float]] | None = None,
              arm_overrides: Mapping[str, Mapping[str, float]] | None = None
              ) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """Enumerate runs and their hyper-parameters: returns (descriptions, {field: (R,) array}).

    variants: hyper-parameter overrides crossed with every arm; arm_overrides: per-arm overrides (e.g. the
    (delta, epsilon) selected for that arm on the validation split)."""
    variants = list(variants) if variants else [{}]
    tr, dd = config.train, config.deduce
    runs, rows = [], []
    for arm in config.arms:
        base, lum, gum, detector, form = ARMS[arm]
        released = (form or dd.unlearn_form) == "released" and (lum or gum)
        for buf in config.buffer_sizes:
            for v_index, variant in enumerate(variants):
                for s in range(config.seeds):
                    hp = dict(lr=tr.lr, w_cur=1.0,
                              alpha=tr.der_alpha if base == "derpp" else 0.0,
                              beta=(tr.der_beta if base == "derpp" else 1.0) if base != "ewc" else 0.0,
                              ewc_lambda=tr.ewc_lambda if base == "ewc" else 0.0,
                              use_lum=float(lum), use_gum=float(gum), detector_b=float(detector == "B"),
                              delta=dd.released_delta if released else dd.delta, epsilon=dd.epsilon,
                              gum_rate=dd.gum_rate, gum_maturity=float(dd.gum_maturity), buffer_size=float(buf),
                              fisher_decay=tr.ewc_gamma if base == "ewc" else dd.fisher_decay,
                              released=float(released), pull=dd.released_pull if released else 0.0,
                              weight_decay=dd.released_weight_decay if released else 0.0)
                    unknown = set(variant) - set(hp)
                    if unknown:
                        raise BadInputError(f"variant keys {sorted(unknown)}, expected a subset of {HP_FIELDS}")
                    own = dict((arm_overrides or {}).get(arm, {}))
                    unknown |= set(own) - set(hp)
                    if unknown:
                        raise BadInputError(f"variant keys {sorted(unknown)}, expected a subset of {HP_FIELDS}")
                    hp.update(own)
                    hp.update(variant)
                    runs.append(dict(arm=arm, buffer=buf, seed=config.seed + s, variant=v_index,
                                     form="released" if released else ("ours" if lum or gum else ""),
                                     **own, **variant))
                    rows.append(hp)
    hps = {k: np.array([r[k] for r in rows], np.float32) for k in HP_FIELDS}
    return runs, hps


class Trainer:
    """Compiled pieces for one config and stream shape; all functions act on vmapped (R, ...) run states."""

    def __init__(self, config: Config, net: Net, arrays: Mapping[str, jax.Array], num_classes: int):
        self.config, self.net, self.arrays = config, net, arrays
        self.num_classes = num_classes
        tr = config.train
        self.capacity = max(config.buffer_sizes)
        self.input_shape = tuple(arrays["train_x"].shape[2:])
        n_max = int(arrays["train_x"].shape[1])
        self.steps_per_epoch = -(-n_max // tr.batch_size)
        self.steps_per_task = tr.epochs * self.steps_per_epoch
        self.min_n = int(np.min(np.asarray(arrays["train_n"])))
        dd = config.deduce
        # detector B's partial training runs only when an arm uses detector B (its cost is per run, vmapped)
        uses_b = any(ARMS[a][3] == "B" for a in config.arms)
        self.probe_steps = max(1, round(dd.bound_probe_frac * self.steps_per_task)) if uses_b else 0
        self.bound_rows = max(1, min(dd.bound_eval_rows, self.min_n // 2))
        self.arrays = None  # the data are arguments of the compiled functions, never baked-in constants
        self._chunk = jax.jit(jax.vmap(self._chunk_one, in_axes=(0, 0, None, None, None, None)), static_argnums=5)
        self._begin = jax.jit(jax.vmap(self._begin_one, in_axes=(0, 0, None, None)))
        self._end = jax.jit(jax.vmap(self._end_one, in_axes=(0, 0, None, None)))
        self._eval = jax.jit(jax.vmap(self._eval_one, in_axes=(0, None)))

    # ---- state -------------------------------------------------------------------------------------------
    def init_states(self, seeds: np.ndarray) -> RunState:
        def one(seed):
            key = jax.random.key(seed)
            params = self.net.init(jax.random.fold_in(key, 0))
            zeros = jax.tree.map(jnp.zeros_like, params)
            z = jnp.zeros((), jnp.int32)
            return RunState(params=params,
                            buffer=buffer_lib.init_buffer(self.capacity, self.input_shape, self.num_classes),
                            fisher=zeros, anchor=params, copy=params,
                            gum=losses.init_gum(params, self.net.gum_pairs),
                            key=jax.random.fold_in(key, 1), step=z, flag_b=jnp.zeros((), bool),
                            fired=z, conflicts=z, resets=z)
        return jax.jit(jax.vmap(one))(jnp.asarray(seeds, jnp.uint32))

    # ---- one step ----------------------------------------------------------------------------------------
    def train_step(self, state: RunState, hp: Mapping[str, jax.Array], xb: jax.Array, yb: jax.Array,
                   t: jax.Array) -> tuple[RunState, dict[str, jax.Array]]:
        """One step of one run on a batch (xb (B, ...), yb (B,)) of task t."""
        cfg, dd = self.config.train, self.config.deduce
        apply = self.net.apply
        key = jax.random.fold_in(state.key, state.step)
        k1, k2, kc, kl, kg, kr = jax.random.split(key, 6)
        buf, size = state.buffer, hp["buffer_size"].astype(jnp.int32)
        i1, m1 = buffer_lib.sample_indices(buf, k1, cfg.buffer_batch, size)
        i2, m2 = buffer_lib.sample_indices(buf, k2, cfg.buffer_batch, size)
        ic, mc = buffer_lib.sample_indices(buf, kc, dd.conflict_batch, size, where=buf.task < t)
        theta = state.params

        # Detect (G): the current batch's CE gradient against the old-task replay gradient.
        net = self.net   # batch-norm statistics (ResNet-18) are no parameters: masked out of gradients
        g_t = net.mask_stats(jax.grad(lambda p: losses.cross_entropy(apply(p, xb)[0], yb))(theta))
        g_m = net.mask_stats(jax.grad(lambda p: losses.cross_entropy(apply(p, buf.x[ic])[0], buf.y[ic], mc))(theta))
        has_old = jnp.sum(mc) > 0
        conflict = losses.gradient_conflict(g_t, g_m, hp["epsilon"]) & has_old
        detected = jnp.where(hp["detector_b"] > 0, state.flag_b & has_old, conflict)
        fire = (hp["use_lum"] > 0) & detected

        # Decide + LUM: unlearn locally before learning.
        pick = lambda c, a, b: jax.tree.map(lambda x, y: jnp.where(c, x, y), a, b)  # noqa: E731
        # released form (and our code form): SGD copy on -CE + alpha |theta - theta_prev|^2, then a step of
        # delta x |theta| per tensor along the copy's direction, plus noise, damped by 1 / (1 + scale F)
        theta_c, copy_c = losses.lum_code(theta, g_t, state.anchor, state.fisher, kl, delta=hp["delta"],
                                          alpha=dd.lum_alpha, lr=dd.code_lr, noise=dd.code_noise,
                                          fisher_scale=dd.code_fisher_scale)
        if dd.lum_form == "code":
            theta_o, reg_target = theta_c, copy_c
        else:
            theta_o = losses.lum_paper(theta, g_t, state.anchor, state.fisher, delta=hp["delta"],
                                       alpha=dd.lum_alpha, damping=dd.fisher_damping)
            reg_target = state.anchor
        released = hp["released"] > 0
        theta_u = pick(released, theta_c, theta_o)
        theta1 = net.restore_stats(pick(fire, theta_u, theta), theta)
        # released form: the unlearned copy persists and the learn step pulls toward it on every step
        copy = pick(fire & released, copy_c, state.copy)

        # Learn: the base learner's loss (ER / DER++ / online EWC) at theta', plus the LUM regulariser.
        bsz = xb.shape[0]
        x_all = jnp.concatenate([xb, buf.x[i1], buf.x[i2]])

        def loss_fn(p):
            logits, hid, stats = net.apply_train(p, x_all)
            lt, l1, l2 = logits[:bsz], logits[bsz:bsz + cfg.buffer_batch], logits[bsz + cfg.buffer_batch:]
            ce_t = losses.cross_entropy(lt, yb)
            mse = jnp.sum(m1[:, None] * (l1 - buf.logits[i1]) ** 2) / jnp.maximum(jnp.sum(m1) * l1.shape[1], 1)
            ce_m = losses.cross_entropy(l2, buf.y[i2], m2)
            ewc = 0.5 * losses.fisher_penalty(p, state.anchor, state.fisher)
            lum_reg = losses.fisher_penalty(p, reg_target, state.fisher)
            pull = losses.fisher_penalty(p, copy, state.fisher)
            ours = fire & ~released
            total = (hp["w_cur"] * ce_t + hp["alpha"] * mse + hp["beta"] * ce_m + hp["ewc_lambda"] * ewc
                     + ours * dd.lum_beta * lum_reg + hp["pull"] * pull)
            return total, (lt, {k: v[:bsz] for k, v in hid.items()}, ce_t, stats)

        (loss, (lt, hid, ce_t, stats)), g = jax.value_and_grad(loss_fn, has_aux=True)(theta1)
        theta2 = jax.tree.map(lambda p, gi: p - hp["lr"] * (gi + hp["weight_decay"] * p), theta1, g)

        # GUM: reclaim capacity from mature, low-utility, low-Fisher units.
        theta3, gum3, n_reset = losses.gum_step(
            theta2, state.gum, hid, state.fisher, kg, self.net.gum_pairs, rate=hp["gum_rate"],
            maturity=hp["gum_maturity"], decay=dd.gum_decay, gate_scale=dd.gum_gate_scale)
        use_gum = hp["use_gum"] > 0
        theta3 = pick(use_gum, theta3, theta2)
        gum = pick(use_gum, gum3, state.gum)
        n_reset = jnp.where(use_gum, n_reset, 0)
        theta3 = net.set_stats(theta3, stats)   # the running statistics: the batch's EMA, nothing else

        new_buf = buffer_lib.reservoir_add(buf, xb, yb, jax.lax.stop_gradient(lt), t, kr, size)
        new_state = state._replace(params=theta3, buffer=new_buf, gum=gum, copy=copy, step=state.step + 1,
                                   fired=state.fired + fire.astype(jnp.int32),
                                   conflicts=state.conflicts + conflict.astype(jnp.int32),
                                   resets=state.resets + n_reset)
        return new_state, {"loss": loss, "ce": ce_t, "fired": fire.astype(jnp.float32)}

    # ---- per-task pieces (one run; vmapped) --------------------------------------------------------------
    def _order(self, arrays, key: jax.Array, t: jax.Array) -> jax.Array:
        """Batch indices for all steps of task t: (steps_per_task, B); each epoch a fresh permutation of the
        task's n rows, cycled to the largest task's size so every task has the same number of steps."""
        n = arrays["train_n"][t]
        n_max = arrays["train_x"].shape[1]
        bsz = self.config.train.batch_size
        pos = jnp.arange(self.steps_per_epoch * bsz)

        def epoch(e):
            u = jax.random.uniform(jax.random.fold_in(jax.random.fold_in(key, t), e), (n_max,))
            perm = jnp.argsort(jnp.where(jnp.arange(n_max) < n, u, 2.0))
            return perm[pos % n]

        return jax.vmap(epoch)(jnp.arange(self.config.train.epochs)).reshape(self.steps_per_task, bsz)

    def _chunk_one(self, state: RunState, hp, arrays, t, start, length: int):
        order = self._order(arrays, jax.random.fold_in(state.key, 10_000_019), t)
        idx = jax.lax.dynamic_slice_in_dim(order, start, length)
        x_task, y_task = arrays["train_x"][t], arrays["train_y"][t]

        def body(s, ix):
            return self.train_step(s, hp, x_task[ix], y_task[ix], t)

        state, metrics = jax.lax.scan(body, state, idx)
        return state, jax.tree.map(jnp.mean, metrics)

    def _begin_one(self, state: RunState, hp, arrays, t) -> RunState:
        """Reset the per-task counters and evaluate detector B's transferability bound for task t."""
        dd = self.config.deduce
        buf = state.buffer
        size = hp["buffer_size"].astype(jnp.int32)
        filled = jnp.arange(self.capacity) < jnp.minimum(buf.n_seen, size)
        w_old = (filled & (buf.task < t)).astype(jnp.float32)
        out = bound_detector(self.net.apply, state.params, buf.x, buf.y, w_old, arrays["train_x"][t],
                             arrays["train_y"][t], arrays["train_n"][t], jax.random.fold_in(state.key, 20_000_003 + t),
                             feature_layer=self.net.feature_layer, num_classes=self.num_classes,
                             probe_steps=self.probe_steps, lr=hp["lr"], batch=self.config.train.batch_size,
                             eval_rows=self.bound_rows, domain_steps=dd.domain_steps, c=dd.bound_c)
        z = jnp.zeros((), jnp.int32)
        return state._replace(flag_b=out["flag"], fired=z, conflicts=z, resets=z)

    def _end_one(self, state: RunState, hp, arrays, t) -> RunState:
        """Fisher F <- decay F + F_task on a sample of task t; anchor <- theta."""
        dd = self.config.deduce
        n = arrays["train_n"][t]
        m = -(-min(dd.fisher_samples, int(arrays["train_x"].shape[1])) // 16) * 16
        key = jax.random.fold_in(state.key, 30_000_001 + t)
        idx = jax.random.randint(key, (m,), 0, n)
        ones = jnp.ones((m,), jnp.float32)
        f_ours = losses.diag_fisher(self.net.apply, state.params, arrays["train_x"][t][idx],
                                    jax.random.fold_in(key, 1), ones)
        f_rel = losses.diag_fisher_released(self.net.apply, state.params, arrays["train_x"][t][idx],
                                            arrays["train_y"][t][idx], ones)
        f_new = self.net.mask_stats(jax.tree.map(lambda a, b: jnp.where(hp["released"] > 0, a, b), f_rel, f_ours))
        fisher = jax.tree.map(lambda a, b: hp["fisher_decay"] * a + b, state.fisher, f_new)
        # the released code reloads its unlearning copy from the network at every task's end
        return state._replace(fisher=fisher, anchor=state.params, copy=state.params)

    def _eval_one(self, params, arrays) -> tuple[jax.Array, jax.Array]:
        """Class-IL (single head) and task-IL (head masked to the task's classes) accuracy on every task."""
        tx, ty, tn, mask = (arrays[k] for k in ("test_x", "test_y", "test_n", "class_mask"))
        num_t, m = ty.shape
        logits = self.net.apply(params, tx.reshape(num_t * m, *tx.shape[2:]))[0].reshape(num_t, m, -1)
        valid = jnp.arange(m)[None, :] < tn[:, None]
        acc_c = jnp.sum(valid * (jnp.argmax(logits, -1) == ty), 1) / tn
        masked = jnp.where(mask[:, None, :] > 0, logits, -jnp.inf)
        acc_t = jnp.sum(valid * (jnp.argmax(masked, -1) == ty), 1) / tn
        return acc_c, acc_t


def bound_detector(apply, params, x_old, y_old, w_old, x_task, y_task, n_task, key, *, feature_layer: str,
                   num_classes: int, probe_steps: int, lr, batch: int, eval_rows: int, domain_steps: int,
                   c) -> dict[str, jax.Array]:
    """Detector B for a new task: fire when E_T > E_S + |1 - 2 eps(h_d)| + c |LEEP|.

    E_S: the current model's class-IL error on the old buffer rows (w_old 1 for real old rows). eps(h_d): the
    held-out error of a domain classifier (old rows vs `eval_rows` new rows) on the last hidden features; LEEP
    from the current softmax on those new rows. E_T: the error on those held-out new rows AFTER partial training
    (`probe_steps` SGD steps of CE on the task's other rows, from the current weights, on a throw-away copy),
    as the released code measures it after 30 % of the epochs; before any training E_T is ~1 in class-IL, so
    the bound could only fire on the untrained head. x_task (n_max, ...) with n_task real rows.
    Returns {flag, err_new, err_new_before, bound, err_old, domain_err, leep}."""
    n_max = x_task.shape[0]
    k_perm, k_dom, k_probe = jax.random.split(key, 3)
    u = jax.random.uniform(k_perm, (n_max,))
    perm = jnp.argsort(jnp.where(jnp.arange(n_max) < n_task, u, 2.0))
    ev = perm[:eval_rows]
    x_new, y_new = x_task[ev], y_task[ev]
    w_new = jnp.ones((eval_rows,), jnp.float32)
    lo, ho = apply(params, x_old)
    ln, hn = apply(params, x_new)
    err_old = jnp.sum(w_old * (jnp.argmax(lo, -1) != y_old)) / jnp.maximum(jnp.sum(w_old), 1.0)
    eps_d = losses.domain_error(ho[feature_layer], w_old, hn[feature_layer], w_new, k_dom, steps=domain_steps)
    score = losses.leep(jax.nn.softmax(ln), y_new, num_classes, w_new)
    bound = losses.transfer_bound(err_old, eps_d, score, c)

    def probe(p, k):
        j = eval_rows + jax.random.randint(k, (batch,), 0, jnp.maximum(n_task - eval_rows, 1))
        ix = perm[j]
        g = jax.grad(lambda q: losses.cross_entropy(apply(q, x_task[ix])[0], y_task[ix]))(p)
        return jax.tree.map(lambda a, b: a - lr * b, p, g), None

    trained, _ = jax.lax.scan(probe, params, jax.random.split(k_probe, probe_steps))
    err_new = jnp.mean(jnp.argmax(apply(trained, x_new)[0], -1) != y_new)
    flag = (err_new > bound) & (jnp.sum(w_old) > 0)
    return dict(flag=flag, err_new=err_new, err_new_before=jnp.mean(jnp.argmax(ln, -1) != y_new), bound=bound,
                err_old=err_old, domain_err=eps_d, leep=score)


_TRAINERS: dict[tuple, Trainer] = {}


def _trainer(config: Config, net: Net, arrays, num_classes: int) -> Trainer:
    """One Trainer (and so one set of compiled functions) per static setting, reused across calls."""
    static = dataclasses.replace(config, train=dataclasses.replace(config.train, checkpoint=False), arms=("er",),
                                 seeds=1, seed=0, buffer_sizes=(max(config.buffer_sizes),))
    key = (static, tuple((k, v.shape, str(v.dtype)) for k, v in sorted(arrays.items())),
           tuple(np.asarray(arrays["train_n"]).tolist()), num_classes)
    if key not in _TRAINERS:
        _TRAINERS[key] = Trainer(config, net, arrays, num_classes)
    return _TRAINERS[key]


def _host(x):
    return np.asarray(jax.device_get(x))


def run_stream(config: Config, workdir: pathlib.Path | str | None = None, *,
               variants: Sequence[Mapping[str, float]] | None = None,
               arm_overrides: Mapping[str, Mapping[str, float]] | None = None, mesh: jax.sharding.Mesh | None = None,
               stop_after_chunks: int | None = None, progress: bool = True) -> dict[str, Any]:
    """Train every run over the whole stream; returns per-run accuracy matrices and summaries.

    workdir + config.train.checkpoint: save after every chunk, resume from the latest checkpoint.
    mesh: shard the run axis over the mesh's "data" axis (runs must divide evenly).
    stop_after_chunks: stop early (simulates an interruption; used by the resume test).
    """
    t0 = time.time()
    stream = make_stream(config.data, flatten=not config.model.conv and config.model.arch == "mlp")
    stacked = stack_stream(stream)
    runs, hps = make_runs(config, variants, arm_overrides)
    num_runs = len(runs)
    if mesh is not None:
        from jax.sharding import NamedSharding
        from jax.sharding import PartitionSpec as P
        n_data = mesh.shape["data"]
        if num_runs % n_data:
            raise BadInputError(f"{num_runs} runs do not divide over the mesh's data axis of size {n_data}")
        run_sharding = NamedSharding(mesh, P("data"))
        arrays = {k: jax.device_put(v, NamedSharding(mesh, P())) for k, v in stacked.items()}
    else:
        run_sharding = None
        arrays = {k: jnp.asarray(v) for k, v in stacked.items()}
    net = make_net(config.model, tuple(stacked["train_x"].shape[2:]), stream.num_classes)
    trainer = _trainer(config, net, arrays, stream.num_classes)
    hp = {k: jnp.asarray(v) for k, v in hps.items()}
    seeds = np.array([r["seed"] * 1000 + r["variant"] for r in runs], np.uint32)
    states = trainer.init_states(seeds)
    if run_sharding is not None:
        states = jax.device_put(states, run_sharding)
        hp = jax.device_put(hp, run_sharding)

    num_tasks = len(stream.tasks)
    data_state: dict[str, Any] = {"task": 0, "pos": 0, "acc_class": [], "acc_task": [], "fired": [],
                                  "conflicts": [], "resets": [], "flag_b": [], "baseline_class": None,
                                  "baseline_task": None, "train_seconds": 0.0}
    ckpt, log = None, None
    if workdir is not None and config.train.checkpoint:
        from core.checkpoint import Checkpointer
        ckpt = Checkpointer(pathlib.Path(workdir) / "checkpoints", keep=2, config=config)
        if ckpt.latest_step() is not None:
            states, data_state = ckpt.restore(states)
    if workdir is not None:  # the run folder's metrics.jsonl: each chunk's mean loss, each task's accuracies
        from core.train import MetricsLog
        resumed = data_state["task"] * trainer.steps_per_task + data_state["pos"]
        log = MetricsLog(pathlib.Path(workdir) / "metrics.jsonl", resumed, config=config)
    if data_state["baseline_class"] is None:
        b_c, b_t = trainer._eval(states.params, arrays)
        data_state["baseline_class"], data_state["baseline_task"] = _host(b_c).tolist(), _host(b_t).tolist()

    from core.train import check_finite

    chunk = config.train.chunk_steps
    total_chunks = num_tasks * -(-trainer.steps_per_task // chunk)
    done_chunks = data_state["task"] * -(-trainer.steps_per_task // chunk) + -(-data_state["pos"] // chunk)
    bar = None
    if progress:
        from core.train import progress as progress_bar
        bar = progress_bar(total=total_chunks, desc=f"deduce {config.data.dataset} ({num_runs} runs)")
        bar.update(done_chunks)
    chunks_now = 0
    history = []
    for t in range(data_state["task"], num_tasks):
        t_arr = jnp.asarray(t, jnp.int32)
        if data_state["pos"] == 0:
            states = trainer._begin(states, hp, arrays, t_arr)
        while data_state["pos"] < trainer.steps_per_task:
            if stop_after_chunks is not None and chunks_now >= stop_after_chunks:
                if ckpt is not None:
                    ckpt.close()
                if log is not None:
                    log.close()
                return {"stopped": True, "data_state": data_state, "final_states": states,
                        "final_params": states.params}
            length = min(chunk, trainer.steps_per_task - data_state["pos"])
            states, metrics = trainer._chunk(states, hp, arrays, t_arr,
                                             jnp.asarray(data_state["pos"], jnp.int32), length)
            data_state["pos"] += length
            chunks_now += 1
            history.append({"task": t, "pos": data_state["pos"],
                            **{k: float(np.mean(_host(v))) for k, v in metrics.items()}})
            # the chunk's loss and the parameter norm, before the checkpoint (steps count over all tasks)
            done = t * trainer.steps_per_task + data_state["pos"]
            check_finite({"loss": history[-1]["loss"]}, states.params, first=done - length + 1, last=done,
                         checkpointer=ckpt)
            if log is not None:
                log.write({"step": done, **history[-1]})
            if ckpt is not None:
                ckpt.save(done, states, data_state=data_state)
            if bar is not None:
                bar.update(1)
        data_state["fired"].append(_host(states.fired).tolist())
        data_state["conflicts"].append(_host(states.conflicts).tolist())
        data_state["resets"].append(_host(states.resets).tolist())
        data_state["flag_b"].append(_host(states.flag_b).astype(int).tolist())
        states = trainer._end(states, hp, arrays, t_arr)
        acc_c, acc_t = trainer._eval(states.params, arrays)
        data_state["acc_class"].append(_host(acc_c).tolist())
        data_state["acc_task"].append(_host(acc_t).tolist())
        data_state["task"], data_state["pos"] = t + 1, 0
        # no save here: a resume from the task's last chunk (pos == steps_per_task) redoes end_task + eval
        if log is not None:  # the mean over runs of the accuracy on the tasks seen so far, after task t
            seen = np.array(data_state["acc_class"][-1])[:, :t + 1]
            log.write({"step": (t + 1) * trainer.steps_per_task, "task_done": t,
                       "class_avg_acc": float(seen.mean() * 100)})
    if bar is not None:
        bar.close()
    if ckpt is not None:
        ckpt.close()
    if log is not None:
        log.close()

    acc_class = np.array(data_state["acc_class"]).transpose(1, 0, 2) * 100   # (R, T, T)
    acc_task = np.array(data_state["acc_task"]).transpose(1, 0, 2) * 100
    base_c = np.array(data_state["baseline_class"]) * 100                     # (R, T)
    base_t = np.array(data_state["baseline_task"]) * 100
    fired = np.array(data_state["fired"]).T                                   # (R, T)
    conflicts = np.array(data_state["conflicts"]).T
    resets = np.array(data_state["resets"]).T
    flag_b = np.array(data_state["flag_b"]).T                                 # (R, T) detector B per task
    per_run = []
    for r, desc in enumerate(runs):
        row = dict(desc)
        row.update({f"class_{k}": v for k, v in metrics_lib.summarize(acc_class[r], base_c[r]).items()})
        row.update({f"task_{k}": v for k, v in metrics_lib.summarize(acc_task[r], base_t[r]).items()})
        steps_after_first = trainer.steps_per_task * max(num_tasks - 1, 1)
        row["lum_rate"] = float(fired[r, 1:].sum() / steps_after_first) if num_tasks > 1 else 0.0
        row["conflict_rate"] = float(conflicts[r, 1:].sum() / steps_after_first) if num_tasks > 1 else 0.0
        row["gum_resets"] = int(resets[r].sum())
        row["b_flags"] = [int(v) for v in flag_b[r]]
        row["acc_matrix_class"] = acc_class[r].round(2).tolist()
        row["acc_matrix_task"] = acc_task[r].round(2).tolist()
        per_run.append(row)
    return {"runs": per_run, "history": history, "steps_per_task": trainer.steps_per_task,
            "num_tasks": num_tasks, "scenario": stream.scenario, "final_params": states.params,
            "final_states": states, "seconds": time.time() - t0}


def aggregate(per_run: Sequence[Mapping[str, Any]], keys=("class_avg_acc", "class_forgetting", "class_bwt",
                                                           "task_avg_acc", "task_forgetting", "lum_rate",
                                                           "conflict_rate", "gum_resets"),
              group=("arm", "buffer")) -> list[dict[str, Any]]:
    """Mean and standard deviation over seeds for each (arm, buffer[, variant]) group."""
    groups: dict[tuple, list] = {}
    for r in per_run:
        groups.setdefault(tuple(r.get(g) for g in group), []).append(r)
    out = []
    for gk, rows in groups.items():
        row = dict(zip(group, gk))
        row["seeds"] = len(rows)
        for k in keys:
            vals = np.array([r[k] for r in rows], float)
            row[k] = float(vals.mean())
            row[k + "_std"] = float(vals.std(ddof=1)) if len(vals) > 1 else 0.0
        out.append(row)
    return out


def run(config: Config, workdir: pathlib.Path) -> dict[str, Any]:
    """`iclr26 run deduce`: train all runs, write metrics.json and plots into workdir."""
    from core import plots
    from core.train import write_metrics
    workdir = pathlib.Path(workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    result = run_stream(config, workdir)
    table = aggregate(result["runs"])
    label = lambda r: f"{r['arm']} (buf {r['buffer']})"  # noqa: E731
    plots.bar_plot(workdir / "class_il_accuracy.png", {label(r): r["class_avg_acc"] for r in table},
                   errors={label(r): r["class_avg_acc_std"] for r in table},
                   title=f"{config.data.dataset}: average accuracy after the last task", ylabel="accuracy %")
    curves = {}
    for r in table:
        mats = [np.array(x["acc_matrix_class"]) for x in result["runs"]
                if x["arm"] == r["arm"] and x["buffer"] == r["buffer"]]
        avg = np.mean([[m[i, :i + 1].mean() for i in range(m.shape[0])] for m in mats], 0)
        curves[label(r)] = (np.arange(1, len(avg) + 1), avg)
    plots.line_plot(workdir / "accuracy_over_tasks.png", curves, title="average accuracy on tasks seen so far",
                    xlabel="tasks learned", ylabel="accuracy %")
    metrics = {"dataset": config.data.dataset, "scenario": result["scenario"], "num_tasks": result["num_tasks"],
               "steps_per_task": result["steps_per_task"], "seconds": round(result["seconds"], 2),
               "table": table,
               "runs": [{k: v for k, v in r.items() if not k.startswith("acc_matrix")} for r in result["runs"]]}
    for r in table:
        metrics[f"{r['arm']}_buf{r['buffer']}_class_avg_acc"] = r["class_avg_acc"]
    write_metrics(workdir, metrics)
    return metrics
