"""VaseVQA-3D records: captions and QA over the six attributes, generated vases, and the released file layout.

One record per vase, in the schema the method note lists:

    {"vase_id", "views": {front, back, left, right, top, bottom: image path}, "glb": path or None,
     "caption", "qa": [{"attribute", "question", "answer"}], "metadata": {"provenance", "museum"},
     "attributes": {...}}                      # ours only: the generator's ground truth

The released layout (read from the official evaluation scripts; the dataset itself is on a model hub and was
not available here, so this is an assumption about it): one folder per model named
`<UUID>_<n>_ac001001_textured_2k.glb_shaded/` holding `front.jpg` ... `bottom.jpg`; the image name of a
model is `<UUID>_<n>_ac001001.jpg`; a caption file is a JSON list of `{"images": [image name], "caption",
"data_by"}` (generated captions and the ground truth alike), matched on the first two `_`-parts of the image
name. QA files are taken to be a JSON list of `{"images": [...], "attribute", "question", "answer"}`
(unconfirmed). `load_released` reads that layout; `export_released` writes our vases in it, so the two
round-trip.
"""

from __future__ import annotations

import dataclasses
import json
import pathlib
import uuid
from collections.abc import Sequence
from typing import Any

import numpy as np

from core.config import BadInputError
from core.train import progress
from multimodal.vasevqa import render, vases

CAPTION_PROMPT = "describe this vase from its six views ."
QUESTIONS = {
    "Fabric": "what is the fabric of this vase ?",
    "Technique": "which painting technique is used on this vase ?",
    "Shape": "what is the shape of this vase ?",
    "Dating": "when was this vase made ?",
    "Decoration": "what decoration bands does this vase have ?",
    "Attribution": "to whom is this vase attributed ?",
}
MUSEUMS = ("Louvre", "British Museum", "Metropolitan Museum", "Staatliche Antikensammlungen", "Ashmolean")
PROVENANCES = ("Vulci", "Athens", "Corinth", "Sparta", "Thebes", "Cerveteri", "Marathon")
# the lay vocabulary a general-purpose captioner would use (the base model's pretraining text)
LAY_SHAPE = {"amphora": "tall jar with two handles", "lekythos": "slim bottle with one handle",
             "hydria": "wide jar with three handles", "kylix": "shallow cup on a stem",
             "krater": "wide bowl with two handles", "oinochoe": "jug with one handle"}
LAY_COLOUR = {"Attic": "orange", "Corinthian": "pale yellow", "Laconian": "dark red", "Boeotian": "tan"}
LAY_BAND = {"meander": "key pattern", "rays": "triangles", "tongues": "stripes", "ivy": "a wavy line", "dots": "dots"}
LAY_WEAR = ("very worn", "worn", "slightly worn", "well kept", "like new")
LAY_FIGURES = ("one large figure on each side", "a frieze of small figures")


def caption(attrs: vases.VaseAttributes) -> str:
    """The ground-truth caption, in the released captions' style (shape, technique, date, decoration,
    attribution): every word a whitespace token, so a word-level model can write it exactly."""
    return (f"{attrs.fabric} {attrs.technique} {attrs.shape}, {attrs.dating}, depicting {attrs.subject}, "
            f"decorated with {attrs.decoration}; attributed to the {attrs.attribution}.")


def lay_caption(attrs: vases.VaseAttributes) -> str:
    """A general-domain description of what is visible, without the archaeological vocabulary."""
    figures = "dark figures on a light ground" if attrs.technique == "black-figure" else \
        "light figures on a dark ground"
    return (f"a {LAY_COLOUR[attrs.fabric]} {LAY_SHAPE[attrs.shape]}, {LAY_WEAR[vases.DATES.index(attrs.dating)]}, "
            f"painted with {figures}, {LAY_FIGURES[attrs.painter_style]}, {LAY_BAND[attrs.shoulder_band]} above "
            f"and {LAY_BAND[attrs.foot_band]} below.")


