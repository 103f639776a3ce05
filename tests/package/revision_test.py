#!/usr/bin/env python3
"""`basal --version` names the git revision it was built from (cmake/revision.cmake).

cmake/revision.cmake runs here on scratch trees: a git checkout (its short hash), the same with a
tracked file changed (+dirty; an untracked file does not count), a tree without .git and a folder
inside another checkout (neither is "a git checkout": a source tarball unpacked anywhere). The
header is rewritten only when the revision changes, so an unchanged tree recompiles nothing. And
the basal under test says "basal VERSION (REVISION)", its revision a commit of this checkout.

Usage: revision_test.py --source-dir DIR --bin-dir DIR --version V [unittest args]
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ARGS = None
GIT = ["git", "-c", "user.name=revision test", "-c", "user.email=test@basal.invalid", "-c", "init.defaultBranch=main"]


def revision(source_dir, output):
    r = subprocess.run(["cmake", f"-DSOURCE_DIR={source_dir}", f"-DOUTPUT={output}", "-P",
                        os.path.join(ARGS.source_dir, "cmake", "revision.cmake")],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    with open(output) as f:
        m = re.search(r'#define BASAL_REVISION "(.*)"', f.read())
    assert m, "no BASAL_REVISION in " + output
    return m.group(1)


def git(repo, *argv):
    r = subprocess.run(GIT + ["-C", repo, *argv], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


class RevisionScript(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="basal-revision.")
        self.repo = os.path.join(self.tmp, "repo")
        os.mkdir(self.repo)
        self.header = os.path.join(self.tmp, "basal_revision.h")

    def tearDown(self):
        shutil.rmtree(self.tmp)

    def commit(self):
        git(self.repo, "init", "-q")
        with open(os.path.join(self.repo, "a.txt"), "w") as f:
            f.write("one\n")
        git(self.repo, "add", "a.txt")
        git(self.repo, "commit", "-q", "-m", "one")
        return git(self.repo, "rev-parse", "--short=7", "HEAD")

    def test_a_tree_without_git_says_so(self):
        self.assertEqual(revision(self.repo, self.header), "not built from a git checkout")

    def test_a_checkout_names_its_commit_and_dirty_when_a_tracked_file_changed(self):
        short = self.commit()
        self.assertRegex(short, r"^[0-9a-f]{7}$")
        self.assertEqual(revision(self.repo, self.header), f"git {short}")
        open(os.path.join(self.repo, "untracked.txt"), "w").close()
        self.assertEqual(revision(self.repo, self.header), f"git {short}")
        with open(os.path.join(self.repo, "a.txt"), "a") as f:
            f.write("two\n")
        self.assertEqual(revision(self.repo, self.header), f"git {short}+dirty")

    def test_a_folder_inside_another_checkout_is_not_that_checkout(self):
        self.commit()
        inner = os.path.join(self.repo, "unpacked-tarball")
        os.mkdir(inner)
        self.assertEqual(revision(inner, self.header), "not built from a git checkout")

    def test_the_header_is_rewritten_only_when_the_revision_changes(self):
        self.commit()
        revision(self.repo, self.header)
        os.utime(self.header, ns=(1_000_000_000, 1_000_000_000))
        revision(self.repo, self.header)
        self.assertEqual(os.stat(self.header).st_mtime_ns, 1_000_000_000)
        with open(os.path.join(self.repo, "a.txt"), "a") as f:
            f.write("two\n")
        revision(self.repo, self.header)
        self.assertNotEqual(os.stat(self.header).st_mtime_ns, 1_000_000_000)


class BuiltBasal(unittest.TestCase):
    def test_version_names_a_commit_of_this_checkout(self):
        r = subprocess.run([os.path.join(ARGS.bin_dir, "basal"), "--version"], capture_output=True, text=True,
                           timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        first = r.stdout.split("\n")[0]
        top = subprocess.run(["git", "-C", ARGS.source_dir, "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=60)
        if top.returncode != 0 or os.path.realpath(top.stdout.strip()) != os.path.realpath(ARGS.source_dir):
            self.assertEqual(first, f"basal {ARGS.version} (not built from a git checkout)")
            return
        m = re.fullmatch(re.escape(f"basal {ARGS.version} (git ") + r"([0-9a-f]{7,})(\+dirty)?\)", first)
        self.assertIsNotNone(m, first)
        # A commit this checkout has (the build may be older than HEAD, never from elsewhere).
        known = subprocess.run(["git", "-C", ARGS.source_dir, "cat-file", "-e", m.group(1) + "^{commit}"],
                               capture_output=True, timeout=60)
        self.assertEqual(known.returncode, 0, f"{m.group(1)} is no commit of {ARGS.source_dir}")


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--source-dir", required=True)
    p.add_argument("--bin-dir", required=True)
    p.add_argument("--version", required=True)
    ARGS, rest = p.parse_known_args()
    ARGS.source_dir = os.path.abspath(ARGS.source_dir)
    ARGS.bin_dir = os.path.abspath(ARGS.bin_dir)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
