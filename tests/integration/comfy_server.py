"""A real ComfyUI server with this pack installed, and a small client for it.

Used by the `comfy_server` fixture (conftest.py). ComfyUI itself is installed by
scripts/setup_comfyui.sh (a ComfyUI 0.3.75 outside the clone); each session gets a
fresh base directory whose custom_nodes/mulosd links to this repo, a free loopback
port, and its own server process, stopped by PID at the end.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import requests

from mulosd_core import devenv

REPO_ROOT = Path(__file__).resolve().parents[2]
# seconds an HTTP request may take: a server under a loaded 2-core machine can answer slowly
HTTP_TIMEOUT = float(os.environ.get("MULOSD_HTTP_TIMEOUT", "120"))
PACK_NAME = "mulosd"  # folder name under custom_nodes/, as the Manager would clone it
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def die_with_parent() -> None:
    """Popen preexec_fn (Linux): the kernel sends the child SIGTERM when its parent dies, also when pytest
    is killed by a signal that skips the fixture's finaliser (`timeout`, SIGKILL); otherwise the server
    would keep a core busy. Elsewhere a no-op."""
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)   # 1 = PR_SET_PDEATHSIG
    if os.getppid() != parent:   # the parent died before the request took effect
        os._exit(1)


class ComfyServerError(RuntimeError):
    """The server could not be set up, died, or did not answer in time."""


def comfyui_dir() -> Path:
    """The ComfyUI install to test against; a clear error when there is none."""
    path = devenv.comfyui_dir()
    if not (path / "main.py").is_file():
        raise ComfyServerError(
            f"No ComfyUI at {path} (MULOSD_COMFYUI, or the set-up scripts' default under {devenv.cache_dir()}). "
            "Install it with: bash scripts/setup_comfyui.sh  (or run everything with bash scripts/test.sh)"
        )
    return path


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class ComfyServer:
    """One ComfyUI process on 127.0.0.1 with the pack linked into its base directory.

    Client API (what tests use):
      url, base_dir, pack_dir, pid, client_id
      get(path, **kw) / post(path, json=None, **kw) -> requests.Response
      object_info(node_class=None) -> dict
      queue(prompt, client_id=None) -> (status_code, json)
      wait(prompt_id, timeout=120) -> history entry (dict with "outputs", "status")
      run(prompt, timeout=120) -> history entry (queue, expect 200, wait)
      interrupt(prompt_id=None), cancel(prompt_id)
      websocket() -> WsListener (context manager) for executing/progress/executed messages
      view(image) -> bytes of an output image ({"filename", "subfolder", "type"})
      log_text() -> the server's stdout+stderr so far
      pack_import_line() -> the "Import times" line for this pack, or None
      alive() -> bool
    """

    def __init__(self, base_dir: Path, comfy_dir: Path | None = None, python: str | None = None,
                 repo_root: Path = REPO_ROOT):
        self.comfy_dir = Path(comfy_dir) if comfy_dir else comfyui_dir()
        self.python = python or sys.executable
        self.base_dir = Path(base_dir)
        self.repo_root = Path(repo_root)
        self.pack_dir = self.base_dir / "custom_nodes" / PACK_NAME
        self.log_path = self.base_dir / "server.log"
        self.port = 0
        self.url = ""
        self.proc: subprocess.Popen | None = None
        self.client_id = uuid.uuid4().hex
        self._log_file = None

    # --- lifecycle -------------------------------------------------------------
    def start(self, ready_timeout: float = 120.0) -> "ComfyServer":
        (self.base_dir / "custom_nodes").mkdir(parents=True, exist_ok=True)
        if not self.pack_dir.exists():
            self.pack_dir.symlink_to(self.repo_root, target_is_directory=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        cmd = [
            self.python, "main.py", "--cpu",
            "--listen", "127.0.0.1", "--port", str(self.port),
            "--disable-auto-launch",
            "--base-directory", str(self.base_dir),
            "--database-url", "sqlite:///:memory:",
            "--disable-api-nodes",
        ]
        env = dict(os.environ)
        env.update(PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                   DO_NOT_TRACK="1", CUDA_VISIBLE_DEVICES="")
        self._log_file = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            cmd, cwd=self.comfy_dir, env=env, stdin=subprocess.DEVNULL,
            stdout=self._log_file, stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group: Ctrl-C in pytest does not hit it twice
            preexec_fn=die_with_parent,
        )
        self._wait_ready(ready_timeout)
        return self

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            if not self.alive():
                raise ComfyServerError(f"ComfyUI exited with code {self.proc.returncode} before it was ready.\n"
                                       + self.log_tail())
            try:
                if requests.get(self.url + "/system_stats", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if time.monotonic() > deadline:
                raise ComfyServerError(f"ComfyUI did not answer /system_stats within {timeout:.0f} s.\n"
                                       + self.log_tail())
            time.sleep(0.25)
        # Another server on the same port would answer too; ours must still be running.
        time.sleep(0.5)
        if not self.alive():
            raise ComfyServerError(f"ComfyUI exited right after start-up (code {self.proc.returncode}); "
                                   "port taken?\n" + self.log_tail())

    def stop(self, grace: float = 15.0) -> None:
        proc = self.proc
        if proc is not None and proc.poll() is None:
            try:
                os.kill(proc.pid, signal.SIGTERM)
                proc.wait(timeout=grace)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
            except ProcessLookupError:
                pass
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self.proc.pid if self.proc else None

    # --- logs ------------------------------------------------------------------
    def log_text(self) -> str:
        if self._log_file is not None:
            self._log_file.flush()
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def log_tail(self, lines: int = 80) -> str:
        tail = self.log_text().splitlines()[-lines:]
        return f"--- last {len(tail)} lines of {self.log_path} ---\n" + "\n".join(tail)

    def pack_import_line(self) -> str | None:
        """ComfyUI's "Import times for custom nodes" line for this pack."""
        pat = re.compile(r"^\s*[\d.]+ seconds.*: " + re.escape(str(self.pack_dir)) + r"\s*$", re.M)
        m = pat.search(self.log_text())
        return m.group(0).strip() if m else None

    def pack_import_errors(self) -> list[str]:
        """Log lines saying this pack failed to import (empty when it loaded)."""
        pack = str(self.pack_dir)
        return [line for line in self.log_text().splitlines()
                if pack in line and ("IMPORT FAILED" in line or "Cannot import" in line
                                     or line.lstrip().startswith("Skip "))]

    # --- HTTP ------------------------------------------------------------------
    def get(self, path: str, **kw) -> requests.Response:
        kw.setdefault("timeout", HTTP_TIMEOUT)
        return requests.get(self.url + path, **kw)

    def post(self, path: str, json=None, **kw) -> requests.Response:
        kw.setdefault("timeout", HTTP_TIMEOUT)
        return requests.post(self.url + path, json=json, **kw)

    def object_info(self, node_class: str | None = None) -> dict:
        path = "/object_info" + (f"/{node_class}" if node_class else "")
        r = self.get(path, timeout=60)
        r.raise_for_status()
        return r.json()

    def queue(self, prompt: dict, client_id: str | None = None) -> tuple[int, dict]:
        """POST /prompt with an API-format graph; (status, body) whatever the status."""
        r = self.post("/prompt", json={"prompt": prompt, "client_id": client_id or self.client_id})
        try:
            body = r.json()
        except ValueError:
            body = {"raw": r.text}
        return r.status_code, body

    def wait(self, prompt_id: str, timeout: float = 120.0, poll: float = 0.2) -> dict:
        """Wait until the prompt has finished (success or error); its /history entry."""
        deadline = time.monotonic() + timeout
        while True:
            r = self.get(f"/history/{prompt_id}")
            r.raise_for_status()
            entry = r.json().get(prompt_id)
            # ComfyUI writes the entry when the prompt ends: status_str "success" or
            # "error" (exceptions and interrupts), with the messages that explain it.
            if entry and entry.get("status", {}).get("status_str") in ("success", "error"):
                return entry
            if not self.alive():
                raise ComfyServerError(f"ComfyUI died while running {prompt_id}.\n" + self.log_tail())
            if time.monotonic() > deadline:
                self.cancel(prompt_id)  # so that it does not hold up the next test's prompts
                raise ComfyServerError(f"prompt {prompt_id} did not finish within {timeout:.0f} s "
                                       "(cancelled).\n" + self.log_tail())
            time.sleep(poll)

    def run(self, prompt: dict, timeout: float = 120.0) -> dict:
        status, body = self.queue(prompt)
        if status != 200:
            raise AssertionError(f"POST /prompt answered {status}: {json.dumps(body, indent=1)[:4000]}")
        return self.wait(body["prompt_id"], timeout)

    def interrupt(self, prompt_id: str | None = None) -> None:
        """Stop the running prompt (only if it is `prompt_id`, when given)."""
        self.post("/interrupt", json={"prompt_id": prompt_id} if prompt_id else None).raise_for_status()

    def cancel(self, prompt_id: str) -> None:
        """Best effort: drop the prompt from the queue, or interrupt it if it is running."""
        try:
            self.post("/queue", json={"delete": [prompt_id]})
            self.interrupt(prompt_id)
        except requests.RequestException:
            pass

    def view(self, image: dict) -> bytes:
        r = self.get("/view", params={"filename": image["filename"], "subfolder": image.get("subfolder", ""),
                                      "type": image.get("type", "output")})
        r.raise_for_status()
        return r.content

    def websocket(self, client_id: str | None = None) -> "WsListener":
        return WsListener(self, client_id or uuid.uuid4().hex)

    # --- browser ---------------------------------------------------------------
    def set_setting(self, key: str, value) -> None:
        self.post(f"/settings/{key}", json=value).raise_for_status()


