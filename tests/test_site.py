"""The documentation site builds with ``mkdocs build --strict`` and renders in Chromium.

The site is built once per session into a temporary directory and served over
HTTP (the search index is fetched, which ``file://`` pages cannot do). Pages
are opened in headless Chromium driven through the DevTools protocol on a pipe
(``--remote-debugging-pipe``: no extra Python package, no port): a page passes
when it loads with no console error, no uncaught exception and no failed
request, and its content is there (the heading, the API reference's rendered
docstrings, search results).
"""

from __future__ import annotations

import functools
import http.server
import importlib.util
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

import pytest

from jax2onnx.checking.web import HEADLESS_FLAGS, WebRuntimeError, find_chromium

pytestmark = pytest.mark.full_suite

ROOT = pathlib.Path(__file__).resolve().parents[1]
REQUIRED = os.environ.get("JAX2ONNX_REQUIRE_WEB") == "1"  # CI: a missing browser fails


def _need(condition_missing: str | None) -> None:
    if condition_missing is None:
        return
    if REQUIRED:
        pytest.fail(f"{condition_missing} (JAX2ONNX_REQUIRE_WEB=1)")
    pytest.skip(condition_missing)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    _need(None if importlib.util.find_spec("mkdocs") else "mkdocs is not installed: .[docs]")
    target = tmp_path_factory.mktemp("site")
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(target)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=900,
    )
    assert done.returncode == 0, f"mkdocs build --strict failed:\n{done.stderr[-6000:]}"
    return target


def test_strict_build_writes_every_page(site):
    for page in ("index.html", "api/index.html", "gallery/index.html", "coverage/index.html"):
        assert (site / page).is_file(), page
    assert (site / "search" / "search_index.json").is_file()


