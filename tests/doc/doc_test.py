#!/usr/bin/env python3
"""The doc test: runs every command shown in README.md and docs/*.md against a build's binaries.

The convention (docs/doc-test.md says the same for writers):

* Every fenced block carries a language. Untagged fences are an error, so a block that shows a
  command cannot be left out by accident.
* ```console blocks are run: each `$ COMMAND` line is a command (a line ending in `\\` continues
  on the next line; a heredoc's lines, up to its end word, belong to the command). The lines after
  it, up to the next `$ ` line, are its expected output: stdout and stderr together, as a terminal
  shows them. A last output line `[exit N]` says the command must exit N; without it, it must
  exit 0.
* ```sh blocks (also bash, shell) are run as one script under `set -e -o pipefail`: every
  command must succeed; their output is not compared. `$ ` prompts are refused in them.
* Output is compared line by line, exactly, except:
    - `...` inside a line matches any run of characters (also none) on that line;
    - a line that is only `...` matches any number of lines (also none);
    - trailing spaces at the ends of lines and trailing empty lines are ignored.
* Any other language (text, json, js, cpp, sql, ...) is shown, never run; a `$ ` prompt in such a
  block is refused (unless the block carries a skip marker), so a command cannot hide in one.
* `<!-- doc-test: skip REASON -->` on the line just above a fence (blank lines between are
  allowed) skips a block that would run; the reason is required and printed in the summary.
* Each page runs in its own scratch directory, as if from the root of a checkout with a release
  build: it holds a copy of examples/ and build/release/bin, a link to the tested binaries. HOME
  is the scratch directory's `home/` (so the default journal is new), XDG_STATE_HOME is unset,
  TMPDIR is its `tmp/`, PATH starts with the binaries' directory. One bash shell runs a page's
  blocks in order, so files, variables and the current directory carry over from block to block.
  A command's stdin is /dev/null. The first failing command ends its page.

Usage: doc_test.py [--source-dir DIR] [--bin-dir DIR] [--keep] [--timeout S] [PAGE.md ...]
"""

import argparse
import dataclasses
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

RUN_CONSOLE = {"console"}
RUN_SCRIPT = {"sh", "bash", "shell"}
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")
MARKER = re.compile(r"^\s*<!--\s*doc-test:(?P<body>.*?)-->\s*$")
HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\2")
EXIT_LINE = re.compile(r"^\[exit (\d+)\]$")


class PageError(Exception):
    """A page that breaks the convention; the message says where and how to fix it."""


@dataclasses.dataclass
class Block:
    page: str
    line: int          # the line of the opening fence, 1-based
    language: str
    lines: list        # (line number, text) of the body, the fence's indentation removed
    skip: str = None   # the skip marker's reason


@dataclasses.dataclass
class Command:
    page: str
    line: int          # the `$ ` line
    text: str          # what bash runs (continuations and heredocs included)
    expected: list     # (line number, text) expected output lines
    exit_code: int


def parse_page(page, text):
    """Returns the page's fenced blocks; raises PageError for a broken convention."""
    blocks = []
    lines = text.split("\n")
    pending = None  # (line, body) of a doc-test marker waiting for its fence
    errors = []
    i = 0
    while i < len(lines):
        raw = lines[i]
        m = MARKER.match(raw)
        if m:
            if pending:
                raise PageError(f"{page}:{pending[0]}: a doc-test marker with no fenced block after it "
                                f"(another marker follows on line {i + 1}; give one marker per block)")
            pending = (i + 1, m.group("body").strip())
            i += 1
            continue
        f = FENCE.match(raw)
        if not f:
            if raw.strip() and pending:
                raise PageError(f"{page}:{pending[0]}: a doc-test marker must be just above a fenced block "
                                f"(line {i + 1} comes between them)")
            i += 1
            continue
        indent, fence, info = f.group("indent"), f.group("fence"), f.group("info").strip()
        start = i + 1
        body = []
        i += 1
        closed = False
        while i < len(lines):
            c = lines[i]
            if re.match(r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + r",}\s*$", c):
                closed = True
                i += 1
                break
            body.append((i + 1, c[len(indent):] if c.startswith(indent) else c.lstrip()))
            i += 1
        if not closed:
            raise PageError(f"{page}:{start}: this fenced block is never closed (add a line {fence})")
        language = info.split()[0].lower() if info else ""
        if not language:
            errors.append(
                f"{page}:{start}: a fenced block without a language. Mark it ```console (commands with their "
                f"output: run and compared), ```sh (commands that must succeed: run), or ```text "
                f"(a synopsis, output or diagram: never run). Conventions: docs/doc-test.md.")
        block = Block(page, start, language, body)
        if pending:
            try:
                block.skip = parse_marker(page, pending)
            except PageError as e:
                errors.append(str(e))
            pending = None
        blocks.append(block)
    if pending:
        raise PageError(f"{page}:{pending[0]}: a doc-test marker with no fenced block after it")
    if errors:  # every such mistake on the page at once, so one run shows them all
        raise PageError("\n     ".join(errors))
    return blocks


