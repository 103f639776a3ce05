#!/usr/bin/env python3
"""basal mcp's bounds and endings, over its raw stdio transport: what an agent's session can make
basal hold (code size, message size, scripts at once, log lines, names asked for), malformed
messages, the end of input, signals and a revoked policy. The official SDK client's tests are
mcp_client_test.mjs; these speak JSON-RPC lines directly to reach what a client library would not
send. Run by ctest: mcp_bounds_test.py --bin-dir DIR."""
import argparse
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import unittest

BIN = None
POLICY = {"grants": {"kv.get": {"namespaces": ["orders"]}, "kv.put": {"namespaces": ["orders"]}},
          "budgets": {"deadline_ms": 20000, "cpu_ms": 5000}}


class Session:
    """A `basal mcp` process: send JSON-RPC lines, read its answers by id."""

    def __init__(self, test, policy=POLICY, extra=(), approve=True):
        self.dir = tempfile.mkdtemp(prefix="basal-mcp-test-")
        self.db = os.path.join(self.dir, "journal.db")
        self.test = test
        if approve:
            self.approve(policy)
        self.proc = subprocess.Popen([os.path.join(BIN, "basal"), "mcp", "--policy", "agents", "--db", self.db, *extra],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        test.addCleanup(self.close)
        self.lines = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.stderr = b""
        threading.Thread(target=self._read_err, daemon=True).start()
        self.next_id = 1

    def approve(self, policy):
        path = os.path.join(self.dir, "policy.json")
        with open(path, "w") as f:
            json.dump(policy, f)
        self.cli("policy", "approve", "agents", "--manifest", path, "--yes")

    def activations(self):
        """`basal journal --json`: one activation a line, newest first."""
        return [json.loads(line) for line in self.cli("journal", "--json").stdout.splitlines() if line.strip()]

    def cli(self, *args):
        r = subprocess.run([os.path.join(BIN, "basal"), *args, "--db", self.db], capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise AssertionError("basal %s: exit %d: %s" % (" ".join(args), r.returncode, r.stderr))
        return r

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _read_err(self):
        self.stderr = self.proc.stderr.read()

    def close(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout, self.proc.stderr):
            try:
                stream.close()
            except OSError:
                pass

    def send_raw(self, data):
        self.proc.stdin.write(data)
        self.proc.stdin.flush()

    def send(self, message):
        self.send_raw(json.dumps(message).encode() + b"\n")

    def request(self, method, params=None):
        rid = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params or {}})
        return rid

    def read(self, timeout=120):
        line = self.lines.get(timeout=timeout)
        if line is None:
            raise AssertionError("basal mcp ended: " + self.stderr.decode(errors="replace"))
        message = json.loads(line)
        self.test.assertEqual(message["jsonrpc"], "2.0")
        return message

    def answer(self, rid):
        message = self.read()
        self.test.assertEqual(message.get("id"), rid, message)
        return message

    def initialize(self):
        rid = self.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {},
                                          "clientInfo": {"name": "bounds-test", "version": "1"}})
        self.answer(rid)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def call(self, name, arguments):
        return self.answer(self.request("tools/call", {"name": name, "arguments": arguments}))["result"]

    def run(self, code, **extra):
        return self.call("run_script", dict(code=code, **extra))


