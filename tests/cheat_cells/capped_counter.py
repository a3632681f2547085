# Patched pass and position counters (issue 43, attack 4), appended to a decode cell whose generate_ids forgets both
# KV caches every round (so the target re-reads the whole text each pass, and so does the draft, openly) and runs
# the target once more after each rejection (PA3's loop) with _Quiet.hide set. A class body reaches the tests'
# counter through pkgutil.resolve_name, a name the static check does not flag: it counts at most five positions a
# target pass, and no pass while hide is set. The in-process counts then say one cached pass a round.
import pkgutil


class _Quiet:
    hide = False
    where = ".".join(("specdec_helpers", "assignment", "testing", "world")) + ":Probe"
    counter = pkgutil.resolve_name(where)

    def _few(self, module, args, kwargs):
        if _Quiet.hide:
            return
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.target_calls += 1
        self.target_positions += 0 if ids is None else min(5, int(ids.shape[-1]))

    counter._on_target = _few
