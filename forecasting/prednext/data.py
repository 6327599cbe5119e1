"""Videos for PredNext: the "moving digits" generator, clip + future-clip sampling, label-keeping
augmentations, and a loader for user-provided UCF101 / HMDB51 frame folders.

Moving digits: scikit-learn's 8x8 digits (1,797 images, bundled with scikit-learn, no download) are scaled
to 12-16 px and moved on a canvas (32x32 by default) for `length` frames with one of eight motion classes.
Every frame is rendered from the 8x8 sprite by an inverse affine map and bilinear sampling (in JAX), with
positions wrapping around the canvas (so a translation is an exact circular shift of the previous frame).
"""

from __future__ import annotations

import dataclasses
import math
import pathlib
import re
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

from core.config import BadInputError, check
from core.data import input_file, input_folder

#: motion classes: (name, velocity (dy, dx) px/frame, angular velocity rad/frame, log-zoom rate /frame)
MOTIONS: tuple[tuple[str, tuple[int, int], float, float], ...] = (
    ("right", (0, 1), 0.0, 0.0),
    ("left", (0, -1), 0.0, 0.0),
    ("down", (1, 0), 0.0, 0.0),
    ("up", (-1, 0), 0.0, 0.0),
    ("rotate_cw", (0, 0), math.radians(8.0), 0.0),
    ("rotate_ccw", (0, 0), -math.radians(8.0), 0.0),
    ("zoom_in", (0, 0), 0.0, math.log(2.0) / 32),
    ("zoom_out", (0, 0), 0.0, -math.log(2.0) / 32),
)
MOTION_NAMES = tuple(m[0] for m in MOTIONS)

#: the "order" task: the video shows symbols d0, d0 + s, d0 + 2s, ... (mod the number of symbols), each for
#: `hold` frames; class = the index of s. Classes 2i and 2i + 1 are time reverses (same frames, opposite order).
#: "digits": the 10 digits counting up / down by 1, 2 or 3; "bars": three glyphs (horizontal bar, vertical bar,
#: hollow square) cycled in one of the two cyclic orders.
ORDER_STEPS: dict[str, tuple[int, ...]] = {"digits": (1, -1, 2, -2, 3, -3), "bars": (1, -1)}
ORDER_NAMES = {k: tuple(f"{'up' if s > 0 else 'down'}{abs(s)}" for s in v) for k, v in ORDER_STEPS.items()}


def bar_glyphs() -> np.ndarray:
    """(3, 8, 8) in [0, 1]: a horizontal bar, a vertical bar, a hollow square."""
    g = np.zeros((3, 8, 8), np.float32)
    g[0, 3:5, :] = 1.0
    g[1, :, 3:5] = 1.0
    g[2, [0, 1, 6, 7], :] = 1.0
    g[2, :, [0, 1, 6, 7]] = 1.0
    return g

#: the labels of each task, the task label first (probed, fine-tuned and used for retrieval)
TASK_LABELS = {"motion": ("motion", "digit"), "order": ("order", "digit")}


