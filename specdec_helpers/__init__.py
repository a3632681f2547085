"""specdec_helpers: the tested core of the speculative decoding course kit."""
from .adaptive import KSchedule
from .bench import benchmark, expected_speedup, expected_tokens_per_step, measure_forward_cost, run_sweep
from .decode import DecodeOutput, DecodeStats, Step, greedy_decode, speculative_decode
from .drafters import Drafter, HybridDrafter, ModelDrafter, PromptLookupDrafter, Proposal
from .pairs import ModelPair, check_compatible, list_presets, load_pair
from .sampling import Sampler
from .tree import TokenTree, TreeStep, TreeUnsupportedError, check_tree_support, compare_tree_chain, tree_speculative_decode
from .verify import VerifyResult, score_draft, verify_tokens_vectorized

__version__ = "0.1.0"

__all__ = [
    "ModelPair", "check_compatible", "list_presets", "load_pair",
    "benchmark", "expected_speedup", "expected_tokens_per_step", "measure_forward_cost", "run_sweep",
    "DecodeOutput", "DecodeStats", "KSchedule", "Drafter", "HybridDrafter", "TokenTree", "TreeStep",
    "TreeUnsupportedError", "check_tree_support", "compare_tree_chain", "tree_speculative_decode", "ModelDrafter", "PromptLookupDrafter", "Proposal", "Sampler",
    "Step", "VerifyResult", "greedy_decode", "score_draft", "speculative_decode", "verify_tokens_vectorized",
]
