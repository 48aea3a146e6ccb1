#!/usr/bin/env python3
"""Time from launching the agent's REPL (in a pseudo-terminal) until its
prompt shows, with no MCP servers and with three (issue 17: the servers
start in the background, so they should add < 50 ms). Alternates the two
configurations, RUNS times each; a local mock model stands in for the
endpoint (the REPL sends nothing before the prompt).

    bench/mcp_prompt.py target/release/agent [RUNS]

The servers are the ones .ci/run installs (AGENT_TEST_MCP_SERVERS, default
target/mcp-servers).
"""
import http.server, os, pty, select, statistics, sys, tempfile, threading, time

binary = os.path.abspath(sys.argv[1])
runs = int(sys.argv[2]) if len(sys.argv) > 2 else 20
servers = os.path.abspath(os.environ.get("AGENT_TEST_MCP_SERVERS", "target/mcp-servers"))

class Model(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        self.send_response(500); self.end_headers()
    def log_message(self, *a): pass

model = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Model)
threading.Thread(target=model.serve_forever, daemon=True).start()
root = tempfile.mkdtemp()
ws = os.path.join(root, "ws"); os.makedirs(ws)
def config(name, text):
    d = os.path.join(root, name); os.makedirs(d)
    if text: open(os.path.join(d, "mcp.rhai"), "w").write(text)
    return d
bin_ = os.path.join(servers, "npm/node_modules/.bin")
three = config("three", f"""#{{ servers: #{{
  time: #{{ command: "{servers}/py/bin/mcp-server-time" }},
  everything: #{{ command: "{bin_}/mcp-server-everything", args: ["stdio"] }},
  files: #{{ command: "{bin_}/mcp-server-filesystem", args: ["{ws}"] }},
}} }}""")
none = config("none", "")

def to_prompt(cfg):
    env = dict(os.environ, AGENT_CONFIG_DIR=cfg, AGENT_DATA_DIR=os.path.join(root, "data"),
               AGENT_BASE_URL=f"http://127.0.0.1:{model.server_port}/v1", AGENT_MODEL="m", NO_COLOR="1")
    t0 = time.perf_counter()
    pid, fd = pty.fork()
    if pid == 0:
        os.chdir(ws); os.execve(binary, [binary], env)
    out = b""
    while "›".encode() not in out:
        if not select.select([fd], [], [], 10)[0]:
            raise SystemExit("no prompt within 10 s")
        out += os.read(fd, 4096)
    ms = (time.perf_counter() - t0) * 1000
    os.write(fd, b"\x04")  # Ctrl+D: leave (stops the servers)
    try:
        while select.select([fd], [], [], 5)[0] and os.read(fd, 4096):
            pass
    except OSError:
        pass
    os.waitpid(pid, 0)
    return ms

to_prompt(none); to_prompt(three)  # warm the page cache and the probe cache
results = {"no servers": [], "three servers": []}
for _ in range(runs):
    results["no servers"].append(to_prompt(none))
    results["three servers"].append(to_prompt(three))
for name, v in results.items():
    v.sort()
    print(f"launch -> prompt, {name}: median {statistics.median(v):.1f} ms, "
          f"p90 {v[int(len(v) * 0.9) - 1]:.1f} ms, min {v[0]:.1f} ms ({runs} runs)")