class WsListener:
    """Websocket messages for one client id; queue with `server.queue(p, client_id=ws.client_id)`.

        with server.websocket() as ws:
            status, body = server.queue(prompt, client_id=ws.client_id)
            msgs = ws.collect(body["prompt_id"], timeout=60)
    JSON messages are dicts {"type", "data"}; binary frames (previews) are
    {"type": "binary", "data": bytes}.
    """

    END_TYPES = ("execution_success", "execution_error", "execution_interrupted")

    def __init__(self, server: ComfyServer, client_id: str):
        self.server = server
        self.client_id = client_id
        self.messages: list[dict] = []
        self._ws = None

    def __enter__(self) -> "WsListener":
        import websocket  # websocket-client

        url = self.server.url.replace("http://", "ws://") + f"/ws?clientId={self.client_id}"
        self._ws = websocket.create_connection(url, timeout=10)
        return self

    def __exit__(self, *exc) -> None:
        if self._ws is not None:
            self._ws.close()

    def recv(self, timeout: float) -> dict | None:
        import websocket

        self._ws.settimeout(timeout)
        try:
            frame = self._ws.recv()
        except websocket.WebSocketTimeoutException:
            return None
        msg = {"type": "binary", "data": frame} if isinstance(frame, bytes) else json.loads(frame)
        self.messages.append(msg)
        return msg

    def wait_progress(self, prompt_id: str, node_id: str, timeout: float = 120.0) -> bool:
        """Wait for the first progress message of `node_id` in this prompt; False when none came in time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self.recv(1.0)
            if msg and msg["type"] == "progress" and msg["data"].get("prompt_id") == prompt_id \
                    and msg["data"]["node"] == node_id:
                return True
        return False

    def wait_executing(self, prompt_id: str, node_id: str, timeout: float = 120.0) -> bool:
        """Wait until `node_id` of this prompt starts executing; False when it did not in time."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            msg = self.recv(1.0)
            if msg and msg["type"] == "executing" and msg["data"].get("prompt_id") == prompt_id \
                    and msg["data"].get("node") == node_id:
                return True
        return False

    def collect(self, prompt_id: str, timeout: float = 120.0) -> list[dict]:
        """Messages until this prompt ends (success, error or interrupt)."""
        deadline = time.monotonic() + timeout
        start = len(self.messages)
        while time.monotonic() < deadline:
            msg = self.recv(min(1.0, max(0.01, deadline - time.monotonic())))
            if msg is None:
                if not self.server.alive():
                    raise ComfyServerError("ComfyUI died.\n" + self.server.log_tail())
                continue
            if msg["type"] in self.END_TYPES and msg.get("data", {}).get("prompt_id") == prompt_id:
                return self.messages[start:]
        raise ComfyServerError(f"no end message for {prompt_id} within {timeout:.0f} s.\n" + self.server.log_tail())


