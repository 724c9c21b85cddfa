"""OSWorld's generic metrics against OSWorld's own (desktop-env 1.0.2, the test-only venv of
`scripts/setup_sandbox.sh osworld_ref`): both score the same seeded cases and must agree on every one.
`check_direct_json_object` and `compare_text_file` in one batch; `exact_match`, `match_in_list`,
`is_in_list`, `literal_match` (its `type` and `ignore_case`), `check_include_exclude`, `compare_csv`
(`strict`, `ignore_case`, lists of golds, golds missing, UTF-8 with and without BOM, Latin-1, the three
line ends), `diff_text_file` and `check_list` (regexes at line ends, characters that are line breaks to
str.splitlines but not to a file) in another. OSWorld's general.py, vscode.py and table.py are loaded by
file path, with stand-ins for the imports these functions do not use (pdfplumber, PyYAML, rapidfuzz,
cssselect, PyPDF2, its metrics.utils).

Deliberate differences, tested on their own: where OSWorld's functions raise, the boxes score 0 (a
result that is not JSON, a missing gold file, `is_in_list` of no result, `compare_csv` with no gold) or
read the file (`diff_text_file` and `check_list` of a file that is not UTF-8: undecodable bytes are
replaced); `literal_match` of an unknown `type` raises ValueError naming it, OSWorld NotImplementedError.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.sandbox.osworld_reference import run_driver

pytestmark = pytest.mark.slow
CASES = 600
MORE_CASES = 300

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


MORE_DRIVER = r"""
import importlib.util, json, os, random, sys, types
from sandbox.server.osworld.metrics import general as ours

site = [p for p in sys.path if p.endswith("site-packages")][0]
metrics_dir = os.path.join(site, "desktop_env", "evaluators", "metrics")
stub = lambda name, **attrs: sys.modules.setdefault(name, types.ModuleType(name)).__dict__.update(attrs)
for name in ("pdfplumber", "yaml", "formulas", "tldextract", "desktop_env", "desktop_env.evaluators",
             "desktop_env.evaluators.metrics"):
    stub(name)
stub("rapidfuzz", fuzz=None)
stub("lxml.cssselect", CSSSelector=None)
stub("desktop_env.evaluators.metrics.utils", **{n: None for n in (
    "_match_record", "_match_value_to_rule", "_read_cell_style", "read_cell_value", "load_charts",
    "load_sparklines", "load_rows_or_cols", "load_xlsx_styles", "load_filters", "load_pivot_tables")})

def load(file):
    spec = importlib.util.spec_from_file_location("osworld_" + file[:-3], os.path.join(metrics_dir, file))
    module = importlib.util.module_from_spec(spec); spec.loader.exec_module(module); return module

ref = load("general.py")
ref_csv = load("table.py").compare_csv
import logging; logging.disable(logging.CRITICAL)
sys.stdout = open(os.devnull, "w")  # OSWorld's metrics print
d, n = sys.argv[1], int(sys.argv[2])

def score(f, *args, **kw):
    try:
        return float(f(*args, **kw))
    except Exception as e:
        return "raises " + type(e).__name__

rows = []
def both(name, case, *args, **kw):
    rows.append({"case": [name, *case], "ours": score(getattr(ours, name), *args, **kw),
                 "osworld": score(ref_csv if name == "compare_csv" else getattr(ref, name), *args, **kw)})

SCALARS = ["Yes", "yes", " Yes", "Yes\n", "YES", "1", 1, 1.0, True, 0, False, "", "None", "alpha beta", "beta"]
def value(r):
    k = r.random()
    if k < 0.6: return r.choice(SCALARS)
    if k < 0.8: return [r.choice(SCALARS) for _ in range(r.randint(0, 3))]
    if k < 0.9: return tuple(r.choice(SCALARS) for _ in range(r.randint(0, 2)))
    return None
def like(r, v):  # the same value, an equal one in another form, or another
    k = r.random()
    if k < 0.4: return v
    if k < 0.55 and isinstance(v, str): return r.choice([v.upper(), v.lower(), v.strip(), " " + v])
    if k < 0.65 and isinstance(v, (list, tuple)): return list(v) if isinstance(v, tuple) else tuple(v)
    if k < 0.7 and isinstance(v, list) and v: return list(reversed(v))
    return value(r)

