"""Running a model in onnxruntime-web (WebAssembly): under Node.js or in headless Chromium.

Both runners take the model file and the inputs, run the model once with the
``wasm`` execution provider and hand back the outputs as NumPy arrays; the
comparison is :func:`jax2onnx.allclose_onnxruntime_web`'s. Inputs and outputs
travel as base64 of their little-endian bytes, so every value (NaN, -0.0,
int64, float16 bit patterns) arrives exactly.

Nothing is downloaded: the npm package ``onnxruntime-web`` must be installed
(``npm install onnxruntime-web``) and, for the browser runner, Chromium.
"""

from __future__ import annotations

import base64
import http.server
import json
import os
import pathlib
import shutil
import subprocess
import tempfile
import threading
from typing import Any

import numpy as np

RUNNER_VARIABLE = "JAX2ONNX_ONNXRUNTIME_WEB_RUNNER"
PACKAGE_VARIABLE = "JAX2ONNX_ONNXRUNTIME_WEB"
CHROMIUM_VARIABLE = "JAX2ONNX_CHROMIUM"
TIMEOUT_VARIABLE = "JAX2ONNX_ONNXRUNTIME_WEB_TIMEOUT"
RUNNERS = {"node": "node", "chrome": "chrome", "browser": "chrome", "chromium": "chrome"}
_CHROMIUMS = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
_HERE = pathlib.Path(__file__).resolve().parent

_TYPES = {
    np.dtype(np.float32): "float32",
    np.dtype(np.float64): "float64",
    np.dtype(np.float16): "float16",
    np.dtype(np.int8): "int8",
    np.dtype(np.int16): "int16",
    np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64",
    np.dtype(np.uint8): "uint8",
    np.dtype(np.uint16): "uint16",
    np.dtype(np.uint32): "uint32",
    np.dtype(np.uint64): "uint64",
    np.dtype(np.bool_): "bool",
}
_DTYPES = {name: dtype for dtype, name in _TYPES.items()}


class WebRuntimeError(RuntimeError):
    """onnxruntime-web, Node.js or Chromium is missing, or the model failed in it."""


def _timeout() -> float:
    return float(os.environ.get(TIMEOUT_VARIABLE, "120"))


def find_package() -> pathlib.Path:
    """The directory of the npm package ``onnxruntime-web``."""
    tried = []
    configured = os.environ.get(PACKAGE_VARIABLE)
    if configured:
        path = pathlib.Path(configured)
        if (path / "package.json").is_file():
            return path.resolve()
        raise WebRuntimeError(
            f"{PACKAGE_VARIABLE}={configured!r} is not the onnxruntime-web package directory "
            "(it has no package.json)"
        )
    for folder in (pathlib.Path.cwd(), *pathlib.Path.cwd().parents):
        candidate = folder / "node_modules" / "onnxruntime-web"
        tried.append(str(candidate))
        if (candidate / "package.json").is_file():
            return candidate
    npm = shutil.which("npm")
    if npm:
        try:
            root = subprocess.run(
                [npm, "root", "-g"], capture_output=True, text=True, timeout=60, check=False
            ).stdout.strip()
        except (OSError, subprocess.TimeoutExpired):
            root = ""
        if root:
            candidate = pathlib.Path(root) / "onnxruntime-web"
            tried.append(str(candidate))
            if (candidate / "package.json").is_file():
                return candidate
    raise WebRuntimeError(
        "the npm package onnxruntime-web is not installed (looked in "
        f"{', '.join(tried) or 'no node_modules'}). Run `npm install onnxruntime-web` in this "
        f"directory or a parent, install it globally, or set {PACKAGE_VARIABLE} to its folder."
    )


def _encode(name: str, value: np.ndarray) -> dict[str, Any]:
    value = np.asarray(value)
    kind = _TYPES.get(value.dtype)
    if kind is None:
        raise WebRuntimeError(
            f"input {name!r} has dtype {value.dtype}, which onnxruntime-web cannot take"
        )
    data = np.ascontiguousarray(value).astype(value.dtype.newbyteorder("<"), copy=False)
    return {
        "name": name,
        "type": kind,
        "dims": [int(d) for d in value.shape],
        "data": base64.b64encode(data.tobytes()).decode("ascii"),
    }


def _decode(entry: dict[str, Any]) -> np.ndarray:
    dtype = _DTYPES.get(entry["type"])
    if dtype is None:
        raise WebRuntimeError(f"onnxruntime-web returned an output of type {entry['type']!r}")
    raw = base64.b64decode(entry["data"])
    data = np.frombuffer(raw, dtype=dtype.newbyteorder("<")).astype(dtype)
    return data.reshape([int(d) for d in entry["dims"]])


def _request(model: str, feed: dict[str, np.ndarray]) -> dict[str, Any]:
    return {"model": model, "inputs": [_encode(k, v) for k, v in feed.items()]}


def _outputs(reply: dict[str, Any], runner: str) -> list[np.ndarray]:
    if "error" in reply:
        raise WebRuntimeError(f"onnxruntime-web ({runner}) failed: {reply['error']}")
    return [_decode(entry) for entry in reply["outputs"]]


