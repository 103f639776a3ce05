#!/usr/bin/env python3
"""A stand-in MCP server for tests/unit/mcp/downstream_test.cpp.

It speaks MCP over stdio (one JSON-RPC message per line) and misbehaves as its flags and its tools
say, so the test can see how basal's downstream client copes with each kind of bad server.

Flags:
  --record FILE        append every line received to FILE (the test reads what basal sent)
  --exit-at-start      write a complaint to stderr and exit 3 before reading anything
  --silent             never answer initialize
  --version V          answer initialize with protocolVersion V (default 2025-11-25)
  --ignore-term        ignore SIGTERM (so do the children spawn_child starts)
  --many-tools N       list N tools t0..t{N-1} in one page instead of the usual two pages
  --bad-tools          add tools whose names or schemas MCP does not allow
  --big-tool BYTES     add a tool "big" whose description has BYTES bytes
  --endless-pages      every tools/list page has a nextCursor
  --tiny-schemas N V   list N tools s0..s{N-1}, five a page, each with a schema of V empty objects
Tools: see TOOLS_PAGE_1 and TOOLS_PAGE_2 and call_tool.
"""
import json
import os
import signal
import sys
import time

ARGS = sys.argv[1:]


def flag(name):
    return name in ARGS


def value(name, default=None):
    if name in ARGS:
        return ARGS[ARGS.index(name) + 1]
    return default


RECORD = value("--record")
OUT = sys.stdout.buffer


def send(obj):
    OUT.write(json.dumps(obj).encode() + b"\n")
    OUT.flush()


def send_raw(data):
    OUT.write(data)
    OUT.flush()


def answer(msg_id, result):
    send({"jsonrpc": "2.0", "id": msg_id, "result": result})


def text_result(text, **extra):
    result = {"content": [{"type": "text", "text": text}]}
    result.update(extra)
    return result


OBJECT = {"type": "object"}
TOOLS_PAGE_1 = [
    {"name": "echo", "title": "Echo text", "description": "Answers with its text.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}},
     "outputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {"name": "fail", "description": "Answers with isError.", "inputSchema": OBJECT,
     "annotations": {"title": "Always fails"}},
    {"name": "rpc_error", "inputSchema": OBJECT},
    {"name": "hang", "inputSchema": OBJECT},
]
TOOLS_PAGE_2 = [
    {"name": "die", "inputSchema": OBJECT},
    {"name": "env", "inputSchema": OBJECT},
    {"name": "pid", "inputSchema": OBJECT},
    {"name": "spawn_child", "inputSchema": OBJECT},
    {"name": "ping_me", "inputSchema": OBJECT},
    {"name": "garbage", "inputSchema": OBJECT},
    {"name": "long_line", "inputSchema": OBJECT},
    {"name": "malformed", "inputSchema": OBJECT},
    {"name": "spam_stderr", "inputSchema": OBJECT},
    {"name": "stop_reading", "inputSchema": OBJECT},
    {"name": "close_stdout", "inputSchema": OBJECT},
    {"name": "close_stdin", "inputSchema": OBJECT},
    {"name": "no_schema.v1"},
]
BAD_TOOLS = [
    {"name": "bad name", "inputSchema": OBJECT},
    {"name": "", "inputSchema": OBJECT},
    {"name": "x" * 129, "inputSchema": OBJECT},
    {"name": "echo", "inputSchema": OBJECT},  # a duplicate
    {"name": "schema_is_text", "inputSchema": "string"},
    {"description": "no name at all"},
    42,
]


def tools_page(cursor):
    if value("--tiny-schemas"):
        count = int(value("--tiny-schemas"))
        per_tool = int(ARGS[ARGS.index("--tiny-schemas") + 2])
        first = int(cursor) if cursor else 0
        schema = {"type": "object", "x": [{}] * per_tool}
        page = {"tools": [{"name": "s%d" % i, "inputSchema": schema} for i in range(first, min(first + 5, count))]}
        if first + 5 < count:
            page["nextCursor"] = str(first + 5)
        return page
    if flag("--endless-pages"):
        k = int(cursor[1:]) if cursor else 0
        return {"tools": [{"name": "p%d" % k, "inputSchema": OBJECT}], "nextCursor": "c%d" % (k + 1)}
    if value("--many-tools"):
        tools = [{"name": "t%d" % i, "inputSchema": OBJECT} for i in range(int(value("--many-tools")))]
        if flag("--bad-tools"):
            tools += BAD_TOOLS
        return {"tools": tools}
    if cursor == "page-2":
        tools = list(TOOLS_PAGE_2)
        if flag("--bad-tools"):
            tools += BAD_TOOLS
        return {"tools": tools}
    tools = list(TOOLS_PAGE_1)
    if value("--big-tool"):
        tools.append({"name": "big", "description": "d" * int(value("--big-tool")), "inputSchema": OBJECT})
    return {"tools": tools, "nextCursor": "page-2"}


# ping_me: the call waits for our own requests' answers.
waiting_call = {"id": None, "answers": {}}