for seed in range(n):
    r = random.Random(seed)
    v = value(r)
    both("exact_match", [seed], like(r, v), {"expected": v})
    pool = [value(r) for _ in range(r.randint(0, 3))]
    want = r.choice([pool, pool, " ".join(map(str, pool))])
    both("match_in_list", [seed], like(r, r.choice(pool)) if pool else value(r), {"expected": want})
    got = r.choice([pool, " ".join(map(str, pool)), tuple(pool)])
    item = like(r, r.choice(pool)) if pool else value(r)
    if isinstance(got, str) and not isinstance(item, str): item = str(item)
    both("is_in_list", [seed], got, {"expected": item})
    opts = {}
    if r.random() < 0.7: opts["type"] = r.choice(["str", "list"])
    if r.random() < 0.7: opts["ignore_case"] = r.random() < 0.5
    v = value(r)
    both("literal_match", [seed, opts], like(r, v), v, **opts)
    text = " ".join(r.choice(["alpha", "Beta", "beta", "gamma", ""]) for _ in range(r.randint(0, 4)))
    rules = {k: [r.choice(["alpha", "beta", "a b", "", "Gamma", "mm"]) for _ in range(r.randint(0, 2))]
             for k in ("include", "exclude") if r.random() < 0.8}
    both("check_include_exclude", [seed, text, rules], r.choice([text, text, None, text.split()]), rules)

LINES = ["a,b", "A,B", " a,b ", "a, b", "", "1,2.0", "é,ü", "x\ty", "\"q,r\",s"]
ENDS = ["\n", "\r\n", "\r"]
def write(path, lines, r, encoding=None):
    encoding = encoding or r.choice(["utf-8", "utf-8", "utf-8", "utf-8-sig", "latin-1"])
    text = r.choice(ENDS).join(lines) + r.choice(["", "\n", "\r\n"])
    open(path, "wb").write(text.encode(encoding))
def variant(r, lines):
    lines = list(lines); k = r.random()
    if lines and k < 0.3:
        i = r.randrange(len(lines))
        lines[i] = r.choice([lines[i].upper(), " " + lines[i] + " ", lines[i].replace(",", ", "), r.choice(LINES)])
    elif k < 0.4: lines.append(r.choice(["", "a,b"]))
    elif lines and k < 0.45: lines.pop()
    return lines
for seed in range(n):
    r = random.Random(seed)
    lines = [r.choice(LINES) for _ in range(r.randint(0, 4))]
    res = f"{d}/csv{seed}.csv"; write(res, lines, r)
    golds = []
    for i in range(r.randint(1, 3)):
        golds.append(f"{d}/csv{seed}-{i}.csv")
        if r.random() < 0.9: write(golds[-1], variant(r, lines), r)
    expected = golds[0] if len(golds) == 1 and r.random() < 0.5 else golds
    opts = {k: r.random() < 0.5 for k in ("strict", "ignore_case") if r.random() < 0.7}
    both("compare_csv", [seed, opts], res if r.random() < 0.95 else f"{d}/none.csv", expected, **opts)

WORDS = ["alpha", "beta 2", "Gamma", "", "  ", "delta\t9", "a\x0cb", "e\x85f", "g\u2028h", "x\ry"]
PATTERNS = [r"^alpha$", "beta", r"\d+", r"gamma\s*$", r"(?i)gamma", r"\s$", r"^$", r"\n", r"^b", r"a.b", r"f$",
            r"^h", r"y$", r"x\ry", r"\t"]
for seed in range(n):
    r = random.Random(seed)
    lines = [r.choice(WORDS) for _ in range(r.randint(0, 5))]
    a, b = f"{d}/list{seed}.txt", f"{d}/gold{seed}.txt"
    write(a, lines, r, "utf-8"); write(b, variant(r, lines), r, "utf-8")
    both("diff_text_file", [seed], a if r.random() < 0.95 else None, b)
    rules = {k: r.sample(PATTERNS, r.randint(0, 3)) for k in ("expect", "unexpect") if r.random() < 0.85}
    both("check_list", [seed, rules], a if r.random() < 0.95 else None, rules)

