#!/usr/bin/env python3
"""The man pages are basal's own reference (cmake/reference.cmake, src/cli/reference_man.cpp).

What a user relies on: `man basal-COMMAND` exists for every command `basal --help` lists (and for
no other), says what `basal COMMAND --help` says (every option, every subcommand), and renders
without a warning; basal-manifest(5) carries every section of docs/manifest.md; the installed
changelog is packaging/debian/changelog, for the project's version.

Usage: reference_test.py --bin-dir DIR --reference-dir DIR --source-dir DIR --version V [unittest args]
"""

import argparse
import gzip
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ARGS = None


def run(*argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, **kw)


def basal(*argv):
    r = run(os.path.join(ARGS.bin_dir, "basal"), *argv)
    if r.returncode != 0:
        raise AssertionError(f"basal {' '.join(argv)} exited {r.returncode}: {r.stderr}")
    return r.stdout


def help_section(text, title):
    """The first words of the lines of a CLI11 help section ("Subcommands:", "Options:")."""
    words = []
    inside = False
    for line in text.split("\n"):
        if line == title:
            inside = True
        elif inside and line.startswith("  ") and line.strip():
            words.append(line.split()[0])
        elif inside:
            break
    return words


def option_names(help_text):
    """"-h,--help" and "--db FILE" -> -h, --help, --db."""
    names = []
    for word in help_section(help_text, "Options:"):
        names += [n for n in word.split(",") if n.startswith("-")]
    return names


def page_text(path):
    """A page's roff source, with \\- read as -."""
    with gzip.open(path, "rt", encoding="ascii") as f:
        return f.read().replace("\\-", "-")


def render(path, tool):
    """groff (or man) output and diagnostics for one page."""
    if tool == "groff":
        with gzip.open(path, "rb") as f:
            source = f.read()
        return subprocess.run(["groff", "-man", "-Tutf8", "-ww", "-z"], input=source, capture_output=True, timeout=60)
    env = dict(os.environ, MANWIDTH="80", MAN_KEEP_FORMATTING="0")
    return subprocess.run(["man", "-l", "-P", "cat", path], capture_output=True, env=env, timeout=60)


class ManPages(unittest.TestCase):
    def setUp(self):
        self.man1 = os.path.join(ARGS.reference_dir, "man", "man1")
        self.man5 = os.path.join(ARGS.reference_dir, "man", "man5")

    def commands(self):
        commands = help_section(basal("--help"), "Subcommands:")
        self.assertIn("run", commands)  # the parsing of --help works
        return commands

    def test_every_command_has_a_page_and_no_other_page_exists(self):
        expected = {"basal.1.gz"} | {f"basal-{c}.1.gz" for c in self.commands()}
        self.assertEqual(set(os.listdir(self.man1)), expected)
        self.assertEqual(set(os.listdir(self.man5)), {"basal-manifest.5.gz"})

    def test_a_page_says_what_help_says(self):
        for command in [None] + self.commands():
            argv = [command] if command else []
            help_text = basal(*argv, "--help")
            page = page_text(os.path.join(self.man1, f"basal-{command}.1.gz" if command else "basal.1.gz"))
            for name in option_names(help_text):
                self.assertIn(f"\\fB{name}\\fR", page, f"{command}: option {name} of --help is not in the page")
            for sub in help_section(help_text, "Subcommands:"):
                if command is None:
                    self.assertIn(f".BR basal-{sub} (1)", page)
                else:
                    self.assertIn(f'.SS "basal {command} {sub}"', page)
                    for name in option_names(basal(command, sub, "--help")):
                        self.assertIn(f"\\fB{name}\\fR", page, f"{command} {sub}: option {name} is not in the page")
            # The hidden commands and the test-hooks switches stay out, as --help leaves them out.
            shown = "\n".join(line for line in page.split("\n") if not line.startswith('.\\"'))
            self.assertNotIn("__generate", shown)
            self.assertNotIn("__complete", shown)
            self.assertNotIn("--worker-arg", shown)

    def test_every_page_renders_without_a_warning(self):
        pages = [os.path.join(self.man1, p) for p in sorted(os.listdir(self.man1))]
        pages.append(os.path.join(self.man5, "basal-manifest.5.gz"))
        for tool in ("groff", "man"):
            if not shutil.which(tool):
                self.fail(f"{tool} is not installed (scripts/setup.sh installs it: groff-base, man-db)")
            for page in pages:
                r = render(page, tool)
                self.assertEqual(r.returncode, 0, f"{tool} {page}: {r.stderr.decode()}")
                self.assertEqual(r.stderr.decode(), "", f"{tool} {page} warns")
                if tool == "man":
                    self.assertIn(b"basal", r.stdout)
                    # Every byte is ASCII roff; a character outside it would show as a box or '?'.
                    self.assertNotIn("\ufffd", r.stdout.decode("utf-8"), page)

    def test_a_bad_page_fails_the_render_check(self):
        # The check above can fail: groff -ww warns about an unknown macro.
        with tempfile.TemporaryDirectory() as tmp:
            bad = os.path.join(tmp, "bad.1.gz")
            with gzip.open(bad, "wt") as f:
                f.write('.TH BAD 1\n.SH NAME\nbad \\- page\n.XY what\n')
            self.assertNotEqual(render(bad, "groff").stderr, b"")

    def test_the_manifest_page_has_every_section_of_docs_manifest_md(self):
        page = page_text(os.path.join(self.man5, "basal-manifest.5.gz"))
        with open(os.path.join(ARGS.source_dir, "docs", "manifest.md"), encoding="utf-8") as f:
            markdown = f.read()
        headings = re.findall(r"^(##+) (.*)$", markdown, re.M)
        self.assertGreater(len(headings), 3)
        for level, title in headings:
            title = re.sub(r"`([^`]*)`", r"\1", title)
            macro = ".SH" if level == "##" else ".SS"
            shown = title.upper() if macro == ".SH" else title
            self.assertIn(f'{macro} "', page)
            self.assertTrue(re.search(re.escape(f'{macro} "') + r".*" + re.escape(shown.replace("`", "")), page),
                            f"{level} {title} is not a section of basal-manifest(5)")
        # Its grants table reached the page, one tagged paragraph a host call.
        for call in ("kv.get", "kv.put", "http.fetch", "timer.sleep"):
            self.assertIn(f".TP\n\\fB{call}\\fR", page)


class Changelog(unittest.TestCase):
    def test_the_installed_changelog_is_the_debian_one_for_this_version(self):
        with gzip.open(os.path.join(ARGS.reference_dir, "doc", "changelog.Debian.gz"), "rt") as f:
            installed = f.read()
        with open(os.path.join(ARGS.source_dir, "packaging", "debian", "changelog")) as f:
            self.assertEqual(installed, f.read())
        r = subprocess.run(["dpkg-parsechangelog", "-l-", "-SVersion"], input=installed, capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        upstream = r.stdout.strip().rsplit("-", 1)[0]
        self.assertEqual(upstream, ARGS.version,
                         "packaging/debian/changelog's newest entry must be for the project's VERSION "
                         "(CMakeLists.txt): add one with dch -v VERSION-1")


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--bin-dir", required=True)
    p.add_argument("--reference-dir", required=True)
    p.add_argument("--source-dir", required=True)
    p.add_argument("--version", required=True)
    ARGS, rest = p.parse_known_args()
    for name in ("bin_dir", "reference_dir", "source_dir"):
        setattr(ARGS, name, os.path.abspath(getattr(ARGS, name)))
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
