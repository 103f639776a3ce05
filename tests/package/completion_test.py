#!/usr/bin/env python3
"""Shell completion of basal, run the way each shell runs it.

bash: the generated script is sourced, COMP_WORDS and COMP_CWORD are set as bash sets them, _basal
is called and COMPREPLY is read. zsh: the script's function runs with the completion system's
functions (_describe, _files, _users, compset) stood in for, printing what they were given.
fish: its own `complete -C` completes a command line. Each asks `basal __complete`, which reads
basal's command definitions and, for names, a store made here with real approvals. What a user
relies on: commands, subcommands, options, choices and paths are offered where they fit; `basal run
<TAB>` offers the approved flows of the store --db names (or of the default journal); the hidden
commands never show; completing never creates a journal.

Usage: completion_test.py --bin-dir DIR --reference-dir DIR [unittest args]
"""

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import unittest

ARGS = None


class Store:
    """A scratch directory with a journal holding flow hello, policy agents, secret example_token,
    token ci, and files for path completion; the default journal (XDG_STATE_HOME) holds flow
    default_flow only."""

    def __init__(self):
        self.dir = tempfile.mkdtemp(prefix="basal-completion.")
        self.basal = os.path.join(ARGS.bin_dir, "basal")
        self.env = dict(os.environ, PATH=ARGS.bin_dir + os.pathsep + os.environ.get("PATH", ""),
                        HOME=os.path.join(self.dir, "home"), XDG_STATE_HOME=os.path.join(self.dir, "state"))
        os.makedirs(self.env["HOME"])
        examples = os.path.join(ARGS.source_dir, "examples")
        db = os.path.join(self.dir, "j.db")
        self.must("flow", "approve", "hello", f"{examples}/hello.js", "--manifest", f"{examples}/hello.manifest.json",
                  "--yes", "--db", db)
        self.must("policy", "approve", "agents", "--manifest", f"{examples}/hello.manifest.json", "--yes", "--db", db)
        self.must("secret", "set", "example_token", "--db", db, stdin="t0ken\n")
        self.must("token", "create", "--name", "ci", "--scope", "read", "--db", db)
        self.must("flow", "approve", "default_flow", f"{examples}/hello.js", "--manifest",
                  f"{examples}/hello.manifest.json", "--yes")
        for name in ("flows.jsonl", "my flow.js"):
            open(os.path.join(self.dir, name), "w").close()
        os.mkdir(os.path.join(self.dir, "subdir"))

    def must(self, *argv, stdin=None):
        r = subprocess.run([self.basal, *argv], input=stdin or "", capture_output=True, text=True, env=self.env,
                           cwd=self.dir, timeout=60)
        if r.returncode != 0:
            raise AssertionError(f"basal {' '.join(argv)}: {r.stderr}")

    def close(self):
        shutil.rmtree(self.dir, ignore_errors=True)


STORE = None


def setUpModule():
    global STORE
    STORE = Store()


def tearDownModule():
    STORE.close()


def script(name):
    return os.path.join(ARGS.reference_dir, "completions", name)


