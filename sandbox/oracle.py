"""A scripted oracle agent: it reads each task's solution from the task's own state (MiniWoB's DOM, the
desktop task's target file) but acts only through the public action API, exactly as a policy would.
Used by scripts/smoke_sandbox.py and the tests; also a random agent for the "random scores below 1" check.
"""

from __future__ import annotations

import asyncio
import random
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

from sandbox.base import Sandbox

Solver = Callable[["Ctx"], Awaitable[None]]
MINIWOB: dict[str, Solver] = {}
DESKTOP: dict[str, Solver] = {}


def miniwob(*names: str) -> Callable[[Solver], Solver]:
    def deco(fn: Solver) -> Solver:
        for n in names:
            MINIWOB[n] = fn
        return fn

    return deco


def desktop(*names: str) -> Callable[[Solver], Solver]:
    def deco(fn: Solver) -> Solver:
        for n in names:
            DESKTOP[n] = fn
        return fn

    return deco


def supported_tasks() -> list[str]:
    return [f"miniwob/{n}" for n in sorted(MINIWOB)] + [f"desktop/{n}" for n in sorted(DESKTOP)]


class OracleError(RuntimeError):
    pass


def _center_of(el: dict[str, Any]) -> dict[str, int]:
    return {"x": round(el["x"] + el["w"] / 2), "y": round(el["y"] + el["h"] / 2)}


class Ctx:
    def __init__(self, sb: Sandbox, state: dict[str, Any]) -> None:
        self.sb, self.state = sb, state
        self.actions: list[dict[str, Any]] = []

    @property
    def fields(self) -> dict[str, str]:
        return self.state.get("fields", {})

    @property
    def elements(self) -> list[dict[str, Any]]:
        return self.state.get("elements", [])

    async def refresh(self) -> None:
        self.state = await self.sb.oracle()

    def find_all(
        self, tag: str | None = None, text: str | None = None, id: str | None = None, cls: str | None = None
    ) -> list[dict[str, Any]]:
        out = []
        for e in self.elements:
            if tag is not None and e["tag"] != tag:
                continue
            if text is not None and (e.get("text") or "").strip() != text:
                continue
            if id is not None and e.get("id") != id:
                continue
            if cls is not None and cls not in (e.get("classes") or "").split():
                continue
            out.append(e)
        return out

    def find(self, **kw: Any) -> dict[str, Any]:
        found = self.find_all(**kw)
        if not found:
            raise OracleError(f"{self.state.get('task')}: no element {kw}")
        return found[0]

    async def act(self, action: dict[str, Any]) -> dict[str, Any]:
        self.actions.append(action)
        return await self.sb.act(action)

    async def click(self, el: dict[str, Any], dx: float | None = None) -> None:
        if dx is None:
            await self.act({"type": "click", **_center_of(el)})
            return
        x = el["x"] + (dx if dx is not None else el["w"] / 2)
        await self.act({"type": "click", "x": round(x), "y": round(el["y"] + el["h"] / 2)})

    async def type(self, text: str) -> None:
        await self.act({"type": "type", "text": text})

    async def key(self, keys: str) -> None:
        await self.act({"type": "key", "keys": keys})

    async def fill(self, el: dict[str, Any], text: str) -> None:
        await self.click(el)
        await self.type(text)

    async def submit(self, label: str = "Submit") -> None:
        await self.click(self.find(tag="BUTTON", text=label))

    async def wait_for(self, pred: Callable[[], Any], timeout: float = 5.0) -> Any:
        """Polls the task state until pred() holds (e.g. an animation finished)."""
        deadline = time.monotonic() + timeout
        while True:
            await self.refresh()
            try:
                val = pred()
            except OracleError:
                val = None
            if val:
                return val
            if time.monotonic() > deadline:
                raise OracleError(f"{self.state.get('task')}: condition not met in {timeout} s")
            await asyncio.sleep(0.05)


def _first(items: Any) -> dict[str, Any]:
    for item in items:
        return item
    raise OracleError("expected element not found")


# -- MiniWoB++ ---------------------------------------------------------------------------------------
@miniwob("click-test")
async def _click_test(c: Ctx) -> None:
    await c.click(c.find(tag="BUTTON"))


@miniwob("click-test-2", "click-test-transfer", "click-button", "unicode-test")
async def _click_named_button(c: Ctx) -> None:
    await c.click(c.find(tag="BUTTON", text=c.fields["target"]))