def catalogue(n: int, seed: int) -> list[tuple[str, str]]:
    """(prompt, text) rows of n catalogue entries (a caption and its six QA pairs each) of vases drawn from
    their own seed and never rendered: the domain text a web-pretrained base model has read."""
    rng = np.random.default_rng(seed)
    rows = []
    for _ in range(n):
        attrs = vases.sample_attributes(rng)
        rows.append((CAPTION_PROMPT, caption(attrs)))
        rows += [(q["question"], q["answer"]) for q in qa_pairs(attrs)]
    return rows


def qa_pairs(attrs: vases.VaseAttributes) -> list[dict[str, str]]:
    return [{"attribute": a, "question": QUESTIONS[a], "answer": f"{attrs.value(a)}."} for a in vases.ATTRIBUTES]


@dataclasses.dataclass
class Vase:
    vase_id: str
    attributes: vases.VaseAttributes | None
    views: np.ndarray                      # (6, H, W, 3) uint8 in render.VIEWS order
    caption: str
    qa: list[dict[str, str]]
    metadata: dict[str, str]
    mesh: vases.VaseMesh | None = None

    @property
    def image_name(self) -> str:
        return f"{self.vase_id}.jpg"

    def record(self, view_paths: dict[str, str] | None = None, glb: str | None = None) -> dict[str, Any]:
        out = {"vase_id": self.vase_id, "views": view_paths or {}, "glb": glb, "caption": self.caption,
               "qa": self.qa, "metadata": self.metadata}
        if self.attributes is not None:
            out["attributes"] = dataclasses.asdict(self.attributes)
        return out


def make_vase(rng: np.random.Generator, index: int, *, size: int = 32, keep_mesh: bool = False) -> Vase:
    attrs = vases.sample_attributes(rng)
    mesh = vases.build_mesh(attrs, rng)
    views = render.render_mesh(mesh, size)
    uid = str(uuid.UUID(bytes=rng.bytes(16), version=4)).upper()
    vase_id = f"{uid}_{index}_ac001001"  # the released image-name pattern
    meta = {"provenance": PROVENANCES[rng.integers(len(PROVENANCES))], "museum": MUSEUMS[rng.integers(len(MUSEUMS))]}
    return Vase(vase_id, attrs, views, caption(attrs), qa_pairs(attrs), meta, mesh if keep_mesh else None)


def make_split(n: int, seed: int, *, size: int = 32, desc: str = "render vases") -> list[Vase]:
    rng = np.random.default_rng(seed)
    return [make_vase(rng, i, size=size) for i in progress(range(n), desc=desc)]


def caption_records(vs: Sequence[Vase], captions: Sequence[str] | None = None, data_by: str = "ground_truth"
                    ) -> list[dict[str, Any]]:
    """The released caption JSON: [{"images": [image name], "caption", "data_by"}]."""
    captions = [v.caption for v in vs] if captions is None else captions
    if len(captions) != len(vs):
        raise BadInputError(f"{len(captions)} captions for {len(vs)} vases: expected one per vase")
    return [{"images": [v.image_name], "caption": c, "data_by": data_by} for v, c in zip(vs, captions)]


def export_released(vs: Sequence[Vase], root: str | pathlib.Path, *, split: str = "test",
                    glb: bool = False) -> pathlib.Path:
    """Write vases in the released layout: per vase a `<id>_textured_2k.glb_shaded/` folder with the six view
    JPEGs (and `<id>.glb` when asked and the mesh is kept), `captions_<split>.json`, `qa_<split>.json`,
    `records_<split>.json` (our full schema) and `split_<split>.txt` (the vase ids)."""
    from PIL import Image

    root = pathlib.Path(root)
    root.mkdir(parents=True, exist_ok=True)
    records, qa = [], []
    for v in vs:
        folder = root / f"{v.vase_id}_textured_2k.glb_shaded"
        folder.mkdir(exist_ok=True)
        paths = {}
        for name, image in zip(render.VIEWS, v.views):
            Image.fromarray(image).save(folder / f"{name}.jpg", quality=95)
            paths[name] = str((folder / f"{name}.jpg").relative_to(root))
        glb_path = None
        if glb and v.mesh is not None:
            glb_path = str(v.mesh.export_glb(root / "glb" / f"{v.vase_id}.glb").relative_to(root))
        records.append(v.record(paths, glb_path))
        qa += [{"images": [v.image_name], **q} for q in v.qa]
    (root / f"captions_{split}.json").write_text(json.dumps(caption_records(vs), indent=1))
    (root / f"qa_{split}.json").write_text(json.dumps(qa, indent=1))
    (root / f"records_{split}.json").write_text(json.dumps(records, indent=1))
    (root / f"split_{split}.txt").write_text("".join(v.vase_id + "\n" for v in vs))
    return root


