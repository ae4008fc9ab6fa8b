"""The docstring rule, its mechanical part: every public function, method and class of
``specrag_batch/`` and ``flows/`` has a non-empty docstring.

Public = its name has no leading underscore, defined at module level or in the body of a public
class (functions nested in functions are not API). Read with ``ast``: nothing is imported. What
a docstring must say (shapes and types, units, errors raised, the paper source of a formula) is
checked by review, not here.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("specrag_batch", "flows")
DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def undocumented(source: str, filename: str = "<source>") -> list[str]:
    """``file:line name`` of each public definition in ``source`` without a docstring."""
    out: list[str] = []

    def walk(body: list[ast.stmt], prefix: str) -> None:
        for node in body:
            if not isinstance(node, DEFINITIONS) or node.name.startswith("_"):
                continue
            if not (ast.get_docstring(node) or "").strip():
                out.append(f"{filename}:{node.lineno} {prefix}{node.name}")
            if isinstance(node, ast.ClassDef):
                walk(node.body, f"{prefix}{node.name}.")

    walk(ast.parse(source, filename).body, "")
    return out


def test_every_public_function_and_class_has_a_docstring():
    files = sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))
    assert len(files) > 50  # the walk found the packages
    offenders = [o for p in files for o in undocumented(p.read_text(), str(p.relative_to(ROOT)))]
    assert not offenders, "public definitions without a docstring:\n" + "\n".join(offenders)


def test_the_check_flags_a_missing_or_blank_docstring_and_skips_private_names():
    src = '''
def documented():
    """Yes."""

def bare():
    pass

class Public:
    """Yes."""

    def method(self):
        """   """

    def _private(self):
        pass

    def __init__(self):
        pass

class _Hidden:
    def inner(self):
        pass

def outer():
    """Yes."""
    def nested():
        pass
'''
    assert undocumented(src, "m.py") == ["m.py:5 bare", "m.py:11 Public.method"]
