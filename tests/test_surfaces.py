"""Every surface offers every verb and option, or says why not (``_surface/surfaces.py``).

``Supervisor``, ``Client``, ``HttpClient`` and ``UnitContext`` are read as they are
(their public names and signatures), not as the definitions say they should be:
a method added by hand to one of them, or an option that reaches one surface
and not another, fails here unless ``surfaces.SURFACES`` gives the reason.
"""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import workunits as wu
from workunits._surface import submits, surfaces
from workunits._surface.options import OPTIONS, Flag, Json
from workunits._surface.surfaces import SURFACES, Surface

ROOT = Path(__file__).resolve().parent.parent


def _classes() -> dict[str, type]:
    pytest.importorskip("httpx", reason="the HTTP client needs workunits[http]")
    from workunits._client.http_client import HttpClient  # noqa: PLC0415

    return {
        "Supervisor": wu.Supervisor,
        "Client": wu.Client,
        "HttpClient": HttpClient,
        "UnitContext": wu.UnitContext,
    }


def _verbs() -> set[str]:
    """The verbs defined for every surface: ``verbs.Verbs``' methods and the submit verbs."""
    tree = ast.parse((ROOT / "src/workunits/_surface/verbs.py").read_text(encoding="utf-8"))
    (verbs,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Verbs"]
    names = {n.name for n in verbs.body if isinstance(n, ast.FunctionDef)}
    return names | {v.name for v in submits.SUBMIT_VERBS} | surfaces.BATCHES


def _parameters(fn: Any, surface: Surface, verb: str) -> dict[str, inspect.Parameter]:
    """A verb's parameters under their common names (the unit's context renames some)."""
    back = {new: old for old, new in surface.renames.get(verb, {}).items()}
    return {
        back.get(p.name, p.name): p
        for p in inspect.signature(fn).parameters.values()
        if p.name != "self"
    }


def test_a_surface_lacks_a_verb_another_offers_only_for_a_stated_reason() -> None:
    classes = _classes()
    offered = {name: set(dir(cls)) & _verbs() for name, cls in classes.items()}
    everyone = set().union(*offered.values())
    for surface in SURFACES:
        missing = everyone - offered[surface.name]
        unexplained = {v for v in missing if not surface.absent.get(v)}
        assert unexplained == set(), (
            f"{surface.name} lacks {sorted(unexplained)}: offer them, or say why in "
            f"workunits/_surface/surfaces.py"
        )
        stale = {v for v in offered[surface.name] if v in surface.absent}
        assert stale == set(), f"{surface.name} offers {sorted(stale)}, said absent"


def test_a_verb_takes_the_same_parameters_everywhere_unless_a_reason_says_otherwise() -> None:
    classes = _classes()
    for verb in sorted(_verbs()):
        having = [s for s in SURFACES if hasattr(classes[s.name], verb)]
        signatures = {s.name: _parameters(getattr(classes[s.name], verb), s, verb) for s in having}
        everyone = set().union(*(set(p) for p in signatures.values()))
        for surface in having:
            for param in sorted(everyone - set(signatures[surface.name])):
                reason = surface.absent.get(f"{verb}.{param}") or surface.absent.get(param)
                assert reason, (
                    f"{surface.name}.{verb} lacks {param!r}, which another surface's takes: "
                    f"take it, or say why in workunits/_surface/surfaces.py"
                )
        # What they share, they share exactly: the kind of parameter and its default.
        for param in everyone:
            shapes = {
                (p.kind, repr(p.default))
                for name, sig in signatures.items()
                if (p := sig.get(param)) is not None
            }
            assert len(shapes) == 1, f"{verb}({param}) differs between surfaces: {shapes}"


def test_a_surface_adds_no_public_name_without_saying_what_it_is() -> None:
    classes = _classes()
    verbs = _verbs()
    for surface in SURFACES:
        names = {
            n
            for n in dir(classes[surface.name])
            if not n.startswith("_") and not n.endswith("_async")
        }
        extra = names - verbs - set(surface.own)
        assert extra == set(), (
            f"{surface.name} has {sorted(extra)}, which no other surface offers: make it a "
            f"verb (workunits/_surface/verbs.py), or list it in its surface's own names"
        )
        gone = set(surface.own) - names
        assert gone == set(), f"{surface.name} no longer has {sorted(gone)}"


def test_every_verb_of_a_surface_with_twins_has_its_twin() -> None:
    classes = _classes()
    for surface in SURFACES:
        cls = classes[surface.name]
        for verb in _verbs() & set(dir(cls)):
            assert hasattr(cls, f"{verb}_async") == surface.twins, f"{surface.name}.{verb}"


def test_every_reason_is_a_sentence() -> None:
    for surface in SURFACES:
        for key, reason in {**surface.absent, **surface.own}.items():
            assert len(reason) > 20, f"{surface.name}: {key}: {reason!r}"


def test_every_option_has_a_flag_and_a_body_field_or_says_why_not() -> None:
    from workunits._cli.submit import submit  # noqa: PLC0415
    from workunits._http.models import CallSubmit, ShellSubmit  # noqa: PLC0415

    flags = {p.name for p in submit.params}
    fields = set(ShellSubmit.model_fields) | set(CallSubmit.model_fields)
    for option in OPTIONS:
        if isinstance(option.cli, Flag):
            assert option.name in flags, option.name
        else:
            assert len(option.cli) > 20, option.name
            assert option.name not in flags, option.name
        if isinstance(option.http, Json):
            assert option.http.header is not None or option.name in fields, option.name
        else:
            assert len(option.http) > 20, option.name
            assert option.name not in fields, option.name


def test_every_submit_verb_documents_each_option_it_takes() -> None:
    classes = _classes()
    for surface in SURFACES:
        for verb in submits.SUBMIT_VERBS:
            fn = getattr(classes[surface.name], verb.name, None)
            if fn is None:
                continue
            doc = inspect.getdoc(fn) or ""
            for name in _parameters(fn, surface, verb.name):
                if name in {o.name for o in OPTIONS}:
                    assert f"``{name}``" in doc, f"{surface.name}.{verb.name}: {name}"


def test_the_generated_files_are_what_the_definitions_make() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "tools/gen_surfaces.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr
    first = (ROOT / "src/workunits/_surface/_generated.py").read_text().splitlines()[0]
    assert "do not edit" in first
    assert first.startswith("# Generated by tools/gen_surfaces.py"), first


@pytest.mark.parametrize("name", [s.name for s in SURFACES])
def test_the_surfaces_table_names_real_classes(name: str) -> None:
    surface = surfaces.BY_NAME[name]
    import importlib  # noqa: PLC0415

    for cls, module in surface.types.values():
        if module.endswith("http_client") or module.endswith("http_stream"):
            pytest.importorskip("httpx")
        assert isinstance(getattr(importlib.import_module(module), cls), type)