class Bounds(unittest.TestCase):
    def test_code_over_the_bound_is_refused_and_the_session_goes_on(self):
        s = Session(self)
        s.initialize()
        result = s.run("return 1;" + " " * (1 << 20))
        self.assertTrue(result["isError"])
        self.assertEqual(result["structuredContent"]["status"], "invalid")
        self.assertIn("at most 1048576", result["structuredContent"]["error"]["message"])
        self.assertEqual(s.run("return 6 * 7")["structuredContent"]["result"], 42)

    def test_a_message_over_8_mib_is_skipped_and_the_next_is_served(self):
        s = Session(self)
        s.initialize()
        s.send_raw(b'{"jsonrpc":"2.0","id":99,"method":"tools/list","params":{"pad":"' + b"x" * (9 << 20) + b'"}}\n')
        skipped = s.read()
        self.assertIsNone(skipped["id"])
        self.assertEqual(skipped["error"]["code"], -32600)
        self.assertIn("skipped", skipped["error"]["message"])
        self.assertEqual(s.run("return 'still here'")["structuredContent"]["result"], "still here")

    def test_scripts_past_max_scripts_are_answered_busy(self):
        s = Session(self, extra=["--max-scripts", "1"])
        s.initialize()
        slow = s.request("tools/call", {"name": "run_script",
                                        "arguments": {"code": "await new Promise(r => setTimeout(r, 1500)); return 'slow'"}})
        busy = s.request("tools/call", {"name": "run_script", "arguments": {"code": "return 'second'"}})
        answers = {m["id"]: m["result"] for m in (s.read(), s.read())}
        self.assertEqual(answers[busy]["structuredContent"]["status"], "busy")
        self.assertTrue(answers[busy]["isError"])
        self.assertEqual(answers[slow]["structuredContent"]["result"], "slow")
        # Once the first ended, the next runs.
        self.assertEqual(s.run("return 'third'")["structuredContent"]["result"], "third")

    def test_log_lines_past_the_bound_are_cut_and_counted(self):
        s = Session(self)
        s.initialize()
        result = s.run("for (let i = 0; i < 300; i++) console.log('line ' + i); return 'done'")["structuredContent"]
        self.assertEqual(result["status"], "ok")
        self.assertEqual(len(result["logs"]), 201)
        self.assertEqual(result["logs"][0], "line 0")
        self.assertEqual(result["logs"][199], "line 199")
        self.assertEqual(result["logs"][200], "... [100 more log lines cut]")
        self.assertEqual(result["logs_cut"], 100)
        # Every line is journaled all the same.
        journal = json.loads(s.cli("journal", "--run", str(result["run_id"]), "--json").stdout.splitlines()[0])
        self.assertEqual((journal["run"], journal["id"]), (result["run_id"], result["activation_id"]))
        logs = [c for c in journal["calls"] if c["name"] == "log"]
        self.assertEqual(len(logs), 300)

    def test_describe_tools_refuses_more_than_100_names(self):
        s = Session(self)
        s.initialize()
        result = s.call("describe_tools", {"names": ["kv.get"] * 101})
        self.assertTrue(result["isError"])
        self.assertEqual(result["structuredContent"]["status"], "invalid")
        ok = s.call("describe_tools", {"names": ["kv.get", "nope.nothing"]})["structuredContent"]
        self.assertIn("get(args", ok["declarations"])
        self.assertEqual(ok["unknown"], ["nope.nothing"])


class Messages(unittest.TestCase):
    def test_malformed_messages_are_answered_and_the_server_goes_on(self):
        s = Session(self)
        s.send_raw(b"this is not json\n")
        self.assertEqual(s.read()["error"]["code"], -32700)
        s.send_raw(b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]\n')
        self.assertEqual(s.read()["error"]["code"], -32600)
        s.send_raw(b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}\n')  # before initialize
        self.assertEqual(s.answer(2)["error"]["code"], -32600)
        s.initialize()
        s.send_raw(b'{"jsonrpc":"2.0","id":30,"method":"resources/list","params":{}}\n')
        self.assertEqual(s.answer(30)["error"]["code"], -32601)
        s.send_raw(b'{"jsonrpc":"2.0","id":31,"method":"tools/call","params":{"name":"nope","arguments":{}}}\n')
        self.assertEqual(s.answer(31)["error"]["code"], -32602)

    def test_an_unsupported_revision_is_32022_with_the_supported_ones(self):
        s = Session(self)
        rid = s.request("tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2099-01-01"}})
        error = s.answer(rid)["error"]
        self.assertEqual(error["code"], -32022)
        self.assertEqual(error["data"]["requested"], "2099-01-01")
        self.assertIn("2026-07-28", error["data"]["supported"])
        rid = s.request("tools/list", {"_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28"}})
        result = s.answer(rid)["result"]
        self.assertEqual(result["resultType"], "complete")
        self.assertEqual([t["name"] for t in result["tools"]], ["run_script", "list_tools", "describe_tools"])


