"""The template transformations of ``tools/gen_surfaces.py``: copy a method, retype it
for a surface, make its ``_async`` twin.

Everything here works on ``ast`` trees of the definitions in ``workunits/_surface/``.
"""

from __future__ import annotations

import ast
import copy
import textwrap
from collections.abc import Iterable
from pathlib import Path

from workunits._surface.surfaces import Surface

# Transport calls an async twin awaits (their ``_async`` twin); and those it only renames.
AWAITED = {
    "_run",
    "_submit",
    "_submit_batch",
    "_submit_teammate",
    "_wait",
    "_result",
    "_notifications",
    "_ask_teammate",
    "_offload",
}
RENAMED = {"_stream"}
TWIN_DOC = "Like ``{name}`` without blocking the event loop."


def parse_module(path: Path) -> ast.Module:
    return ast.parse(path.read_text(encoding="utf-8"), str(path))


def class_named(tree: ast.Module, name: str) -> ast.ClassDef:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node
    raise SystemExit(f"gen_surfaces: no class {name} in the definitions")


def methods_of(cls: ast.ClassDef) -> dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Each method by name: its ``@overload`` stubs first, then its implementation."""
    found: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
    for node in cls.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.setdefault(node.name, []).append(node)
    return found


def imports_of(tree: ast.Module) -> tuple[dict[str, str], dict[str, str]]:
    """The names a module imports, at run time and for type checking only: name -> line."""
    runtime: dict[str, str] = {}
    typing_only: dict[str, str] = {}

    def add(node: ast.stmt, into: dict[str, str]) -> None:
        if isinstance(node, ast.ImportFrom) and node.module != "__future__":
            for alias in node.names:
                name = alias.asname or alias.name
                into[name] = f"from {node.module} import {alias.name}" + (
                    f" as {alias.asname}" if alias.asname else ""
                )
        elif isinstance(node, ast.Import):
            for alias in node.names:
                name = alias.asname or alias.name.split(".")[0]
                into[name] = f"import {alias.name}" + (
                    f" as {alias.asname}" if alias.asname else ""
                )

    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for inner in node.body:
                add(inner, typing_only)
        else:
            add(node, runtime)
    return runtime, typing_only


def names_defined(tree: ast.Module) -> dict[str, str]:
    """Names a module defines itself (functions, classes, constants): importable from it."""
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            names[node.name] = node.name
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    names[target.id] = target.id
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names[node.target.id] = node.target.id
    return names


class Renamer(ast.NodeTransformer):
    """Renames names (types, parameters) and replaces absent parameters by their defaults."""

    def __init__(self, renames: dict[str, str], defaults: dict[str, ast.expr]) -> None:
        self.renames = renames
        self.defaults = defaults

    def visit_Name(self, node: ast.Name) -> ast.expr:
        if node.id in self.defaults and isinstance(node.ctx, ast.Load):
            return copy.deepcopy(self.defaults[node.id])
        if node.id in self.renames:
            return ast.copy_location(ast.Name(self.renames[node.id], node.ctx), node)
        return node


class TwinMaker(ast.NodeTransformer):
    """Turns a verb's body into its twin's: transport calls and verb calls made async."""

    def __init__(self, async_verbs: set[str], plain_verbs: set[str], receivers: tuple[str, ...]):
        self.async_verbs = async_verbs  # verbs whose twin is a coroutine
        self.plain_verbs = plain_verbs  # verbs whose twin returns at once (streams)
        self.receivers = receivers  # ``self.<receiver>`` whose verbs are called
        self.awaits = False

    def visit_Lambda(self, node: ast.Lambda) -> ast.Lambda:
        return node  # a callback stays blocking (a retain's renew and release)

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        func = node.func
        if not isinstance(func, ast.Attribute):
            return node
        owner = func.value
        on_self = isinstance(owner, ast.Name) and owner.id == "self"
        if isinstance(owner, ast.Call):  # self._calls_async().verb(...)
            owner = owner.func
        on_receiver = (
            isinstance(owner, ast.Attribute)
            and isinstance(owner.value, ast.Name)
            and owner.value.id == "self"
            and owner.attr in self.receivers
        )
        name = func.attr
        if on_self and name in AWAITED:
            return self._awaited(node, f"{name}_async")
        if on_self and name in RENAMED:
            func.attr = f"{name}_async"
            return node
        if on_self or on_receiver:
            if name in self.async_verbs:
                return self._awaited(node, f"{name}_async")
            if name in self.plain_verbs:
                func.attr = f"{name}_async"
        return node

    def _awaited(self, node: ast.Call, name: str) -> ast.Await:
        assert isinstance(node.func, ast.Attribute)
        node.func.attr = name
        self.awaits = True
        return ast.Await(node)


def docstring_of(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> str | None:
    return ast.get_docstring(fn, clean=False)


def set_docstring(fn: ast.FunctionDef | ast.AsyncFunctionDef, text: str | None) -> None:
    body = fn.body
    first = body[0] if body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        body.pop(0)
    if text is not None:
        body.insert(0, ast.Expr(ast.Constant(text)))
    if not body:
        body.append(ast.Expr(ast.Constant(...)))


def all_args(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.arg]:
    a = fn.args
    extra = [x for x in (a.vararg, a.kwarg) if x is not None]
    return [*a.posonlyargs, *a.args, *a.kwonlyargs, *extra]


def drop_param(fn: ast.FunctionDef | ast.AsyncFunctionDef, name: str) -> ast.expr:
    """Remove the parameter ``name`` (it has a default); return that default."""
    a = fn.args
    for i, arg in enumerate(a.kwonlyargs):
        if arg.arg == name:
            default = a.kw_defaults[i]
            assert default is not None, f"{fn.name}.{name} has no default to leave it out with"
            del a.kwonlyargs[i]
            del a.kw_defaults[i]
            return default
    positional = [*a.posonlyargs, *a.args]
    for i, arg in enumerate(positional):
        if arg.arg == name:
            first_default = len(positional) - len(a.defaults)
            assert i >= first_default, f"{fn.name}.{name} has no default to leave it out with"
            default = a.defaults[i - first_default]
            assert i == len(positional) - 1, f"{fn.name}.{name} is not its last positional"
            a.args.remove(arg)
            a.defaults.pop()
            return default
    raise SystemExit(f"gen_surfaces: {fn.name} has no parameter {name!r}")


def shape(
    node: ast.FunctionDef | ast.AsyncFunctionDef,
    surface: Surface,
    verb: str,
    *,
    primitive: bool = False,
) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """A copy of a template method for ``surface``: its types, names and parameters
    (a transport primitive's types only)."""
    fn = copy.deepcopy(node)
    type_names = {k: v[0] for k, v in surface.types.items()}
    if primitive:
        for arg in all_args(fn):
            if arg.annotation is not None:
                arg.annotation = Renamer(type_names, {}).visit(arg.annotation)
        if fn.returns is not None:
            fn.returns = Renamer(type_names, {}).visit(fn.returns)
        return fn
    defaults: dict[str, ast.expr] = {}
    for key in surface.absent:
        owner, _, param = key.partition(".")
        if owner == verb and param:
            defaults[param] = drop_param(fn, param)
    renames = dict(surface.renames.get(verb, {}))
    # Types first (in annotations only), then parameters (annotations and body).
    for arg in all_args(fn):
        if arg.annotation is not None:
            arg.annotation = Renamer(type_names, {}).visit(arg.annotation)
        if arg.arg == "work_id" and surface.unit_type is not None:
            arg.annotation = ast.parse(surface.unit_type, mode="eval").body
    if fn.returns is not None:
        fn.returns = Renamer(type_names, {}).visit(fn.returns)
    fn.body = [Renamer(renames, defaults).visit(stmt) for stmt in fn.body]
    for arg in all_args(fn):
        arg.arg = renames.get(arg.arg, arg.arg)
    ids = [
        renames.get("work_id", "work_id")
        for arg in all_args(node)
        if arg.arg == "work_id" and surface.unit_type is not None
    ]
    if ids and not is_stub(fn):
        # Wherever a unit's ID goes, its handle does too: its ID is str(handle).
        doc = 1 if docstring_of(fn) is not None else 0
        fn.body.insert(doc, ast.parse(f"{ids[0]} = str({ids[0]})").body[0])
    return fn


def is_stub(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(ast.unparse(d) == "overload" for d in fn.decorator_list)


def twin_of(
    fn: ast.FunctionDef | ast.AsyncFunctionDef,
    async_verbs: set[str],
    plain_verbs: set[str],
    receivers: tuple[str, ...] = (),
    note: str | None = None,
) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, bool]:
    """The ``_async`` twin of a shaped method, and whether it is a coroutine."""
    sync_name = fn.name
    twin = copy.deepcopy(fn)
    rewriter = TwinMaker(async_verbs, plain_verbs, receivers)
    twin.body = [rewriter.visit(stmt) for stmt in twin.body]
    doc = twin_doc(sync_name, note, indent="        ")
    set_docstring(twin, doc if not is_stub(fn) else None)
    is_async = rewriter.awaits
    made: ast.FunctionDef | ast.AsyncFunctionDef
    if is_async:
        made = ast.AsyncFunctionDef(
            name=f"{sync_name}_async",
            args=twin.args,
            body=twin.body,
            decorator_list=twin.decorator_list,
            returns=twin.returns,
            type_comment=None,
        )
    else:
        twin.name = f"{sync_name}_async"
        made = twin
    return ast.fix_missing_locations(made), is_async


def twin_doc(name: str, note: str | None, indent: str) -> str:
    """A twin's docstring: "Like ``name`` without blocking the event loop", then the note."""
    first = TWIN_DOC.format(name=name)
    if note is None:
        return first
    rest = textwrap.fill(note, width=88 - len(indent), break_on_hyphens=False)
    return f"{first}\n\n{textwrap.indent(rest, indent)}\n{indent}"


def async_types(
    node: ast.FunctionDef | ast.AsyncFunctionDef,
) -> ast.FunctionDef | ast.AsyncFunctionDef:
    """A verb with its twin's types: a ``Stream`` is an ``AsyncStream`` there."""
    fn = copy.deepcopy(node)
    if fn.returns is not None:
        fn.returns = Renamer({"Stream": "AsyncStream"}, {}).visit(fn.returns)
    return fn


def as_async(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AsyncFunctionDef:
    if isinstance(fn, ast.AsyncFunctionDef):
        return fn
    made = ast.AsyncFunctionDef(
        name=fn.name,
        args=fn.args,
        body=fn.body,
        decorator_list=fn.decorator_list,
        returns=fn.returns,
        type_comment=None,
    )
    return ast.fix_missing_locations(made)


def stub_body(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
    """An abstract declaration: its docstring kept, its body ``raise NotImplementedError``."""
    doc = docstring_of(fn)
    fn.body = [ast.parse("raise NotImplementedError").body[0]]
    set_docstring(fn, doc)


def self_calls(nodes: Iterable[ast.AST]) -> set[str]:
    """Names ``self.<name>(...)`` is called with."""
    found: set[str] = set()
    for node in nodes:
        for sub in ast.walk(node):
            if (
                isinstance(sub, ast.Call)
                and isinstance(sub.func, ast.Attribute)
                and isinstance(sub.func.value, ast.Name)
                and sub.func.value.id == "self"
            ):
                found.add(sub.func.attr)
    return found


def async_kinds(
    verbs: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]], offered: set[str]
) -> tuple[set[str], set[str]]:
    """Which offered verbs' twins are coroutines, and which return at once (to a fixpoint)."""
    async_verbs: set[str] = set()
    while True:
        before = set(async_verbs)
        for name in offered:
            called = self_calls(verbs[name])
            if called & AWAITED or called & async_verbs:
                async_verbs.add(name)
        if async_verbs == before:
            break
    return async_verbs, offered - async_verbs


def indent(source: str) -> str:
    return "\n".join(("    " + line) if line else line for line in source.split("\n"))


def retyped(
    fn: ast.FunctionDef | ast.AsyncFunctionDef, type_names: dict[str, str]
) -> ast.FunctionDef | ast.AsyncFunctionDef:
    for arg in all_args(fn):
        if arg.annotation is not None:
            arg.annotation = Renamer(type_names, {}).visit(arg.annotation)
    if fn.returns is not None:
        fn.returns = Renamer(type_names, {}).visit(fn.returns)
    return fn


class OnSurface(ast.NodeTransformer):
    """``self._calls()`` -> ``self._surface`` (typed as the surface in the generated base)."""

    def visit_Call(self, node: ast.Call) -> ast.expr:
        self.generic_visit(node)
        func = node.func
        if (
            isinstance(func, ast.Attribute)
            and func.attr == "_calls"
            and isinstance(func.value, ast.Name)
            and func.value.id == "self"
            and not node.args
        ):
            return ast.Attribute(value=func.value, attr="_surface", ctx=ast.Load())
        return node


def free_names(source: str) -> set[str]:
    return {n.id for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Name)}
