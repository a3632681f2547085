"""The simulated GPU (`testing/devices.py`, issue 43 item 3): every way a graded cell can make a tensor on the
host fails where it meets the model's device, and what CUDA allows stays allowed.

Each case is a line of a graded cell run on a CPU with the input ``ids`` on "the device". Whether CUDA refuses
it is stated per case (the expectation is what a real GPU does, not what the watch happens to do).
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest
import torch
from full_marks import full_marks

from specdec_helpers.assignment.authoring import mutations
from specdec_helpers.assignment.grading import classroom, grader, submission
from specdec_helpers.assignment.grading.sandbox import InProcess
from specdec_helpers.assignment.parts import cells
from specdec_helpers.assignment.testing import devices, suite_decode, world
from specdec_helpers.assignment.testing.devices import DeviceWatch

# a new token built on the host, then put after the text on the device: each crashes on a GPU
HOST_BUILT = {
    "torch.Tensor (issue 43, attack 3)": "new = torch.Tensor([[2]]).long()",
    "torch.Tensor with a size": "new = torch.Tensor(1, 1).fill_(2).long()",
    "torch.tensor": "new = torch.tensor([[2]])",
    "torch.as_tensor": "new = torch.as_tensor([[2]])",
    "torch.asarray": "new = torch.asarray([[2]])",
    "torch.from_numpy": "new = torch.from_numpy(np.array([[2]]))",
    "torch.tensor of a NumPy array": "new = torch.tensor(np.array([[2]]))",
    "torch.frombuffer": "new = torch.frombuffer(bytearray(8), dtype=torch.long).view(1, 1)",
    "torch.LongTensor": "new = torch.LongTensor([[2]])",
    "torch.IntTensor": "new = torch.IntTensor([[2]]).long()",
    "torch.FloatTensor": "new = torch.FloatTensor([[2]]).long()",
    "torch.DoubleTensor": "new = torch.DoubleTensor([[2]]).long()",
    "torch.zeros": "new = torch.zeros(1, 1, dtype=torch.long)",
    "torch.full": "new = torch.full((1, 1), 2)",
    "torch.arange": "new = torch.arange(2, 3).view(1, 1)",
    "torch.empty then filled": "new = torch.empty(1, 1, dtype=torch.long).fill_(2)",
    "torch.randint": "new = torch.randint(0, 5, (1, 1))",
    "new_tensor of a host tensor": "new = torch.zeros(1).new_tensor([[2]]).long()",
    "a list of device scalars": "new = torch.tensor([[ids[0, -1]]])",
    ".tolist() then rebuilt": "new = torch.tensor(ids[:, -1:].tolist())",
    ".cpu()": "new = ids[:, -1:].cpu()",
    ".to('cpu')": "new = ids[:, -1:].to('cpu')",
    "device='cpu'": "new = torch.tensor([[2]], device='cpu')",
    "zeros_like(device='cpu')": "new = torch.zeros_like(ids[:, -1:], device='cpu')",
    ".cpu().numpy() round trip": "new = torch.from_numpy(ids[:, -1:].cpu().numpy().copy())",
    "a module-level host tensor": "new = HOST_ONE",
    "a host tensor carried through ops": "new = (torch.Tensor([[1]]) + 1).long().clone()",
}


class _Decoder:
    """What the watch takes as on the device when the call starts: the decoder's models, and what it built on
    their device (here in ``__init__``, run under the watch by `devices.construct` as the child does)."""

    def __init__(self, model):
        self.model = model
        self.eos = torch.tensor([[7]], device=model.weight.device)


def _run(body: str, ids: torch.Tensor, wrapped: bool = False) -> list[str]:
    """The faults of graded-cell code ``body`` run with ``ids`` (and ``HELD``, a decoder) on the device;
    ``wrapped``: with ``.to``, ``.cpu`` and ``.numpy`` wrapped by the kit, as around every graded decode."""
    source = f"import numpy as np\nimport torch\nHOST_ONE = torch.LongTensor([[1]])\n\ndef run(ids):\n    {body}\n"
    model = torch.nn.Linear(1, 1)
    namespace = {"HELD": devices.construct(lambda: _Decoder(model), [model])[0]}
    exec(cells.compile_graded(source, "<graded cell device case>"), namespace)
    with world.CpuMoves() if wrapped else contextlib.nullcontext():
        with DeviceWatch([namespace["HELD"]], [ids]) as watch:
            namespace["run"](ids)
    return watch.faults


@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "kit-wrapped"])
@pytest.mark.parametrize("name", sorted(HOST_BUILT))
def test_a_tensor_built_on_the_host_is_caught_where_it_meets_the_device(name, wrapped):
    ids = torch.ones(1, 3, dtype=torch.long)
    faults = _run(f"{HOST_BUILT[name]}\n    return torch.cat([ids, new], dim=1)", ids, wrapped)
    assert len(faults) == 1 and "cat in run, line" in faults[0] and "built on the CPU" in faults[0], faults
    assert "Expected all tensors to be on the same device" in devices.advice(faults)
    # the same tensor put on the input's device is fine: it is the meeting that is caught, not the constructor
    assert not _run(f"{HOST_BUILT[name]}\n    return torch.cat([ids, new.to(ids.device)], dim=1)", ids, wrapped)


# what else CUDA refuses, and what it allows (the expectation is CUDA's)
OTHER_CASES = {
    ".numpy() of a device tensor": ("ids.numpy()", True),
    "np.asarray of a device tensor": ("np.asarray(ids)", True),
    "a host table indexed with device ids": ("torch.arange(10)[ids]", True),
    "device tensor, host values at tensor indices": ("ids[0, torch.tensor([0])] = torch.tensor([5])", True),
    "a module built in the call": ("torch.nn.Linear(3, 3)(ids.float())", True),
    "a comparison with a 1-element host tensor": ("ids == torch.tensor([1])", True),
    "device=ids.device": ("torch.cat([ids, torch.tensor([[2]], device=ids.device)], 1)", False),
    "device=str(ids.device)": ("torch.cat([ids, torch.tensor([[2]], device=str(ids.device))], 1)", False),
    "a device string held in a name": (
        "dev = str(ids.device)\n    torch.cat([ids, torch.ones(1, 1, dtype=torch.long, device=dev)], 1)",
        False,
    ),
    "new_tensor keeps the device": ("torch.cat([ids, ids.new_tensor([[2]])], 1)", False),
    "legacy .new keeps the device": ("torch.cat([ids, ids.new([[2]])], 1)", False),
    "new_full keeps the device": ("torch.cat([ids, ids.new_full((1, 1), 2)], 1)", False),
    "full_like keeps the device": ("torch.cat([ids, torch.full_like(ids[:, :1], 2)], 1)", False),
    ".to(ids)": ("torch.cat([ids, torch.LongTensor([[2]]).to(ids)], 1)", False),
    ".type_as(ids) moves": ("torch.cat([ids, torch.Tensor([[2]]).type_as(ids)], 1)", False),
    "as_tensor of a device tensor": ("torch.as_tensor(ids) + ids", False),
    "tensor of a device tensor": ("torch.tensor(ids) + ids", False),
    "a 0-dim host scalar": ("ids + torch.tensor(1)", False),
    "a device tensor indexed with host indices": ("ids[0, torch.tensor([0, 1])]", False),
    "host values into a device slice": ("x = ids.clone()\n    x[0, :2] = torch.tensor([5, 6])", False),
    "copy_ from the host": ("ids.clone().copy_(torch.zeros(1, 3, dtype=torch.long))", False),
    "rows of a device tensor": ("torch.stack([row for row in ids]) + ids", False),
    "reading values on the host": (
        "assert ids[0, -1].item() == ids.tolist()[0][-1] == ids.cpu().numpy()[0, -1]",
        False,
    ),
    "isinstance with a legacy type": ("assert isinstance(ids, torch.LongTensor)", False),
    "a tensor the decoder held before the call": ("torch.cat([ids, HELD.eos], 1)", False),
}


@pytest.mark.parametrize("wrapped", [False, True], ids=["plain", "kit-wrapped"])
@pytest.mark.parametrize("name", sorted(OTHER_CASES))
def test_what_cuda_refuses_is_caught_and_what_it_allows_is_not(name, wrapped):
    body, refused = OTHER_CASES[name]
    faults = _run(body, torch.ones(1, 3, dtype=torch.long), wrapped)
    assert bool(faults) == refused, (name, faults)
    if name.startswith(".numpy"):
        assert "can't convert cuda:0 device type tensor to numpy" in devices.advice(faults)


def test_a_tensor_held_before_the_call_is_on_the_device_and_one_built_in_it_is_not():
    """The models' weights, and a cache built from them, are reached through the decoder."""
    model = torch.nn.Linear(4, 4)
    holder = type("Decoder", (), {})()
    holder.target_model = model
    with DeviceWatch([model], []):  # a cache made in an earlier watched call, on the model's device
        holder.cache = {"layers": [(torch.zeros(1, 2, 4, device=model.weight.device),)]}
    with DeviceWatch([holder], []) as watch:
        model(holder.cache["layers"][0][0])
    assert not watch.faults
    with DeviceWatch([holder], []) as watch:
        model(torch.zeros(1, 2, 4))
    assert len(watch.faults) == 1 and "linear" in watch.faults[0]


