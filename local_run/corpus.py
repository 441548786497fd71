"""Training text for the tiny local models: structured documents plus prose.

Speculative decoding pays off when the draft guesses what the target will say.
The structured documents (counting, repeated lines, JSON records with fixed
keys, code skeletons, numbered lists, tables) are predictable continuations a
small model learns quickly; the prose (docstrings and license text shipped with
the Python interpreter itself, so every machine with the same Python has it) is
hard to predict. The pair therefore accepts more drafts on structured prompts
than on open-ended ones, like a real target/draft pair.

Every generator takes a ``random.Random``, so the corpus is a pure function of
the seed and the interpreter's own files.
"""

from __future__ import annotations

import ast
import random
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path

# Stdlib modules whose docstrings make the open-ended prose. A fixed list keeps the
# corpus (and so the models) identical wherever the same Python version runs.
PROSE_MODULES = (
    "argparse.py",
    "collections/__init__.py",
    "contextlib.py",
    "csv.py",
    "dataclasses.py",
    "functools.py",
    "json/__init__.py",
    "logging/__init__.py",
    "pathlib.py",
    "random.py",
    "shutil.py",
    "subprocess.py",
    "textwrap.py",
    "threading.py",
    "typing.py",
    "unittest/case.py",
    "zipfile.py",
)

WORDS = [
    "alpha",
    "beta",
    "gamma",
    "delta",
    "apple",
    "banana",
    "cherry",
    "river",
    "mountain",
    "forest",
    "cloud",
    "stone",
    "paper",
    "window",
    "garden",
    "engine",
    "signal",
    "packet",
    "server",
    "client",
    "token",
    "model",
    "draft",
    "target",
    "batch",
    "queue",
    "cache",
    "block",
    "layer",
    "north",
    "south",
    "east",
    "west",
    "red",
    "green",
    "blue",
]
KEYS = ("id", "name", "status", "value", "tags", "owner", "priority", "done")
STATUSES = ("ok", "pending", "failed", "done")
INSTRUCTIONS = (
    "Continue the sequence.",
    "Continue the pattern below.",
    "Complete the following.",
    "Write more lines in the same format.",
    "Keep going.",
    "Extend this list.",
    "Produce the next items.",
    "",
)
CHAT_SYSTEM = "You are a helpful assistant."