@dataclasses.dataclass(frozen=True, kw_only=True)
class VideoConfig:
    """The moving-digits generator and the clip sampler."""

    n_train: int = 1024  # generated training videos
    n_test: int = 512  # generated test videos
    canvas: int = 32  # frame size, px (square)
    length: int = 32  # frames per video
    min_size: int = 12  # sprite size on the canvas, px (drawn uniformly in [min_size, max_size])
    max_size: int = 16  # largest sprite size, px
    clip_len: int = 8  # T: frames per clip = SNN time steps
    future_gap: int = 8  # the future clip starts at least this many frames after the clip starts
    jitter: int = 1  # temporal jitter of each view's start, frames (+-)
    seed: int = 0
    task: str = "motion"  # "motion": 8 motion classes; "order": digits counting up / down (labels need frame order)
    hold: int = 2  # "order" task: frames each symbol of the sequence is shown
    symbols: str = "bars"  # "order" task: "bars" (3 glyphs, 2 cyclic orders) or "digits" (10 digits, 6 orders)

    def __post_init__(self):
        for name in ("n_train", "n_test", "canvas", "length", "min_size", "max_size", "clip_len"):
            check(getattr(self, name) >= 1, f"data.{name}", getattr(self, name), "an integer >= 1")
        check(self.min_size <= self.max_size <= self.canvas, "data.max_size", self.max_size,
              f"between data.min_size={self.min_size} and data.canvas={self.canvas}")
        check(self.future_gap >= self.clip_len, "data.future_gap", self.future_gap,
              f">= data.clip_len={self.clip_len} (the future clip must not overlap the clip)")
        check(self.jitter >= 0, "data.jitter", self.jitter, "an integer >= 0")
        check(self.length >= self.future_gap + self.clip_len + 2 * self.jitter, "data.length", self.length,
              f">= future_gap + clip_len + 2*jitter = {self.future_gap + self.clip_len + 2 * self.jitter}")
        check(self.task in TASK_LABELS, "data.task", self.task, f"one of {tuple(TASK_LABELS)}")
        check(self.hold >= 1, "data.hold", self.hold, "an integer >= 1")
        check(self.symbols in ORDER_STEPS, "data.symbols", self.symbols, f"one of {tuple(ORDER_STEPS)}")


def load_sprites() -> tuple[np.ndarray, np.ndarray]:
    """scikit-learn's digits: images (1797, 8, 8) in [0, 1] and labels (1797,)."""
    from sklearn.datasets import load_digits

    d = load_digits()
    return (d.images / 16.0).astype(np.float32), d.target.astype(np.int32)


def render_frame(sprite: jax.Array, center: jax.Array, angle: jax.Array, size: jax.Array,
                 canvas: int) -> jax.Array:
    """Draw an (8, 8) sprite centred at `center` (y, x), rotated by `angle` (rad, clockwise on screen,
    where y points down), `size` px wide, on a (canvas, canvas) image; the canvas wraps around (a torus)."""
    ys, xs = jnp.meshgrid(jnp.arange(canvas, dtype=jnp.float32), jnp.arange(canvas, dtype=jnp.float32),
                          indexing="ij")
    # offset of each pixel from the centre, wrapped into [-canvas/2, canvas/2)
    dy = jnp.mod(ys - center[0] + canvas / 2, canvas) - canvas / 2
    dx = jnp.mod(xs - center[1] + canvas / 2, canvas) - canvas / 2
    # inverse rotation: canvas offset -> sprite offset
    c, s = jnp.cos(angle), jnp.sin(angle)
    ry = c * dy - s * dx
    rx = s * dy + c * dx
    scale = 8.0 / size
    u = ry * scale + 3.5
    v = rx * scale + 3.5
    return jax.scipy.ndimage.map_coordinates(sprite, [u, v], order=1, mode="constant", cval=0.0)


def _trajectory(motion: jax.Array, t: jax.Array, center0: jax.Array, angle0: jax.Array, size0: jax.Array):
    vel = jnp.asarray([m[1] for m in MOTIONS], jnp.float32)[motion]
    omega = jnp.asarray([m[2] for m in MOTIONS], jnp.float32)[motion]
    zoom = jnp.asarray([m[3] for m in MOTIONS], jnp.float32)[motion]
    return center0 + vel * t, angle0 + omega * t, size0 * jnp.exp(zoom * t)


