#!/usr/bin/env python3
"""Writes link/hot-symbols.txt: the functions a one-shot task runs, in the
order the linker should place them (first the ones run most), so that the
code a short run needs sits together in the binary instead of spread over
all of its 11 MB of text. The kernel maps a binary's code in whole page-cache
folios (up to 2 MB here), so a run that touches one function in a folio pays
for all of it: with the code spread out a one-shot task mapped 8.2 MB of
text, with it packed 4.1 MB (BENCHMARKS.md).

How: the release binary runs a few one-shot tasks against a scripted
loopback server under valgrind's callgrind, which names every function
that ran; the names that are symbols of the binary are written out. The
names carry hashes that change with the toolchain and Cargo.lock, so run
this again after `cargo update` or a new rustc (`bench/run.sh` says how many
of the file's symbols the binary still has):

    cargo build --release && link/order.py && cargo build --release

(right after `cargo build --release`: `cargo bench` puts its own build,
with other hashes, at the same path target/release/agent).

Needs valgrind, git and bash. Nothing here changes behaviour: the file
only orders code (build.rs passes it to the linker for release builds).
"""
import collections
import http.server
import json
import os
import re
import subprocess
import sys
import tempfile
import threading

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target/release/agent")
OUT = os.path.join(ROOT, "link/hot-symbols.txt")

# Each scenario: the tool calls the model makes, one per answer, then a
# final text answer.
SCENARIOS = {
    "echo": [("run_shell", {"command": "echo hello"})],
    "edit": [
        ("list_dir", {}),
        ("read_file", {"path": "src/lib.rs"}),
        ("grep", {"pattern": "fn main"}),
        ("edit_file", {"path": "src/lib.rs", "old_string": "one", "new_string": "two"}),
        ("write_file", {"path": "notes.md", "content": "# Notes\n\n- done\n"}),
        ("run_shell", {"command": "cat notes.md | wc -l"}),
    ],
}


def sse(obj):
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class Server(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    calls = []

    def log_message(self, *args):
        pass

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers.get("content-length", 0))))
        answered = sum(1 for m in body["messages"] if m.get("role") == "tool")
        if answered < len(Server.calls):
            name, args = Server.calls[answered]
            delta = {"role": "assistant", "tool_calls": [{"index": 0, "id": f"c{answered}", "type": "function",
                     "function": {"name": name, "arguments": json.dumps(args)}}]}
            finish = "tool_calls"
        else:
            delta = {"role": "assistant", "content": "Done: **all** of it.\n\n```rust\nfn main() {}\n```\n"}
            finish = "stop"
        chunks = [sse({"choices": [{"index": 0, "delta": delta}]}),
                  sse({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}),
                  b"data: [DONE]\n\n"]
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()
        for c in chunks:
            self.wfile.write(b"%x\r\n" % len(c) + c + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def workspace(path):
    os.makedirs(f"{path}/src")
    with open(f"{path}/src/lib.rs", "w") as f:
        f.write("// one\nfn main() {}\n")
    for i in range(50):
        with open(f"{path}/file{i}.txt", "w") as f:
            f.write(f"line {i}\n" * 10)
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "init.defaultBranch=main"]
    for args in (["init", "-q"], ["add", "."], ["commit", "-qm", "files"]):
        subprocess.run(git + args, cwd=path, check=True)


def run(name, calls, port):
    Server.calls = calls
    with tempfile.TemporaryDirectory() as d:
        for sub in ("home", "config", "data"):
            os.makedirs(f"{d}/{sub}")
        workspace(f"{d}/ws")
        env = {"PATH": os.environ["PATH"], "HOME": f"{d}/home", "AGENT_CONFIG_DIR": f"{d}/config",
               "AGENT_DATA_DIR": f"{d}/data", "NO_COLOR": "1", "AGENT_API_KEY": "k",
               "AGENT_BASE_URL": f"http://127.0.0.1:{port}/v1"}
        out = f"{d}/callgrind.out"
        done = subprocess.run(["valgrind", "--tool=callgrind", "--demangle=no", f"--callgrind-out-file={out}",
                               BIN, "--yes", "-p", f"the {name} task"],
                              cwd=f"{d}/ws", env=env, capture_output=True, text=True)
        if done.returncode != 0 or "Done" not in done.stdout:
            sys.exit(f"the {name} scenario failed ({done.returncode}):\n{done.stdout}\n{done.stderr[-2000:]}")
        return costs(out)


def costs(path):
    """Self cost (instructions) per function name in a callgrind file."""
    names, cost, current, call = {}, collections.Counter(), None, False
    for line in open(path):
        m = re.match(r"(c?)fn=\((\d+)\)(?: (.*))?$", line.rstrip("\n"))
        if m:
            if m.group(3):
                names[m.group(2)] = re.sub(r"'\d+$", "", m.group(3))
                cost.setdefault(names[m.group(2)], 0)
            if not m.group(1):
                current = names.get(m.group(2))
        elif line.startswith("calls="):
            call = True  # the next cost line is the call's inclusive cost
        elif line[:1].isdigit() or line[:1] in "+-*":
            parts = line.split()
            if not call and current and len(parts) >= 2 and parts[1].isdigit():
                cost[current] += int(parts[1])
            call = False
    return cost


def main():
    symbols = set(subprocess.run(["nm", "--defined-only", BIN], capture_output=True, text=True,
                                 check=True).stdout.split())
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Server)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    total = collections.Counter()
    for name, calls in SCENARIOS.items():
        total.update(run(name, calls, server.server_address[1]))
    hot = [n for n, _ in sorted(total.items(), key=lambda kv: -kv[1]) if n in symbols]
    with open(OUT, "w") as f:
        f.write("\n".join(hot) + "\n")
    print(f"{len(hot)} functions written to {os.path.relpath(OUT, ROOT)} ({len(total)} ran)")


main()