@miniwob("click-button-sequence")
async def _click_sequence(c: Ctx) -> None:
    await c.click(c.find(tag="BUTTON", text="ONE"))
    await c.click(c.find(tag="BUTTON", text="TWO"))


@miniwob("click-link")
async def _click_link(c: Ctx) -> None:
    await c.click(c.find(tag="SPAN", cls="alink", text=c.fields["target"]))


@miniwob("click-dialog", "click-dialog-2")
async def _click_dialog(c: Ctx) -> None:
    target = c.fields.get("target", "x")
    if target == "x":
        await c.click(c.find(tag="BUTTON", cls="ui-dialog-titlebar-close"))
    else:
        await c.click(c.find(tag="BUTTON", text=target))


@miniwob("focus-text")
async def _focus_text(c: Ctx) -> None:
    await c.click(c.find(tag="INPUT_text"))


@miniwob("focus-text-2")
async def _focus_text_2(c: Ctx) -> None:
    await c.click(c.find(tag="INPUT_text", id=f"tt{c.fields['target']}"))


@miniwob("enter-text", "enter-text-dynamic")
async def _enter_text(c: Ctx) -> None:
    await c.fill(c.find(tag="INPUT_text"), c.fields["target"])
    await c.submit()


@miniwob("enter-text-2")
async def _enter_text_2(c: Ctx) -> None:
    text = c.fields["text"]
    await c.fill(c.find(tag="INPUT_text"), text.upper() if c.fields["case"] == "upper" else text.lower())
    await c.submit()


@miniwob("enter-password")
async def _enter_password(c: Ctx) -> None:
    await c.fill(c.find(id="password"), c.fields["target"])
    await c.fill(c.find(id="verify"), c.fields["target"])
    await c.submit()


@miniwob("login-user")
async def _login_user(c: Ctx) -> None:
    await c.fill(c.find(id="username"), c.fields["username"])
    await c.fill(c.find(id="password"), c.fields["password"])
    await c.submit("Login")


@miniwob("click-checkboxes", "click-option")
async def _click_labels(c: Ctx) -> None:
    targets = [v for k, v in c.fields.items() if k.startswith("target")]
    if not targets and c.state["task"] != "miniwob/click-checkboxes":  # click-checkboxes may want none
        raise OracleError(f"{c.state['task']}: no target in {c.state.get('utterance')!r}")
    for t in targets:
        # A click on a label's text toggles its input (LABEL > [INPUT, t]). Confirm it did: right after a
        # page load a click can be lost under load (seen on the local backend); then click the input.
        await c.click(c.find(tag="t", text=t))
        try:
            await c.wait_for(lambda t=t: _input_before(c, t)["value"] is True, timeout=1.5)
        except OracleError:
            await c.click(_input_before(c, t))
            await c.wait_for(lambda t=t: _input_before(c, t)["value"] is True, timeout=3.0)
    await c.submit()


def _input_before(c: Ctx, label_text: str) -> dict[str, Any]:
    """The checkbox/radio of the label whose text is `label_text` (it precedes the text in the DOM walk)."""
    t = c.find(tag="t", text=label_text)
    i = c.elements.index(t)
    for el in reversed(c.elements[max(0, i - 2) : i]):
        if el["tag"] in ("INPUT_radio", "INPUT_checkbox"):
            return el
    raise OracleError(f"{c.state.get('task')}: no input for label {label_text!r}")


@miniwob("click-tab")
async def _click_tab(c: Ctx) -> None:
    await c.click(c.find(tag="A", text=f"Tab #{c.fields['target']}"))


@miniwob("click-tab-2-easy")
async def _click_tab_2(c: Ctx) -> None:
    target = c.fields["target"]
    for tab in c.find_all(tag="A", cls="ui-tabs-anchor"):
        await c.click(tab)
        await c.wait_for(lambda t=tab: c.find(tag="A", text=t["text"]) and c.find_all(cls="ui-tabs-panel"))
        links = c.find_all(tag="SPAN", cls="alink", text=target)
        if links:
            await c.click(links[0])
            return
    raise OracleError("link not found in any tab")


@miniwob("click-widget")
async def _click_widget(c: Ctx) -> None:
    tags = {
        "radio": "INPUT_radio",
        "checkbox": "INPUT_checkbox",
        "text": "INPUT_text",
        "textarea": "TEXTAREA",
        "button": "BUTTON",
    }
    # miniwob's field regex expects 'Click on a "..." widget.' and yields no fields for 'an'.
    target = c.fields.get("target")
    if target is None:
        m = re.search(r'"([^"]+)"', c.state.get("utterance") or "")
        if m is None:
            raise OracleError(f"click-widget: no target in {c.state.get('utterance')!r}")
        target = m.group(1)
    await c.click(c.find(tag=tags[target]))


