"""MiniWoB++ tasks: the `miniwob` package's HTML pages in a real chromium window on the X display.

Selenium is used only to load pages, seed and start episodes and read MiniWoB's own reward globals; the
agent's input is OS-level (xdotool) on the real window.

Oracle state (`GET /task/oracle`, `OracleState` below): the utterance, its fields and the page's DOM in
screen coordinates. sandbox/oracles/miniwob.py reads it on the host to solve the tasks; a policy never
sees it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any, TypedDict

from sandbox.server.display import Display
from sandbox.server.runtimes.base import Runtime, TaskError

# What chromium needs inside Xvfb without a GPU, a sandbox or a network (docs/architecture.md, Desktops).
CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-extensions",
    "--disable-translate",
    "--disable-features=Translate,MediaRouter",
    "--password-store=basic",
    "--force-device-scale-factor=1",
    "--kiosk",
    "--window-position=0,0",
    "--disable-session-crashed-bubble",
    "--hide-scrollbars",
]
EPISODE_MAX_MS = 3_600_000  # MiniWoB's default 10 s timer would end episodes during slow policy turns


class OracleElement(TypedDict):
    """One node of MiniWoB's DOM walk (core.getDOMInfo), depth first."""

    tag: str  # "BUTTON", "INPUT_text", "INPUT_checkbox", "t" (a text node), ...
    id: str | None
    classes: str | None  # space-separated
    text: str | None
    value: Any  # an input's value: str, or bool for checkboxes and radios
    ref: int
    bgColor: str | None  # "rgb(r, g, b)"
    focused: bool
    x: float  # screen coordinates of the box: page offset + the window's position
    y: float
    w: float
    h: float
    depth: int


class OracleState(TypedDict):
    """The contract with sandbox/oracles/miniwob.py: change both sides together."""

    task: str  # "miniwob/<name>"
    utterance: str
    fields: dict[str, str]  # MiniWoB's field extraction of the utterance, e.g. {"target": "OK"}
    elements: list[OracleElement]


