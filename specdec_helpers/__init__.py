"""specdec_helpers: the tested core of the speculative decoding course kit (public API; see README's layout)."""

from specdec_helpers.core.adaptive import KSchedule
from specdec_helpers.core.batch import BatchDecodeOutput
from specdec_helpers.core.decode import (
    DecodeOutput,
    DecodeStats,
    Step,
    greedy_decode,
    speculative_decode,
)
from specdec_helpers.core.drafters import (
    Drafter,
    HybridDrafter,
    ModelDrafter,
    PromptLookupDrafter,
    Proposal,
)
from specdec_helpers.core.sampling import Sampler
from specdec_helpers.core.tree import (
    TokenTree,
    TreeStep,
    TreeUnsupportedError,
    check_tree_support,
    tree_speculative_decode,
)
from specdec_helpers.core.verify import (
    VerifyResult,
    accept_sampled,
    verify_tokens_vectorized,
)
from specdec_helpers.measure.batching import batch_costs, batch_sweep, predicted_batch_speedup
from specdec_helpers.measure.bench import benchmark
from specdec_helpers.measure.sweep import run_sweep
from specdec_helpers.measure.theory import (
    expected_speedup,
    expected_tokens_per_step,
    measure_forward_cost,
)
from specdec_helpers.measure.tree_vs_chain import compare_tree_chain
from specdec_helpers.models.pairs import ModelPair, load_pair
from specdec_helpers.models.presets import list_presets
from specdec_helpers.models.vocab import check_compatible

__version__ = "0.1.0"

__all__ = [
    "lean_forward",
    "static_forward",
    "ModelPair",
    "check_compatible",
    "list_presets",
    "load_pair",
    "BatchDecodeOutput",
    "batch_costs",
    "batch_sweep",
    "predicted_batch_speedup",
    "benchmark",
    "expected_speedup",
    "expected_tokens_per_step",
    "measure_forward_cost",
    "run_sweep",
    "DecodeOutput",
    "DecodeStats",
    "KSchedule",
    "Drafter",
    "HybridDrafter",
    "TokenTree",
    "TreeStep",
    "TreeUnsupportedError",
    "check_tree_support",
    "compare_tree_chain",
    "tree_speculative_decode",
    "ModelDrafter",
    "PromptLookupDrafter",
    "Proposal",
    "Sampler",
    "Step",
    "accept_sampled",
    "VerifyResult",
    "greedy_decode",
    "speculative_decode",
    "verify_tokens_vectorized",
]
from specdec_helpers.core.graphs import static_forward  # a model step over a static cache (notebook 01)
from specdec_helpers.core.backends import lean_forward  # a Llama's forward without transformers' Python (notebook 01)
