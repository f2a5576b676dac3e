#!/usr/bin/env bash
# The README's quick start, word for word: every fenced block of README.md that follows a
# `<!-- quickstart -->` line is run as the README shows it, from the repository root, with
# the built binary on PATH as `ampcheck` and the recorder's Python (AMPCHECK_PYTHON, which
# scripts/test.sh sets from scripts/pyenv.sh) on PATH as `python`.
#
# In such a block a line `$ COMMAND` is a command, run by bash exactly as written; a
# trailing `# exit N` comment (part of the command, so bash ignores it) is the exit code the
# README documents, 0 without one. The lines after it, up to the next `$ `, are what the
# README shows of its output: each must be a line of the output (stdout and stderr, trailing
# blanks ignored), in the order shown. `...` cuts: a line that is only `...` stands for
# lines left out; ` ... ` inside a line, `... ` at its start or ` ...` at its end for text
# left out of that line.
#
# Skipped, saying why: a command that runs `python` where AMPCHECK_PYTHON is not set, and a
# command that reads ../shared/ (the public GPU profiles beside the project) where that
# folder is absent. A README without a marked block fails: the quick start was lost.
set -uo pipefail
bin=${AMPCHECK:?set AMPCHECK to the ampcheck binary}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=${WORK:?set WORK to a scratch directory}
rm -rf "$work" && mkdir -p "$work"

# `ampcheck` on PATH: a folder holding the binary under that name.
mkdir -p "$work/bin" && ln -sf "$(cd "$(dirname "$bin")" && pwd)/$(basename "$bin")" "$work/bin/ampcheck"
path=$work/bin:$PATH
if [[ -n ${AMPCHECK_PYTHON:-} ]]; then
  # `python` on PATH: the recorder's interpreter (a wrapper, not a link: a virtual
  # environment's python finds its environment from its own path).
  printf '#!/bin/sh\nexec %q "$@"\n' "$AMPCHECK_PYTHON" > "$work/bin/python" && chmod +x "$work/bin/python"
fi

exec python3 - "$root" "$path" "${AMPCHECK_PYTHON:-}" <<'EOF'
import os, re, subprocess, sys

root, path, python = sys.argv[1], sys.argv[2], sys.argv[3]
readme = open(os.path.join(root, "README.md"), encoding="utf-8").read().split("\n")

# The marked blocks: [(README line number, [lines])].
blocks, i = [], 0
while i < len(readme):
    if readme[i].strip() == "<!-- quickstart -->":
        j = i + 1
        while j < len(readme) and not readme[j].strip():
            j += 1
        if j >= len(readme) or not readme[j].startswith("```"):
            print(f"FAIL: README.md:{i + 1}: <!-- quickstart --> is not followed by a fenced block")
            sys.exit(1)
        k = j + 1
        while k < len(readme) and not readme[k].startswith("```"):
            k += 1
        blocks.append((j + 2, readme[j + 1:k]))
        i = k
    i += 1
if not blocks:
    print("FAIL: README.md has no <!-- quickstart --> block: its quick start is gone")
    sys.exit(1)

# The commands: (README line, command, documented exit code, [shown output lines]).
commands = []
for first, lines in blocks:
    for n, line in enumerate(lines):
        if line.startswith("$ "):
            command = line[2:].strip()
            if command.endswith("\\"):
                print(f"FAIL: README.md:{first + n}: a quick-start command continued over lines is not supported")
                sys.exit(1)
            m = re.search(r"#\s*exit (\d+)\b", command)
            commands.append((first + n, command, int(m.group(1)) if m else 0, []))
        elif commands and commands[-1][0] >= first:
            commands[-1][3].append(line.rstrip())
        elif line.strip():
            print(f"FAIL: README.md:{first + n}: output before any `$ ` command in a quick-start block")
            sys.exit(1)


def matches(shown, line):
    """`shown`, with its ... cuts, is this output line."""
    head, tail = shown.startswith("... "), shown.endswith(" ...")
    core = shown[4 if head else 0:len(shown) - 4 if tail else len(shown)]
    pattern = ".*".join(re.escape(part) for part in core.split(" ... "))
    return re.search(("" if head else "^") + pattern + ("" if tail else "$"), line) is not None


env = dict(os.environ, PATH=path)
fails = skipped = 0
for where, command, code, shown in commands:
    if re.search(r"\bpython\b", command) and not python:
        print(f"SKIPPED: README.md:{where}: {command}\n  (it runs python, and AMPCHECK_PYTHON is not set: the recorder's "
              "environment, which scripts/test.sh makes with scripts/pyenv.sh and sets)")
        skipped += 1
        continue
    shared = re.findall(r"\.\./shared/\S+", command)
    if any(not os.path.exists(os.path.join(root, p)) for p in shared):
        print(f"SKIPPED: README.md:{where}: {command}\n  ({' '.join(shared)} is not here: the public GPU profiles "
              "beside the project, ../shared/data/traces)")
        skipped += 1
        continue
    try:
        r = subprocess.run(["bash", "-c", command], cwd=root, env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=600)
        out, rc = r.stdout, r.returncode
    except subprocess.TimeoutExpired as e:
        out, rc = (e.stdout or b"").decode() if isinstance(e.stdout, bytes) else (e.stdout or ""), "timeout (600 s)"
    lines = [l.rstrip() for l in out.split("\n")]
    problems = []
    if rc != code:
        problems.append(f"exit {rc}, the README says {code}")
    at = 0
    for s in shown:
        if s.strip() in ("", "..."):
            continue
        n = next((n for n in range(at, len(lines)) if matches(s, lines[n])), None)
        if n is None:
            before = any(matches(s, l) for l in lines[:at])
            problems.append(f"no output line {'after the previous one ' if before else ''}is the README's {s!r}")
        else:
            at = n + 1
    if problems:
        fails += 1
        print(f"FAIL: README.md:{where}: {command}")
        for p in problems:
            print(f"  {p}")
        print("  its output (last 40 lines):")
        for l in lines[-40:]:
            print(f"    {l}")
    else:
        print(f"ok: README.md:{where}: {command}")
print(f"{len(commands)} quick-start command(s): {len(commands) - fails - skipped} as the README says, "
      f"{fails} not, {skipped} skipped")
sys.exit(1 if fails else 0)
EOF
