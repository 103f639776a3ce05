#!/usr/bin/env python3
"""A private PostgreSQL cluster for the tests (docs/postgres.md, "Testing").

initdb and pg_ctl in a new temporary directory, as an unprivileged user (the caller itself; when
that is root, `nobody` through runuser, since PostgreSQL refuses to run as root). The server
listens on a Unix socket in that directory and on no TCP port, trusts local connections (only who
can reach the directory can connect), and is stopped and removed afterwards. It holds a role
`basal` (LOGIN CREATEDB, no superuser: what an operator gives basal, plus CREATEDB so the tests can
make a database each) and a database `basal` owned by it.

As a library (tests/serve/*.py):

    with Cluster() as pg:
        run(["basal", "serve", "--db", pg.locator(), ...])

As a command, around another command that finds the locator in BASAL_TEST_PG:

    tests/support/pg_cluster.py -- build/release/tests/store_test --gtest_filter='Postgres/*'
    tests/support/pg_cluster.py --set fsync=on --set synchronous_commit=on -- COMMAND...

(`--set KEY=VALUE`: a server setting over the tests' defaults below; the benchmarks turn fsync back
on, as a server should run.)

The server binaries are looked up in BASAL_PG_BINDIR, then PATH, then /usr/lib/postgresql/*/bin
(Debian's postgresql-15, which scripts/setup.sh installs).
"""

import glob
import os
import pwd
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse


def _find_bindir():
    wanted = os.environ.get("BASAL_PG_BINDIR")
    if wanted:
        return wanted
    on_path = shutil.which("initdb")
    if on_path and shutil.which("pg_ctl"):
        return os.path.dirname(os.path.realpath(on_path))

    def version(path):
        try:
            return int(path.split("/")[-3])
        except ValueError:
            return 0

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version, reverse=True)
    if found:
        return os.path.dirname(found[0])
    raise RuntimeError("no PostgreSQL server binaries (initdb, pg_ctl): install postgresql-15 "
                       "(scripts/setup.sh does), or set BASAL_PG_BINDIR")


class Cluster:
    """One private cluster; start() and stop(), or a `with` block."""

    def __init__(self, settings=None):
        self.bindir = _find_bindir()
        # Tests are not benchmarks: no fsync, so a loaded CI disk does not make them slow.
        self.settings = {"fsync": "off", "full_page_writes": "off", "max_connections": "60",
                         "shared_buffers": "32MB", "log_min_messages": "warning"}
        self.settings.update(settings or {})
        self.dir = None
        self.user = None  # the OS user the server runs as; None: this process's

    def _as_owner(self, argv):
        return (["runuser", "-u", self.user, "--"] + argv) if self.user else argv

    def _run(self, argv, **kw):
        result = subprocess.run(self._as_owner(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                **kw)
        if result.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)} failed ({result.returncode}):\n{result.stdout}")
        return result.stdout

    @property
    def socket_dir(self):
        return os.path.join(self.dir, "socket")

    def locator(self, database="basal", user="basal"):
        host = urllib.parse.quote(self.socket_dir, safe="")
        return f"postgresql://{user}@/{database}?host={host}"

    def psql(self, *statements, database="basal", user="basal"):
        """Runs each statement on its own (the admin role `postgres` for what basal's role may not do)."""
        argv = [os.path.join(self.bindir, "psql"), "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At", "-h", self.socket_dir,
                "-U", user, "-d", database]
        for sql in statements:
            argv += ["-c", sql]
        return subprocess.run(argv, check=True, stdout=subprocess.PIPE, text=True).stdout

    def start(self):
        self.dir = tempfile.mkdtemp(prefix="basal_pg.")
        if os.geteuid() == 0:
            self.user = "nobody"
            entry = pwd.getpwnam(self.user)
            os.chown(self.dir, entry.pw_uid, entry.pw_gid)
        os.chmod(self.dir, 0o700)
        data = os.path.join(self.dir, "data")
        self._run(["mkdir", self.socket_dir])
        self._run([os.path.join(self.bindir, "initdb"), "-D", data, "-U", "postgres", "-E", "UTF8", "--no-locale",
                   "--auth=trust", "--no-sync"])
        with open(os.path.join(data, "postgresql.conf"), "a", encoding="utf-8") as conf:
            conf.write(f"listen_addresses = ''\nunix_socket_directories = '{self.socket_dir}'\n")
            for key, value in self.settings.items():
                conf.write(f"{key} = '{value}'\n")
        self._run([os.path.join(self.bindir, "pg_ctl"), "-D", data, "-l", os.path.join(self.dir, "server.log"),
                   "-w", "-t", "60", "start"])
        self.psql("CREATE ROLE basal LOGIN CREATEDB", "CREATE DATABASE basal OWNER basal", database="postgres",
                  user="postgres")
        return self

    def pg_ctl(self, action, *args):
        """pg_ctl ACTION on the running cluster (stop, start, restart; waits for it), as its owner."""
        data = os.path.join(self.dir, "data")
        argv = [os.path.join(self.bindir, "pg_ctl"), "-D", data, "-w", "-t", "60", *args, action]
        if action in ("start", "restart"):
            argv[-1:-1] = ["-l", os.path.join(self.dir, "server.log")]
        return self._run(argv)

    def owner_ids(self):
        """(uid, gid) of the OS user the server runs as: who must own a tablespace's directory."""
        entry = pwd.getpwnam(self.user) if self.user else pwd.getpwuid(os.geteuid())
        return entry.pw_uid, entry.pw_gid

    def stop(self):
        if not self.dir:
            return
        data = os.path.join(self.dir, "data")
        if os.path.exists(os.path.join(data, "postmaster.pid")):
            subprocess.run(self._as_owner([os.path.join(self.bindir, "pg_ctl"), "-D", data, "-m", "immediate",
                                           "-w", "-t", "30", "stop"]),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.dir = None

    def server_log(self):
        try:
            with open(os.path.join(self.dir, "server.log"), encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def __enter__(self):
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc):
        self.stop()


def main(argv):
    usage = "usage: pg_cluster.py [--set KEY=VALUE]... -- COMMAND [ARG...]   (COMMAND finds the locator in BASAL_TEST_PG)"
    if "--" not in argv:
        print(usage, file=sys.stderr)
        return 2
    command = argv[argv.index("--") + 1:]
    options = argv[:argv.index("--")]
    settings = {}
    while options:
        if len(options) < 2 or options[0] != "--set" or "=" not in options[1] or options[1].startswith("="):
            print("pg_cluster.py: not understood: %s\n%s" % (" ".join(options), usage), file=sys.stderr)
            return 2
        key, value = options[1].split("=", 1)
        settings[key] = value
        options = options[2:]
    started = time.monotonic()
    with Cluster(settings) as pg:
        print(f"pg_cluster: a private cluster in {pg.dir} ({time.monotonic() - started:.1f} s to start)",
              flush=True)
        env = dict(os.environ, BASAL_TEST_PG=pg.locator())
        child = subprocess.Popen(command, env=env)
        # A CTest timeout kills this process: the cluster goes with the command.
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: child.kill())
        code = child.wait()
        if code != 0:
            tail = pg.server_log()[-4000:]
            if tail:
                print("pg_cluster: the server's log ends with:\n" + tail, flush=True)
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
