"""forecasting.data: TSL splits and window counts (hand-computed), scaler, checksums, CSV errors, windows."""

import shutil

import jax.numpy as jnp
import numpy as np
import pytest

from forecasting import data

# ETTh: 12/4/4 months of 30 days x 24 h = 8640 / 2880 / 2880 rows; ETTm: x4.
# windows = rows - L - H + 1, val/test rows include L leading rows.
CASES = [
    ("ETTh1", 720, 96, 8640 - 720 - 96 + 1, 2880 - 96 + 1, 2880 - 96 + 1),  # 7825, 2785, 2785
    ("ETTh2", 720, 720, 8640 - 1440 + 1, 2880 - 720 + 1, 2161),
    ("ETTm1", 720, 96, 34560 - 816 + 1, 11520 - 96 + 1, 11425),  # 33745, 11425, 11425
]


@pytest.mark.parametrize("name,L,H,n_train,n_val,n_test", CASES)
def test_ett_window_counts_and_borders(name, L, H, n_train, n_val, n_test):
    d = data.load(name, L, H)
    assert (d.num_windows("train"), d.num_windows("val"), d.num_windows("test")) == (n_train, n_val, n_test)
    month = 720 * (4 if name.startswith("ETTm") else 1)
    assert d.borders == ((0, 12 * month), (12 * month - L, 16 * month), (16 * month - L, 20 * month))
    assert d.columns == data.ETT_COLUMNS


def test_scaler_fitted_on_train_rows_only():
    d = data.load("ETTh1", 96, 24)
    np.testing.assert_allclose(d.train.mean(0), 0.0, atol=1e-4)
    np.testing.assert_allclose(d.train.std(0), 1.0, atol=1e-4)
    _, raw = data.read_csv(data.ett_path("ETTh1"))
    a, b = d.borders[2]
    np.testing.assert_allclose(d.inverse_transform(d.test), raw[a:b], rtol=1e-5, atol=1e-4)
    # the test rows are scaled with the train statistics, not their own
    assert np.abs(d.test.mean(0)).max() > 0.1


def test_shipped_files_match_checksums():
    sums = data.read_checksums(data.ETT_DIR / "SHA256SUMS")
    assert sorted(sums) == [f"{n}.csv" for n in data.ETT_NAMES]
    assert data.sha256(data.ETT_DIR / "ETTh2.csv") == sums["ETTh2.csv"]


def test_modified_ett_file_is_rejected(tmp_path, monkeypatch):
    shutil.copy(data.ETT_DIR / "SHA256SUMS", tmp_path / "SHA256SUMS")
    text = (data.ETT_DIR / "ETTh1.csv").read_text()
    (tmp_path / "ETTh1.csv").write_text(text.replace("30.5310001373291", "30.5310001373292", 1))
    monkeypatch.setattr(data, "ETT_DIR", tmp_path)
    with pytest.raises(ValueError, match="sha256"):
        data.ett_path("ETTh1")


def _write_csv(path, rows, header="date,a,b"):
    lines = [header] + [f"2020-01-01 {i:05d},{float(i)},{2.0 * i + 1}" for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path


def test_custom_csv_ratio_split(tmp_path):
    path = _write_csv(tmp_path / "custom.csv", 200)
    d = data.load(path, 10, 5)
    # TSL Dataset_Custom: train int(0.7 n) = 140, test int(0.2 n) = 40, val the rest = 20
    assert d.borders == ((0, 140), (130, 160), (150, 200))
    assert (d.num_windows("train"), d.num_windows("val"), d.num_windows("test")) == (126, 16, 36)
    assert d.columns == ("a", "b")
    np.testing.assert_allclose(d.mean, [69.5, 140.0])


def test_csv_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no such data file"):
        data.load(tmp_path / "missing.csv", 10, 5)
    bad = _write_csv(tmp_path / "bad.csv", 50, header="time,a,b")
    with pytest.raises(ValueError, match="date column"):
        data.load(bad, 10, 5)
    good = _write_csv(tmp_path / "good.csv", 50)
    with pytest.raises(ValueError, match=r"columns \['OT'\] not found"):
        data.load(good, 10, 5, columns=["OT"])
    with pytest.raises(ValueError, match="too short for seq_len \\+ pred_len"):
        data.load(good, 30, 20)
    with pytest.raises(ValueError, match="dataset='ETTh3'"):
        data.ett_path("ETTh3")
    with pytest.raises(ValueError, match="split='weekly'"):
        data.load(good, 10, 5, split="weekly")
    gappy = good.read_text().splitlines()
    gappy[4], gappy[9] = "2020-01-01 00003,3.0,NaN", "2020-01-01 00008,inf,17.0"
    (tmp_path / "gappy.csv").write_text("\n".join(gappy) + "\n")
    with pytest.raises(ValueError, match=r"2 missing or non-finite values, the first 'NaN' in column 'b' on data "
                                         r"line 5; expected finite numbers"):
        data.load(tmp_path / "gappy.csv", 10, 5)


def test_windows_match_numpy_slices():
    series = np.arange(60, dtype=np.float32).reshape(30, 2)
    x, y = data.windows(jnp.asarray(series), jnp.asarray([0, 7, 21]), 5, 4)
    for i, s in enumerate([0, 7, 21]):
        np.testing.assert_array_equal(x[i], series[s:s + 5])
        np.testing.assert_array_equal(y[i], series[s + 5:s + 9])


def test_batch_starts_cover_every_window_once():
    starts, mask = data.batch_starts(10, 4)
    assert starts.shape == mask.shape == (3, 4)
    assert sorted(starts.reshape(-1)[mask.reshape(-1) > 0].tolist()) == list(range(10))
    assert mask.sum() == 10