def parse_marker(page, pending):
    line, body = pending
    m = re.match(r"^skip\b[\s:]*(.*)$", body)
    if not m:
        raise PageError(f"{page}:{line}: unknown doc-test marker \"{body}\": the only marker is "
                        f"<!-- doc-test: skip REASON -->")
    reason = m.group(1).strip()
    if reason.startswith("(") and reason.endswith(")"):
        reason = reason[1:-1].strip()
    if not reason:
        raise PageError(f"{page}:{line}: a skip marker needs a reason: <!-- doc-test: skip (why it cannot run) -->")
    return reason


def console_commands(block):
    """Splits a console block into commands with their expected output and exit code."""
    commands = []
    body = block.lines
    k = 0
    while k < len(body) and not body[k][1].strip():
        k += 1
    while k < len(body):
        number, text = body[k]
        if not (text.startswith("$ ") or text == "$"):
            raise PageError(f"{block.page}:{number}: in a ```console block, output before any command: every "
                            f"command line starts with \"$ \" (or show this as ```text)")
        command_lines = [text[2:]]
        k += 1
        while command_lines[-1].endswith("\\") and k < len(body):
            command_lines.append(body[k][1])
            k += 1
        for m in HEREDOC.finditer("\n".join(command_lines)):
            strip_tabs, word = m.group(1) == "-", m.group(3)
            while True:
                if k >= len(body):
                    raise PageError(f"{block.page}:{number}: the heredoc <<{word} is never ended (a line {word})")
                line = body[k][1]
                command_lines.append(line)
                k += 1
                if (line.lstrip("\t") if strip_tabs else line) == word:
                    break
        expected = []
        while k < len(body) and not (body[k][1].startswith("$ ") or body[k][1] == "$"):
            expected.append(body[k])
            k += 1
        while expected and not expected[-1][1].strip():
            expected.pop()
        exit_code = 0
        if expected and EXIT_LINE.match(expected[-1][1].strip()):
            exit_code = int(EXIT_LINE.match(expected[-1][1].strip()).group(1))
            expected.pop()
            while expected and not expected[-1][1].strip():
                expected.pop()
        commands.append(Command(block.page, number, "\n".join(command_lines), expected, exit_code))
    if not commands:
        raise PageError(f"{block.page}:{block.line}: an empty ```console block (show a command, or use ```text)")
    return commands


def line_pattern(expected):
    parts = expected.rstrip().split("...")
    return re.compile(".*?".join(re.escape(p) for p in parts), re.DOTALL)


def output_matches(expected, actual):
    """expected: list of strings (a line `...` matches any lines); actual: list of strings."""
    patterns = [None if e.strip() == "..." else line_pattern(e) for e in expected]
    memo = {}

    def match(i, j):
        if (i, j) in memo:
            return memo[(i, j)]
        if i == len(patterns):
            ok = j == len(actual)
        elif patterns[i] is None:
            ok = any(match(i + 1, jj) for jj in range(j, len(actual) + 1))
        else:
            ok = j < len(actual) and patterns[i].fullmatch(actual[j].rstrip()) is not None and match(i + 1, j + 1)
        memo[(i, j)] = ok
        return ok

    return match(0, 0)


def first_difference(page, expected, actual):
    """A hint for the reader of a failure: the first expected line that no actual line matches in order.

    expected: (line number, text) pairs."""
    j = 0
    for number, e in expected:
        if e.strip() == "...":
            continue
        p = line_pattern(e)
        while j < len(actual) and p.fullmatch(actual[j].rstrip()) is None:
            j += 1
        if j == len(actual):
            return f"{page}:{number} ({e.rstrip()!r}) matches no actual line at or after the previous match"
        j += 1
    return ("every expected line was found in order, but the actual output has lines the page does not show "
            "(a line `...` stands for any lines)")


