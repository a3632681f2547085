"""Instructor tools that write things: the student release, notebook badge/set-up sync, the Gradescope autograder bundle, templates."""
