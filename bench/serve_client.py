#!/usr/bin/env python3
"""A sequential keep-alive client of a basal serve Unix socket, for profiling the daemon (see
docs/performance.md, "Where the time goes"): serve_client.py SOCKET runs|healthz N. Each run is
POST /v1/flows/bench/runs?wait=30s with {"input": 1}; exits non-zero on any answer but 200."""
import http.client
import socket
import sys


class UnixConnection(http.client.HTTPConnection):
    def __init__(self, path):
        super().__init__("basal", timeout=60)
        self.unix_path = path

    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(self.unix_path)


def main():
    path, what, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    c = UnixConnection(path)
    for _ in range(n):
        if what == "runs":
            c.request("POST", "/v1/flows/bench/runs?wait=30s", body=b'{"input": 1}',
                      headers={"Content-Type": "application/json"})
        else:
            c.request("GET", "/healthz")
        r = c.getresponse()
        body = r.read()
        if r.status != 200:
            sys.exit(f"serve_client.py: {what}: HTTP {r.status}: {body[:200]!r}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
