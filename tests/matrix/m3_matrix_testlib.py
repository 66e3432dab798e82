"""A local HTTP server that speaks PyPI's JSON API, and tiny wheels (no network)."""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import threading
import zipfile


def make_wheel(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        for name, data in files.items():
            z.writestr(name, data)
    return buf.getvalue()


class FakeIndex:
    """releases: {version: wheel bytes}; ``lie`` = versions whose JSON digest is wrong."""

    def __init__(self, releases: dict[str, bytes], lie: set[str] = frozenset()):
        self.wheels = {
            f"vllm-{v}-cp38-abi3-manylinux_2_28_x86_64.whl": data for v, data in releases.items()
        }
        self.hits: list[str] = []
        doc = {
            "releases": {
                v: [
                    {
                        "filename": f"vllm-{v}-cp38-abi3-manylinux_2_28_x86_64.whl",
                        "url": f"../../packages/vllm-{v}-cp38-abi3-manylinux_2_28_x86_64.whl",
                        "digests": {
                            "sha256": ("0" * 64) if v in lie else hashlib.sha256(data).hexdigest()
                        },
                        "size": len(data),
                        "yanked": False,
                    }
                ]
                for v, data in releases.items()
            }
        }
        doc["releases"]["0.9.0rc1"] = doc["releases"][next(iter(releases))]
        doc["releases"]["0.1.0"] = []
        index = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def do_GET(self):
                index.hits.append(self.path)
                if self.path == "/pypi/vllm/json":
                    body, code = json.dumps(doc).encode(), 200
                elif (
                    self.path.startswith("/packages/") and self.path.split("/")[-1] in index.wheels
                ):
                    body, code = index.wheels[self.path.split("/")[-1]], 200
                else:
                    body, code = b"no", 404
                self.send_response(code)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self):
        self.server.shutdown()
