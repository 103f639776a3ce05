#!/usr/bin/env python3
"""Tests of the doc test itself: made-up pages whose commands are plain shell (no basal needed).

Each case writes a page into a fresh source dir, runs doc_test.py on it as a separate process,
and checks its exit status and what it says. A harness that passed everything would fail the
"must fail" cases; one that failed everything would fail the "must pass" ones.
"""

import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HARNESS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "doc_test.py")
F = "```"


class DocTestSelfTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="doc-test-selftest-")
        self.root = self.tmp.name
        os.makedirs(os.path.join(self.root, "docs"))
        os.makedirs(os.path.join(self.root, "examples"))
        with open(os.path.join(self.root, "examples", "greeting.txt"), "w") as f:
            f.write("hello from examples\n")
        # A stand-in for the build's bin directory: one program that says where it ran from.
        self.bin = os.path.join(self.root, "bin")
        os.makedirs(self.bin)
        tool = os.path.join(self.bin, "doc-tool")
        with open(tool, "w") as f:
            f.write("#!/bin/sh\necho \"doc-tool $*\"\n")
        os.chmod(tool, 0o755)

    def tearDown(self):
        self.tmp.cleanup()

    def run_pages(self, pages):
        for name, text in pages.items():
            with open(os.path.join(self.root, name), "w") as f:
                f.write(textwrap.dedent(text).replace("FENCE", F))
        proc = subprocess.run([sys.executable, HARNESS, "--source-dir", self.root, "--bin-dir", self.bin,
                               "--timeout", "30"] + list(pages), capture_output=True, text=True)
        return proc.returncode, proc.stdout + proc.stderr

    def assert_passes(self, pages):
        code, out = self.run_pages(pages)
        self.assertEqual(code, 0, out)
        return out

    def assert_fails(self, pages, *needles):
        code, out = self.run_pages(pages)
        self.assertEqual(code, 1, out)
        for n in needles:
            self.assertIn(n, out)
        return out

    def test_right_output_passes_and_wrong_output_fails_naming_page_line_command_and_both_outputs(self):
        right = textwrap.dedent("""\
            # A page

            FENCEconsole
            $ echo hello
            hello
            FENCE
            """)
        out = self.assert_passes({"docs/page.md": right})
        self.assertIn("1 blocks run (1 console commands)", out)
        out = self.assert_fails({"docs/page.md": right.replace("hello\nFENCE", "goodbye\nFENCE")},
                                "FAIL docs/page.md:4: its output differs", "$ echo hello", "goodbye", "hello")
        self.assertIn("expected output (lines 5-5 of docs/page.md", out)
        self.assertIn("actual output (stdout and stderr; exit 0)", out)

    def test_exit_codes_are_checked(self):
        self.assert_passes({"docs/p.md": """\
            FENCEconsole
            $ sh -c 'echo oops >&2; exit 3'
            oops
            [exit 3]
            FENCE
            """})
        self.assert_fails({"docs/p.md": """\
            FENCEconsole
            $ sh -c 'echo oops >&2; exit 3'
            oops
            FENCE
            """}, "docs/p.md:2: it exited 3, the page says 0")
        self.assert_fails({"docs/p.md": """\
            FENCEconsole
            $ true
            [exit 1]
            FENCE
            """}, "docs/p.md:2: it exited 0, the page says 1")

    def test_placeholders_match_what_varies_and_nothing_else(self):
        page = textwrap.dedent("""\
            FENCEconsole
            $ printf 'id 42 at 17:01\\nline a\\nline b\\nlast\\n'
            id ... at ...
            ...
            last
            FENCE
            """)
        self.assert_passes({"docs/p.md": page})
        self.assert_fails({"docs/p.md": page.replace("last\nFENCE", "final\nFENCE")}, "its output differs")
        # `...` stands for characters within its line only; an extra line is a difference.
        self.assert_fails({"docs/p.md": """\
            FENCEconsole
            $ printf 'a\\nb\\n'
            a...
            FENCE
            """}, "its output differs")
        # No output shown means none expected.
        self.assert_fails({"docs/p.md": "FENCEconsole\n$ echo surprise\nFENCE\n"}, "its output differs", "surprise")

    def test_state_carries_over_within_a_page_from_the_examples_and_heredocs(self):
        self.assert_passes({"docs/p.md": """\
            FENCEsh
            cat > made.txt <<'EOF'
            made by a heredoc
            EOF
            GREETING=hi
            FENCE

            Text between blocks.

            FENCEconsole
            $ cat made.txt examples/greeting.txt
            made by a heredoc
            hello from examples
            $ echo $GREETING; \\
              echo continued
            hi
            continued
            $ cat > second.txt <<EOF
            $GREETING again
            EOF
            $ cat second.txt
            hi again
            FENCE
            """})

    def test_each_page_has_its_own_directory_and_home_and_the_bin_dir_first_on_path(self):
        out = self.assert_passes({
            "docs/a.md": """\
                FENCEconsole
                $ touch $HOME/mark left-here; echo "$HOME" | grep -c '/home$'
                1
                $ doc-tool x
                doc-tool x
                $ command -v doc-tool | sed 's|.*/||'; test -z "$XDG_STATE_HOME" && echo unset
                doc-tool
                unset
                $ ls build/release/bin
                doc-tool
                FENCE
                """,
            "docs/b.md": """\
                FENCEconsole
                $ ls $HOME; ls left-here
                ls: cannot access 'left-here': No such file or directory
                [exit 2]
                FENCE
                """})
        self.assertIn("ok   docs/a.md", out)
        self.assertIn("ok   docs/b.md", out)

    def test_a_failing_sh_block_fails_and_the_page_stops_there(self):
        out = self.assert_fails({"docs/p.md": """\
            FENCEsh
            echo before
            false
            echo after
            FENCE

            FENCEconsole
            $ echo never
            never
            FENCE
            """}, "docs/p.md:1: this ```sh block failed with exit code 1", "before")
        self.assertNotIn("after", out.split("its output:")[1].split("scratch")[0])
        self.assertIn("1 blocks run (0 console commands)", out)

    def test_skip_needs_a_reason_and_is_counted(self):
        out = self.assert_passes({"docs/p.md": """\
            <!-- doc-test: skip (needs a GPU) -->
            FENCEsh
            false
            FENCE
            """})
        self.assertIn("1 skipped", out)
        self.assertIn("skipped docs/p.md:2: needs a GPU", out)
        self.assert_fails({"docs/p.md": "<!-- doc-test: skip -->\nFENCEsh\nfalse\nFENCE\n"},
                          "docs/p.md:1: a skip marker needs a reason")
        self.assert_fails({"docs/p.md": "<!-- doc-test: skp (typo) -->\nFENCEsh\nfalse\nFENCE\n"},
                          'unknown doc-test marker "skp (typo)"')
        self.assert_fails({"docs/p.md": "<!-- doc-test: skip (x) -->\nsome text\nFENCEsh\nfalse\nFENCE\n"},
                          "docs/p.md:1: a doc-test marker must be just above a fenced block")

    def test_blocks_that_could_hide_a_command_are_refused(self):
        self.assert_fails({"docs/p.md": "FENCE\n$ echo hi\nhi\nFENCE\n\nFENCE\nplain\nFENCE\n"},
                          "docs/p.md:1: a fenced block without a language",
                          "docs/p.md:6: a fenced block without a language")
        self.assert_fails({"docs/p.md": "FENCEsh\n$ echo hi\nFENCE\n"},
                          "docs/p.md:2: a ```sh block with a \"$ \" prompt")
        self.assert_fails({"docs/p.md": "FENCEconsole\nhi\n$ echo hi\nFENCE\n"},
                          "docs/p.md:2: in a ```console block, output before any command")
        self.assert_fails({"docs/p.md": "FENCEsh\ntrue\n"}, "docs/p.md:1: this fenced block is never closed")
        # Shown, never run: other languages; but a command shown in one is refused unless skipped.
        out = self.assert_passes({"docs/p.md": "FENCEtext\nfalse\nFENCE\n\nFENCEjson\n{}\nFENCE\n"})
        self.assertIn("0 blocks run", out)
        self.assert_fails({"docs/p.md": "FENCEtext\noutput\n$ false\nFENCE\n"},
                          "docs/p.md:3: a ```text block shows a command")
        out = self.assert_passes({"docs/p.md": "<!-- doc-test: skip (an old release) -->\nFENCEtext\n$ false\nFENCE\n"})
        self.assertIn("skipped docs/p.md:2: an old release", out)

    def test_indented_fences_in_lists_run(self):
        self.assert_fails({"docs/p.md": "- a step:\n\n  FENCEconsole\n  $ echo indented\n  indented!\n  FENCE\n"},
                          "docs/p.md:4: its output differs", "indented!")


if __name__ == "__main__":
    unittest.main()