# --- browser -----------------------------------------------------------------
def launch_chromium(playwright):
    """Debian's Chromium through Playwright (no Playwright browser download)."""
    if not os.access(CHROMIUM, os.X_OK):
        raise ComfyServerError(f"No browser at {CHROMIUM}. Install it with: bash scripts/setup_browser.sh")
    return playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS,
                                      timeout=300_000)  # a first start on a busy machine is slow


FRONTEND_READY_JS = """() => !!(window.app && window.app.graph && window.LiteGraph
    && window.app.graph._nodes && window.app.graph._nodes.length > 0)"""


def open_frontend(browser, server: ComfyServer, timeout: float = 180.0):
    """A new page with ComfyUI's frontend loaded and its default graph on the canvas.

    The first-run templates dialog is turned off first (Comfy.TutorialCompleted).
    The frontend is some 500 small ES modules: on a busy 2-core machine it can take
    a minute or more, so one generous deadline covers navigation and start-up.
    The page carries `page.console_messages` and `page.page_errors` (lists of str).
    """
    server.set_setting("Comfy.TutorialCompleted", True)
    deadline = time.monotonic() + timeout
    page = browser.new_page(viewport={"width": 1280, "height": 800})
    page.console_messages = []
    page.page_errors = []
    page.on("console", lambda m: page.console_messages.append(f"{m.type}: {m.text}"))
    page.on("pageerror", lambda e: page.page_errors.append(str(e)))
    try:
        page.goto(server.url + "/", wait_until="commit", timeout=timeout * 1000)
        left_ms = max(1.0, deadline - time.monotonic()) * 1000
        page.wait_for_function(FRONTEND_READY_JS, timeout=left_ms, polling=250)
    except Exception as e:
        errors = "\n".join(page.page_errors[-5:] + page.console_messages[-10:])
        page.close()
        raise ComfyServerError(f"ComfyUI's frontend did not start within {timeout:.0f} s: {e}\n"
                               f"last page messages:\n{errors}") from e
    return page


def save_artifact(src: Path, name: str) -> Path | None:
    """Copy a file to <repo>/artifacts/ (ignored by git) for a look after the run."""
    try:
        dest_dir = REPO_ROOT / "artifacts"
        dest_dir.mkdir(exist_ok=True)
        dest = dest_dir / name
        shutil.copyfile(src, dest)
        return dest
    except OSError:
        return None