class Endings(unittest.TestCase):
    def test_the_end_of_input_lets_a_running_script_finish_and_answers_it(self):
        s = Session(self)
        s.initialize()
        rid = s.request("tools/call", {"name": "run_script",
                                       "arguments": {"code": "await new Promise(r => setTimeout(r, 500)); return 'finished'"}})
        s.proc.stdin.close()
        self.assertEqual(s.answer(rid)["result"]["structuredContent"]["result"], "finished")
        self.assertEqual(s.proc.wait(timeout=60), 0)

    def test_sigterm_cancels_the_running_script_and_exits_143(self):
        s = Session(self)
        s.initialize()
        s.request("tools/call", {"name": "run_script", "arguments": {"code": "await new Promise(r => setTimeout(r, 60000))"}})
        # The script is running once its activation is in the journal.
        for _ in range(600):
            if s.activations():
                break
            threading.Event().wait(0.05)
        s.proc.send_signal(signal.SIGTERM)
        self.assertEqual(s.proc.wait(timeout=60), 128 + signal.SIGTERM)
        self.assertEqual(s.activations()[0]["outcome"], "cancelled")

    def test_a_positional_call_and_a_name_that_is_no_tool_are_type_errors_that_say_what_to_do(self):
        # Not a denial (the policy was never asked) and not "not a function": what to write instead.
        s = Session(self)
        s.initialize()
        result = s.run("""
            const out = [];
            try { await tools.kv.get("orders", "k"); } catch (e) { out.push(e.name + ": " + e.message); }
            try { await tools.kv.delete({namespace: "orders", key: "k"}); } catch (e) { out.push(e.name + ": " + e.message); }
            try { await tools.fs.read_text_file({path: "/"}); } catch (e) { out.push(e.name + ": " + e.message); }
            out.push("delete" in tools.kv, "put" in tools.kv);
            await tools.kv.put({namespace: "orders", key: "k", value: 1});
            out.push(await tools.kv.get({namespace: "orders", key: "k"}));
            return out;""")
        self.assertEqual(result["structuredContent"]["status"], "ok", result)
        self.assertEqual(result["structuredContent"]["result"], [
            "TypeError: tools.kv.get takes one object of named arguments: tools.kv.get({...}) "
            "(describe_tools gives their names)",
            "TypeError: tools.kv.delete is not a tool this policy grants (list_tools lists the tools)",
            "TypeError: tools.fs is not a tool this policy grants (list_tools lists the tools)",
            False, True, 1])
        # list_tools shows the one object the call takes.
        text = s.call("list_tools", {})["content"][0]["text"]
        self.assertIn("tools.kv.get({key, namespace}): ", text)

    def test_a_revoked_policy_refuses_the_next_script(self):
        s = Session(self)
        s.initialize()
        self.assertEqual(s.run("return 1")["structuredContent"]["status"], "ok")
        s.cli("policy", "revoke", "agents")
        result = s.run("return 2")
        self.assertTrue(result["isError"])
        self.assertEqual(result["structuredContent"]["status"], "refused")
        self.assertIn("revoked", result["structuredContent"]["error"]["message"])

    def test_a_policy_that_was_never_approved_exits_4(self):
        d = tempfile.mkdtemp(prefix="basal-mcp-test-")
        r = subprocess.run([os.path.join(BIN, "basal"), "mcp", "--policy", "agents", "--db", os.path.join(d, "j.db")],
                           input=b"", capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 4, r.stderr)
        self.assertIn(b"agents", r.stderr)
        self.assertEqual(r.stdout, b"")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin-dir", required=True)
    args, rest = parser.parse_known_args()
    BIN = args.bin_dir
    unittest.main(argv=[sys.argv[0], *rest])