@miniwob("click-collapsible")
async def _click_collapsible(c: Ctx) -> None:
    await c.click(c.find(tag="H3"))
    # The section slides open: wait until the submit button holds still.
    prev: list[Any] = []

    def settled() -> bool:
        b = c.find(tag="BUTTON", text="Submit")
        cur = [b["y"], b["h"]]
        ok = cur == prev and b["h"] > 0
        prev[:] = cur
        return ok

    await c.wait_for(settled)
    await c.submit()


def _arith(expr: str) -> int:
    m = re.match(r"^\s*(-?\d+)\s*([-+x*/])\s*(-?\d+)\s*=?\s*$", expr)
    if not m:
        raise OracleError(f"cannot parse {expr!r}")
    a, op, b = int(m[1]), m[2], int(m[3])
    return {"+": a + b, "-": a - b, "x": a * b, "*": a * b, "/": a // b if b else 0}[op]


@miniwob("simple-arithmetic")
async def _simple_arithmetic(c: Ctx) -> None:
    await c.fill(c.find(id="math-answer"), str(_arith(c.find(id="math-problem")["text"])))
    await c.submit()


@miniwob("simple-algebra")
async def _simple_algebra(c: Ctx) -> None:
    # "a + x = b", "x - a = b", "a - x = b" ...: try integer x values against the equation.
    eq = c.find(id="math-problem")["text"].replace("−", "-")
    lhs, rhs = (s.strip() for s in eq.split("="))
    for x in range(-1000, 1001):
        try:
            if _arith(lhs.replace("x", f"({x})").replace("(", "").replace(")", "")) == int(rhs):
                break
        except OracleError:
            continue
    else:
        raise OracleError(f"cannot solve {eq!r}")
    await c.fill(c.find(id="math-answer"), str(x))
    await c.submit()


@miniwob("find-word")
async def _find_word(c: Ctx) -> None:
    words = c.find(tag="P")["text"].split()
    word = re.sub(r"[^a-zA-Z0-9]", "", words[int(c.fields["target"]) - 1])
    await c.fill(c.find(id="answer-input"), word)
    await c.submit()


@miniwob("read-table")
async def _read_table(c: Ctx) -> None:
    cells = c.find_all(tag="TD")
    for i, cell in enumerate(cells[:-1]):
        if cell.get("text") == c.fields["target"]:
            await c.fill(c.find(tag="INPUT_text"), cells[i + 1]["text"])
            await c.submit()
            return
    raise OracleError("row not found")


@miniwob("multi-orderings")
async def _multi_orderings(c: Ctx) -> None:
    inputs = c.find_all(tag="INPUT_text")
    for key, value in c.fields.items():
        label = _first(
            e
            for e in c.elements
            if (e.get("text") or "").strip().lower() == key.lower()
            and e["tag"] in ("TH", "LABEL", "t", "SPAN", "DIV", "TD")
        )
        row = min(inputs, key=lambda i, lab=label: abs(i["y"] - lab["y"]) + abs(i["x"] - lab["x"]) / 10)
        await c.fill(row, value)
    await c.click(_first(e for e in c.elements if (e.get("text") or "").strip() == "Submit"))


@miniwob("copy-paste")
async def _copy_paste(c: Ctx) -> None:
    await c.click(c.find(tag="TEXTAREA"))
    await c.key("ctrl+a")
    await c.key("ctrl+c")
    await c.click(c.find(tag="INPUT_text"))
    await c.key("ctrl+v")
    await c.submit()


@miniwob("text-transform")
async def _text_transform(c: Ctx) -> None:
    cap = c.find(id="captcha")
    letters = [
        e["text"]
        for e in c.elements
        if e["tag"] == "SPAN"
        and e["depth"] == cap["depth"] + 1
        and cap["x"] - 30 <= e["x"] <= cap["x"] + cap["w"]
    ]
    await c.fill(c.find(tag="INPUT_text"), "".join(letters))
    await c.submit()


COLORS = {
    "red": (255, 0, 0),
    "blue": (0, 0, 255),
    "olive": (128, 128, 0),
    "lime": (0, 255, 0),
    "black": (0, 0, 0),
    "white": (255, 255, 255),
    "grey": (128, 128, 128),
    "purple": (128, 0, 128),
    "orange": (255, 165, 0),
    "yellow": (255, 255, 0),
    "cyan": (0, 255, 255),
    "pink": (255, 192, 203),
    "magenta": (255, 0, 255),
}


@miniwob("click-color")
async def _click_color(c: Ctx) -> None:
    want = "rgb({}, {}, {})".format(*COLORS[c.fields["target"]])
    await c.click(_first(e for e in c.find_all(cls="color") if e["bgColor"] == want))


@miniwob("enter-date")
async def _enter_date(c: Ctx) -> None:
    mm, dd, yyyy = c.fields["target"].split("/")
    await c.click(c.find(tag="INPUT_date"), dx=12)  # the month segment
    await c.type(f"{mm}{dd}{yyyy}")
    await c.submit()


@miniwob("choose-list")
async def _choose_list(c: Ctx) -> None:
    # Opens chromium's native popup; wait until it is drawn, then type-ahead picks the item.
    await c.act({"type": "click", "wait_change_s": 2, **_center_of(c.find(tag="SELECT"))})
    await c.type(c.fields["target"])
    await c.act({"type": "key", "keys": "Return", "wait_change_s": 1})
    await c.submit()


# -- desktop tasks --------------------------------------------------------------------------------
def _center(c: Ctx) -> dict[str, Any]:
    w, h = c.state["screen"]
    return {"type": "click", "x": w // 2, "y": h // 2}


@desktop("editor-save")
async def _editor_save(c: Ctx) -> None:
    await c.act(_center(c))
    await c.type(c.state["text"])
    await c.key("ctrl+s")


@desktop("editor-save-as")
async def _editor_save_as(c: Ctx) -> None:
    await c.act(_center(c))
    await c.type(c.state["text"])
    # The file chooser maps its window before its name field takes input: wait for the screen to settle.
    await c.act({"type": "key", "keys": "ctrl+s", "wait_change_s": 3})
    await c.wait_for(lambda: any("save" in t.lower() for t in c.state["windows"]), timeout=10)
    await c.act({"type": "wait", "seconds": 0, "wait_change_s": 0.5})
    # The chooser opens in the editor's folder (the task's folder): the file name is enough, and a
    # typed full path would pop up GTK's location completion, which swallows the Return.
    await c.key("ctrl+a")
    await c.act({"type": "type", "text": c.state["path"].rsplit("/", 1)[1], "wait_change_s": 2})
    # Like a person: press Enter, and again if the dialog is still open (GTK may still be busy with the
    # typed name when the first one arrives).
    for _ in range(5):
        await c.act({"type": "key", "keys": "Return", "wait_change_s": 1})
        try:
            await c.wait_for(lambda: not any(t == "Save As" for t in c.state["windows"]), timeout=1)
            return
        except OracleError:
            continue


@desktop("terminal-file")
async def _terminal_file(c: Ctx) -> None:
    path = c.state["path"]
    await c.act(_center(c))
    await c.type(f"mkdir -p '{path.rsplit('/', 1)[0]}' && echo {c.state['text']} > '{path}'")
    await c.key("Return")


async def solve(sb: Sandbox) -> Ctx:
    """Solves the task that was last reset in `sb`; returns the context (its actions)."""
    state = await sb.oracle()
    family, name = state["task"].split("/", 1)
    table = MINIWOB if family == "miniwob" else DESKTOP
    if name not in table:
        raise OracleError(f"no oracle for {state['task']}")
    ctx = Ctx(sb, state)
    await table[name](ctx)
    return ctx


async def random_actions(
    sb: Sandbox, n: int, rng: random.Random, width: int = 1280, height: int = 800
) -> None:
    """A random policy over the public action space (clicks, typing, keys, scrolls)."""
    for _ in range(n):
        kind = rng.choice(["click", "click", "double_click", "type", "key", "scroll"])
        x, y = rng.randrange(width), rng.randrange(height)
        if kind in ("click", "double_click"):
            act: dict[str, Any] = {"type": kind, "x": x, "y": y}
        elif kind == "type":
            act = {
                "type": "type",
                "text": "".join(rng.choice("abcxyz 123") for _ in range(rng.randint(1, 8))),
            }
        elif kind == "key":
            act = {"type": "key", "keys": rng.choice(["Return", "Tab", "BackSpace", "ctrl+a", "Escape"])}
        else:
            act = {"type": "scroll", "x": x, "y": y, "dy": rng.choice([-3, 3])}
        await sb.act(act)
