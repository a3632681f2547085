"""The commands that train models: distill (a draft of a preset, once, then cached) and train-toy (the toy pair
the package ships)."""

from __future__ import annotations

import argparse
import functools
import json
import shutil
import sys

import torch

from specdec_helpers.cli.args import positive_int, preset_names
from specdec_helpers.models.drafts import eagle, eagle_train
from specdec_helpers.models.drafts.distill import distill_draft, distilled_dir
from specdec_helpers.models.drafts.registry import DRAFTS
from specdec_helpers.models.drafts.training import is_saved
from specdec_helpers.models.pairs import _model_name, load_pair
from specdec_helpers.models.toy import retrain_toy


def distill(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m specdec_helpers distill",
        description="Train (once, then cached) a draft of a preset from its target's own text; prints what it cost.",
    )
    parser.add_argument(
        "--preset",
        type=preset_names,
        default="smollm2-135m",
        help="a preset whose target is LLaMA-style (default: smollm2-135m)",
    )
    parser.add_argument(
        "--draft",
        choices=("eagle", "distilled"),
        default="eagle",
        help=f"eagle (default): {DRAFTS['eagle'].help}; distilled: {DRAFTS['distilled'].help}",
    )
    parser.add_argument("--force", action="store_true", help="train again even if a cached draft exists")
    parser.add_argument(
        "--corpus",
        action="store_true",
        help="eagle only: train teacher-forced on the kit's corpus of existing text and the target's own "
        "answers (written once, ~5 minutes), unrolled over 2 drafting steps, and write the shipped "
        "fp16 copy under specdec_helpers/data/ (the shipped draft: --corpus --epochs 2; ~25 minutes "
        "on 2 cores, the target's features then cached)",
    )
    parser.add_argument(
        "--max-chunks", type=int, default=None, help="with --corpus: train on about N chunks, evenly spread"
    )
    parser.add_argument(
        "--epochs", type=int, default=None, help="with --corpus: training epochs (default: EagleRecipe's)"
    )
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (the result depends on it)")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    pair = load_pair(args.preset, draft="prompt-lookup")
    name = _model_name(pair.target)
    if args.corpus and args.draft != "eagle":
        raise ValueError("--corpus trains the eagle draft: write --draft eagle --corpus")
    folder, train = (
        (eagle.eagle_dir(name), eagle_train.train_eagle)
        if args.draft == "eagle"
        else (distilled_dir(name), distill_draft)
    )
    if args.corpus:
        folder = eagle.shipped_dir(name)
        recipe = eagle.EagleRecipe(**({"epochs": args.epochs} if args.epochs else {}))
        train = functools.partial(eagle_train.train_eagle_corpus, max_chunks=args.max_chunks, recipe=recipe)
    if args.force:
        shutil.rmtree(folder, ignore_errors=True)
    if is_saved(folder):
        print(f"cached: {folder} (--force trains again)", file=sys.stderr)
    else:
        train(pair.target, pair.tokenizer, name=name)
    meta = json.loads((folder / "draft.json").read_text())
    print(json.dumps(meta, indent=1))
    return 0


def train_toy(argv=None) -> int:
    """Retrain the toy pair with its recipe (about 90 s on 2 cores) and rewrite the files the package ships."""
    parser = argparse.ArgumentParser(prog="python -m specdec_helpers train-toy", description=train_toy.__doc__)
    parser.add_argument("--out", default=None, help="folder to write (default: the package's data/toy)")
    parser.add_argument("--threads", type=positive_int, default=1, help="torch CPU threads (the shipped pair: 1)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"wrote {retrain_toy(args.out)}; commit it with its manifest.json")
    return 0