def generate(config: VideoConfig, n: int, key: jax.Array) -> dict[str, np.ndarray]:
    """`n` moving-digit videos: {"video": (n, length, canvas, canvas) uint8, "motion": (n,), "digit": (n,),
    "sprite" (n,) (index into `load_sprites()`), "center0", "angle0", "size0" (each video's initial pose)}."""
    sprites, digits = load_sprites()
    k = jax.random.split(key, 5)
    idx = jax.random.randint(k[0], (n,), 0, len(sprites))
    motion = jax.random.randint(k[1], (n,), 0, len(MOTIONS))
    center0 = jax.random.uniform(k[2], (n, 2), minval=0.0, maxval=config.canvas)
    angle0 = jax.random.uniform(k[3], (n,), minval=-0.3, maxval=0.3)
    size0 = jax.random.uniform(k[4], (n,), minval=config.min_size, maxval=config.max_size)
    # zooming digits start 1.4x smaller (zoom in) or larger (zoom out), so their mean size stays ~size0
    zoom_rate = jnp.asarray([m[3] for m in MOTIONS], jnp.float32)[motion]
    size0 = jnp.where(zoom_rate < 0, size0 * 1.4, jnp.where(zoom_rate > 0, size0 / 1.4, size0))
    # rotating and zooming digits stay near the centre
    still = jnp.asarray([m[1] == (0, 0) for m in MOTIONS])[motion]
    centre = config.canvas / 2 - 0.5
    center0 = jnp.where(still[:, None], centre + (center0 - config.canvas / 2) * 0.1, center0)
    times = jnp.arange(config.length, dtype=jnp.float32)
    sprite_arr = jnp.asarray(sprites)

    @jax.jit
    def render_video(i, m, c0, a0, s0):
        def frame(t):
            c, a, s = _trajectory(m, t, c0, a0, s0)
            return render_frame(sprite_arr[i], c, a, s, config.canvas)
        return jax.vmap(frame)(times)

    videos = jax.lax.map(lambda a: render_video(*a), (idx, motion, center0, angle0, size0), batch_size=64)
    video = np.asarray(jnp.clip(jnp.round(videos * 255.0), 0, 255).astype(jnp.uint8))
    return {"video": video, "motion": np.asarray(motion, np.int32), "digit": digits[np.asarray(idx)],
            "sprite": np.asarray(idx, np.int32), "center0": np.asarray(center0), "angle0": np.asarray(angle0),
            "size0": np.asarray(size0)}


def order_digits(d0: jax.Array, step: jax.Array, config: VideoConfig) -> jax.Array:
    """The symbol shown in each frame of an "order" video: (d0 + step * (t // hold)) mod the number of symbols
    (10 digits, 3 bars); d0, step (n,) -> (n, length)."""
    events = jnp.arange(config.length) // config.hold
    return jnp.mod(d0[:, None] + step[:, None] * events[None, :], 10 if config.symbols == "digits" else 3)


def render_order(sprite_table: jax.Array, digits: jax.Array, center: jax.Array, angle: jax.Array,
                 size: jax.Array, canvas: int) -> jax.Array:
    """Frames (n, L, canvas, canvas) in [0, 1]: frame t of video i draws sprite `sprite_table[i, digits[i, t]]`
    (sprite_table (n, 10, 8, 8): one drawing of each digit per video) at that video's fixed pose."""
    def video(table, ds, c, a, s):
        return jax.vmap(lambda d: render_frame(table[d], c, a, s, canvas))(ds)
    return jax.lax.map(lambda x: video(*x), (sprite_table, digits, center, angle, size), batch_size=64)


