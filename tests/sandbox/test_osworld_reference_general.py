"""`check_direct_json_object` and `compare_text_file` against OSWorld's own (desktop-env 1.0.2, the test-only
venv of `scripts/setup_sandbox.sh osworld_ref`): both score the same seeded cases and must agree on every
one. OSWorld's general.py and vscode.py are loaded by file path, with stand-ins for the imports these two
functions do not use (pdfplumber, PyYAML, rapidfuzz, cssselect, PyPDF2, its metrics.utils).

Deliberate differences, tested on their own: a result that is not JSON and a missing gold file score 0
where OSWorld's functions raise.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sandbox.test_osworld_reference_slides import run_driver

pytestmark = pytest.mark.slow
CASES = 600

DRIVER = r"""
import importlib.util, json, os, random, sys, types
from sandbox.server.osworld.metrics.general import check_direct_json_object, compare_text_file

site = [p for p in sys.path if p.endswith("site-packages")][0]
metrics_dir = os.path.join(site, "desktop_env", "evaluators", "metrics")
stub = lambda name, **attrs: sys.modules.setdefault(name, types.ModuleType(name)).__dict__.update(attrs)
for name in ("pdfplumber", "yaml", "PyPDF2", "desktop_env", "desktop_env.evaluators", "desktop_env.evaluators.metrics"):
    stub(name)
stub("rapidfuzz", fuzz=None)
stub("lxml.cssselect", CSSSelector=None)
stub("desktop_env.evaluators.metrics.utils", _match_record=None, _match_value_to_rule=None)

def load(file):
    spec = importlib.util.spec_from_file_location("osworld_" + file[:-3], os.path.join(metrics_dir, file))
    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); return module

ref_json = load("general.py").check_direct_json_object
ref_text = load("vscode.py").compare_text_file
sys.stdout = open(os.devnull, "w")  # OSWorld's metrics print
d, n = sys.argv[1], int(sys.argv[2])

def score(f, *args, **kw):
    try:
        return float(f(*args, **kw))
    except Exception as e:
        return "raises " + type(e).__name__

NAMES = ["Kilimanjaro", "Everest", "Mont Blanc", "K2", "Denali"]
def value(r):
    k = r.random()
    if k < 0.35: return r.choice(NAMES)
    if k < 0.7: return r.sample(NAMES, r.randint(1, 3))
    if k < 0.8: return r.randint(0, 3)
    if k < 0.85: return "__EVALUATION_FAILED__"
    if k < 0.9: return None
    return {"x": r.choice(NAMES)}

def answer(r, want):
    k = r.random()
    if isinstance(want, list) and want:
        if k < 0.3: return r.choice(want)
        if k < 0.5: return r.sample(want, len(want))
        if k < 0.6: return [r.choice(NAMES), r.choice(want)]
        if k < 0.7: return ", ".join(map(str, want))
    if isinstance(want, str):
        if k < 0.4: return want
        if k < 0.6: return "the " + want + " peak"
        if k < 0.7: return [want]
    if k < 0.8: return want
    return value(r)

rows = []
for seed in range(n):
    r = random.Random(seed)
    expected = {f"k{i}": value(r) for i in range(r.randint(0, 3))}
    if r.random() < 0.05: expected["ignore_list_order"] = True
    result = {k: answer(r, v) for k, v in expected.items() if r.random() < 0.9}
    if r.random() < 0.2: result["extra"] = "x"
    k = r.random()
    if k < 0.6: res = json.dumps(result)
    elif k < 0.7: res = "  " + json.dumps(result).replace('"', "'") + "\n"
    elif k < 0.8: res = result
    elif k < 0.9: res = json.dumps(list(result.values()))
    else: res = r.choice(["null", "3", '"text"', None])
    rules = {"expected": expected}
    if r.random() < 0.7: rules["expect_in_result"] = r.random() < 0.8
    rows.append({"case": ["json", seed], "ours": score(check_direct_json_object, res, rules),
                 "osworld": score(ref_json, res, rules)})

