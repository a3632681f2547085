"""The decoder a student wrote, for the notebooks after 04 (``sd.student_decoder(pair)``).

Notebook 05 benchmarks, plots and reports this decoder, as PA3 benchmarked the student's own class:
in the student kit it is the student's cells of notebooks 01-04; in the instructor edition the
reference cells of those notebooks. A part that is missing or unfinished is named with its notebook.
"""
from __future__ import annotations

from specdec_helpers.assignment.student.cells import assemble
from specdec_helpers.assignment.student.decoder import NOTEBOOK_OF, PARTS
from specdec_helpers.present.notebook import CheckFailed

_PART_OF = {name: part for part, names in PARTS.items() for name in names}


def missing_parts_message(names) -> str:
    """"finish notebook 04's `verify_tokens_cached` first", for each missing method, in notebook order."""
    names = sorted(names, key=lambda n: (NOTEBOOK_OF[_PART_OF[n]], n))
    return "; ".join(f"finish notebook {NOTEBOOK_OF[_PART_OF[n]]}'s `{n}` first" for n in names)


def student_decoder(pair, notebook: str = "05", folder=".", verbose: bool = True):
    """``SpeculativeDecoder`` assembled from the graded cells of notebooks 01-04 found in ``folder`` (and
    a mounted Drive on Colab), on ``pair``'s already loaded models. Raises `CheckFailed` naming each
    unfinished part with its notebook; where the kit still fills a part in (the instructor edition's
    stand-ins), says so loudly, never silently."""
    cls = assemble(notebook, folder, verbose)
    absent = [name for names in PARTS.values() for name in names if not callable(getattr(cls, name, None))]
    if absent:
        raise CheckFailed(f"❌ Your SpeculativeDecoder is not complete: {missing_parts_message(absent)} (and keep "
                          f"that notebook next to this one), then run this cell again.")
    from_kit = [n for n in getattr(cls, "parts_from_kit", []) if n in _PART_OF and n not in
                ("initialize_target_model", "initialize_draft_model")]  # from_pair loads no model
    if from_kit and verbose:
        print(f"⚠️ Not yours: the kit's stand-ins run for {', '.join(from_kit)} ({missing_parts_message(from_kit)}); "
              "the numbers below are not your decoder's until then.")
    return cls.from_pair(pair)