def image_name_of_folder(folder_name: str) -> str:
    """`<id>_textured_2k.glb_shaded` (or `_4k`, `.glb_shaded`, `_shaded`) -> `<id>.jpg`, as released."""
    for suffix in ("_textured_4k.glb_shaded", "_textured_2k.glb_shaded", "_textured_2k", ".glb_shaded", "_shaded"):
        if folder_name.endswith(suffix):
            return folder_name[: -len(suffix)] + ".jpg"
    return folder_name + ".jpg"


def load_released(root: str | pathlib.Path, captions_file: str | pathlib.Path, *, size: int = 32,
                  qa_file: str | pathlib.Path | None = None) -> list[Vase]:
    """Vases from the released layout: the view folders under `root` with a ground-truth caption in
    `captions_file` (matched by `metrics.extract_image_id`, as the evaluation does); views resized to size."""
    from PIL import Image

    from multimodal.vasevqa.metrics import extract_image_id

    root = pathlib.Path(root)
    if not root.is_dir():
        raise BadInputError(f"data root {str(root)!r}: expected a folder of <id>_textured_2k.glb_shaded/ view folders")
    gt = load_caption_json(captions_file)
    by_id = {extract_image_id(r["images"][0]): r["caption"] for r in gt}
    qa_by_id: dict[str, list] = {}
    if qa_file is not None:
        for row in json.loads(pathlib.Path(qa_file).read_text()):
            qa_by_id.setdefault(extract_image_id(row["images"][0]), []).append(
                {k: row[k] for k in ("attribute", "question", "answer")})
    out = []
    for folder in sorted(p for p in root.iterdir() if p.is_dir()):
        name = image_name_of_folder(folder.name)
        key = extract_image_id(name)
        if key not in by_id:
            continue
        missing = [v for v in render.VIEWS if not (folder / f"{v}.jpg").exists()]
        if missing:
            raise BadInputError(f"view folder {str(folder)!r}: missing {missing}; expected {list(render.VIEWS)} .jpg")
        views = np.stack([np.asarray(Image.open(folder / f"{v}.jpg").convert("RGB").resize((size, size)))
                          for v in render.VIEWS])
        out.append(Vase(name[:-4], None, views, by_id[key], qa_by_id.get(key, []), {}))
    if not out:
        raise BadInputError(f"data root {str(root)!r}: no view folder matched a caption in {str(captions_file)!r}")
    return out


def load_caption_json(path: str | pathlib.Path) -> list[dict[str, Any]]:
    path = pathlib.Path(path)
    if not path.exists():
        raise BadInputError(f"caption file {str(path)!r}: expected a JSON list of {{images, caption}} records")
    rows = json.loads(path.read_text())
    if not isinstance(rows, list) or any(not isinstance(r, dict) or "caption" not in r or not r.get("images")
                                         for r in rows):
        raise BadInputError(f"caption file {str(path)!r}: expected a JSON list of {{\"images\": [name], \"caption\"}}")
    return rows


def view_stack(vs: Sequence[Vase]) -> np.ndarray:
    """(N, H, W, 18) float inputs of the VLM."""
    return render.stack_views(np.stack([v.views for v in vs]))