def test_forging_the_device_check_earns_nothing_and_a_failure_is_flagged_for_the_instructor():
    """The watch runs in the student's process: the red team (2026-11-27) hid a host tensor three ways (marks
    copied onto it, the watch's fault list emptied, the child's answers rewritten) and each earned the device
    test's share. The check now carries no points, so forging it earns nothing; its failure shows in the
    gradebook's flags, and only where the part otherwise works (a stub fails it too, and is not flagged)."""
    assert [t.weight for t in grader.TESTS if t.body is suite_decode.decode_device] == [0]
    points = grader.load_config()["points"]
    report = grader.Report(full_marks(points, ids=True))
    device = report.find("decode.decode_device")
    assert device.max_score == 0 and report.score == report.max_score == sum(points[p] for p in grader.EXERCISES)
    device.status = "failed"  # a host tensor: the same points, one flag
    flagged = classroom.Student("ana", Path("."), results=report.gradescope())
    assert flagged.review() == [f"check: {device.name}"] and report.score == report.max_score
    for r in report.results:  # a stub of the decode part: every decode test fails, nothing to review
        if r.item == "decode":
            r.status, r.score = "not implemented", 0.0
    assert classroom.Student("bo", Path("."), results=report.gradescope()).review() == []


def test_the_torch_tensor_cheat_of_issue_43_earns_nothing():
    """Attack 3: ``torch.Tensor([accepted_tokens]).long()`` builds the new tokens on the CPU whatever the input's
    device. The watch wrapped legacy factories but not ``torch.Tensor``, so it got full marks; graded in the
    child's server here, it loses the device test, named with its line. Graded by that test alone: on a CPU this
    decoder is the reference's (the same tokens, the same passes, no move to the CPU), which the part's other tests
    pass in world 0 (tests/test_assignment.py), and the catalog's ``new_tokens_on_cpu``, the same line without
    ``device=``, grades its whole part to hold that a device mistake loses the device check only."""
    reference = submission.reference_sources()
    new = mutations._NEW
    assert new in reference["decode"]
    cheat = mutations.Mutation(
        "torch_tensor_on_cpu",
        "the new tokens built with torch.Tensor",
        "decode",
        ((new, "new = torch.Tensor([accepted_tokens]).long()"),),
        "decode.decode_device",
        "on a GPU this raises",
    )
    report = mutations.grade_mutation(cheat, reference, seed=0, in_process=True, ids={cheat.test_id})
    lost = [r for r in report.results if not r.passed]
    assert [r.test_id for r in lost] == ["decode.decode_device"], [(r.test_id, r.feedback) for r in lost]
    assert lost[0].score == 0 and "in generate_ids, line" in lost[0].feedback
    assert (
        "built on the CPU" in lost[0].feedback and "Expected all tensors to be on the same device" in lost[0].feedback
    )