class Shell:
    """One bash for one page: commands are sourced from files, so state carries over."""

    def __init__(self, cwd, env, timeout):
        self.timeout = timeout
        self.cwd = cwd
        self.proc = subprocess.Popen(["bash", "--noprofile", "--norc"], cwd=cwd, env=env, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
        self.count = 0
        self.closed = False

    def run(self, script, strict):
        """Runs script; returns (output, exit code, timed_out). With strict, set -e -o pipefail."""
        self.count += 1
        path = os.path.join(self.cwd, ".doc-test", f"block-{self.count}.sh")
        with open(path, "w") as f:
            f.write(script + "\n")
        marker = "doc-test-done-" + uuid.uuid4().hex
        if strict:
            # A failing command ends the shell (set -e) with its status: the page stops there anyway.
            line = (f"set -e -o pipefail; . {path} </dev/null; set +e +o pipefail; "
                    f"printf '\\n{marker} %d\\n' 0\n")
        else:
            line = f". {path} </dev/null; __doc_test_rc=$?; printf '\\n{marker} %d\\n' $__doc_test_rc\n"
        try:
            self.proc.stdin.write(line.encode())
            self.proc.stdin.flush()
        except BrokenPipeError:
            return "(the page's shell had already exited)", None, False
        data = b""
        deadline = time.monotonic() + self.timeout
        end = re.compile(rb"\n" + marker.encode() + rb" (\d+)\n")
        fd = self.proc.stdout.fileno()
        while True:
            m = end.search(data)
            if m:
                return data[:m.start()].decode("utf-8", "backslashreplace"), int(m.group(1)), False
            left = deadline - time.monotonic()
            if left <= 0:
                self.close()
                return data.decode("utf-8", "backslashreplace"), None, True
            ready, _, _ = select.select([fd], [], [], left)
            if ready:
                chunk = os.read(fd, 65536)
                if not chunk:  # the shell exited: set -e in a ```sh block, or a command ran `exit`
                    self.close()  # its group first, then reap it: the page ends here anyway
                    return data.decode("utf-8", "backslashreplace"), self.proc.returncode, False
                data += chunk

    def close(self):
        # The shell leads its own process group: this also ends what a page left running in the
        # background, even after the shell itself has exited.
        if self.closed:  # once reaped, its pid (the group's id) may belong to someone else
            return
        self.closed = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait()


def indent(lines, prefix="    "):
    return "\n".join(prefix + l for l in lines) if lines else prefix + "(nothing)"


def prepare_scratch(scratch, source_dir, bin_dir):
    os.makedirs(os.path.join(scratch, "home"))
    os.makedirs(os.path.join(scratch, "tmp"))
    os.makedirs(os.path.join(scratch, ".doc-test"))
    examples = os.path.join(source_dir, "examples")
    if os.path.isdir(examples):
        shutil.copytree(examples, os.path.join(scratch, "examples"), symlinks=True)
    os.makedirs(os.path.join(scratch, "build", "release"))
    os.symlink(os.path.abspath(bin_dir), os.path.join(scratch, "build", "release", "bin"))
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_STATE_HOME", "BASH_ENV", "ENV", "CDPATH")}
    env.update(HOME=os.path.join(scratch, "home"), TMPDIR=os.path.join(scratch, "tmp"), LC_ALL="C.UTF-8",
               TERM="dumb", COLUMNS="100", PATH=os.path.abspath(bin_dir) + os.pathsep + env.get("PATH", "/usr/bin:/bin"))
    return env


def run_page(page, path, source_dir, bin_dir, scratch_root, timeout, stats, skipped):
    """Runs one page; returns a failure message or None."""
    with open(path, encoding="utf-8") as f:
        text = f.read()
    try:
        blocks = parse_page(page, text)
        plan = []
        for b in blocks:
            if b.language in RUN_CONSOLE:
                commands = console_commands(b)  # the page's convention is checked even when skipped
            elif b.language in RUN_SCRIPT:
                for number, line in b.lines:
                    if line.startswith("$ "):
                        raise PageError(f"{page}:{number}: a ```{b.language} block with a \"$ \" prompt: show commands "
                                        f"with their output as ```console, or drop the prompt")
                commands = None
            else:
                prompts = [number for number, line in b.lines if line.startswith("$ ")]
                if prompts and not b.skip:
                    # A command shown where it is never run could drift from the truth unseen.
                    raise PageError(f"{page}:{prompts[0]}: a ```{b.language or '(untagged)'} block shows a command "
                                    f"(\"$ ...\"): mark the block ```console so the doc test runs it, or put "
                                    f"<!-- doc-test: skip (why it cannot run) --> above it")
                if not b.skip:
                    continue
            if b.skip:
                skipped.append((page, b.line, b.skip))
                continue
            plan.append((b, commands))
    except PageError as e:
        return str(e)
    if not plan:
        return None
    scratch = os.path.join(scratch_root, re.sub(r"[^A-Za-z0-9_.-]", "_", page))
    env = prepare_scratch(scratch, source_dir, bin_dir)
    shell = Shell(scratch, env, timeout)
    try:
        for block, commands in plan:
            if commands is None:
                script = "\n".join(t for _, t in block.lines)
                output, code, timed_out = shell.run(script, strict=True)
                stats["blocks"] += 1
                if timed_out or code != 0:
                    what = f"did not finish within {timeout} s" if timed_out else f"failed with exit code {code}"
                    return (f"{page}:{block.line}: this ```{block.language} block {what}; every command in it must "
                            f"succeed.\n  the block:\n{indent([t for _, t in block.lines])}\n  its output:\n"
                            f"{indent(output.rstrip(chr(10)).split(chr(10)) if output else [])}\n  scratch directory: {scratch}")
                continue
            stats["blocks"] += 1
            for c in commands:
                output, code, timed_out = shell.run(c.text, strict=False)
                stats["commands"] += 1
                actual = output.split("\n")
                if actual and actual[-1] == "":
                    actual.pop()
                actual = [a.rstrip() for a in actual]
                while actual and not actual[-1]:
                    actual.pop()
                expected = [t for _, t in c.expected]
                problems = []
                if timed_out:
                    problems.append(f"it did not finish within {timeout} s (killed)")
                elif code != c.exit_code:
                    problems.append(f"it exited {code}, the page says {c.exit_code}"
                                    + ("" if c.exit_code else " (write [exit N] as its last output line if that is intended)"))
                if not timed_out and not output_matches(expected, actual):
                    problems.append("its output differs: " + first_difference(c.page, c.expected, actual))
                if problems:
                    where = (f"lines {c.expected[0][0]}-{c.expected[-1][0]}" if c.expected else "no lines")
                    cmd_lines = c.text.split("\n")
                    return (f"{page}:{c.line}: {'; '.join(problems)}\n"
                            f"  command:\n{indent(['$ ' + cmd_lines[0]] + cmd_lines[1:])}\n"
                            f"  expected output ({where} of {page}; `...` matches anything; exit {c.exit_code}):\n"
                            f"{indent(expected)}\n"
                            f"  actual output (stdout and stderr; exit {'none: timed out' if timed_out else code}):\n"
                            f"{indent(actual)}\n"
                            f"  scratch directory: {scratch}")
    finally:
        shell.close()
    return None


def main(argv):
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description="Run every command shown in README.md and docs/*.md.")
    parser.add_argument("--source-dir", default=os.path.normpath(os.path.join(here, "..", "..")),
                        help="the checkout whose pages and examples/ are used (default: this file's checkout)")
    parser.add_argument("--bin-dir", default=None,
                        help="the build's bin directory, with basal and ck-basal-worker (default: SOURCE/build/release/bin)")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directories and print where they are")
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds one command or block may take (default 60)")
    parser.add_argument("pages", nargs="*", help="pages relative to the source dir (default: README.md and docs/*.md)")
    args = parser.parse_args(argv)
    source_dir = os.path.abspath(args.source_dir)
    bin_dir = os.path.abspath(args.bin_dir or os.path.join(source_dir, "build", "release", "bin"))
    pages = args.pages
    if not pages:
        pages = ["README.md"] if os.path.exists(os.path.join(source_dir, "README.md")) else []
        docs = os.path.join(source_dir, "docs")
        if os.path.isdir(docs):
            pages += sorted("docs/" + n for n in os.listdir(docs) if n.endswith(".md"))
    for name in ("basal", "ck-basal-worker"):
        if not os.path.exists(os.path.join(bin_dir, name)) and os.path.exists(os.path.join(source_dir, "src", "cli")):
            print(f"doc test: {bin_dir}/{name} does not exist: build it first "
                  f"(cmake --build build/release --target basal ck-basal-worker) or pass --bin-dir", file=sys.stderr)
            return 2
    scratch_root = tempfile.mkdtemp(prefix="basal-doc-test-")
    stats = {"blocks": 0, "commands": 0}
    skipped = []
    failures = []
    started = time.monotonic()
    for page in pages:
        path = os.path.join(source_dir, page)
        if not os.path.isfile(path):
            failures.append(f"{page}: no such page under {source_dir}")
            continue
        failure = run_page(page, path, source_dir, bin_dir, scratch_root, args.timeout, stats, skipped)
        if failure:
            failures.append(failure)
            print(f"FAIL {page}")
        else:
            print(f"ok   {page}")
    elapsed = time.monotonic() - started
    print(f"\ndoc test: {len(pages)} pages, {stats['blocks']} blocks run ({stats['commands']} console commands), "
          f"{len(skipped)} skipped, {len(failures)} failed, {elapsed:.1f} s")
    for page, line, reason in skipped:
        print(f"  skipped {page}:{line}: {reason}")
    for f in failures:
        print("\nFAIL " + f)
    if failures:
        print("\nThe doc test runs the ```console and ```sh blocks of each page in a fresh directory "
              "(conventions: docs/doc-test.md). Fix the page (or the code), or mark a block that cannot run "
              "with <!-- doc-test: skip REASON -->.")
    if args.keep or failures:
        print(f"scratch directories: {scratch_root}")
    else:
        shutil.rmtree(scratch_root, ignore_errors=True)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
