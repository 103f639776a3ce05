#!/usr/bin/env python3
"""QuickJS and the worker's engine, built by mingw-w64, run flows under Wine (the Windows worker's
engine without its confinement: windows-engine-smoke.exe, see engine_smoke_main.cpp). Each case
is a fresh process, spoken to in frames as the parent speaks: load, activate, and the `done` it
must answer, through the parts the Windows build replaced (src/worker/windows/posix/: the C
runtime's malloc sizes, RtlGenRandom, the thread CPU clock) and the web globals' bytecode.

  engine_smoke_test.py WINE_SH SMOKE.exe
"""
import json
import struct
import subprocess
import sys
import time

wine, exe = sys.argv[1], sys.argv[2]


def frame(message):
    body = json.dumps(message).encode()
    return struct.pack("<I", len(body)) + body


def frames(data):
    out = []
    while len(data) >= 4:
        (n,) = struct.unpack("<I", data[:4])
        if len(data) < 4 + n:
            break
        out.append(json.loads(data[4:4 + n]))
        data = data[4 + n:]
    return out


def run(source, inputs, cpu_ms=2000, heap_mb=16):
    send = frame({"type": "load", "flow": "smoke.js", "source": source, "profile": "flow", "cpu_ms": cpu_ms,
                  "heap_bytes": heap_mb << 20, "stack_bytes": 512 << 10})
    for i, value in enumerate(inputs, 1):
        send += frame({"type": "activate", "activation": i, "input": value})
    start = time.monotonic()
    # stdin closes after the frames: the worker answers them, then sees EOF and exits 0.
    p = subprocess.run([wine, exe], input=send, capture_output=True, timeout=120)
    got = frames(p.stdout)
    return got, p.returncode, p.stderr.decode(errors="replace"), time.monotonic() - start


failures = []


def check(name, ok, detail):
    print(("ok   " if ok else "FAIL ") + name + ("" if ok else ": " + detail))
    if not ok:
        failures.append(name)


FLOW = r"""
let count = 0;
export default function (input) {
  count += 1;
  const u = new URL("https://example.com/a/../b?x=1#f");
  const bytes = crypto.getRandomValues(new Uint8Array(32));
  const text = new TextDecoder().decode(new TextEncoder().encode("h\u00e9llo"));
  let sum = 0;
  for (let i = 0; i < 100000; i++) sum += i;
  return { count, input, href: u.href, search: u.searchParams.get("x"), random: bytes.some(b => b !== 0),
           text, sum, math: typeof Math.random(), b64: btoa("basal"), clone: structuredClone({a: [1, 2]}) };
}
"""
got, status, err, took = run(FLOW, [{"n": 1}, {"n": 2}])
print(f"windows engine under Wine: {len(got)} frames, exit {status}, {took * 1000:.0f} ms")
types = [m["type"] for m in got]
check("welcome, loaded, done, done; then exit 0 at EOF", types == ["welcome", "loaded", "done", "done"] and status == 0,
      f"{types} exit {status} {err}")
if len(got) == 4:
    check("the welcome says what this is (os windows, test hooks, no confinement)",
          got[0]["os"] == "windows" and got[0]["test_hooks"] is True and got[0]["confinement"] == {}, str(got[0]))
    ok = got[2].get("ok", {})
    check("URL, crypto, TextEncoder/Decoder, btoa, structuredClone, Math.random",
          ok.get("href") == "https://example.com/b?x=1#f" and ok.get("search") == "1" and ok.get("random") is True and
          ok.get("text") == "h\u00e9llo" and ok.get("sum") == 4999950000 and ok.get("math") == "number" and
          ok.get("b64") == "YmFzYWw=" and ok.get("clone") == {"a": [1, 2]}, json.dumps(got[2]))
    check("module state persists across activations of one worker",
          got[3].get("ok", {}).get("count") == 2 and got[3]["ok"]["input"] == {"n": 2}, json.dumps(got[3]))
    check("cpu_us is counted on Windows", got[2]["cpu_us"] > 0, json.dumps(got[2]))

got, status, err, _ = run("export default function () { for (;;) {} }", [None], cpu_ms=200)
done = [m for m in got if m["type"] == "done"]
check("a CPU budget ends a spinning script (the engine thread's CPU clock on Windows)",
      len(done) == 1 and done[0].get("error", {}).get("budget") == "cpu", json.dumps(got) + err)

got, status, err, _ = run("export default function () { const a = []; for (;;) a.push(new Array(1e5).fill(1)); }",
                          [None], heap_mb=8)
done = [m for m in got if m["type"] == "done"]
check("a heap budget ends a script that allocates without end (the C runtime's block sizes)",
      len(done) == 1 and done[0].get("error", {}).get("budget") == "memory", json.dumps(got) + err)

got, status, err, _ = run("export default function ( {", [None])
loaded = [m for m in got if m["type"] == "loaded"]
check("a syntax error is a failed load with its line", len(loaded) == 1 and loaded[0]["ok"] is False and
      loaded[0]["error"]["name"] == "SyntaxError" and loaded[0]["error"].get("line") == 1, json.dumps(got))

sys.exit(1 if failures else 0)