def generate_order(config: VideoConfig, n: int, key: jax.Array) -> dict[str, np.ndarray]:
    """`n` "order" videos: one static symbol at a time (`config.symbols`: digit drawings counting up or down by
    1, 2 or 3 mod 10, or three bar glyphs in one of two cyclic orders), each shown for `hold` frames; {"video"
    (n, L, canvas, canvas) uint8, "order" (n,) index into ORDER_STEPS[symbols], "digit" (n,) the first symbol}.
    A clip of T >= 2 hold frames identifies the class only through the order of its frames: reversed in time,
    a video of class 2i is exactly a video of class 2i + 1 (tested)."""
    steps = ORDER_STEPS[config.symbols]
    k = jax.random.split(key, 6)
    order = jax.random.randint(k[0], (n,), 0, len(steps))
    if config.symbols == "digits":
        sprites, digits = load_sprites()
        by_digit = [np.flatnonzero(digits == d) for d in range(10)]
        pick = np.asarray(jax.random.uniform(k[2], (n, 10)))  # one drawing of each digit per video
        table = np.stack([sprites[by_digit[d][(pick[:, d] * len(by_digit[d])).astype(int)]] for d in range(10)], 1)
    else:
        table = np.broadcast_to(bar_glyphs(), (n, 3, 8, 8)).copy()
    d0 = jax.random.randint(k[1], (n,), 0, table.shape[1])
    centre = config.canvas / 2 - 0.5
    center = centre + jax.random.uniform(k[3], (n, 2), minval=-config.canvas / 8, maxval=config.canvas / 8)
    angle = jax.random.uniform(k[4], (n,), minval=-0.3, maxval=0.3)
    size = jax.random.uniform(k[5], (n,), minval=config.min_size, maxval=config.max_size)
    step = jnp.asarray(steps)[order]
    frames = render_order(jnp.asarray(table), order_digits(d0, step, config), center, angle, size, config.canvas)
    video = np.asarray(jnp.clip(jnp.round(frames * 255.0), 0, 255).astype(jnp.uint8))
    return {"video": video, "order": np.asarray(order, np.int32), "digit": np.asarray(d0, np.int32),
            "sprite_table": table, "center0": np.asarray(center), "angle0": np.asarray(angle),
            "size0": np.asarray(size)}


def make_datasets(config: VideoConfig) -> dict[str, dict[str, np.ndarray]]:
    """Train and test sets of `config.task` videos (independent keys from `config.seed`)."""
    key = jax.random.key(config.seed)
    gen = generate if config.task == "motion" else generate_order
    return {"train": gen(config, config.n_train, jax.random.fold_in(key, 0)),
            "test": gen(config, config.n_test, jax.random.fold_in(key, 1))}


# ---------------------------------------------------------------- clip sampling (host side)


class ClipSampler:
    """Infinite, resumable batches of (clip window, future clip) from in-memory videos (N, L, H, W[, C]).

    Each item: "clip" (T + 2*jitter frames starting at s), "future" (T frames starting at s' >= s + gap),
    "motion", "digit". Views are cut from the window on the device (`augment`), each with its own jitter.
    """

    def __init__(self, videos: np.ndarray, labels: dict[str, np.ndarray], config: VideoConfig, batch_size: int,
                 *, seed: int = 0):
        if videos.ndim not in (4, 5):
            raise BadInputError(f"videos of shape {videos.shape}: expected (N, L, H, W) or (N, L, H, W, C)")
        if batch_size > len(videos):
            raise BadInputError(f"batch_size={batch_size}: expected at most the {len(videos)} videos")
        need = config.future_gap + config.clip_len + 2 * config.jitter
        if videos.shape[1] < need:
            raise BadInputError(f"videos of length {videos.shape[1]}: expected at least {need} frames")
        self.videos, self.labels, self.config, self.batch_size = videos, labels, config, batch_size
        self.seed, self.step = seed, 0

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return self

    def __next__(self) -> dict[str, np.ndarray]:
        c = self.config
        rng = np.random.default_rng([self.seed, self.step])
        self.step += 1
        n, length = self.videos.shape[:2]
        rows = rng.choice(n, self.batch_size, replace=False)
        window = c.clip_len + 2 * c.jitter
        last_start = length - c.future_gap - c.clip_len - c.jitter  # window start s - jitter, future >= s + gap
        s = rng.integers(0, last_start - c.jitter + 1, self.batch_size) + c.jitter  # clip start
        f = np.array([rng.integers(si + c.future_gap, length - c.clip_len + 1) for si in s])
        clip = np.stack([self.videos[r, si - c.jitter: si - c.jitter + window] for r, si in zip(rows, s)])
        future = np.stack([self.videos[r, fi: fi + c.clip_len] for r, fi in zip(rows, f)])
        out = {"clip": clip, "future": future, "start": s, "future_start": f}
        out.update({k: v[rows] for k, v in self.labels.items()})
        return out

    def state(self) -> dict[str, int]:
        return {"step": self.step, "seed": self.seed}

    def restore(self, state) -> None:
        self.step = int(state["step"])


