"""The terminal agent's tools, their system prompt and the parser of its calls.

The tools are written as Qwen-style tool calls, the format every supported family's chat template uses
for functions (Qwen2.5-VL and Qwen3-VL; UI-TARS-1.5 is a Qwen2.5-VL):

    <tool_call>
    {"name": "run", "arguments": {"command": "python3 -m unittest"}}
    </tool_call>

    run(command)                 a shell command in the repository (cut at a timeout; output capped)
    read_file(path)              a file's text
    write_file(path, content)    a file written whole
    apply_patch(patch)           a unified diff applied in the repository
    submit()                     the work is done: the task's tests decide the reward
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

TOOLS: dict[str, dict[str, str]] = {  # name -> {argument: description}; every argument is a string
    "run": {"command": "a shell command, run in the repository's directory"},
    "read_file": {"path": "a file path, relative to the repository or absolute"},
    "write_file": {"path": "a file path", "content": "the file's whole new text"},
    "apply_patch": {
        "patch": "a unified diff (--- a/file, +++ b/file, @@ hunks), paths relative to the repository"
    },
    "submit": {},
}
MAX_ARGUMENT_CHARS = 100_000


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, str] = field(default_factory=dict)

    def to_wire(self) -> dict[str, Any]:
        """As recorded in rollouts.jsonl and shown by the viewer."""
        return {"tool": self.name, **self.arguments}


def format_tool_call(call: ToolCall) -> str:
    body = json.dumps({"name": call.name, "arguments": call.arguments}, ensure_ascii=False)
    return f"<tool_call>\n{body}\n</tool_call>"


def system_prompt(workdir: str) -> str:
    schema = [
        {
            "type": "function",
            "function": {
                "name": name,
                "parameters": {
                    "type": "object",
                    "properties": {a: {"type": "string", "description": d} for a, d in args.items()},
                    "required": list(args),
                },
            },
        }
        for name, args in TOOLS.items()
    ]
    tools = "\n".join(json.dumps(s) for s in schema)
    return f"""You are a software engineer fixing an issue in a repository at {workdir}. You work in a \
terminal, one tool call per turn, and read each call's output before the next.

# Tools
<tools>
{tools}
</tools>

# Output format
Think briefly if useful, then output exactly one tool call, for example:
<tool_call>
{{"name": "run", "arguments": {{"command": "ls"}}}}
</tool_call>
Only the first tool call is executed. Long outputs are cut. When the issue is fixed, call submit: the \
repository's tests then decide whether it is."""


class ToolCallError(ValueError):
    """The model's output holds no valid tool call (the policy's fault: a format failure)."""


OPEN, CLOSE = "<tool_call>", "</tool_call>"


def _load(text: str) -> Any:
    for candidate in (text, text + "}", text + "}}", text + '"}}'):  # a call cut by max tokens
        try:
            return json.loads(candidate, strict=False)
        except ValueError:
            continue
    raise ToolCallError("the tool call is not JSON")


def parse_tool_call(text: str) -> ToolCall:
    """The first tool call in a model's output; ToolCallError naming what is wrong."""
    if not isinstance(text, str) or not text.strip():
        raise ToolCallError("empty output")
    start = text.find(OPEN)
    if start >= 0:  # up to its closing tag, or the end (cut by max tokens); str.find: linear on any text
        body = text[start + len(OPEN) :]
        end = body.find(CLOSE)
        body = body if end < 0 else body[:end]
    else:
        start = text.find("{")
        if start < 0:
            raise ToolCallError("no tool call (expected <tool_call>{...}</tool_call>)")
        body = text[start:]
        end = body.rfind("}")
        body = body[: end + 1] if end >= 0 else body
    obj = _load(body.strip())
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        raise ToolCallError('a tool call needs "name" and "arguments"')
    name, args = obj["name"], obj.get("arguments", {})
    if isinstance(args, str):  # some models write the arguments as a JSON string
        args = _load(args)
    if name not in TOOLS:
        raise ToolCallError(f"unknown tool {name[:40]!r} (tools: {', '.join(TOOLS)})")
    if not isinstance(args, dict):
        raise ToolCallError(f"{name}: arguments must be an object")
    missing = [a for a in TOOLS[name] if a not in args]
    if missing:
        raise ToolCallError(f"{name}: missing argument {missing[0]!r}")
    out = {}
    for a in TOOLS[name]:
        value = args[a]
        if not isinstance(value, str):
            raise ToolCallError(f"{name}: {a} must be a string")
        if len(value) > MAX_ARGUMENT_CHARS or "\x00" in value:
            raise ToolCallError(f"{name}: {a} is longer than {MAX_ARGUMENT_CHARS} characters or holds NUL")
        out[a] = value
    if name in ("run", "read_file") and not out[next(iter(TOOLS[name]))].strip():
        raise ToolCallError(f"{name}: empty {next(iter(TOOLS[name]))}")
    return ToolCall(name, out)