class DevTools:
    """Chromium driven over ``--remote-debugging-pipe`` (fd 3 in, fd 4 out)."""

    def __init__(self, browser: str, profile: str) -> None:
        to_browser_read, self._write = os.pipe()
        self._read, from_browser_write = os.pipe()
        # the browser reads fd 3 and writes fd 4: bash moves the pipe ends there (no
        # preexec_fn, whose fork is unsafe in a process where JAX runs threads)
        wire = f'exec 3<&{to_browser_read} 4>&{from_browser_write}; exec "$0" "$@"'
        self.process = subprocess.Popen(
            [
                shutil.which("bash") or "/bin/bash",  # dash cannot move fds above 9
                "-c",
                wire,
                browser,
                *HEADLESS_FLAGS,
                "--remote-debugging-pipe",
                f"--user-data-dir={profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            pass_fds=(to_browser_read, from_browser_write),
            start_new_session=True,  # its helper processes go with it
        )
        os.close(to_browser_read)
        os.close(from_browser_write)
        self._buffer = b""
        self._next_id = 0
        self.events: list[dict] = []

    def close(self) -> None:
        try:
            os.killpg(self.process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.process.wait()
        os.close(self._write)
        os.close(self._read)

    def _receive(self, deadline: float) -> dict:
        import select

        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([self._read], [], [], max(left, 0))
            if not ready:
                raise TimeoutError("Chromium did not answer in time")
            chunk = os.read(self._read, 1 << 16)
            if not chunk:
                raise RuntimeError("Chromium closed the DevTools pipe")
            self._buffer += chunk
        message, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(message)

    def send(self, method: str, session: str | None = None, timeout: float = 60, **params):
        self._next_id += 1
        message = {"id": self._next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = session
        os.write(self._write, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        while True:
            reply = self._receive(deadline)
            if reply.get("id") == self._next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def wait_for(self, method: str, timeout: float = 60) -> dict:
        deadline = time.monotonic() + timeout
        for i, event in enumerate(self.events):
            if event.get("method") == method:
                return self.events.pop(i)
        while True:
            event = self._receive(deadline)
            if event.get("method") == method:
                return event
            self.events.append(event)

    def drain(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        try:
            while True:
                self.events.append(self._receive(deadline))
        except TimeoutError:
            pass


def _problems(events: list[dict]) -> list[str]:
    found = []
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            found.append(f"exception: {details.get('exception', {}).get('description', details)}")
        elif method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            found.append(f"console.{params['type']}: {params.get('args')}")
        elif method == "Log.entryAdded" and params["entry"]["level"] == "error":
            entry = params["entry"]
            found.append(f"log: {entry.get('text')} {entry.get('url', '')}")
        elif method == "Network.loadingFailed" and not params.get("canceled"):
            found.append(f"request failed: {params.get('errorText')}")
    return found


@pytest.fixture(scope="module")
def browser(site):
    try:
        found = find_chromium()  # JAX2ONNX_CHROMIUM, else chromium ... on PATH
    except WebRuntimeError as err:
        _need(str(err))
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    profiles = tempfile.TemporaryDirectory(prefix="jax2onnx-site-", ignore_cleanup_errors=True)
    with profiles as profile:
        tools = DevTools(found, profile)
        try:
            yield tools, f"http://127.0.0.1:{server.server_address[1]}/"
        finally:
            tools.close()
            server.shutdown()
            server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


def _open(tools: DevTools, url: str) -> tuple[str, list[str]]:
    """Open ``url`` in a new tab; its session and the problems it reported."""
    target = tools.send("Target.createTarget", url="about:blank")["targetId"]
    session = tools.send("Target.attachToTarget", targetId=target, flatten=True)["sessionId"]
    tools.events.clear()
    for domain in ("Runtime", "Log", "Network", "Page"):
        tools.send(f"{domain}.enable", session)
    tools.send("Page.navigate", session, url=url)
    tools.wait_for("Page.loadEventFired")
    tools.drain(1.0)  # scripts that run after load (search worker, highlighting)
    return session, _problems(tools.events)


def _evaluate(tools: DevTools, session: str, expression: str):
    result = tools.send(
        "Runtime.evaluate", session, expression=expression, returnByValue=True, awaitPromise=True
    )
    assert "exceptionDetails" not in result, result
    return result["result"].get("value")


def test_index_renders_without_console_errors(browser):
    tools, base = browser
    session, problems = _open(tools, base)
    assert not problems, problems
    title = _evaluate(tools, session, "document.querySelector('article h1').textContent")
    assert title.strip().startswith("jax2onnx")
    links = _evaluate(tools, session, "document.querySelectorAll('nav.md-nav a').length")
    assert links > 20  # the navigation is there
    # search: the worker loads the index and answers a query
    hits = _evaluate(
        tools,
        session,
        """new Promise(resolve => {
            const input = document.querySelector('input.md-search__input');
            input.focus(); input.value = 'opset';
            input.dispatchEvent(new Event('input', {bubbles: true}));
            input.dispatchEvent(new KeyboardEvent('keyup', {bubbles: true, key: 't'}));
            let tries = 0;
            const poll = () => {
                const n = document.querySelectorAll('.md-search-result__item').length;
                if (n > 0 || ++tries > 50) resolve(n); else setTimeout(poll, 100);
            };
            poll();
        })""",
    )
    assert hits > 0, "the search found nothing for 'opset'"
    tools.drain(0.5)
    assert not _problems(tools.events)


def test_api_reference_renders_the_docstrings(browser):
    tools, base = browser
    session, problems = _open(tools, base + "api/jax2onnx/")
    assert not problems, problems
    objects = _evaluate(tools, session, "document.querySelectorAll('.doc-object').length")
    assert objects >= 5
    text = _evaluate(tools, session, "document.querySelector('article').innerText")
    for name in ("to_onnx", "onnx_function", "allclose", "allclose_onnxruntime_web"):
        assert name in text


def test_gallery_shows_pictures_of_the_graphs(browser):
    tools, base = browser
    session, problems = _open(tools, base + "gallery/")
    assert not problems, problems
    loaded = _evaluate(
        tools,
        session,
        "[...document.querySelectorAll('article img')].map(i => i.complete && i.naturalWidth > 0)",
    )
    assert loaded and all(loaded)
