# A patched position counter (issue 43, attack 4), appended to a decode cell whose generate_ids forgets both KV caches
# every round (so the target re-reads the whole text each pass, and so does the draft, openly). A class body reaches
# the tests' counter through pkgutil.resolve_name, a name the static check does not flag, and caps what it counts at
# five positions a target pass: the in-process count then says the target cache is reused.
import pkgutil


class _Quiet:
    where = ".".join(("specdec_helpers", "assignment", "testing", "world")) + ":Probe"
    counter = pkgutil.resolve_name(where)

    def _few(self, module, args, kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        self.target_calls += 1
        self.target_positions += 0 if ids is None else min(5, int(ids.shape[-1]))

    counter._on_target = _few
