"""The released caption metrics on hand cases, the image-id matching, the encoders, and the reward."""

import json
import math

import numpy as np
import pytest
from scipy import linalg

from core.config import BadInputError
from multimodal.vasevqa import metrics, reward, vases


class Fixed:
    """An encoder that looks embeddings up in a table (hand cases)."""

    name = "fixed"

    def __init__(self, table):
        self.table = table

    def encode(self, texts):
        return np.asarray([self.table[t] for t in texts], float)


def test_image_id_as_released():
    assert metrics.extract_image_id("0A1F-UUID_2_ac001001.jpg") == "0A1F-UUID_2"
    assert metrics.extract_image_id("a_b.jpg") == "a_b"  # two parts: the name without .jpg
    assert metrics.extract_image_id("plain.jpg") == "plain"


def test_matching_by_id_skips_unmatched_and_later_ground_truth_wins():
    gt = [{"images": ["u1_1_x.jpg"], "caption": "old"}, {"images": ["u1_1_y.jpg"], "caption": "new"},
          {"images": ["u2_1_x.jpg"], "caption": "two"}]
    gen = [{"images": ["u2_1_z.jpg"], "caption": "g2"}, {"images": ["u1_1_z.jpg"], "caption": "g1"},
           {"images": ["u9_1_z.jpg"], "caption": "none"}, {"images": [], "caption": "no image"}]
    pairs, skipped = metrics.match(gen, gt)
    assert pairs == [("u2_1", "g2", "two"), ("u1_1", "g1", "new")] and skipped == 2


def test_jaccard_lexical_hand_case():
    assert metrics.jaccard("The red Vase", "the vase.") == pytest.approx(1 / 4)  # {the} of {the, red, vase, vase.}
    assert metrics.jaccard("", "") == 0.0
    assert metrics.lexical_similarity(["a b", "c"], ["a b", "d"]) == pytest.approx(0.5)


def test_paired_cosine_and_retrieval_hits_hand_case():
    gen = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    gt = np.array([[1.0, 0.1], [1.0, 0.0], [0.6, 0.8]])
    cos = [1 / math.sqrt(1.01), 0.0, (0.6 + 0.8) / math.sqrt(2)]
    assert metrics.paired_cosine(gen, gt) == pytest.approx(np.mean(cos))
    hits = metrics.retrieval_hits(gen, gt, ks=(1, 2, 3))
    # gen 0 ranks gt 1 (cos 1) above gt 0 (0.995): miss at 1, hit at 2; gen 1 ranks gt 2 first, gt 1 last;
    # gen 2 ranks gt 2 first (0.99): hit
    assert hits == {1: 1, 2: 2, 3: 3}


def test_frechet_distance_matches_the_formula_and_is_zero_on_identical_sets():
    rng = np.random.default_rng(0)
    a, b = rng.normal(size=(20, 3)), rng.normal(1.0, 2.0, size=(25, 3))
    s1, s2 = np.cov(a, rowvar=False) + 1e-6 * np.eye(3), np.cov(b, rowvar=False) + 1e-6 * np.eye(3)
    expected = np.sum((a.mean(0) - b.mean(0)) ** 2) + np.trace(s1 + s2 - 2 * linalg.sqrtm(s1 @ s2).real)
    assert metrics.frechet_distance(a, b) == pytest.approx(expected, rel=1e-9)
    assert metrics.frechet_distance(a, a) == pytest.approx(0.0, abs=1e-6)
    # rank-deficient (n < d): eps keeps it finite
    assert math.isfinite(metrics.frechet_distance(rng.normal(size=(3, 8)), rng.normal(size=(3, 8))))
    with pytest.raises(BadInputError, match="expected \\(n >= 2, d\\)"):
        metrics.frechet_distance(a[:1], b)


def test_overall_score_weights_and_double_counted_semantic():
    table = {"g1": [1, 0], "g2": [0, 1], "t1": [1, 0], "t2": [1, 1]}
    out = metrics.evaluate_captions(["g1", "g2"], ["t1", "t2"], Fixed(table))
    clip = (1 + 1 / math.sqrt(2)) / 2
    assert out["clip_score"] == pytest.approx(clip) and out["semantic_similarity"] == out["clip_score"]
    assert out["hits_at_1"] == 2 and out["r_at_5"] == 1.0  # g2 prefers t2 (0.71) over t1 (0)
    expected = 0.25 * clip * 2 + 0.2 * 1 + 0.15 * 0.0 + 0.1 * 1 + 0.05 * 1
    assert out["overall_score"] == pytest.approx(expected)
    assert sum(metrics.OVERALL_WEIGHTS.values()) == pytest.approx(1.0)


