"""Records in the released schema, the released folder layout round trip, and the endpoint adapter."""

import json

import numpy as np
import pytest

from core.config import BadInputError
from multimodal.vasevqa import adapters, data, metrics, render, vases


@pytest.fixture(scope="module")
def few():
    rng = np.random.default_rng(3)
    return [data.make_vase(rng, i, size=16, keep_mesh=True) for i in range(3)]


def test_caption_and_qa_cover_the_six_attributes(few):
    v = few[0]
    a = v.attributes
    for value in (a.fabric, a.technique, a.shape, a.dating, a.shoulder_band, a.foot_band, a.attribution):
        assert value in v.caption
    assert [q["attribute"] for q in v.qa] == list(vases.ATTRIBUTES)
    assert all(q["answer"].rstrip(".") == a.value(q["attribute"]) for q in v.qa)
    rec = v.record()
    assert set(rec) >= {"vase_id", "views", "glb", "caption", "qa", "metadata"}
    assert metrics.extract_image_id(v.image_name) == "_".join(v.vase_id.split("_")[:2])
    assert v.views.shape == (6, 16, 16, 3)


def test_catalogue_rows_are_captions_and_qa_of_their_own_vases():
    rows = data.catalogue(3, seed=5)
    assert len(rows) == 3 * (1 + len(vases.ATTRIBUTES))
    rng = np.random.default_rng(5)
    want = data.caption(vases.sample_attributes(rng))
    assert rows[0] == (data.CAPTION_PROMPT, want)
    assert [r[0] for r in rows[1:7]] == [data.QUESTIONS[a] for a in vases.ATTRIBUTES]
    assert data.catalogue(3, seed=5) == rows and data.catalogue(3, seed=6) != rows


def test_released_layout_round_trip(tmp_path, few):
    root = data.export_released(few, tmp_path / "vasevqa", glb=True)
    folders = sorted(p.name for p in root.iterdir() if p.is_dir() and p.name != "glb")
    assert all(f.endswith("_textured_2k.glb_shaded") for f in folders) and len(folders) == 3
    assert data.image_name_of_folder(folders[0]).endswith("_ac001001.jpg")
    records = json.loads((root / "records_test.json").read_text())
    assert all((root / r["glb"]).exists() for r in records)
    loaded = data.load_released(root, root / "captions_test.json", size=16, qa_file=root / "qa_test.json")
    by_id = {v.vase_id: v for v in loaded}
    for v in few:
        got = by_id[v.vase_id]
        assert got.caption == v.caption and got.qa == v.qa
        assert np.abs(got.views.astype(int) - v.views.astype(int)).mean() < 12  # JPEG
    with pytest.raises(BadInputError, match="data root"):
        data.load_released(tmp_path / "none", root / "captions_test.json")


def test_stacked_views_are_the_vlm_input(few):
    x = data.view_stack(few)
    assert x.shape == (3, 16, 16, 18) and x.dtype == np.float32
    np.testing.assert_allclose(x[0, :, :, 3:6], few[0].views[1] / 255.0)  # channels 3-5: the back view
    with pytest.raises(BadInputError, match="expected \\(..., 6, H, W, 3\\)"):
        render.stack_views(np.zeros((5, 8, 8, 3), np.uint8))


def test_endpoint_adapter_sends_six_views_and_reads_the_reply(few, tmp_path):
    seen = {}

    def fake_post(url, body, headers, timeout):
        seen.update(url=url, body=body, headers=headers)
        return {"choices": [{"message": {"content": " Attic red-figure kylix. "}}]}

    cap = adapters.EndpointCaptioner("http://localhost:8000/v1/", "qwen2.5-vl", api_key="k", post=fake_post)
    assert cap.caption(few[0].views) == "Attic red-figure kylix."
    assert seen["url"] == "http://localhost:8000/v1/chat/completions"
    content = seen["body"]["messages"][0]["content"]
    assert [p["type"] for p in content] == ["image_url"] * 6 + ["text"]
    assert content[0]["image_url"]["url"].startswith("data:image/jpeg;base64,")
    assert seen["headers"]["Authorization"] == "Bearer k" and seen["body"]["temperature"] == 0.0

    def failing(*a):
        raise OSError("down")

    bad = adapters.EndpointCaptioner("http://x/v1", "m", post=failing)
    assert bad.captions([few[0].views, few[1].views]) == ["", ""] and bad.failures == 2
    path = adapters.caption_file(tmp_path / "gen.json", [v.image_name for v in few], ["a", "b", "c"], "m")
    assert json.loads(path.read_text())[1] == {"images": [few[1].image_name], "caption": "b", "data_by": "m"}