def miniwob_html_dir() -> Path:
    # find_spec does not execute miniwob/__init__ (which pulls gymnasium); only its data files are used.
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError("the 'miniwob' package is not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "html" / "miniwob"


def _field_extractors() -> dict:
    path = miniwob_html_dir().parent.parent / "fields.py"
    spec = importlib.util.spec_from_file_location("_miniwob_fields", path)
    if spec is None or spec.loader is None:
        return {}
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.FIELD_EXTRACTORS


class MiniWoBRuntime(Runtime):
    prefix = "miniwob"

    def __init__(self, display: Display) -> None:
        super().__init__(display)
        self.html_dir = miniwob_html_dir()
        self.driver: Any = None
        self.profile: str | None = None
        self.task: str | None = None
        self._fields = _field_extractors()

    def tasks(self) -> list[str]:
        return sorted(p.stem for p in self.html_dir.glob("*.html"))

    def _start_browser(self) -> None:
        from selenium import webdriver
        from selenium.webdriver.chrome.service import Service

        os.environ["DISPLAY"] = self.display.name
        os.environ.setdefault("SE_AVOID_STATS", "true")  # selenium must never phone home
        self.profile = tempfile.mkdtemp(prefix="cua-chromium-")
        opts = webdriver.ChromeOptions()
        for flag in CHROMIUM_FLAGS:
            opts.add_argument(flag)
        opts.add_argument(f"--window-size={self.display.width},{self.display.height}")
        opts.add_argument(f"--user-data-dir={self.profile}")
        # No "controlled by automated test software" bar: it would shift the page under the agent.
        opts.add_experimental_option("excludeSwitches", ["enable-automation"])
        opts.binary_location = shutil.which("chromium") or "/usr/bin/chromium"
        service = Service(
            executable_path=shutil.which("chromedriver") or "/usr/bin/chromedriver",
            env={**os.environ, "DISPLAY": self.display.name},
        )
        self.driver = webdriver.Chrome(service=service, options=opts)
        self.driver.set_script_timeout(10)
        self.driver.set_page_load_timeout(20)

    def _alive(self) -> bool:
        if self.driver is None:
            return False
        try:
            self.driver.execute_script("return 1")
            return True
        except Exception:
            return False

    def reset(self, name: str, seed: int) -> dict[str, Any]:
        path = self.html_dir / f"{name}.html"
        if not path.is_file():
            raise TaskError(f"unknown MiniWoB task {name!r}")
        if not self._alive():
            self.close()
            self._start_browser()
        d = self.driver
        # Input hygiene: no button or modifier left held by the previous episode, no popup left open.
        self.display.xdotool("keyup", "ctrl", "alt", "shift", "super", "mouseup", "1", "key", "Escape")
        self._open(path, name)
        d.execute_script(
            f"core.EPISODE_MAX_TIME = {EPISODE_MAX_MS}; Math.seedrandom({seed!r});"
            "core.setDataMode('default'); core.startEpisodeReal();"
            # One problem per episode: when the task ends, MiniWoB shows a START cover whose click starts
            # a new problem and clears the result, so a wrong click followed by a click on the cover and
            # a right one would score 1. The first result stands; the cover stays inert.
            "core.startEpisodeReal = function () {};"
        )
        deadline = time.monotonic() + 5
        while not d.execute_script("return WOB_TASK_READY;"):
            if time.monotonic() > deadline:
                raise RuntimeError(f"MiniWoB task {name} did not become ready")
            time.sleep(0.02)
        # Ready is not painted: a click that arrives before chromium's first frame after the load can be
        # dropped (seen as rare reward-0 oracle runs under load). Wait for two animation frames.
        d.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "requestAnimationFrame(() => requestAnimationFrame(() => done(true)));"
        )
        # Keyboard focus on the browser window: a popup closed in the previous episode can leave X focus
        # elsewhere, and then clicks work while typed keys are lost.
        with contextlib.suppress(Exception):
            self.display.xdotool("search", "--onlyvisible", "--classname", "chromium", "windowfocus")
        self.task = name
        instruction = self._utterance()[0]
        if not instruction.strip():  # never hand the agent an empty task
            raise RuntimeError(f"MiniWoB task {name}: the page shows no utterance after reset")
        return {"instruction": instruction}

    def _open(self, path: Path, name: str, attempts: int = 3, wait_s: float = 5.0) -> None:
        """A fresh page per episode: no state leaks from the previous one. Under load get() can return
        before the page is complete: CI saw the task's scripts (genProblem, core) undefined for a whole
        wait, and once a body not yet parsed, so that genProblem wrote the utterance nowhere and the
        agent got an empty instruction. Wait for the page's own `onload` (every task's shows its start
        cover) and its query element; navigate again before giving up. The page being left is marked
        first: before the navigation commits, the tab still holds the previous task's page, which is
        complete too (the oracle once found no `math-answer` on simple-arithmetic: the agent had been
        given the previous task's page and instruction)."""
        complete = (
            "return window.cuaLeft === undefined && document.readyState === 'complete'"
            " && typeof genProblem === 'function'"
            " && typeof core !== 'undefined' && core.cover_div != null"
            " && document.getElementById('query') !== null;"
        )
        for _ in range(attempts):
            self.driver.execute_script("window.cuaLeft = true;")
            self.driver.get(path.as_uri())
            deadline = time.monotonic() + wait_s
            while time.monotonic() < deadline:
                if self.driver.execute_script(complete):
                    return
                time.sleep(0.02)
        raise RuntimeError(f"MiniWoB task {name}: its page did not load completely in {attempts} loads")

    def _utterance(self, timeout_s: float = 10.0) -> tuple[str, dict[str, str]]:
        """The task's utterance and its fields. Under load the page can answer before its utterance is
        final (an oracle then read no fields, clicked nothing and scored 0): poll until miniwob's field
        extractor accepts it, and give up with empty fields only after `timeout_s` (2 s was too short
        once in CI, with the whole suite loading 2 cores)."""
        deadline = time.monotonic() + timeout_s
        extractor = self._fields.get(self.task)
        while True:
            resp = self.driver.execute_script("return core.getUtterance();")
            if isinstance(resp, dict):
                return resp["utterance"], {str(k): str(v) for k, v in resp.get("fields", {}).items()}
            if extractor is None:
                return resp, {}
            try:
                return resp, dict(extractor(resp))
            except ValueError:
                if time.monotonic() > deadline:
                    return resp, {}
            time.sleep(0.05)

    def evaluate(self, wait_s: float) -> dict[str, Any]:
        if self.task is None:
            raise TaskError("no task has been reset")
        # The last input event may still be in flight from X to the renderer: poll, do not sleep.
        deadline = time.monotonic() + wait_s
        while True:
            meta = self.driver.execute_script(
                "return {done: WOB_DONE_GLOBAL, env_reward: WOB_REWARD_GLOBAL,"
                " raw_reward: WOB_RAW_REWARD_GLOBAL, reason: WOB_REWARD_REASON};"
            )
            if meta["done"] or time.monotonic() >= deadline:
                break
            time.sleep(0.02)
        raw = float(meta["raw_reward"] or 0.0)
        reward = max(0.0, raw) if meta["done"] else 0.0
        return {
            "reward": reward,
            "done": bool(meta["done"]),
            "info": {
                "raw_reward": raw,
                "env_reward": meta["env_reward"],
                "reason": None if meta["reason"] is None else str(meta["reason"]),
            },
        }

    def finished(self) -> bool:
        if self.task is None:
            return False
        # Two animation frames: the input event that xdotool just sent is dispatched before they run.
        return bool(
            self.driver.execute_async_script(
                "const done = arguments[arguments.length - 1];"
                "requestAnimationFrame(() => requestAnimationFrame(() => done(WOB_DONE_GLOBAL)));"
            )
        )

    def oracle(self) -> OracleState:
        if self.task is None:
            raise TaskError("no task has been reset")
        utterance, fields = self._utterance()
        # Page -> screen offset: the window's position. A kiosk window has no chrome, and outerWidth -
        # innerWidth is no measure of it: chromium keeps a window at least 500 px wide, so on a 400 px
        # screen that difference is 100 px of nothing and every element was reported 100 px off.
        ox, oy = self.driver.execute_script("return [window.screenX, window.screenY];")
        elements: list[OracleElement] = []

        def walk(node: dict | None, depth: int) -> None:
            if not node:
                return
            el = {
                k: node.get(k) for k in ("tag", "id", "classes", "text", "value", "ref", "bgColor", "focused")
            }
            el.update(x=node["left"] + ox, y=node["top"] + oy, w=node["width"], h=node["height"], depth=depth)
            elements.append(el)  # type: ignore[arg-type]
            for child in node.get("children", []):
                walk(child, depth + 1)

        walk(self.driver.execute_script("return core.getDOMInfo();"), 0)
        return {
            "task": f"miniwob/{self.task}",
            "utterance": utterance,
            "fields": fields,
            "elements": elements,
        }

    def close(self) -> None:
        if self.driver is not None:
            with contextlib.suppress(Exception):
                self.driver.quit()
            self.driver = None
        if self.profile:
            shutil.rmtree(self.profile, ignore_errors=True)
            self.profile = None
        self.task = None
