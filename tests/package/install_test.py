#!/usr/bin/env python3
"""`cmake --install` into a scratch prefix gives a basal that works from where it was installed.

What an administrator relies on (docs/install.md): basal in PREFIX/bin finds its worker in
PREFIX/libexec/basal without --worker (`basal doctor` accepts it) and runs a flow from the installed
examples; the man pages are where `man` looks (`man -M PREFIX/share/man basal-run`); the
completions, sysusers.d and tmpfiles.d files are in their FHS places; the unit's ExecStart names
the installed basal and configuration, whatever the prefix; an edited configuration survives the
next install.

Usage: install_test.py --build-dir DIR [unittest args]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

ARGS = None
PREFIX = None
TMP = None


def setUpModule():
    global PREFIX, TMP
    TMP = tempfile.mkdtemp(prefix="basal-install.")
    PREFIX = os.path.join(TMP, "prefix")
    install()


def tearDownModule():
    shutil.rmtree(TMP, ignore_errors=True)


def install():
    r = subprocess.run(["cmake", "--install", ARGS.build_dir, "--prefix", PREFIX], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout


def run(*argv, **kw):
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, **kw)


class InstalledTree(unittest.TestCase):
    def test_the_fhs_layout(self):
        for path in ("bin/basal", "libexec/basal/ck-basal-worker", "share/man/man1/basal.1.gz",
                     "share/man/man1/basal-run.1.gz", "share/man/man5/basal-manifest.5.gz",
                     "share/bash-completion/completions/basal", "share/zsh/vendor-completions/_basal",
                     "share/fish/vendor_completions.d/basal.fish", "share/doc/basal/copyright",
                     "share/doc/basal/changelog.Debian.gz", "share/doc/basal/examples/hello.js",
                     "lib/sysusers.d/basal.conf", "lib/tmpfiles.d/basal.conf", "lib/systemd/system/basal.service",
                     "etc/basal/serve.json"):
            self.assertTrue(os.path.isfile(os.path.join(PREFIX, path)), path)
        self.assertFalse(os.path.exists(os.path.join(PREFIX, "bin", "ck-basal-worker")))
        self.assertTrue(os.access(os.path.join(PREFIX, "libexec/basal/ck-basal-worker"), os.X_OK))

    def test_doctor_finds_the_installed_worker(self):
        r = run(os.path.join(PREFIX, "bin", "basal"), "doctor", cwd=TMP)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn(f"worker:                {PREFIX}/libexec/basal/ck-basal-worker\n", r.stdout)
        self.assertIn("accepted: yes", r.stdout)

    def test_a_flow_runs_from_the_installed_examples(self):
        examples = os.path.join(PREFIX, "share", "doc", "basal", "examples")
        r = run(os.path.join(PREFIX, "bin", "basal"), "run", f"{examples}/hello.js", "--manifest",
                f"{examples}/hello.manifest.json", "--input", '{"name":"installed"}', "--db",
                os.path.join(TMP, "journal.db"), cwd=TMP)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout, '{"greeting":"hello installed"}\n')

    def test_man_finds_the_pages(self):
        man = os.path.join(PREFIX, "share", "man")
        for page, file in (("basal", "man1/basal.1.gz"), ("basal-run", "man1/basal-run.1.gz"),
                           ("basal-manifest", "man5/basal-manifest.5.gz")):
            r = run("man", "-M", man, "-w", page)
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.strip(), os.path.join(man, file))

    def test_the_unit_names_this_prefix(self):
        with open(os.path.join(PREFIX, "lib/systemd/system/basal.service")) as f:
            unit = f.read()
        self.assertIn(f"\nExecStart={PREFIX}/bin/basal serve --config {PREFIX}/etc/basal/serve.json "
                      "--db /var/lib/basal/journal.db\n", unit)
        self.assertNotIn("@BASAL", unit)  # every placeholder filled

    def test_an_edited_configuration_is_kept(self):
        config = os.path.join(PREFIX, "etc", "basal", "serve.json")
        with open(config, "w") as f:
            f.write('{"limits": {"max_workers": 2}}\n')
        out = install()
        self.assertIn("Kept as it is", out)
        with open(config) as f:
            self.assertEqual(f.read(), '{"limits": {"max_workers": 2}}\n')


def main():
    global ARGS
    p = argparse.ArgumentParser()
    p.add_argument("--build-dir", required=True)
    ARGS, rest = p.parse_known_args()
    ARGS.build_dir = os.path.abspath(ARGS.build_dir)
    unittest.main(argv=[sys.argv[0]] + rest, verbosity=2)


if __name__ == "__main__":
    main()