def test_evaluate_files_round_trip(tmp_path):
    gt = [{"images": [f"id{i}_1_ac.jpg"], "caption": c} for i, c in enumerate(["a red amphora", "a black kylix"])]
    gen = [{"images": ["id1_1_ac.jpg"], "caption": "a black kylix", "data_by": "x"},
           {"images": ["id0_1_ac.jpg"], "caption": "a red amphora", "data_by": "x"}]
    (tmp_path / "gt.json").write_text(json.dumps(gt))
    (tmp_path / "gen.json").write_text(json.dumps(gen))
    out = metrics.evaluate_files(tmp_path / "gen.json", tmp_path / "gt.json", metrics.HashEncoder())
    assert out["lexical_similarity"] == 1.0 and out["hits_at_1"] == 2 and out["skipped"] == 0
    with pytest.raises(BadInputError, match="caption file"):
        metrics.evaluate_files(tmp_path / "nope.json", tmp_path / "gt.json", metrics.HashEncoder())


def test_lsa_encoder_separates_attribute_words_and_round_trips(tmp_path):
    texts = ["Attic black-figure amphora", "Corinthian red-figure kylix", "Attic red-figure hydria",
             "Laconian black-figure krater"]
    enc = metrics.LSAEncoder.fit(texts, dim=4)
    e = enc.encode(texts + ["unseen words only"])
    np.testing.assert_allclose(np.linalg.norm(e[:4], axis=1), 1.0, atol=1e-9)
    assert np.abs(e[4]).max() == 0.0
    sims = e[:4] @ e[:4].T
    assert np.argmax(sims[0]) == 0 and sims[0, 2] > sims[0, 1]  # "Attic" shared with the hydria
    enc.save(tmp_path / "lsa.npz")
    np.testing.assert_allclose(metrics.LSAEncoder.load(tmp_path / "lsa.npz").encode(texts), e[:4])
    with pytest.raises(BadInputError, match="text encoder folder"):
        metrics.HFTextEncoder("/nonexistent/clip")


TRUTH = vases.VaseAttributes(fabric="Attic", technique="black-figure", shape="amphora", dating="c. 550-525 BCE",
                             shoulder_band="meander", foot_band="rays", attribution="Antimenes Painter")


def test_reward_on_hand_built_captions():
    from multimodal.vasevqa.data import caption

    cfg = reward.RewardConfig()
    exact = caption(TRUTH)
    np.testing.assert_allclose(reward.attribute_scores(exact, TRUTH), np.ones(6))
    expected = 1.0 + cfg.bonus - cfg.penalty * reward.repeat_fraction(exact)
    assert reward.reward(exact, TRUTH, cfg) == pytest.approx(expected)
    wrong = exact.replace("Attic", "Corinthian").replace("c. 550-525", "c. 500-475").replace("rays at", "dots at")
    r = reward.attribute_scores(wrong, TRUTH)
    np.testing.assert_allclose(r, [0, 1, 1, 1 - 2 / 4, 0.5, 1])
    assert reward.reward(wrong, TRUTH, cfg) == pytest.approx(np.mean(r) - cfg.penalty * reward.repeat_fraction(wrong))
    assert reward.missing_fraction("") == 1.0 and reward.reward("", TRUTH, cfg) == pytest.approx(-cfg.penalty)
    # "red-figure" is not read as "figure"; a repeated caption is penalised
    assert reward.parse("Attic red-figure kylix")["Technique"] == "red-figure"
    assert reward.reward(exact + " " + exact, TRUTH, cfg) < reward.reward(exact, TRUTH, cfg)
    weighted = reward.RewardConfig(weights=(1, 0, 0, 0, 0, 0), penalty=0, bonus=0)
    assert reward.reward(wrong, TRUTH, weighted) == 0.0
    acc = reward.attribute_accuracy([exact, wrong], [TRUTH, TRUTH])
    assert acc["Fabric"] == 0.5 and acc["Technique"] == 1.0 and acc["Decoration"] == 0.5


def test_reward_config_rejects_bad_weights():
    from core.config import ConfigError

    with pytest.raises(ConfigError, match="reward.weights"):
        reward.RewardConfig(weights=(1, 1, 1))
