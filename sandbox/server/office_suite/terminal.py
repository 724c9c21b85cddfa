"""Terminal tasks: commands typed at a shell in xterm; scored from the file system by a shell command
whose output must hold some lines and not others."""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable

from sandbox.server.office_suite.common import NAMES, Generated, sample_words, text_file
from sandbox.server.words import WORDS


def _terminal(
    what: str,
    work: str,
    files: dict[str, str],
    check: str,
    include: list[str],
    exclude: list[str],
    commands: list[str],
    wrong: list[str],
) -> Generated:
    """`check` (a shell command) lists what the task leaves behind; its output must hold every `include`
    and no `exclude` line."""
    task = {
        "instruction": f"Using the terminal, {what}.",
        "config": [
            {
                "type": "launch",
                "parameters": {
                    "command": [
                        "xterm",
                        "-T",
                        "Terminal",
                        "-fa",
                        "DejaVu Sans Mono",
                        "-fs",
                        "12",
                        "-e",
                        "bash",
                        "--norc",
                    ]
                },
            },
            {"type": "sleep", "parameters": {"seconds": 1}},
        ],
        "evaluator": {
            "func": "check_include_exclude",
            "result": {"type": "vm_command_line", "command": check, "shell": True},
            "expected": {"type": "rule", "rules": {"include": include, "exclude": exclude}},
        },
    }
    writers = {f"{work}/{name}": text_file(text) for name, text in files.items()}
    if not files:
        writers = {f"{work}/.keep": lambda p: p.write_text("")}
    return Generated(task, work, writers, {}, {"commands": commands, "wrong_commands": wrong})


def terminal_mkdir(seed: int) -> Generated:
    rng = random.Random(f"terminal-mkdir:{seed}")
    work, name = "/home/user/work", f"{rng.choice(WORDS)}-{rng.randint(10, 99)}"
    return _terminal(
        f"create a folder named {name} in {work}",
        work,
        {},
        f"cd {work} && find . -mindepth 1 -type d",
        [f"./{name}\n"],
        [],
        [f"mkdir {work}/{name}"],
        [f"touch {work}/{name}"],  # a file, not a folder
    )


def terminal_rename(seed: int) -> Generated:
    rng = random.Random(f"terminal-rename:{seed}")
    work = "/home/user/work"
    old, new = (f"{w}.txt" for w in rng.sample(WORDS, 2))
    return _terminal(
        f"rename the file {old} in {work} to {new}",
        work,
        {old: f"{rng.choice(WORDS)}\n"},
        f"ls -1 {work}",
        [f"{new}\n"],
        [f"{old}\n"],
        [f"mv {work}/{old} {work}/{new}"],
        [f"cp {work}/{old} {work}/{new}"],
    )


def terminal_count_lines(seed: int) -> Generated:
    rng = random.Random(f"terminal-count-lines:{seed}")
    work, lines = "/home/user/work", sample_words(rng, 3, 9)
    return _terminal(
        f"write the number of lines of data.txt in {work} into a new file count.txt there (just the number)",
        work,
        {"data.txt": "".join(f"{w}\n" for w in lines)},
        f"cat {work}/count.txt | tr -d ' \\n'; echo",
        [f"{len(lines)}\n"],
        [],
        [f"wc -l < {work}/data.txt > {work}/count.txt"],
        [f"wc -w {work}/data.txt > {work}/count.txt"],  # with the file name after the number
    )


def terminal_copy(seed: int) -> Generated:
    rng = random.Random(f"terminal-copy:{seed}")
    work, name, folder = "/home/user/work", f"{rng.choice(WORDS)}.txt", rng.choice(NAMES)
    return _terminal(
        f"copy the file {name} in {work} into a new folder {work}/{folder}",
        work,
        {name: "keep me\n"},
        f"cd {work} && find . -type f | sort",
        [f"./{name}\n", f"./{folder}/{name}\n"],
        [],
        [f"mkdir {work}/{folder} && cp {work}/{name} {work}/{folder}/"],
        [f"mkdir {work}/{folder} && mv {work}/{name} {work}/{folder}/"],  # moved: the original is gone
    )


def terminal_write_file(seed: int) -> Generated:
    rng = random.Random(f"terminal-write-file:{seed}")
    work, name, text = "/home/user/work", f"{rng.choice(WORDS)}.txt", " ".join(rng.sample(WORDS, 3))
    return _terminal(
        f'create the file {name} in {work} containing the line "{text}"',
        work,
        {},
        f"cat {work}/{name}",
        [f"{text}\n"],
        [],
        [f"echo {shlex.quote(text)} > {work}/{name}"],
        [f"echo {shlex.quote(text.upper())} > {work}/{name}"],
    )


def terminal_delete_file(seed: int) -> Generated:
    rng = random.Random(f"terminal-delete-file:{seed}")
    work = "/home/user/work"
    names = [f"{w}.txt" for w in rng.sample(WORDS, 3)]
    gone, kept = names[0], names[1:]
    return _terminal(
        f"delete the file {gone} in {work}, and nothing else",
        work,
        {n: "x\n" for n in names},
        f"ls -1 {work}",
        [f"{n}\n" for n in kept],
        [f"{gone}\n"],
        [f"rm {work}/{gone}"],
        [f"rm {work}/{kept[0]}"],
    )


TASKS: dict[str, Callable[[int], Generated]] = {
    "terminal-mkdir": terminal_mkdir,
    "terminal-rename": terminal_rename,
    "terminal-count-lines": terminal_count_lines,
    "terminal-copy": terminal_copy,
    "terminal-write-file": terminal_write_file,
    "terminal-delete-file": terminal_delete_file,
}
