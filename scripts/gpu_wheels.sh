#!/usr/bin/env bash
# Wheels for labkit on an offline GPU host that keeps its own CUDA torch (docs/gpu-check.md).
#
#   bash scripts/gpu_wheels.sh [DIR] [--notebooks]        DIR: default wheels/ (git-ignored)
#
# Run it where PyPI is reachable. It downloads, for CPython 3.12 on manylinux x86_64 (glibc
# 2.28 or newer), every dependency pyproject.toml lists except:
#   - torch: the GPU host's own CUDA build stays; nothing here installs or replaces it;
#   - the notebook stack (jupyterlab, ipykernel, ipywidgets, papermill, nbconvert): the labkit
#     command, gpu-check included, does not import it; --notebooks adds it.
# numpy is downloaded at labkit's pin, but the install keeps a numpy the host already has (its
# torch and the image's other packages were built against it) and installs the carried one
# only where there is none. setuptools and wheel come along so labkit itself installs offline.
# Writes DIR/requirements.txt and DIR/install.sh, the recipe to run on the GPU host:
#   bash DIR/install.sh [REPO]
# Environment: PYTHON (the interpreter that runs pip here, default .venv/bin/python or python3),
# TARGET_PYTHON (default 3.12).
set -euo pipefail

repo=$(cd "$(dirname "$0")/.." && pwd)
dir=""
notebooks=0
for arg in "$@"; do
  case "$arg" in
    --notebooks) notebooks=1 ;;
    -h|--help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    -*) echo "gpu_wheels.sh: unknown option $arg" >&2; exit 2 ;;
    *) dir=$arg ;;
  esac
done
dir=${dir:-$repo/wheels}
py=${PYTHON:-}
if [ -z "$py" ]; then
  if [ -x "$repo/.venv/bin/python" ]; then py=$repo/.venv/bin/python; else py=python3; fi
fi
target=${TARGET_PYTHON:-3.12}
mkdir -p "$dir"
dir=$(cd "$dir" && pwd)

# labkit's pinned dependencies, read from pyproject.toml, less torch (and the notebook stack)
"$py" - "$repo/pyproject.toml" "$notebooks" > "$dir/pins.txt" <<'EOF'
import re
import sys
import tomllib

NOTEBOOK_STACK = {"jupyterlab", "ipykernel", "ipywidgets", "papermill", "nbconvert"}
with open(sys.argv[1], "rb") as f:
    deps = tomllib.load(f)["project"]["dependencies"]
for dep in deps:
    name = re.split(r"[<>=!~; \[]", dep, maxsplit=1)[0].lower()
    if name == "torch" or (name in NOTEBOOK_STACK and sys.argv[2] != "1"):
        continue
    print(dep)
EOF
# What the host installs: the same pins, except numpy unpinned (a numpy already there stays).
sed -E 's/^numpy[=<>!~].*/numpy/' "$dir/pins.txt" > "$dir/requirements.txt"
printf 'setuptools>=68\nwheel\n' > "$dir/build.txt"

platforms=(--platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64
           --platform manylinux_2_27_x86_64 --platform manylinux_2_28_x86_64)
echo "downloading $(wc -l < "$dir/pins.txt") pinned packages and their dependencies for" \
     "CPython $target, manylinux x86_64, into $dir"
"$py" -m pip download --only-binary=:all: --python-version "$target" --implementation cp \
  "${platforms[@]}" -d "$dir" -r "$dir/pins.txt" -r "$dir/build.txt"
rm "$dir/pins.txt" "$dir/build.txt"

cat > "$dir/install.sh" <<'EOF'
#!/usr/bin/env bash
# Install labkit from this folder of wheels, offline, keeping this host's torch.
#   bash install.sh [REPO]    REPO: the labkit checkout (default: this folder's parent)
# PYTHON picks the interpreter (default python3): the one whose torch the GPU checks use.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=${1:-$(dirname "$here")}
py=${PYTHON:-python3}
before=$("$py" -c 'import torch; print(torch.__version__)') || {
  echo "install.sh: $py has no torch: use the interpreter of the GPU image (PYTHON=...)" >&2
  exit 1
}
echo "keeping torch $before"
"$py" -m pip install --no-index --find-links "$here" -r "$here/requirements.txt"
"$py" -m pip install --no-index --find-links "$here" --no-deps -e "$repo"
after=$("$py" -c 'import torch; print(torch.__version__)')
if [ "$before" != "$after" ]; then
  echo "install.sh: torch changed from $before to $after" >&2
  exit 1
fi
"$py" -c 'import labkit.cli' && echo "labkit installed; torch $after kept"
EOF
chmod +x "$dir/install.sh"
echo "wrote $(ls "$dir"/*.whl | wc -l) wheels ($(du -sh "$dir" | cut -f1)) and $dir/install.sh"
