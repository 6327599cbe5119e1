"""Moving digits: labels against measured displacement fields; clip sampling; label-keeping augmentations;
the UCF101 / HMDB51 frame-folder loader on a tiny fake folder."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image
from scipy import ndimage

from core.config import ConfigError
from forecasting.prednext.data import (
    MOTION_NAMES,
    MOTIONS,
    ORDER_STEPS,
    AugmentConfig,
    ClipSampler,
    FrameFolderSampler,
    VideoConfig,
    crop_params,
    frame_folder_entries,
    generate,
    generate_order,
    make_views,
    order_digits,
    render_order,
    resized_crop,
)

CFG = VideoConfig(n_train=48, n_test=8, length=20, clip_len=6, future_gap=6, jitter=1)


@pytest.fixture(scope="module")
def videos():
    return generate(CFG, 48, jax.random.key(0))


def shift_estimate(a, b):
    """The circular shift (dy, dx) that best maps frame a onto frame b (phase of the cross-correlation)."""
    corr = np.real(np.fft.ifft2(np.conj(np.fft.fft2(a)) * np.fft.fft2(b)))
    dy, dx = np.unravel_index(np.argmax(corr), corr.shape)
    n = a.shape[0]
    return (dy + n // 2) % n - n // 2, (dx + n // 2) % n - n // 2


def best_shift(a, b, max_shift=6):
    """The (dy, dx) minimising the mean squared error between a shifted by (dy, dx) and b on their overlap
    (no wrap-around: for cropped views, whose borders are not periodic)."""
    n = a.shape[0]
    best, arg = np.inf, None
    for dy in range(-max_shift, max_shift + 1):
        for dx in range(-max_shift, max_shift + 1):
            ya, yb = slice(max(0, -dy), n - max(0, dy)), slice(max(0, dy), n - max(0, -dy))
            xa, xb = slice(max(0, -dx), n - max(0, dx)), slice(max(0, dx), n - max(0, -dx))
            err = np.mean((a[ya, xa] - b[yb, xb]) ** 2)
            if err < best:
                best, arg = err, (dy, dx)
    return arg


def rotate_about(img, center, omega):
    """Forward-warp an image by a rotation of omega rad, clockwise on screen (y down): a point above the centre
    moves right. Output pixel p takes the input at R^-1 (p - c) + c."""
    ys, xs = np.meshgrid(np.arange(img.shape[0]), np.arange(img.shape[1]), indexing="ij")
    dy, dx = ys - center[0], xs - center[1]
    c, s = math.cos(omega), math.sin(omega)
    src_y = c * dy - s * dx + center[0]  # inverse of (dy, dx) -> (dy c + dx s, dx c - dy s)
    src_x = s * dy + c * dx + center[1]
    return ndimage.map_coordinates(img, [src_y, src_x], order=1, mode="constant")


def test_every_motion_class_has_its_displacement_field(videos):
    v = videos["video"].astype(np.float64) / 255.0
    motion = videos["motion"]
    assert set(motion) == set(range(len(MOTIONS)))
    assert videos["video"].dtype == np.uint8 and v.max() > 0.5
    for i in range(len(v)):
        name, vel, omega, zoom = MOTIONS[motion[i]]
        frames = v[i]
        if name in ("right", "left", "down", "up"):
            for t in (0, 7, 15):
                assert shift_estimate(frames[t], frames[t + 1]) == vel, (i, name, t)
                # a translation is an exact circular shift (up to uint8 rounding)
                diff = np.abs(np.roll(frames[t], vel, axis=(0, 1)) - frames[t + 1])
                assert diff.max() <= 1.5 / 255
        elif name.startswith("rotate"):
            c = videos["center0"][i]
            for t in (2, 9):
                good = np.abs(rotate_about(frames[t], c, omega) - frames[t + 1]).mean()
                wrong = np.abs(rotate_about(frames[t], c, -omega) - frames[t + 1]).mean()
                still = np.abs(frames[t] - frames[t + 1]).mean()
                assert good < 0.5 * wrong and good < 0.5 * still, (i, name, good, wrong, still)
        else:  # zoom: the drawn area grows (in) or shrinks (out) by exp(2 * rate * dt); the centre stays
            ratio = frames[-1].sum() / frames[0].sum()
            expected = math.exp(2 * zoom * (CFG.length - 1))
            assert abs(math.log(ratio) - math.log(expected)) < 0.15, (name, ratio, expected)
            cy = [(frames[t].sum(1) * np.arange(32)).sum() / frames[t].sum() for t in (0, CFG.length - 1)]
            assert abs(cy[0] - cy[1]) < 1.0


def test_digit_labels_are_the_sprites_labels(videos):
    from sklearn.datasets import load_digits

    d = load_digits()
    np.testing.assert_array_equal(videos["digit"], d.target[videos["sprite"]])
    assert len(np.unique(videos["digit"])) >= 8
    # frame 0 is the labelled sprite drawn at the initial pose: upscaling the 8x8 image to the drawn size
    # (scipy zoom, an independent resampler) matches the frame's bright region for a still, unrotated digit
    for i in range(len(videos["video"])):
        img = d.images[videos["sprite"][i]] / 16.0
        frame = videos["video"][i, 0] / 255.0
        ratio = frame.sum() / img.sum()  # area scales with (size / 8)^2
        assert abs(ratio - (videos["size0"][i] / 8.0) ** 2) < 0.25 * (videos["size0"][i] / 8.0) ** 2, i


def test_clip_sampler_windows_future_and_resume(videos):
    labels = {"motion": videos["motion"], "digit": videos["digit"]}
    s = ClipSampler(videos["video"], labels, CFG, 8, seed=3)
    b = next(s)
    assert b["clip"].shape == (8, CFG.clip_len + 2 * CFG.jitter, 32, 32)
    assert b["future"].shape == (8, CFG.clip_len, 32, 32)
    assert np.all(b["future_start"] >= b["start"] + CFG.future_gap)
    assert np.all(b["future_start"] + CFG.clip_len <= CFG.length)
    assert np.all(b["start"] - CFG.jitter >= 0)
    # contents: find each row's video and check the windows are the right frames
    for k in range(8):
        rows = [r for r in range(48) if np.array_equal(videos["video"][r, b["start"][k]], b["clip"][k, CFG.jitter])]
        r = rows[0]
        np.testing.assert_array_equal(b["future"][k], videos["video"][r, b["future_start"][k]:][:CFG.clip_len])
        assert b["motion"][k] == videos["motion"][r]
    state = s.state()
    nxt = next(s)
    s2 = ClipSampler(videos["video"], labels, CFG, 8, seed=3)
    s2.restore(state)
    np.testing.assert_array_equal(next(s2)["clip"], nxt["clip"])


def test_augmentations_keep_motion_direction_and_time_order(videos):
    aug = AugmentConfig(noise=0.0)
    crop = jax.jit(resized_crop, static_argnums=3)
    # a horizontal and a vertical ramp keep their orientation through any crop (no flips)
    ramp = jnp.broadcast_to(jnp.arange(32.0)[None, :, None], (32, 32, 1))[None]
    for seed in range(5):
        scale, shift = jax.jit(crop_params, static_argnums=1)(jax.random.key(seed), aug)
        out = np.asarray(crop(ramp, scale, shift, 32))[0, :, :, 0]
        # non-decreasing up to float32 rounding of the bilinear weights, and increasing end to end
        assert np.all(np.diff(out, axis=1) >= -1e-5) and np.all(np.diff(out, axis=1).sum(1) > 1)
        outv = np.asarray(crop(jnp.swapaxes(ramp, 1, 2), scale, shift, 32))[0, :, :, 0]
        assert np.all(np.diff(outv, axis=0) >= -1e-5) and np.all(np.diff(outv, axis=0).sum(0) > 1)
    # translation videos: the augmented views still move in the labelled direction
    v = videos["video"]
    trans = [i for i in range(len(v)) if MOTION_NAMES[videos["motion"][i]] in ("right", "left", "down", "up")][:6]
    window = jnp.asarray(v[trans, 2: 2 + CFG.clip_len + 2])
    views = jax.jit(make_views, static_argnums=(2, 3, 4))(jax.random.key(1), window, CFG.clip_len, 1, aug)
    views = np.asarray(views)  # (2, n, T, 32, 32, 1)
    assert views.shape == (2, len(trans), CFG.clip_len, 32, 32, 1)
    for j, i in enumerate(trans):
        vel = np.array(MOTIONS[videos["motion"][i]][1])
        for view in views[:, j, :, :, :, 0]:
            d = np.array(best_shift(view[0], view[3]), float)
            assert np.dot(d, vel) > 0, (MOTION_NAMES[videos["motion"][i]], d)
    # time order: a window whose frame t is the constant t comes out increasing by one per step
    clock = jnp.broadcast_to(jnp.arange(10.0)[None, :, None, None], (3, 10, 8, 8)) / 255.0
    cv = np.asarray(jax.jit(make_views, static_argnums=(2, 3, 4))(
        jax.random.key(2), clock, 8, 1, AugmentConfig(out_size=8, noise=0.0, brightness=0.0)))
    steps = cv[..., 0, 0, 0] * 255.0  # (2, 3, T)
    np.testing.assert_allclose(np.diff(steps, axis=-1), 1.0, atol=1e-4)


def write_fake_ucf(root):
    classes = ["ApplyEyeMakeup", "Basketball"]
    splits = root / "splits"
    splits.mkdir()
    (splits / "classInd.txt").write_text("1 ApplyEyeMakeup\n2 Basketball\n")
    train, test = [], []
    for ci, c in enumerate(classes):
        for g in (1, 2, 3):
            stem = f"v_{c}_g0{g}_c01"
            folder = root / "frames" / c / stem
            folder.mkdir(parents=True)
            for f in range(1, 41):
                img = np.full((30, 40, 3), (ci * 100 + f) % 256, np.uint8)
                Image.fromarray(img).save(folder / f"img_{f:05d}.png")
            (train if g < 3 else test).append(f"{c}/{stem}.avi")
    (splits / "trainlist01.txt").write_text("".join(f"{p} {classes.index(p.split('/')[0]) + 1}\n" for p in train))
    (splits / "testlist01.txt").write_text("".join(f"{p}\n" for p in test))
    return root / "frames", splits


def test_ucf101_frame_folders(tmp_path):
    frames, splits = write_fake_ucf(tmp_path)
    train = frame_folder_entries(frames, splits, dataset="ucf101", subset="train")
    test = frame_folder_entries(frames, splits, dataset="ucf101", subset="test")
    assert len(train) == 4 and len(test) == 2
    assert [e.label for e in train] == [0, 0, 1, 1]
    assert train[0].frames[1].name == "img_00002.png" and len(train[0].frames) == 40
    cfg = VideoConfig(clip_len=4, future_gap=4, jitter=1, length=12)
    sampler = FrameFolderSampler(train, cfg, 2, stride=2, size=16, seed=0)
    b = next(sampler)
    assert b["clip"].shape == (2, 6, 16, 16, 3) and b["future"].shape == (2, 4, 16, 16, 3)
    assert b["clip"].dtype == np.uint8
    # frame values encode the frame number: the clip is strided by 2, the future clip starts later
    clip_f, fut_f = b["clip"][..., 0, 0, 0].astype(int), b["future"][..., 0, 0, 0].astype(int)
    assert np.all(np.diff(clip_f, axis=1) == 2) and np.all(fut_f[:, 0] >= clip_f[:, 1] + 2 * 4)
    (frames / "Basketball" / "v_Basketball_g01_c01" / "img_00001.png").unlink()
    for p in (frames / "Basketball" / "v_Basketball_g01_c01").iterdir():
        p.unlink()
    (frames / "Basketball" / "v_Basketball_g01_c01").rmdir()
    with pytest.raises(ValueError, match="v_Basketball_g01_c01"):
        frame_folder_entries(frames, splits, dataset="ucf101", subset="train")


def test_hmdb51_split_files(tmp_path):
    splits = tmp_path / "splits"
    splits.mkdir()
    for c in ("climb", "run"):
        (splits / f"{c}_test_split1.txt").write_text(f"{c}_a.avi 1\n{c}_b.avi 2\n{c}_c.avi 0\n")
        for stem in (f"{c}_a", f"{c}_b", f"{c}_c"):
            (tmp_path / "frames" / c / stem).mkdir(parents=True)
            Image.fromarray(np.zeros((8, 8, 3), np.uint8)).save(tmp_path / "frames" / c / stem / "00001.jpg")
    train = frame_folder_entries(tmp_path / "frames", splits, dataset="hmdb51", subset="train")
    test = frame_folder_entries(tmp_path / "frames", splits, dataset="hmdb51", subset="test")
    assert [(e.name, e.label) for e in train] == [("climb_a", 0), ("run_a", 1)]
    assert [e.name for e in test] == ["climb_b", "run_b"]


def test_bad_inputs_raise(tmp_path, videos):
    with pytest.raises(ConfigError, match="data.future_gap"):
        VideoConfig(clip_len=8, future_gap=4)
    with pytest.raises(ConfigError, match="data.length"):
        VideoConfig(length=10)
    with pytest.raises(ConfigError, match="augment.min_scale"):
        AugmentConfig(min_scale=0.0)
    with pytest.raises(ValueError, match="batch_size=100"):
        ClipSampler(videos["video"], {}, CFG, 100)
    with pytest.raises(ValueError, match="dataset='kinetics'"):
        frame_folder_entries(tmp_path, tmp_path, dataset="kinetics")
    with pytest.raises(ValueError, match="classInd"):
        frame_folder_entries(tmp_path, tmp_path, dataset="ucf101")


@pytest.mark.parametrize("symbols", ["digits", "bars"])
def test_order_task_labels_need_the_frame_order(symbols):
    cfg = VideoConfig(canvas=16, length=12, min_size=6, max_size=8, clip_len=4, future_gap=4, jitter=1,
                      task="order", hold=2, symbols=symbols)
    v = generate_order(cfg, 12, jax.random.key(3))
    n_sym = 10 if symbols == "digits" else 3
    assert set(v["order"]) <= set(range(len(ORDER_STEPS[symbols]))) and len(set(v["order"])) > 1
    step = np.asarray(ORDER_STEPS[symbols])[v["order"]]
    # frame t shows digit d0 + step * (t // hold) mod 10: its frames match a render of that digit sequence
    seq = np.asarray(order_digits(jnp.asarray(v["digit"]), jnp.asarray(step), cfg))
    assert seq.shape == (12, 12) and np.all(seq[:, 0] == v["digit"])
    assert np.all(seq[:, 2] == (v["digit"] + step) % n_sym)
    assert np.all(v["video"][:, 0] == v["video"][:, 1]) and not np.all(v["video"][:, 1] == v["video"][:, 2])
    # reversed in time, a video of step s is exactly the video of step -s that starts at its last digit:
    # the same frames in the opposite order, so any frame-order-blind feature cannot tell classes 2i, 2i + 1 apart
    last = jnp.asarray(seq[:, -1])
    rev = render_order(jnp.asarray(v["sprite_table"]), order_digits(last, -jnp.asarray(step), cfg),
                       jnp.asarray(v["center0"]), jnp.asarray(v["angle0"]), jnp.asarray(v["size0"]), cfg.canvas)
    rev = np.asarray(jnp.clip(jnp.round(rev * 255.0), 0, 255).astype(jnp.uint8))
    np.testing.assert_array_equal(rev, v["video"][:, ::-1])
    # a frame shuffle keeps the frame multiset, which is the same for s and -s
    perm = np.random.default_rng(0).permutation(12)
    shuffled = v["video"][:, perm]
    assert all(sorted(map(bytes, shuffled[i])) == sorted(map(bytes, rev[i])) for i in range(12))
    # ... while in order the clips of s and -s differ (the label is in the order)
    assert not np.array_equal(rev[:, :4], v["video"][:, :4])


def test_future_views_share_the_crop_but_not_the_noise():
    aug = AugmentConfig(out_size=16, noise=0.1, brightness=0.0)
    clean = dataclasses.replace(aug, noise=0.0)
    clip = jnp.full((2, 4, 16, 16), 128, jnp.uint8)

    @jax.jit
    def four(key):
        return (make_views(key, clip, 4, 0, aug), make_views(key, clip, 4, 0, aug, noise_salt=1),
                make_views(key, clip, 4, 0, clean), make_views(key, clip, 4, 0, clean, noise_salt=1))

    a, b, a0, b0 = (np.asarray(x) for x in four(jax.random.key(0)))
    np.testing.assert_array_equal(a0, b0)  # same crop and brightness
    assert np.abs(a - a0).max() > 0.05 and np.abs(b - b0).max() > 0.05
    assert abs(np.corrcoef((a - a0).ravel(), (b - b0).ravel())[0, 1]) < 0.05  # independent noise


def test_parallel_frame_reader_gives_the_serial_batches_and_resumes(tmp_path):
    frames, splits = write_fake_ucf(tmp_path)
    train = frame_folder_entries(frames, splits, dataset="ucf101", subset="train")
    cfg = VideoConfig(clip_len=4, future_gap=4, jitter=1, length=12)
    serial = FrameFolderSampler(train, cfg, 3, stride=2, size=16, seed=1, workers=0, prefetch=0)
    parallel = FrameFolderSampler(train, cfg, 3, stride=2, size=16, seed=1, workers=4, prefetch=2)
    want = [next(serial) for _ in range(4)]
    got = [next(parallel) for _ in range(2)]
    state = parallel.state()
    assert state["step"] == 2
    resumed = FrameFolderSampler(train, cfg, 3, stride=2, size=16, seed=1, workers=3, prefetch=1)
    resumed.restore(state)
    got += [next(resumed) for _ in range(2)]
    for w, g in zip(want, got):
        for k in ("clip", "future", "motion"):
            np.testing.assert_array_equal(w[k], g[k])
    with pytest.raises(ValueError, match="workers=-1"):
        FrameFolderSampler(train, cfg, 3, workers=-1)
