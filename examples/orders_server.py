#!/usr/bin/env python3
"""A tiny HTTP server for the docs' fetch examples (docs/http.md): GET /orders/ID answers
{"id": ID, "status": "shipped", "auth": <the Authorization header it got>}, anything else 404.

    python3 examples/orders_server.py 18431 server.pid   # returns once it listens on 127.0.0.1:18431

It listens on loopback only, detaches, writes its pid to the file named, and exits by itself
after 10 minutes (so a docs run that stops half way leaves nothing behind for long).
"""
import http.server
import json
import os
import sys
import threading


class Orders(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        parts = self.path.split("/")
        if len(parts) == 3 and parts[1] == "orders" and parts[2].isdigit():
            body = json.dumps({"id": int(parts[2]), "status": "shipped",
                               "auth": self.headers.get("Authorization")}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
        else:
            body = b'{"error": "no such order"}'
            self.send_response(404)
            self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def main():
    port, pid_file = int(sys.argv[1]), sys.argv[2]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Orders)  # listening from here on
    if os.fork() > 0:
        return  # the parent returns: the child serves
    os.setsid()
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    with open(pid_file, "w") as f:
        f.write(str(os.getpid()))
    threading.Timer(600, server.shutdown).start()
    server.serve_forever()


if __name__ == "__main__":
    main()
