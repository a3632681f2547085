"""Assignment tooling: release the student kit, grade submissions, self-check, hand in.

The graded work is in the notebooks (one graded cell per part, `cells`); `decoder` assembles PA3's
``SpeculativeDecoder`` from those functions (with the kit's stand-ins for missing parts). Grading runs
student code only in a child process or a kernel (`child`, `sandbox`), as a user without rights on the
grader (`privilege`); `suite` / `suite_decode` hold the tests, `speed` the side-by-side timing,
`submission` the nbval run, `mutations` the known-mistake catalog.
"""