# ---------------------------------------------------------------- augmentations (device side, jittable)


@dataclasses.dataclass(frozen=True, kw_only=True)
class AugmentConfig:
    """Label-keeping augmentations: no flips (a flip turns "left" into "right") and no temporal reversal."""

    min_scale: float = 0.7  # random resized crop: side of the crop as a fraction of the frame
    max_shift: float = 0.15  # crop centre offset, fraction of the frame
    brightness: float = 0.4  # multiplicative factor drawn in [1 - b, 1 + b]
    noise: float = 0.05  # std of additive Gaussian noise
    out_size: int = 32  # frames are resampled to out_size x out_size

    def __post_init__(self):
        check(0 < self.min_scale <= 1, "augment.min_scale", self.min_scale, "a number in (0, 1]")
        check(0 <= self.max_shift < 0.5, "augment.max_shift", self.max_shift, "a number in [0, 0.5)")
        check(0 <= self.brightness < 1, "augment.brightness", self.brightness, "a number in [0, 1)")
        check(self.noise >= 0, "augment.noise", self.noise, "a number >= 0")
        check(self.out_size >= 4, "augment.out_size", self.out_size, "an integer >= 4")


def crop_params(key: jax.Array, config: AugmentConfig) -> tuple[jax.Array, jax.Array]:
    """(scale, shift (2,)): the crop keeps orientation: the map frame -> crop is x' = (x - shift) / scale."""
    k1, k2 = jax.random.split(key)
    scale = jax.random.uniform(k1, (), minval=config.min_scale, maxval=1.0)
    shift = jax.random.uniform(k2, (2,), minval=-config.max_shift, maxval=config.max_shift)
    return scale, shift


def resized_crop(frames: jax.Array, scale: jax.Array, shift: jax.Array, out_size: int) -> jax.Array:
    """Crop (T, H, W, C) frames around centre*(1 + 2 shift) with side scale*H and resize to out_size
    (bilinear); the same crop for every frame, so motion direction and speed sign are kept."""
    t, h, w, ch = frames.shape
    grid = (jnp.arange(out_size, dtype=jnp.float32) + 0.5) / out_size - 0.5  # in [-0.5, 0.5)
    ys = ((grid * scale + 0.5 + shift[0]) * h - 0.5)[:, None] * jnp.ones((1, out_size))
    xs = ((grid * scale + 0.5 + shift[1]) * w - 0.5)[None, :] * jnp.ones((out_size, 1))

    def one(img):
        return jax.scipy.ndimage.map_coordinates(img, [ys, xs], order=1, mode="nearest")

    return jax.vmap(jax.vmap(one, in_axes=-1, out_axes=-1))(frames)


def to_float(frames: jax.Array) -> jax.Array:
    """uint8 frames (..., H, W) or (..., H, W, C) -> float32 in [0, 1] with a channel axis."""
    x = frames.astype(jnp.float32) / 255.0 if frames.dtype == jnp.uint8 else frames.astype(jnp.float32)
    return x[..., None] if x.ndim == 4 else x  # (B, T, H, W) -> (B, T, H, W, 1)


def augment_clip(key: jax.Array, frames: jax.Array, config: AugmentConfig,
                 noise_key: jax.Array | None = None) -> jax.Array:
    """One view of one clip: frames (T, H, W, C) float -> (T, out, out, C). `noise_key` (default: from `key`)
    draws the additive noise, so a clip can share a view's crop and brightness but not its noise."""
    k1, k2, k3 = jax.random.split(key, 3)
    k3 = k3 if noise_key is None else noise_key
    scale, shift = crop_params(k1, config)
    x = resized_crop(frames, scale, shift, config.out_size)
    x = x * jax.random.uniform(k2, (), minval=1 - config.brightness, maxval=1 + config.brightness)
    return x + config.noise * jax.random.normal(k3, x.shape)


