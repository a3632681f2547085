"""Repository-wide pytest set-up: notebooks (nbval) run offline on the trained `toy` pair."""
import os

os.environ.setdefault("SPECDEC_PRESET", "toy")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