# The issue's case (multi_apps/ce2b64a2): candidates per key, the answer names one.
mountains = {"expected": {"a.jpg": ["Kilimanjaro", "Mount Kilimanjaro"], "b.jpg": ["Everest"]}, "expect_in_result": True}
answer_ = json.dumps({"a.jpg": "Kilimanjaro", "b.jpg": "Everest"})
issue = {"ours": score(check_direct_json_object, answer_, mountains), "osworld": score(ref_json, answer_, mountains)}

WORDS = ["green", "kiwi", "Apple", "tea", ""]
SEPS = [" ", "  ", "\t", "\n", " \n ", "\r\n", "", "\u00a0", "\x0b"]
def text(r, words):
    return r.choice(["", " ", "\n"]) + "".join(w + r.choice(SEPS) for w in words) + r.choice(["", "\n", " \n"])
for seed in range(n):
    r = random.Random(seed)
    words = [r.choice(WORDS) for _ in range(r.randint(0, 5))]
    other = list(words)
    if other and r.random() < 0.3: other[r.randrange(len(other))] = r.choice(WORDS).upper()
    if r.random() < 0.1: other.append(r.choice(WORDS))
    a, b = f"{d}/a{seed}.txt", f"{d}/b{seed}.txt"
    open(a, "w", newline="").write(text(r, words)); open(b, "w", newline="").write(text(r, other))
    opts = {k: r.random() < 0.5 for k in ("ignore_blanks", "ignore_case") if r.random() < 0.8}
    rows.append({"case": ["text", seed, opts], "ours": score(compare_text_file, a, b, **opts),
                 "osworld": score(ref_text, a, b, **opts)})
open(f"{d}/g1.txt", "w").write("green kiwi\n"); open(f"{d}/g2.txt", "w").write("greenkiwi\n")
blanks = {"ours": score(compare_text_file, f"{d}/g2.txt", f"{d}/g1.txt", ignore_blanks=True),
          "osworld": score(ref_text, f"{d}/g2.txt", f"{d}/g1.txt", ignore_blanks=True)}

# Deliberate differences: OSWorld raises, the boxes score 0.
differ = {"not_json": [score(check_direct_json_object, "{nope", {"expected": {}}), score(ref_json, "{nope", {"expected": {}})],
          "no_gold": [score(compare_text_file, f"{d}/g1.txt", None), score(ref_text, f"{d}/g1.txt", None)]}
sys.stdout = sys.__stdout__
print(json.dumps({"rows": rows, "issue": issue, "blanks": blanks, "differ": differ}))
"""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_driver(DRIVER, tmp_path_factory.mktemp("general"), str(CASES))


def _agreement(rows: list[dict], kind: str) -> None:
    rows = [r for r in rows if r["case"][0] == kind]
    assert len(rows) == CASES
    disagree = [r for r in rows if r["ours"] != r["osworld"]]
    assert disagree == [], f"{len(disagree)} of {CASES} {kind} cases disagree; first: {disagree[:5]}"
    scores = [r["osworld"] for r in rows]
    assert scores.count(1.0) >= CASES // 10 and scores.count(0.0) >= CASES // 10


def test_check_direct_json_object_agrees_with_osworld(reference: dict):
    _agreement(reference["rows"], "json")
    # A correct answer to multi_apps/ce2b64a2 (candidate names per picture) passes, as in OSWorld.
    assert reference["issue"] == {"ours": 1.0, "osworld": 1.0}


def test_compare_text_file_agrees_with_osworld(reference: dict):
    _agreement(reference["rows"], "text")
    # ignore_blanks collapses whitespace runs, it does not delete them.
    assert reference["blanks"] == {"ours": 0.0, "osworld": 0.0}


def test_where_osworld_raises_the_boxes_score_0(reference: dict):
    assert reference["differ"] == {
        "not_json": [0.0, "raises JSONDecodeError"],
        "no_gold": [0.0, "raises TypeError"],
    }


def test_module_path(tmp_path: Path):  # the reference is OSWorld's file, never the package's __init__
    out = run_driver(
        "import sys, json; print(json.dumps({'init': 'desktop_env.evaluators.metrics' in sys.modules}))",
        tmp_path,
    )
    assert out == {"init": False}