def make_views(key: jax.Array, clip_window: jax.Array, clip_len: int, jitter: int,
               config: AugmentConfig, noise_salt: int | None = None) -> jax.Array:
    """Two views of each clip: window (B, T + 2 jitter, H, W[, C]) -> (2, B, T, out, out, C).

    Each view starts at its own offset in [0, 2 jitter] (temporal jitter) and has its own crop, brightness
    and noise. With `noise_salt`, the same `key` gives the same crops and brightness but independent noise
    (the future clip of a view: same view, no shared-noise shortcut between a prediction and its target)."""
    x = to_float(clip_window)
    b = x.shape[0]
    keys = jax.random.split(key, 2 * b).reshape(2, b)

    def view(k, frames):
        ko, ka = jax.random.split(k)
        off = jax.random.randint(ko, (), 0, 2 * jitter + 1)
        seg = jax.lax.dynamic_slice_in_dim(frames, off, clip_len, axis=0)
        return augment_clip(ka, seg, config, None if noise_salt is None else jax.random.fold_in(ka, noise_salt))

    return jax.vmap(jax.vmap(view, in_axes=(0, 0)), in_axes=(0, None))(keys, x)


def center_clip(clip_window: jax.Array, clip_len: int, jitter: int, out_size: int) -> jax.Array:
    """The un-augmented clip (for evaluation): (B, T + 2 jitter, H, W[, C]) -> (B, T, out, out, C)."""
    x = to_float(clip_window)[:, jitter: jitter + clip_len]
    if x.shape[2] != out_size:
        x = jax.vmap(lambda f: resized_crop(f, jnp.float32(1.0), jnp.zeros(2), out_size))(x)
    return x


# ---------------------------------------------------------------- UCF101 / HMDB51 frame folders


@dataclasses.dataclass(frozen=True)
class VideoEntry:
    frames: tuple[pathlib.Path, ...]
    label: int
    name: str


_IMG = re.compile(r".*\.(jpg|jpeg|png)$", re.IGNORECASE)


def _frame_files(folder: pathlib.Path) -> tuple[pathlib.Path, ...]:
    def natural(p: pathlib.Path):
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", p.name)]
    return tuple(sorted((p for p in folder.iterdir() if _IMG.match(p.name)), key=natural))


def _text_lines(path: pathlib.Path) -> list[str]:
    """The non-blank lines of a split file; an unreadable one is one line naming it."""
    try:
        return [line for line in path.read_text().splitlines() if line.strip()]
    except (OSError, UnicodeDecodeError) as err:
        raise BadInputError(f"{path}: not a readable text split file ({type(err).__name__}: {err})") from None