# A decoder's own state: built in its construction (`devices.construct`, as the child builds every watched
# decoder) or stored in one call and used in the next. On a GPU what it built on the host is on the host.
STATE = {
    "torch.tensor": ("self.eos = torch.tensor([[2]])", True),
    "torch.zeros": ("self.eos = torch.zeros(1, 1, dtype=torch.long)", True),
    "torch.Tensor": ("self.eos = torch.Tensor([[2]]).long()", True),
    "a list of the target's device scalars": ("self.eos = torch.tensor([[target.weight[0, 0].long()]])", True),
    "device=target's device": ("self.eos = torch.tensor([[2]], device=target.weight.device)", False),
    ".to(target's device)": ("self.eos = torch.LongTensor([[2]]).to(target.weight.device)", False),
    "new_tensor of a weight": ("self.eos = target.weight.new_tensor([[2]]).long()", False),
    "derived from a weight": ("self.eos = (target.weight[:1, :1] * 0 + 2).long()", False),
}


def _decoder(target, init="pass", keep="pass"):
    """A graded cell's decoder around ``target``: ``init`` runs in ``__init__``, ``keep`` in ``keep()``, and
    ``use()`` puts ``self.eos`` after the text (line 14)."""
    source = (
        "import torch\n\n\nclass Decoder:\n    def __init__(self, target):\n        self.target = target\n"
        f"        {init}\n\n    def keep(self, ids):\n        target = self.target\n        {keep}\n\n"
        "    def use(self, ids):\n        return torch.cat([ids, self.eos], dim=1)\n"
    )
    namespace = {}
    exec(cells.compile_graded(source, "<graded cell state case>"), namespace)
    return namespace["Decoder"](target)