def bash(words, cword=None):
    """COMPREPLY after bash's completion of COMP_WORDS=words at COMP_CWORD=cword (default: the last)."""
    cword = len(words) - 1 if cword is None else cword
    program = (f"source {shlex.quote(script('basal'))}\n"
               f"COMP_WORDS=({' '.join(shlex.quote(w) for w in words)})\n"
               f"COMP_CWORD={cword}\n"
               "_basal\n"
               "printf '%s\\n' \"${COMPREPLY[@]}\"\n")
    r = subprocess.run(["bash", "--norc", "--noprofile", "-c", program], capture_output=True, text=True,
                       env=STORE.env, cwd=STORE.dir, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stderr == "", r.stderr
    return [line for line in r.stdout.split("\n") if line]


class Bash(unittest.TestCase):
    def test_commands_without_the_hidden_ones(self):
        got = bash(["basal", ""])
        for command in ("run", "check", "journal", "doctor", "flow", "policy", "serve", "mcp", "help"):
            self.assertIn(command, got)
        self.assertNotIn("__generate", got)
        self.assertNotIn("__complete", got)
        self.assertEqual(bash(["basal", "jo"]), ["journal"])

    def test_subcommands_and_options(self):
        self.assertEqual(bash(["basal", "flow", ""]), ["approve", "list", "show", "diff", "revoke"])
        self.assertEqual(bash(["basal", "run", "--ma"]), ["--manifest", "--max-workers"])
        self.assertEqual(bash(["basal", "flow", "approve", "--no"]), ["--note"])
        # An option already given is not offered again.
        self.assertNotIn("--logs", bash(["basal", "run", "--logs", "--l"]))

    def test_choices(self):
        self.assertEqual(bash(["basal", "run", "--durability", ""]), ["normal", "full"])
        self.assertEqual(bash(["basal", "check", "x.js", "--profile", "c"]), ["codemode"])

    def test_run_offers_the_approved_flows_of_the_db_typed_and_paths(self):
        got = bash(["basal", "run", "--db", "j.db", ""])
        self.assertIn("hello", got)
        self.assertNotIn("default_flow", got)
        self.assertIn("flows.jsonl", got)   # NAME|FLOW.js: a file too
        self.assertIn("my flow.js", got)
        self.assertEqual(bash(["basal", "run", "--db", "j.db", "he"]), ["hello"])
        # --db after the word being completed counts too? No: only what is typed before it.
        self.assertEqual(bash(["basal", "run", "he"]), [])

    def test_the_default_journal_is_read_without_db(self):
        self.assertIn("default_flow", bash(["basal", "run", "de"]))
        self.assertIn("default_flow", bash(["basal", "flow", "show", ""]))

    def test_db_with_an_equals_sign_as_bash_splits_it(self):
        # bash splits --db=j.db into --db, = and j.db (COMP_WORDBREAKS).
        self.assertIn("hello", bash(["basal", "run", "--db", "=", "j.db", ""]))
        # Right after the '=': the value, a path (bash replaces only what follows the '=').
        self.assertIn("j.db", bash(["basal", "run", "--db", "="]))

    def test_policy_secret_and_token_names(self):
        self.assertEqual(bash(["basal", "policy", "show", "--db", "j.db", ""]), ["agents"])
        self.assertEqual(bash(["basal", "run", "--db", "j.db", "--policy", ""]), ["agents"])
        self.assertEqual(bash(["basal", "secret", "rm", "--db", "j.db", ""]), ["example_token"])
        self.assertEqual(bash(["basal", "token", "revoke", "--db", "j.db", ""]), ["ci"])

    def test_paths_where_a_file_is_asked_for(self):
        self.assertEqual(bash(["basal", "run", "--inputs", "flo"]), ["flows.jsonl"])
        self.assertEqual(bash(["basal", "secret", "list", "--secrets", "sub"]), ["subdir"])

    def test_help_completes_command_paths(self):
        self.assertIn("run", bash(["basal", "help", ""]))
        self.assertEqual(bash(["basal", "help", "flow", "ap"]), ["approve"])

    def test_completing_never_creates_a_journal(self):
        missing = os.path.join(STORE.dir, "none", "missing.db")
        self.assertEqual(bash(["basal", "run", "--db", missing, "he"]), [])
        self.assertFalse(os.path.exists(os.path.dirname(missing)))
        empty_home = tempfile.mkdtemp(prefix="basal-completion-home.")
        try:
            env = dict(STORE.env, HOME=empty_home)
            env.pop("XDG_STATE_HOME")
            r = subprocess.run([STORE.basal, "__complete", "--", "run", ""], capture_output=True, text=True,
                               env=env, timeout=60)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(os.listdir(empty_home), [])  # no .local/state/basal made
        finally:
            shutil.rmtree(empty_home)

    def test_the_function_is_registered_for_basal(self):
        r = subprocess.run(["bash", "--norc", "--noprofile", "-c", f"source {shlex.quote(script('basal'))}; complete -p basal"],
                           capture_output=True, text=True, timeout=60)
        self.assertEqual(r.stdout.strip(), "complete -F _basal basal")


class Zsh(unittest.TestCase):
    def complete(self, words):
        if not shutil.which("zsh"):
            self.skipTest("zsh is not installed (scripts/setup.sh installs it)")
        stand_ins = (
            "compdef() { :; }\n"
            "compset() { return 0; }\n"
            "_files() { print -r -- \":files $*\"; }\n"
            "_users() { print -r -- ':users'; }\n"
            "_describe() { local name=${@[-1]}; print -rl -- \"${(@P)name}\"; }\n")
        program = (stand_ins + f"source {shlex.quote(script('_basal'))}\n"
                   f"words=({' '.join(shlex.quote(w) for w in words)})\nCURRENT={len(words)}\n_basal\n")
        r = subprocess.run(["zsh", "-f", "-c", program], capture_output=True, text=True, env=STORE.env,
                           cwd=STORE.dir, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stderr, "")
        return [line for line in r.stdout.split("\n") if line]

    def test_commands_with_descriptions(self):
        got = self.complete(["basal", "fl"])
        self.assertEqual(len(got), 1)
        self.assertTrue(got[0].startswith("flow:Approve, inspect and revoke flows"), got)

    def test_flows_and_files(self):
        got = self.complete(["basal", "run", "--db", "j.db", ""])
        self.assertIn("hello", got)
        self.assertIn(":files ", got)

    def test_choices(self):
        self.assertEqual(self.complete(["basal", "run", "--durability=f"]), ["full"])

    def test_the_script_parses(self):
        r = subprocess.run(["zsh", "-n", script("_basal")], capture_output=True, text=True, timeout=60) \
            if shutil.which("zsh") else self.skipTest("zsh is not installed")
        self.assertEqual(r.returncode, 0, r.stderr)


class Fish(unittest.TestCase):
    def complete(self, line):
        if not shutil.which("fish"):
            self.skipTest("fish is not installed (scripts/setup.sh installs it)")
        program = f"source {shlex.quote(script('basal.fish'))}; complete -C {shlex.quote(line)}"
        r = subprocess.run(["fish", "--no-config", "-c", program], capture_output=True, text=True, env=STORE.env,
                           cwd=STORE.dir, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        return [line.split("\t")[0] for line in r.stdout.split("\n") if line]

    def test_subcommands(self):
        # fish sorts what it offers.
        self.assertEqual(self.complete("basal flow "), sorted(["approve", "list", "show", "diff", "revoke"]))

    def test_flows_files_and_equals(self):
        got = self.complete("basal run --db j.db ")
        self.assertIn("hello", got)
        self.assertIn("flows.jsonl", got)
        self.assertEqual(self.complete("basal run --durability=n"), ["--durability=normal"])


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--bin-dir", required=True)
    p.add_argument("--reference-dir", required=True)
    p.add_argument("--source-dir", required=True)
    ARGS, rest = p.parse_known_args()
    for name in ("bin_dir", "reference_dir", "source_dir"):
        setattr(ARGS, name, os.path.abspath(getattr(ARGS, name)))
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