def call_tool(msg_id, name, args):
    if name == "echo":
        return answer(msg_id, text_result(args.get("text", ""), structuredContent={"echo": args}))
    if name == "fail":
        return answer(msg_id, text_result("no such file: /srv/x", isError=True))
    if name == "rpc_error":
        return send({"jsonrpc": "2.0", "id": msg_id,
                     "error": {"code": -32602, "message": "Invalid params: path is required"}})
    if name == "hang":
        return None
    if name == "die":
        sys.stderr.write("fake: dying on purpose\n")
        sys.stderr.flush()
        os._exit(7)
    if name == "env":
        with open("/proc/self/environ", "rb") as f:
            raw = f.read()
        entries = [e.decode() for e in raw.split(b"\0") if e]
        return answer(msg_id, text_result("env", structuredContent={"environ": entries}))
    if name == "pid":
        return answer(msg_id, text_result(str(os.getpid()), structuredContent={"pid": os.getpid()}))
    if name == "spawn_child":
        child = os.fork()
        if child == 0:
            if args.get("ignore_term"):
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
            null = os.open("/dev/null", os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            time.sleep(3600)
            os._exit(0)
        return answer(msg_id, text_result(str(child), structuredContent={"pid": child}))
    if name == "ping_me":
        waiting_call["id"] = msg_id
        send({"jsonrpc": "2.0", "id": "srv-1", "method": "ping"})
        send({"jsonrpc": "2.0", "id": 77, "method": "sampling/createMessage", "params": {"messages": []}})
        return None
    if name == "tiny_answer":
        # A result of `values` empty objects: {"content": [{...}, ...]} with one id the client can find.
        n = int(args.get("values", 10))
        return send_raw(b'{"jsonrpc":"2.0","id":' + str(msg_id).encode() + b',"result":{"content":[' +
                        b",".join([b"{}"] * n) + b"]}}\n")
    if name == "garbage":
        send_raw(b"this is not json\n")
        send_raw(b'{"jsonrpc":"2.0","id":999999,"result":{}}\n')
        send_raw(b"[1,2,3]\n")
        send_raw(b"[" * 5000 + b"]" * 5000 + b"\n")
        send_raw(b'{"jsonrpc":"2.0","id":5,"result":{"x":"\xff\xfe"}}\n')
        send_raw(b'"just a string"\n')
        send_raw(b'{"jsonrpc":"2.0"}\n')
        send_raw(b"\n\r\n   \n")
        send({"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "hello"}})
        send({"jsonrpc": "2.0", "method": "notifications/tools/list_changed"})
        return answer(msg_id, text_result("after garbage"))
    if name == "long_line":
        size = int(args.get("bytes", 100000))
        if args.get("newline", True):
            send_raw(b'{"x":"' + b"y" * size + b'"}\n')
            return answer(msg_id, text_result("too late"))
        send_raw(b"y" * size)
        return None
    if name == "malformed":
        shape = args.get("shape", "string")
        if shape == "string":
            return answer(msg_id, "oops")
        if shape == "content":
            return answer(msg_id, {"content": "not a list"})
        return answer(msg_id, {"content": [], "isError": "yes"})
    if name == "spam_stderr":
        size = int(args.get("bytes", 1 << 20))
        chunk = b"e" * 4096
        err = sys.stderr.buffer
        for _ in range(size // len(chunk)):
            err.write(chunk)
        err.write(b"\nEND-OF-SPAM\n")
        err.flush()
        return answer(msg_id, text_result("spammed"))
    if name == "close_stdout":
        os.close(1)
        time.sleep(3600)
        os._exit(0)
    if name == "close_stdin":
        os.close(0)
        answer(msg_id, text_result("stdin closed"))
        time.sleep(3600)
        os._exit(0)
    if name == "stop_reading":
        answer(msg_id, text_result("no longer reading"))
        time.sleep(3600)
        os._exit(0)
    return send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32601, "message": "no tool " + name}})


def handle(msg):
    method = msg.get("method")
    msg_id = msg.get("id")
    if method is None:
        # An answer to one of our requests (ping_me).
        if waiting_call["id"] is not None:
            waiting_call["answers"][str(msg_id)] = msg
            if len(waiting_call["answers"]) == 2:
                answers = waiting_call["answers"]
                answer(waiting_call["id"], text_result("pinged", structuredContent={
                    "ping": answers.get("srv-1"), "sampling": answers.get("77")}))
                waiting_call["id"] = None
                waiting_call["answers"] = {}
        return
    if method == "initialize":
        if flag("--silent"):
            return
        return answer(msg_id, {"protocolVersion": value("--version", "2025-11-25"),
                               "capabilities": {"tools": {"listChanged": True}},
                               "serverInfo": {"name": "fake", "version": "1.0"},
                               "instructions": "A fake server for tests."})
    if method == "tools/list":
        return answer(msg_id, tools_page((msg.get("params") or {}).get("cursor")))
    if method == "tools/call":
        params = msg.get("params") or {}
        return call_tool(msg_id, params.get("name"), params.get("arguments") or {})
    if msg_id is not None:
        send({"jsonrpc": "2.0", "id": msg_id, "error": {"code": -32601, "message": "unknown method"}})


def main():
    if flag("--ignore-term"):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if flag("--exit-at-start"):
        sys.stderr.write("fake: cannot open /etc/fake.conf\n")
        sys.stderr.flush()
        sys.exit(3)
    record = open(RECORD, "ab", buffering=0) if RECORD else None
    for line in sys.stdin.buffer:
        if record:
            record.write(line)
        handle(json.loads(line))


main()
