"""The graded parts, below the rest of `assignment/`: reading them from notebook cells (`cells`) and assembling
the student's `SpeculativeDecoder` from them (`decoder`). Grading, the student's tools and authoring build on it."""