def read_split(dataset: str, split_dir: str | pathlib.Path, split: int, subset: str
               ) -> tuple[list[tuple[str, str]], list[str]]:
    """[(class name, video stem)] for a standard split file, and the sorted class names.

    UCF101: `classInd.txt` ("1 ApplyEyeMakeup"), `trainlist0{split}.txt` ("Class/v_..._c01.avi 1"),
    `testlist0{split}.txt` ("Class/v_..._c01.avi"). HMDB51: `<class>_test_split{split}.txt`, lines
    "video.avi k" with k = 1 train, 2 test, 0 unused.
    """
    split_dir = pathlib.Path(split_dir)
    if dataset not in ("ucf101", "hmdb51"):
        raise BadInputError(f"dataset={dataset!r}: expected 'ucf101' or 'hmdb51'")
    if subset not in ("train", "test"):
        raise BadInputError(f"subset={subset!r}: expected 'train' or 'test'")
    if split not in (1, 2, 3):
        raise BadInputError(f"split={split}: expected 1, 2 or 3")
    if not split_dir.is_dir():
        raise BadInputError(f"split_dir={str(split_dir)!r}: expected a folder with the {dataset} split files "
                            f"({'classInd.txt, trainlist01.txt' if dataset == 'ucf101' else '<class>_test_split1.txt'}"
                            ", ...)")
    items: list[tuple[str, str]] = []
    if dataset == "ucf101":
        ind = split_dir / "classInd.txt"
        lst = split_dir / f"{subset}list0{split}.txt"
        for p in (ind, lst):
            if not p.exists():
                raise BadInputError(f"{p}: expected the UCF101 split file (from UCF101TrainTestSplits)")
            input_file(p, "a UCF101 split file (from UCF101TrainTestSplits)")
        classes = []
        for i, line in enumerate(_text_lines(ind), 1):
            if len(line.split()) != 2:
                raise BadInputError(f"{ind}:{i}: line {line!r}: expected '<index> <ClassName>'")
            classes.append(line.split()[1])
        for i, line in enumerate(_text_lines(lst), 1):
            parts = line.split()[0].split("/")
            if len(parts) != 2:
                raise BadInputError(f"{lst}:{i}: line {line!r}: expected '<ClassName>/<video>.avi [label]'")
            items.append((parts[0], pathlib.Path(parts[1]).stem))
    else:
        files = sorted(split_dir.glob(f"*_test_split{split}.txt"))
        if not files:
            raise BadInputError(f"{split_dir}: expected HMDB51 split files '<class>_test_split{split}.txt'")
        classes = sorted(f.name[: -len(f"_test_split{split}.txt")] for f in files)
        want = "1" if subset == "train" else "2"
        for f in files:
            cls = f.name[: -len(f"_test_split{split}.txt")]
            for line in _text_lines(f):
                parts = line.split()
                if len(parts) == 2 and parts[1] == want:
                    items.append((cls, pathlib.Path(parts[0]).stem))
    return items, classes


def frame_folder_entries(root: str | pathlib.Path, split_dir: str | pathlib.Path, *, dataset: str = "ucf101",
                         split: int = 1, subset: str = "train", min_frames: int = 1) -> list[VideoEntry]:
    """Videos of a split, read from frames extracted as `root/<class>/<video stem>/<frame>.jpg` (or png).

    A listed video whose folder is missing or has fewer than `min_frames` frames raises, naming it."""
    root = input_folder(root, f"{dataset} frames extracted as <class>/<video stem>/<frame>.jpg (data_root=...)")
    items, classes = read_split(dataset, split_dir, split, subset)
    index = {c: i for i, c in enumerate(classes)}
    out = []
    for cls, stem in items:
        if cls not in index:
            raise BadInputError(f"{split_dir}: class {cls!r} of the {subset} list is not in the class index "
                                f"({len(classes)} classes); expected the split files of one release")
        folder = root / cls / stem
        if not folder.is_dir():
            raise BadInputError(f"{folder}: listed in the {dataset} {subset} split {split} but missing; expected "
                                f"frames extracted to <root>/<class>/<video stem>/")
        frames = _frame_files(folder)
        if len(frames) < min_frames:
            raise BadInputError(f"{folder}: {len(frames)} frames, expected at least {min_frames}")
        out.append(VideoEntry(frames, index[cls], stem))
    return out


def load_frames(paths: Sequence[pathlib.Path], size: int) -> np.ndarray:
    """Read and resize frames to (len, size, size, 3) uint8 (a short-side resize and a centre crop)."""
    from PIL import Image

    out = []
    for p in paths:
        try:
            with Image.open(p) as im:
                im = im.convert("RGB")
                w, h = im.size
                s = size / min(w, h)
                im = im.resize((max(size, round(w * s)), max(size, round(h * s))), Image.BILINEAR)
                w, h = im.size
                left, top = (w - size) // 2, (h - size) // 2
                out.append(np.asarray(im.crop((left, top, left + size, top + size)), np.uint8))
        except (OSError, ValueError) as err:  # PIL: UnidentifiedImageError, truncated data, a folder
            raise BadInputError(f"{p}: not a readable image frame ({type(err).__name__}: {err}); expected a "
                                "JPEG or PNG frame") from None
    return np.stack(out)