@pytest.mark.parametrize("name", sorted(STATE))
def test_what_the_decoder_built_at_construction_is_where_it_was_built(name):
    """Issue 43 item 3's remaining limit: a tensor ``__init__`` built on the host was taken as on the device because
    the decoder held it when the call began (``self.eos = torch.tensor([eos_id])``: passes on the CPU grader,
    crashes on a GPU). The construction runs under the watch too, seeded with the models."""
    line, refused = STATE[name]
    target, ids = torch.nn.Linear(4, 4), torch.ones(1, 3, dtype=torch.long)
    decoder, faults = devices.construct(lambda: _decoder(target, init=line), [target])
    assert not faults
    with DeviceWatch([decoder], [ids]) as watch:
        decoder.use(ids)
    assert bool(watch.faults) == refused, (name, watch.faults)
    if refused:  # named where it meets the device: the graded cell's own line
        assert "cat in use, line 14" in watch.faults[0] and "built on the CPU" in watch.faults[0], watch.faults


@pytest.mark.parametrize("name", sorted(STATE))
def test_what_the_decoder_kept_from_one_call_is_where_it_was_built_in_the_next(name):
    """The same between calls: a tensor built on the host in one call and stored on the decoder stays on the host
    when a later call uses it; one built on the device stays there."""
    line, refused = STATE[name]
    target, ids = torch.nn.Linear(4, 4), torch.ones(1, 3, dtype=torch.long)
    decoder, _ = devices.construct(lambda: _decoder(target, keep=line), [target])
    with DeviceWatch([decoder], [ids]) as watch:
        decoder.keep(ids)  # stored, not used: no fault yet
    assert not watch.faults
    with DeviceWatch([decoder], [ids.clone()]) as watch:
        decoder.use(ids)
    assert bool(watch.faults) == refused, (name, watch.faults)


def test_a_module_built_on_the_host_stays_there_and_the_models_stay_on_the_device():
    """A module the decoder builds itself (in ``__init__`` or a call) has its weights where it was built; the
    models the grader gives are on the device in every call, also after the decoder used them."""
    target, ids = torch.nn.Linear(4, 4), torch.ones(1, 4)
    decoder, _ = devices.construct(lambda: _decoder(target, init="self.head = torch.nn.Linear(4, 4)"), [target])
    for _ in range(2):
        with DeviceWatch([decoder], [ids]) as watch:
            decoder.target(ids)  # the grader's model: on the device
        assert not watch.faults
        with DeviceWatch([decoder], [ids]) as watch:
            decoder.head(ids)
        assert len(watch.faults) == 1 and "linear" in watch.faults[0], watch.faults
    decoder, _ = devices.construct(lambda: _decoder(target, keep="self.head = torch.nn.Linear(4, 4)"), [target])
    with DeviceWatch([decoder], [ids]) as watch:
        decoder.keep(ids)  # built in a call, used in the next
    with DeviceWatch([decoder], [ids]) as watch:
        decoder.head(ids)
    assert len(watch.faults) == 1 and "linear" in watch.faults[0], watch.faults


