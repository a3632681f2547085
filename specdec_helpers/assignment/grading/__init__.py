"""The machinery that grades: the grader (`grader`) and its points (`scoring`), the sandboxed child that runs
student code (`child`, `sandbox`), who runs it with which rights (`privilege`, `jail_policy`, `isolation`,
`student_users`), the side-by-side timing (`speed`), the nbval run (`submission`), a class at once and copied
work (`classroom`, `grade_worker`, `contain`, `similarity`: the instructor's).

The trust model. Student code runs only in the student's processes (the graded cells' child, nbval's kernels),
as a user without rights on the grader, in bubblewrap where it works (`privilege`). Whatever runs in such a
process can be rewritten by the student's code there, so no verdict rests on it:

- Code. The child's view of the kit holds only the modules the child imports (`isolation.least_code`: the
  graded parts' plumbing, the test worlds, cache bookkeeping, the CPU kernels of the models, a clock;
  `isolation.CHILD_CORE` says why each is safe). The kit's decode loops, tree and batch loops, drafters,
  sampling, eagle and lean forwards are absent, not guarded: a closure, ``gc`` or ``sys.modules`` finds
  nothing to call, and the parts a student did not write are placeholders that name their notebook.
- Outputs are compared with greedy decoding the grader computed in its own process; time is the wall time the
  grader measures around a request, the other child paused (`speed`); CPU time is read from outside, where a
  process can add to it but never take from it.
- Counters and logs the child writes (its statistics, the round log, the test worlds' pass and position
  counters, its device watch) are read as consistency checks that name a mistake. Acceptance is computed by the
  grader from the prompt, the target's greedy text and the draft model's greedy proposals (`replay`); a target
  that re-reads the text shows in the CPU time of a pass-heavy target (`World.live`: layers that each change the
  logits, so none can be skipped), whatever the counters say, and its text is held against the grader's own.
- The grader writes results.json after every student process is gone; answers from the child are JSON, never
  executed or unpickled.

The limits that remain, and what each is worth to a student:

- Without a sandbox (``SPECDEC_SANDBOX=none``, or a grader that is neither root nor able to run bubblewrap) the
  child imports the grader's whole kit, reference solution included, and only a guard in the student's own
  process (`child._poison_the_algorithm`) refuses graded callers; a closure read gets through
  (tests/test_child_view.py's control). Such a grading says that student code runs with the grader's rights:
  grade as root with bubblewrap (Gradescope, CI), where nothing of that is in reach.
- The kit code left in the view can be patched by the student's code (the round recorder, the counters, cache
  helpers, torch itself). Each patch changes only what the child reports, which is checked against what the
  grader computes or measures, or changes the student's own decoder, which is what is graded.
- The device check is the one verdict only the child can give: a CPU grader has no second device, so
  `devices.DeviceWatch` (a torch function mode) runs in the child and the child sends its faults. Code written
  against it hides its own host tensors: copying the marks a tensor carries, emptying the watch's fault list,
  rewriting the child's answers on their way out (red team, 2026-11-27: three ways). So the check carries no
  points (weight 0): it tells the student the line that would crash on a GPU, and the gradebook flags a failure
  for the instructor (`classroom.Student.review`). Forging it earns nothing; the same decoder still crashes on
  the first GPU it meets, where the correctness tests lose their points.
- The models live in the student's process: their weights can be read. The pass-heavy target of the checks of
  cost (`World.live`) has no layer that adds nothing: skipping its faint layers changes the text, which is held
  against the grader's own (red team A03, tests/cheat_cells/skipped_layers.py). `World.deep`, whose extra layers
  add exactly zero, is left only where a draft must always agree (`suite_decode._rounds_real_outside`, which
  holds two of the child's own runs against each other: a decoder can slow either one down, never speed it up).
- A graded cell sees the test world it runs in (its models, prompts and seed). The timed prompts are drawn
  apart, so nothing it learns there tells them (`world.grading_seed`), and every timed output is checked
  against the grader's own greedy text. So are the texts of the checks of cost, one per try
  (`outside.random_texts`): a decoder cannot run their passes ahead, or answer a retry from memory.
"""