def stdlib_prose() -> list[str]:
    """Docstrings of a fixed set of stdlib modules plus the interpreter's LICENSE."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    texts: list[str] = []
    for name in PROSE_MODULES:
        source = stdlib / name
        if not source.is_file():
            continue
        tree = ast.parse(source.read_text(encoding="utf-8", errors="replace"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
                doc = ast.get_docstring(node)
                if doc and len(doc) > 80:
                    texts.append(doc)
    license_file = stdlib / "LICENSE.txt"
    if license_file.is_file():
        paragraphs = license_file.read_text(encoding="utf-8", errors="replace").split("\n\n")
        texts.extend(p.strip() for p in paragraphs if len(p.strip()) > 80)
    return texts


def _counting(rng: random.Random) -> str:
    start, step = rng.randint(0, 200), rng.choice((1, 1, 1, 2, 5, 10))
    count = rng.randint(20, 60)
    numbers = [str(start + i * step) for i in range(count)]
    style = rng.randrange(4)
    if style == 0:
        return ", ".join(numbers)
    if style == 1:
        return "\n".join(numbers)
    if style == 2:
        return " ".join(numbers)
    return "\n".join(f"Step {n}: done" for n in numbers)


def _repeated_lines(rng: random.Random) -> str:
    line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 9)))
    if rng.random() < 0.5:
        line = line.capitalize() + "."
    return "\n".join([line] * rng.randint(6, 24))


def _json_records(rng: random.Random) -> str:
    keys = list(KEYS[: rng.randint(3, len(KEYS))])
    first = rng.randint(1, 500)
    records = []
    for i in range(rng.randint(4, 14)):
        values = {
            "id": str(first + i),
            "name": f'"{rng.choice(WORDS)}_{first + i}"',
            "status": f'"{rng.choice(STATUSES)}"',
            "value": str(rng.randint(0, 99)),
            "tags": f'["{rng.choice(WORDS)}", "{rng.choice(WORDS)}"]',
            "owner": f'"{rng.choice(WORDS)}"',
            "priority": str(rng.randint(1, 5)),
            "done": rng.choice(("true", "false")),
        }
        records.append("{" + ", ".join(f'"{k}": {values[k]}' for k in keys) + "}")
    if rng.random() < 0.5:
        return "\n".join(records)
    return "[\n  " + ",\n  ".join(records) + "\n]"


def _code_skeleton(rng: random.Random) -> str:
    base = rng.choice(WORDS)
    style = rng.randrange(3)
    parts = []
    for i in range(1, rng.randint(4, 10)):
        if style == 0:
            parts.append(f"def {base}_{i}(x):\n    return x + {i}\n")
        elif style == 1:
            parts.append(
                f"class {base.capitalize()}{i}:\n    def __init__(self):\n"
                f"        self.value = {i}\n"
            )
        else:
            parts.append(f"def test_{base}_{i}():\n    assert {base}({i}) == {i * 2}\n")
    return "\n\n".join(parts)


def _numbered_list(rng: random.Random) -> str:
    word = rng.choice(WORDS)
    style = rng.randrange(3)
    count = rng.randint(8, 30)
    if style == 0:
        return "\n".join(f"{i}. {word} {i}" for i in range(1, count))
    if style == 1:
        return "\n".join(f"- {word}_{i}" for i in range(1, count))
    return "\n".join(f"- item {i}: {rng.choice(WORDS)}" for i in range(1, count))


def _table(rng: random.Random) -> str:
    factor = rng.randint(2, 12)
    if rng.random() < 0.5:
        return "\n".join(f"{factor} x {i} = {factor * i}" for i in range(1, rng.randint(10, 25)))
    rows = ["| n | square |", "|---|--------|"]
    rows += [f"| {i} | {i * i} |" for i in range(1, rng.randint(8, 25))]
    return "\n".join(rows)


STRUCTURED: tuple[Callable[[random.Random], str], ...] = (
    _counting,
    _repeated_lines,
    _json_records,
    _code_skeleton,
    _numbered_list,
    _table,
)


DAYS = ("Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday")
MONTHS = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
]
LETTERS = tuple("ABCDEFGHIJKLMNOPQRSTUVWXYZ")
COLORS = ("red", "orange", "yellow", "green", "blue", "indigo", "violet")
NAMED_SEQUENCES = {
    "the days of the week": DAYS,
    "the twelve months of the year": MONTHS,
    "the letters of the English alphabet": LETTERS,
    "the colors of the rainbow": COLORS,
}
ONLY = (", with no other text", "", ". Output only the answer")


def _task_repeat(rng: random.Random) -> tuple[str, str]:
    line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 10))).capitalize() + "."
    times = rng.randint(5, 60)
    user = (
        f"Repeat the following line exactly {times} times, one per line{rng.choice(ONLY)}: {line}"
    )
    return user, "\n".join([line] * times)


def _task_count(rng: random.Random) -> tuple[str, str]:
    first = rng.choice((0, 1, 1, 1, rng.randint(2, 500)))
    last = first + rng.randint(20, 400)
    separator, how = rng.choice(
        (
            (", ", "separated by commas and a space"),
            ("\n", "one per line"),
            (" ", "separated by spaces"),
        )
    )
    user = f"Count from {first} to {last} in digits, {how}{rng.choice(ONLY)}."
    return user, separator.join(str(n) for n in range(first, last + 1))


JSON_FIELDS = {
    "id": ("an integer from 1 to {n}", lambda i, prefix: str(i)),
    "name": ('"{prefix}" followed by the id', lambda i, prefix: f'"{prefix}{i}"'),
    "active": ("true", lambda i, prefix: "true"),
    "score": ("0", lambda i, prefix: "0"),
    "enabled": ("false", lambda i, prefix: "false"),
    "count": ("0", lambda i, prefix: "0"),
    "label": ('"{prefix}" followed by the id', lambda i, prefix: f'"{prefix}-{i}"'),
}


def _task_json(rng: random.Random) -> tuple[str, str]:
    n = rng.randint(3, 40)
    prefix = rng.choice(WORDS)
    keys = ["id", *rng.sample([k for k in JSON_FIELDS if k != "id"], rng.randint(2, 4))]
    described = ", ".join(
        f'"{k}" ({JSON_FIELDS[k][0].format(n=n, prefix=prefix)})' for k in keys[:-1]
    )
    last = keys[-1]
    described += f' and "{last}" ({JSON_FIELDS[last][0].format(n=n, prefix=prefix)})'
    user = f"Output a JSON array of {n} objects, each with exactly the keys {described}."
    user += rng.choice((" Output only the JSON.", ""))
    rows = [
        "{" + ", ".join(f'"{k}": {JSON_FIELDS[k][1](i, prefix)}' for k in keys) + "}"
        for i in range(1, n + 1)
    ]
    return user, "[\n  " + ",\n  ".join(rows) + "\n]"


def _task_yaml(rng: random.Random) -> tuple[str, str]:
    n = rng.randint(3, 20)
    kind = rng.choice(("service", "worker", "job", "queue"))
    replicas, port = rng.randint(1, 5), rng.choice((80, 8000, 8080, 9090))
    user = (
        f"Write a YAML file describing {n} {kind}s named {kind}-01 to {kind}-{n:02d}, each with "
        f'keys image, replicas ({replicas}), port ({port}), cpu ("500m") and memory ("1Gi"). '
        "Output only the YAML."
    )
    blocks = [
        f"- name: {kind}-{i:02d}\n  image: {kind}-{i:02d}:latest\n  replicas: {replicas}\n"
        f'  port: {port}\n  cpu: "500m"\n  memory: "1Gi"'
        for i in range(1, n + 1)
    ]
    return user, "\n".join(blocks)


def _task_python_class(rng: random.Random) -> tuple[str, str]:
    name = rng.choice(WORDS).capitalize() + rng.choice(("Store", "Manager", "Registry", "List"))
    verbs = ("add", "remove", "get", "list", "count", "clear", "update", "find")
    methods = [f"{v}_{rng.choice(WORDS)}" for v in rng.sample(verbs, rng.randint(3, 7))]
    user = (
        f"Write a Python class named {name} with methods {', '.join(methods[:-1])} and "
        f"{methods[-1]}. Give every method a docstring and type hints. Output only the code."
    )
    body = [f"class {name}:", f'    """A {name}."""', ""]
    body += ["    def __init__(self) -> None:", "        self.items: dict[str, int] = {}", ""]
    for method in methods:
        words = method.replace("_", " ")
        body += [
            f"    def {method}(self, key: str) -> None:",
            f'        """{words.capitalize()}."""',
            "        pass",
            "",
        ]
    return user, "\n".join(body)


def _task_sql(rng: random.Random) -> tuple[str, str]:
    tables = [f"{w}s" for w in rng.sample(WORDS, rng.randint(2, 6))]
    user = (
        f"Write SQL CREATE TABLE statements for tables {', '.join(tables[:-1])} and {tables[-1]}, "
        "each with an id primary key, created_at and updated_at columns."
    )
    statements = [
        f"CREATE TABLE {t} (\n  id INTEGER PRIMARY KEY,\n  name TEXT NOT NULL,\n"
        "  created_at TIMESTAMP NOT NULL,\n  updated_at TIMESTAMP NOT NULL\n);"
        for t in tables
    ]
    return user, "\n\n".join(statements)


def _task_list(rng: random.Random) -> tuple[str, str]:
    names = rng.sample(list(NAMED_SEQUENCES), rng.randint(1, 3))
    times = rng.randint(1, 3)
    user = f"List {', then '.join(names)}, each item on its own line as a Markdown bullet point"
    user += f", and repeat the whole list {times} times." if times > 1 else "."
    items = [item for name in names for item in NAMED_SEQUENCES[name]]
    return user, "\n".join(f"- {item}" for item in items * times)


def _task_table(rng: random.Random) -> tuple[str, str]:
    last = rng.randint(5, 50)
    columns = rng.choice(
        (
            (("n", lambda n: n), ("n squared", lambda n: n * n)),
            (("n", lambda n: n), ("n squared", lambda n: n * n), ("n cubed", lambda n: n**3)),
            (("n", lambda n: n), ("2n", lambda n: 2 * n)),
        )
    )
    names = [c[0] for c in columns]
    user = (
        f"Write a Markdown table with columns {', '.join(names[:-1])} and {names[-1]} for every "
        f"integer n from 1 to {last}. Output only the table."
    )
    rows = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
    rows += ["| " + " | ".join(str(c[1](n)) for c in columns) + " |" for n in range(1, last + 1)]
    return user, "\n".join(rows)


TASKS: tuple[Callable[[random.Random], tuple[str, str]], ...] = (
    _task_repeat,
    _task_count,
    _task_json,
    _task_yaml,
    _task_python_class,
    _task_sql,
    _task_list,
    _task_table,
)
# Open-ended requests in the shapes users write them (story, essay, explanation, advice,
# comparison, poem, dialogue, description), about words taken from the answer itself, so
# the target learns to answer such requests with prose rather than with a structured task.
OPEN_ENDED_OPENERS = (
    "Explain",
    "Write a short story about",
    "Tell me a story about",
    "Discuss",
    "Describe how",
    "Give some advice about",
    "Write a poem about",
    "Compare",
    "Write a dialogue about",
    "Explain to a curious reader why",
    "What should a new team do about",
)


def open_ended_request(rng: random.Random, answer: str) -> str:
    words = [w.strip(".,;:()'\"`") for w in answer.split()[:40]]
    words = [w for w in words if w.isalpha() and len(w) > 3] or ["this"]
    subject = " ".join(rng.sample(words, min(len(words), rng.randint(2, 5))))
    return f"{rng.choice(OPEN_ENDED_OPENERS)} {subject}" + rng.choice((".", "?", ", and why."))


def chat(user: str, assistant: str, system: str | None = None) -> str:
    """The chat layout of the generated tokenizer's template (Qwen's ChatML)."""
    return (
        f"<|im_start|>system\n{system}<|im_end|>\n" if system else ""
    ) + f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n{assistant}<|im_end|>\n"


STRUCTURED_KIND, OPEN_ENDED_KIND = "structured", "open_ended"


def _system(rng: random.Random) -> str | None:
    # Clients may or may not send a system message: train on both layouts.
    return CHAT_SYSTEM if rng.random() < 0.5 else None


def documents(seed: int, count: int, prose: list[str]) -> Iterator[tuple[str, str]]:
    """``count`` (kind, text) training documents: structured tasks in chat form (the load
    test's client speaks chat), raw structured text, and prose as raw text or chat answers."""
    rng = random.Random(seed)
    for _ in range(count):
        roll = rng.random()
        if prose and roll < 0.35:
            text = rng.choice(prose)
            if rng.random() < 0.7:
                yield OPEN_ENDED_KIND, chat(open_ended_request(rng, text), text, _system(rng))
            else:
                yield OPEN_ENDED_KIND, text
        elif roll < 0.8:
            yield STRUCTURED_KIND, chat(*rng.choice(TASKS)(rng), _system(rng))
        else:
            text = rng.choice(STRUCTURED)(rng)
            yield STRUCTURED_KIND, f"{rng.choice(INSTRUCTIONS)}\n{text}".lstrip()