def run(runner: str, model: str, feed: dict[str, np.ndarray], *, node_command: str = "node"):
    """The model's outputs from onnxruntime-web under ``runner`` (``"node"`` or ``"chrome"``)."""
    package = find_package()
    request = _request(os.path.abspath(model), feed)
    if runner == "node":
        return _run_node(package, request, node_command)
    return _run_chrome(package, model, request)


def _run_node(package: pathlib.Path, request: dict[str, Any], node_command: str):
    with tempfile.TemporaryDirectory(prefix="jax2onnx-web-") as folder:
        path = os.path.join(folder, "request.json")
        with open(path, "w", encoding="utf-8") as out:
            json.dump(request, out)
        try:
            done = subprocess.run(
                [node_command, str(_HERE / "run_node.mjs"), str(package), path],
                capture_output=True,
                text=True,
                timeout=_timeout(),
                check=False,
            )
        except FileNotFoundError:
            raise WebRuntimeError(
                f"Node.js was not found (node_command={node_command!r}); install Node.js or "
                "pass node_command"
            ) from None
        except subprocess.TimeoutExpired:
            raise WebRuntimeError(
                f"onnxruntime-web (node) did not finish in {_timeout():g} s "
                f"(set {TIMEOUT_VARIABLE} to wait longer)"
            ) from None
    if done.returncode != 0:
        detail = (done.stderr or done.stdout).strip() or f"exit code {done.returncode}"
        raise WebRuntimeError(f"onnxruntime-web (node) failed: {detail}")
    return _outputs(json.loads(done.stdout), "node")


#: how every headless Chromium run of ours starts (no sandbox: CI containers run as root)
HEADLESS_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
)


def find_chromium() -> str:
    """The Chromium (or Chrome) executable."""
    configured = os.environ.get(CHROMIUM_VARIABLE)
    if configured:
        found = shutil.which(configured)
        if found:
            return found
        raise WebRuntimeError(f"{CHROMIUM_VARIABLE}={configured!r} is not an executable")
    for name in _CHROMIUMS:
        found = shutil.which(name)
        if found:
            return found
    raise WebRuntimeError(
        f"no Chromium found (tried {', '.join(_CHROMIUMS)} on PATH); install it (Debian: "
        f"`apt-get install chromium`) or set {CHROMIUM_VARIABLE} to the executable"
    )


def _wait(arrived: threading.Event, process: subprocess.Popen) -> bool:
    """Wait for the page's answer until the timeout, or until Chromium exits without one."""
    deadline = _timeout()
    waited = 0.0
    while waited < deadline:
        if arrived.wait(0.25):
            return True
        if process.poll() is not None:
            return arrived.is_set()
        waited += 0.25
    return False


def _run_chrome(package: pathlib.Path, model: str, request: dict[str, Any]):
    browser = find_chromium()
    files = {
        "/": (_HERE / "page.html", "text/html"),
        "/page.mjs": (_HERE / "page.mjs", "text/javascript"),
        "/tensors.mjs": (_HERE / "tensors.mjs", "text/javascript"),
        "/model.onnx": (pathlib.Path(model), "application/octet-stream"),
    }
    body = json.dumps(request).encode()
    reply: dict[str, Any] = {}
    arrived = threading.Event()

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:  # keep the test output quiet
            pass

        def _send(self, data: bytes, kind: str) -> None:
            self.send_response(200)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/request.json":
                return self._send(body, "application/json")
            if path in files:
                source, kind = files[path]
                return self._send(source.read_bytes(), kind)
            if path.startswith("/ort/"):
                source = (package / "dist" / path[len("/ort/") :]).resolve()
                if source.parent == (package / "dist").resolve() and source.is_file():
                    kind = "application/wasm" if source.suffix == ".wasm" else "text/javascript"
                    return self._send(source.read_bytes(), kind)
            self.send_error(404)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            reply.update(json.loads(self.rfile.read(length)))
            self._send(b"{}", "application/json")
            arrived.set()

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    with tempfile.TemporaryDirectory(prefix="jax2onnx-chromium-") as profile:
        command = [
            browser,
            *HEADLESS_FLAGS,
            f"--user-data-dir={profile}",
            f"http://127.0.0.1:{server.server_address[1]}/",
        ]
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            finished = _wait(arrived, process)
        finally:
            process.kill()
            _, stderr = process.communicate()
            server.shutdown()
            server.server_close()
    if not finished and process.returncode not in (None, -9):
        detail = stderr.decode(errors="replace").strip()[-2000:]
        raise WebRuntimeError(
            f"Chromium exited (code {process.returncode}) before the page answered: "
            f"{detail or 'no message'}"
        )
    if not finished:
        detail = stderr.decode(errors="replace").strip()[-2000:]
        raise WebRuntimeError(
            f"onnxruntime-web (chrome) gave no result in {_timeout():g} s "
            f"(set {TIMEOUT_VARIABLE} to wait longer). Chromium said: {detail or 'nothing'}"
        )
    return _outputs(reply, "chrome")
