#!/usr/bin/env bash
# Gradescope runs this once when it builds the autograder's image (Ubuntu with python3). It makes a
# virtual environment in /autograder/venv with the versions the instructor graded with
# (constraints.txt), the CPU build of torch first. The kit is used from source/kit and the toy
# pair's weights ship in the bundle: nothing is downloaded or trained at grading time.
# Student code never runs as root: it runs as the unprivileged user made here (Gradescope's advice),
# which cannot read source/ (the solutions, the hidden tests, the grader), write outside its scratch
# folder, or signal the grader. bubblewrap adds a sandbox where the image allows namespaces.
set -euxo pipefail
# Python first: transformers 5.x and the pinned numpy need 3.11 or newer; Ubuntu 22.04 images have 3.10.
PY=python3
if ! "$PY" -c 'import sys; sys.exit(sys.version_info < (3, 11))'; then
  PY=python3.11 && { apt-get update && apt-get install -y python3.11 python3.11-venv; } || {
    echo "setup.sh: this image's python3 is older than 3.11 and python3.11 cannot be installed: choose a base image with Python 3.11 or newer (Ubuntu 24.04) in the autograder settings" >&2; exit 1; }
fi
cd /autograder/source
if ! "$PY" -m venv --help > /dev/null 2>&1 || ! "$PY" -c "import ensurepip" 2> /dev/null; then
  apt-get update && apt-get install -y python3-venv python3-pip
fi
"$PY" -m venv /autograder/venv
/autograder/venv/bin/pip install --upgrade pip
/autograder/venv/bin/pip install -c constraints.txt torch --index-url https://download.pytorch.org/whl/cpu
/autograder/venv/bin/pip install -c constraints.txt -r requirements.txt
id -u specdec-student > /dev/null 2>&1 || useradd --system --user-group --no-create-home \
  --home-dir /nonexistent --shell /usr/sbin/nologin specdec-student
apt-get install -y bubblewrap || (apt-get update && apt-get install -y bubblewrap) || true
chmod -R a+rX,go-w /autograder/venv   # the student's user runs Python and torch from here
chmod -R go-rwx /autograder/source     # ... but reads nothing of the kit, its solutions or its tests
