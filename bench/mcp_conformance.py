#!/usr/bin/env python3
"""The agent as the client under test of the MCP conformance suite (npm
`@modelcontextprotocol/conformance`, `conformance client --command ...`).

The suite starts a test server for one scenario and runs this script with
the server's URL as its last argument (and MCP_CONFORMANCE_SCENARIO set).
The script writes a temporary config dir whose mcp.rhai names that URL as
the server `conf`, starts a local mock model, and runs the real agent
(`agent -p ... --yes`): the agent connects, lists the tools, and the mock
model calls each `conf__*` tool it is offered once (arguments made from
the tool's JSON Schema), then answers with the results it got. Nothing in
the agent knows it is being tested.

    AGENT_BIN=target/debug/agent conformance client \\
        --command "python3 bench/mcp_conformance.py" --scenario tools_call

bench/mcp_conformance.sh installs the suite and runs every client scenario.
"""
import http.server, json, os, subprocess, sys, tempfile, threading

url = sys.argv[-1]
binary = os.path.abspath(os.environ.get("AGENT_BIN", "target/debug/agent"))


def example(schema):
    """A value that fits a JSON Schema, for the mock model's arguments."""
    kind = schema.get("type")
    if "default" in schema:
        return schema["default"]
    if "enum" in schema:
        return schema["enum"][0]
    if kind in ("number", "integer"):
        return 3
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return {k: example(v) for k, v in schema.get("properties", {}).items()
                if k in schema.get("required", list(schema.get("properties", {})))}
    return "conformance"


def sse(chunks):
    return "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n"


def delta(d, finish=None):
    return {"id": "m", "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": d, "finish_reason": finish}]}


class Model(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["content-length"])))
        messages = body.get("messages", [])
        results = [m.get("content") for m in messages if m.get("role") == "tool"]
        tools = [t["function"] for t in body.get("tools", [])
                 if t["function"]["name"].startswith("conf__")]
        if results or not tools:
            text = "results: " + " | ".join(str(r) for r in results) if results else "no conf tools"
            chunks = [delta({"role": "assistant", "content": text}), delta({}, "stop")]
        else:
            calls = [{"index": i, "id": f"c{i}", "type": "function",
                      "function": {"name": t["name"],
                                   "arguments": json.dumps(example(t.get("parameters", {})))}}
                     for i, t in enumerate(tools)]
            chunks = [delta({"role": "assistant", "tool_calls": calls}), delta({}, "tool_calls")]
        data = sse(chunks).encode()
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *a):
        pass


model = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Model)
threading.Thread(target=model.serve_forever, daemon=True).start()
root = tempfile.mkdtemp(prefix="agent-conformance-")
config, data, ws = (os.path.join(root, d) for d in ("config", "data", "ws"))
for d in (config, data, ws):
    os.makedirs(d)
with open(os.path.join(config, "mcp.rhai"), "w") as f:
    f.write("#{ servers: #{ conf: #{ url: %s, startup_timeout: 20 } } }\n" % json.dumps(url))
env = {"PATH": os.environ.get("PATH", ""), "HOME": root, "NO_COLOR": "1",
       "AGENT_CONFIG_DIR": config, "AGENT_DATA_DIR": data, "AGENT_MODEL": "mock",
       "AGENT_BASE_URL": f"http://127.0.0.1:{model.server_port}/v1"}
run = subprocess.run([binary, "-p", "Call each tool of the conf server once.", "--yes"],
                     cwd=ws, env=env, timeout=60)
sys.exit(run.returncode)