# A CSV in Latin-1 is read as Latin-1: "é" and "è" differ (replacing what UTF-8 cannot decode would not).
open(f"{d}/e.csv", "wb").write("caf\xe9\n".encode("latin-1")); open(f"{d}/f.csv", "wb").write("caf\xe8\n".encode("latin-1"))
both("compare_csv", ["latin-1"], f"{d}/e.csv", f"{d}/f.csv")
# Deliberate differences: OSWorld raises, the boxes score 0 (a result that is None, a file not UTF-8,
# no gold at all), or both raise with another error type (literal_match of an unknown type).
open(f"{d}/latin.txt", "wb").write("caf\xe9\n".encode("latin-1"))
differ = {
    "is_in_list_none": [score(ours.is_in_list, None, {"expected": "a"}), score(ref.is_in_list, None, {"expected": "a"})],
    "csv_no_gold": [score(ours.compare_csv, f"{d}/latin.txt", None), score(ref_csv, f"{d}/latin.txt", None)],
    "diff_not_utf8": [score(ours.diff_text_file, f"{d}/latin.txt", f"{d}/latin.txt"),
                      score(ref.diff_text_file, f"{d}/latin.txt", f"{d}/latin.txt")],
    "check_list_not_utf8": [score(ours.check_list, f"{d}/latin.txt", {"expect": ["caf"]}),
                            score(ref.check_list, f"{d}/latin.txt", {"expect": ["caf"]})],
    "literal_type": [score(ours.literal_match, "a", "a", type="set"), score(ref.literal_match, "a", "a", type="set")],
}
sys.stdout = sys.__stdout__
print(json.dumps({"rows": rows, "differ": differ}))
"""


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_driver(DRIVER, tmp_path_factory.mktemp("general"), str(CASES))


@pytest.fixture(scope="module")
def more(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return run_driver(MORE_DRIVER, tmp_path_factory.mktemp("general_more"), str(MORE_CASES))


def _agreement(rows: list[dict], kind: str, cases: int = CASES) -> None:
    rows = [r for r in rows if r["case"][0] == kind]
    assert len(rows) == cases
    disagree = [r for r in rows if r["ours"] != r["osworld"]]
    assert disagree == [], f"{len(disagree)} of {cases} {kind} cases disagree; first: {disagree[:5]}"
    scores = [r["osworld"] for r in rows]
    assert scores.count(1.0) >= cases // 10 and scores.count(0.0) >= cases // 10


def test_check_direct_json_object_agrees_with_osworld(reference: dict):
    _agreement(reference["rows"], "json")
    # A correct answer to multi_apps/ce2b64a2 (candidate names per picture) passes, as in OSWorld.
    assert reference["issue"] == {"ours": 1.0, "osworld": 1.0}


def test_compare_text_file_agrees_with_osworld(reference: dict):
    _agreement(reference["rows"], "text")
    # ignore_blanks collapses whitespace runs, it does not delete them.
    assert reference["blanks"] == {"ours": 0.0, "osworld": 0.0}


@pytest.mark.parametrize(
    "name",
    ["exact_match", "match_in_list", "is_in_list", "literal_match", "check_include_exclude", "check_list"],
)
def test_generic_metric_agrees_with_osworld(more: dict, name: str):
    _agreement(more["rows"], name, MORE_CASES)


def test_compare_csv_agrees_with_osworld(more: dict):
    _agreement([r for r in more["rows"] if r["case"][1] != "latin-1"], "compare_csv", MORE_CASES)
    # A Latin-1 file is read as Latin-1: two different accented letters stay different.
    assert [r for r in more["rows"] if r["case"][1] == "latin-1"] == [
        {"case": ["compare_csv", "latin-1"], "ours": 0.0, "osworld": 0.0}
    ]


def test_diff_text_file_agrees_with_osworld_on_every_ratio(more: dict):
    _agreement(more["rows"], "diff_text_file", MORE_CASES)
    ratios = {r["osworld"] for r in more["rows"] if r["case"][0] == "diff_text_file"}
    assert len([s for s in ratios if 0.0 < s < 1.0]) >= 5  # partial similarities, compared exactly


def test_where_osworld_raises_the_boxes_score_0(reference: dict, more: dict):
    assert reference["differ"] == {
        "not_json": [0.0, "raises JSONDecodeError"],
        "no_gold": [0.0, "raises TypeError"],
    }
    assert more["differ"] == {
        "is_in_list_none": [0.0, "raises TypeError"],
        "csv_no_gold": [0.0, "raises TypeError"],
        "diff_not_utf8": [1.0, "raises UnicodeDecodeError"],
        "check_list_not_utf8": [1.0, "raises UnicodeDecodeError"],
        "literal_type": ["raises ValueError", "raises NotImplementedError"],
    }


def test_module_path(tmp_path: Path):  # the reference is OSWorld's file, never the package's __init__
    out = run_driver(
        "import sys, json; print(json.dumps({'init': 'desktop_env.evaluators.metrics' in sys.modules}))",
        tmp_path,
    )
    assert out == {"init": False}
