# Acceptance forged in the timed runs only (issue 43, attack 2), appended to the reference's decode cell: honest in
# every test, but when the grader's timing request (op_generate) is on the call stack, it rewrites the rounds it
# reports: a round with little accepted is folded into the kept round before it (its draft made to match the text
# as far as both rounds kept, so the verification result still adds up), and the pass count made to match.
import traceback

_honest = generate_ids  # noqa: F821 - the reference's, defined above in the same cell


def _timed():
    return any(frame.name == "op_" + "generate" for frame in traceback.extract_stack())


class _Reported(list):
    """The log the grader reads after the call: its pass count is rewritten to the folded rounds'."""

    def append(self, entry):
        if entry and entry[0] == "generate":
            entry = ("generate", sum(1 for e in self if e[0] == "verify")) + tuple(entry[2:])
        super().append(entry)


def _fold(log):
    kept = []
    for entry in (e for e in log if e[0] == "verify"):
        tokens, n = list(entry[3][0]), int(entry[3][1])
        if kept and n < 2:
            prev = kept[-1]
            merged = prev[3][1] + 1 + n
            if merged < prev[2]:  # still fewer accepted than drafted: a result a verification can return
                draft = (list(prev[3][0]) + list(entry[5]))[: prev[2]]
                kept[-1] = (prev[0], prev[1], prev[2], (list(prev[3][0]) + tokens, merged), prev[4], draft)
                continue
        kept.append(entry)
    return kept


def generate_ids(self, input_ids, max_tokens=100, num_speculative_tokens=5, use_cache=True):
    out = _honest(self, input_ids, max_tokens, num_speculative_tokens, use_cache)
    if _timed() and isinstance(getattr(self, "log", None), list):
        self.log = _Reported(_fold(self.log))
    return out