def test_a_host_tensor_kept_between_calls_loses_the_device_test_named_with_its_line():
    """Between calls, graded: a decoder that keeps a token buffer built on the host on the (shared) target model,
    once, in the first decode of the grading. Every later decode, the watched one too, holds it at its start: it was
    taken as on the device and earned full marks. Now it is where it was made, and only the device test is lost.
    Graded by it and one decode before it (`decode_max_tokens`, unwatched, makes the buffer): the part's others see
    the reference's tokens and passes on a CPU, as in the torch.Tensor cheat above."""
    reference = submission.reference_sources()
    new = mutations._NEW
    kept = mutations.Mutation(
        "host_buffer_kept_on_the_model",
        "a token buffer built once on the host, kept on the target model",
        "decode",
        (
            (
                new,
                'if not hasattr(self.target_model, "token_buffer"):\n'
                "            self.target_model.token_buffer = torch.zeros(1, 64, dtype=torch.long)\n"
                "        new = self.target_model.token_buffer[:, : len(accepted_tokens)].clone()\n"
                "        new[0] = torch.tensor(accepted_tokens)",
            ),
        ),
        "decode.decode_device",
        "on a GPU this raises",
    )
    ids = ["decode.decode_max_tokens", "decode.decode_device"]
    results = mutations.grade_mutation(kept, reference, seed=0, in_process=True, ids=set(ids)).results
    assert [r.test_id for r in results] == ids  # the buffer is made in the first, unwatched
    lost = [r for r in results if not r.passed]
    assert [r.test_id for r in lost] == ["decode.decode_device"], [(r.test_id, r.feedback) for r in lost]
    assert "cat in generate_ids, line" in lost[0].feedback and "built on the CPU" in lost[0].feedback, lost[0].feedback


# Switching the watch off (issue 43 item 3's last limit): a decode run with torch's function handling off, or with
# the watch's mode popped, made no tensor the watch saw, so it recorded no fault. The call's result now tells.
@contextlib.contextmanager
def _popped():
    mode = torch._C._pop_torch_function_stack()
    try:
        yield
    finally:
        torch._C._push_on_torch_function_stack(mode)


SWITCHES = {
    "DisableTorchFunction": torch._C.DisableTorchFunction,
    "the mode popped and pushed back": _popped,
    "torch.overrides._pop_mode_temporarily": torch.overrides._pop_mode_temporarily,
}


class _Greedy:
    """A toy target (embedding, head) decoding greedily on the device of ``ids``."""

    def __init__(self):
        self.model = torch.nn.Sequential(torch.nn.Embedding(10, 4), torch.nn.Linear(4, 10))

    def decode(self, ids, n=3):
        for _ in range(n):
            ids = torch.cat([ids, self.model(ids)[:, -1].argmax(-1, keepdim=True)], dim=1)
        return ids


def _switched(switch, move_back=False):
    """``(faults recorded during the call, faults with the result checked)`` of a decode run inside ``switch``."""
    decoder, ids = _Greedy(), torch.ones(1, 3, dtype=torch.long)
    with DeviceWatch([decoder], [ids]) as watch:
        with switch():
            out = decoder.decode(ids)
        out = out.to(ids.device) if move_back else out
        during = list(watch.faults)
    return during, watch.returned(out)


@pytest.mark.parametrize("name", sorted(SWITCHES))
def test_a_decode_with_the_watch_switched_off_is_caught_by_its_result(name):
    during, faults = _switched(SWITCHES[name])
    assert during == []  # the control: all the child reported before, so this passed the device test
    assert faults[0] == devices.UNSEEN and faults[1].startswith(devices.RETURNED), faults
    assert "(shape (1, 6)) while its input is on the model's device" in faults[1]
    assert "Leave torch's function handling on" in devices.advice(faults)
    # its tokens moved to the device where the watch is on again: still not seen reading the model
    assert _switched(SWITCHES[name], move_back=True) == ([], [devices.UNSEEN])


def test_an_honest_decode_and_one_that_only_disables_subclass_handling_are_not():
    """``DisableTorchFunctionSubclass`` leaves modes on: the watch sees the decode, and an honest one is clean."""
    assert _switched(contextlib.nullcontext) == ([], [])
    assert _switched(torch._C.DisableTorchFunctionSubclass) == ([], [])