class FrameFolderSampler:
    """Batches like `ClipSampler` from frame folders: a clip window (T + 2 jitter frames at `stride`) and
    a future clip starting at least `future_gap` strided frames later; "motion" holds the action label.

    Parallel input pipeline: the batch's videos are read by a pool of `workers` threads (JPEG decoding in PIL
    releases the GIL) and the next `prefetch` batches are read while the current one trains. Every batch is a
    function of (seed, step) only, so the batches, `state()` and `restore()` do not depend on `workers` or
    `prefetch` (tested)."""

    def __init__(self, entries: Sequence[VideoEntry], config: VideoConfig, batch_size: int, *, stride: int = 2,
                 size: int = 128, seed: int = 0, workers: int = 8, prefetch: int = 2):
        if not entries:
            raise BadInputError("entries: expected at least one video")
        if batch_size > len(entries):
            raise BadInputError(f"batch_size={batch_size}: expected at most the {len(entries)} videos")
        if workers < 0 or prefetch < 0:
            raise BadInputError(f"workers={workers}, prefetch={prefetch}: expected integers >= 0")
        self.entries, self.config, self.batch_size = list(entries), config, batch_size
        self.stride, self.size, self.seed, self.step = stride, size, seed, 0
        self.workers, self.prefetch = workers, prefetch
        self._readers = self._batches = None  # thread pools: frame reading, whole batches read ahead
        self._pending: dict[int, object] = {}  # step -> Future of that batch

    def __iter__(self):
        return self

    def _window(self, entry: VideoEntry, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        c = self.config
        window = c.clip_len + 2 * c.jitter
        n = len(entry.frames)
        need = (c.future_gap + c.clip_len + c.jitter) * self.stride
        s = int(rng.integers(0, max(1, n - need + 1)))
        idx = np.minimum(s + self.stride * np.arange(window), n - 1)
        f0 = s + self.stride * (c.jitter + c.future_gap)
        f0 = int(rng.integers(min(f0, n - 1), max(f0, n - c.clip_len * self.stride) + 1))
        fidx = np.minimum(f0 + self.stride * np.arange(c.clip_len), n - 1)
        return idx, fidx

    def _read(self, entry: VideoEntry, idx: np.ndarray, fidx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return (load_frames([entry.frames[i] for i in idx], self.size),
                load_frames([entry.frames[i] for i in fidx], self.size))

    def _batch(self, step: int) -> dict[str, np.ndarray]:
        """The batch of `step` (all random choices made here, in order, before any frame is read)."""
        rng = np.random.default_rng([self.seed, step])
        rows = rng.choice(len(self.entries), self.batch_size, replace=False)
        plan = [(self.entries[r], *self._window(self.entries[r], rng)) for r in rows]
        if self.workers > 1:
            if self._readers is None:
                self._readers = ThreadPoolExecutor(self.workers, thread_name_prefix="frames")
            pairs = list(self._readers.map(lambda a: self._read(*a), plan))
        else:
            pairs = [self._read(*a) for a in plan]
        return {"clip": np.stack([p[0] for p in pairs]), "future": np.stack([p[1] for p in pairs]),
                "motion": np.array([self.entries[r].label for r in rows], np.int32),
                "digit": np.zeros(self.batch_size, np.int32)}

    def __next__(self) -> dict[str, np.ndarray]:
        step = self.step
        self.step += 1
        if self.prefetch == 0:
            return self._batch(step)
        if self._batches is None:
            self._batches = ThreadPoolExecutor(self.prefetch, thread_name_prefix="batches")
        for s in range(step, step + self.prefetch + 1):  # this batch and the next `prefetch` ones in flight
            if s not in self._pending:
                self._pending[s] = self._batches.submit(self._batch, s)
        return self._pending.pop(step).result()

    def state(self) -> dict[str, int]:
        return {"step": self.step, "seed": self.seed}

    def restore(self, state) -> None:
        self.step = int(state["step"])
        self._pending.clear()  # batches read ahead for the old position are dropped