def test_the_mode_popped_for_good_is_caught_and_the_stack_left_clean():
    decoder, ids = _Greedy(), torch.ones(1, 3, dtype=torch.long)
    depth = torch._C._len_torch_function_stack()
    with DeviceWatch([decoder], [ids]) as watch:
        torch._C._pop_torch_function_stack()
        out = decoder.decode(ids)
    faults = watch.returned(out)  # before, the watch's own exit raised ("trying to pop from empty mode stack")
    assert faults[0] == devices.UNSEEN and faults[1].startswith(devices.RETURNED), faults
    assert torch._C._len_torch_function_stack() == depth
    for passes_on, faults in ((True, []), (False, [devices.UNSEEN])):  # a mode of its own left above the watch
        with DeviceWatch([decoder], [ids]) as watch:
            torch._C._push_on_torch_function_stack(_Above(passes_on))
            out = decoder.decode(ids)
        assert watch.returned(out) == faults  # seen through a mode that passes calls on, not through one that hides
        assert torch._C._len_torch_function_stack() == depth  # taken off with the watch


class _Above(torch.overrides.TorchFunctionMode):
    def __init__(self, passes_on):
        super().__init__()
        self.passes_on = passes_on

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self.passes_on:
            return func(*args, **(kwargs or {}))
        with torch._C.DisableTorchFunction():
            out = func(*args, **(kwargs or {}))
        return out.to(args[0][0].device) if func is torch.cat else out


def test_a_host_tensor_returned_as_it_is_is_caught():
    """CUDA returns the ids on the input's device (``torch.cat`` of device tensors); tokens rebuilt on the host
    and returned unchanged meet no device tensor in the call, and crash the caller's next step."""
    decoder, ids = _Greedy(), torch.ones(1, 3, dtype=torch.long)
    with DeviceWatch([decoder], [ids]) as watch:
        out = torch.tensor(decoder.decode(ids).tolist())
    faults = watch.returned(out)
    assert len(faults) == 1 and faults[0].startswith(devices.RETURNED), faults
    assert "Return the tokens on input_ids.device" in devices.advice(faults)
    with DeviceWatch([decoder], [ids]) as watch:
        out = torch.tensor(decoder.decode(ids).tolist(), device=ids.device)
    assert watch.returned(out) == []


_HEAD = "    self.reset()\n"
_WRAPPED = (
    "    {switch}\n        return _plain(self, input_ids, max_tokens, num_speculative_tokens, use_cache)\n\n\n"
    "def _plain(self, input_ids, max_tokens=100, num_speculative_tokens=5, use_cache=True):\n" + _HEAD
)
DECODES = {  # the reference's generate_ids, and the same run with the watch switched off, in the child's server
    "the reference": ((), False),
    "wrapped in DisableTorchFunction": (_WRAPPED.format(switch="with torch._C.DisableTorchFunction():"), True),
    "with the mode popped": (_WRAPPED.format(switch="with torch.overrides._pop_mode_temporarily():"), True),
    "HF generate with the draft as assistant": (
        "    return self.target_model.generate(input_ids, max_new_tokens=max_tokens, do_sample=False,\n"
        "        assistant_model=self.draft_model, eos_token_id=self.eos_token_id, pad_token_id=0)\n",
        False,
    ),
}


@pytest.mark.parametrize("name", sorted(DECODES))
def test_the_graded_call_in_the_child_is_seen_or_faulted(name):
    """Through the child's own request (`child.Server.op_call` with ``watch``), as `decode_device` sends it."""
    from specdec_helpers.assignment.testing.wire import encode

    body, caught = DECODES[name]
    edits = ((_HEAD, _HEAD + body),) if body else ()
    sources = mutations.Mutation(name, name, "decode", edits, "decode.decode_device", "").sources(
        submission.reference_sources()
    )
    child = InProcess(cells.load_functions(sources))
    handle = child.request("new", world=0, draft="draft", eos=None)
    prompt = child.server.world(0).prompts[0]
    answer = child.request(
        "call",
        handle=handle,
        method="generate_ids",
        args=encode([prompt.clone(), 20, 4]),
        kwargs=encode({}),
        watch=True,
    )
    assert answer["result"].shape[1] > prompt.shape[1]
    if caught:
        assert answer["device_faults"][0] == devices.UNSEEN, answer["device_faults"]
    else:
        assert answer["device_faults"] == [], answer["device_faults"]
