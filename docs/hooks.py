"""MkDocs hooks for ``docs/mkdocs.yml`` (build configuration, not documentation).

The pages live directly in ``docs/`` beside ``mkdocs.yml``, which MkDocs's own checks refuse in
two ways: ``docs_dir`` may not be the config file's folder, and ``site_dir`` may not lie inside
``docs_dir``. ``mkdocs.yml`` therefore names placeholders that pass those checks and this hook
sets the real folders after validation: pages from ``docs/``, the site into ``docs/_build/site``
(git-ignored, excluded from the pages). It also publishes the benchmark figures and JSON that
``benchmarks.md`` links as ``../benchmarks/results/...``, which lie outside ``docs/``, and
registers a Griffe extension that turns the docstrings' Sphinx roles into code spans.
"""

from __future__ import annotations

import re
from pathlib import Path

import griffe
from mkdocs.structure.files import File

DOCS = Path(__file__).resolve().parent
RESULTS = DOCS.parent / "benchmarks" / "results"
RESULTS_URI = "benchmark_results"


def on_config(config):
    config.docs_dir = str(DOCS)
    config.site_dir = str(DOCS / "_build" / "site")
    python = config.plugins["mkdocstrings"].config.handlers.setdefault("python", {})
    options = python.setdefault("options", {})
    options.setdefault("extensions", []).append(f"{Path(__file__).resolve()}:SphinxRoles")
    return config


def on_files(files, config):
    if RESULTS.is_dir():
        for path in sorted(RESULTS.iterdir()):
            if path.suffix in {".png", ".json", ".svg"}:
                files.append(
                    File.generated(config, f"{RESULTS_URI}/{path.name}", abs_src_path=str(path))
                )
    return files


def on_page_markdown(markdown, page, config, files):
    return markdown.replace("](../benchmarks/results/", f"]({RESULTS_URI}/")


# --- Sphinx roles in docstrings -------------------------------------------------------------
# The docstrings use Sphinx roles (:func:`pymc.sample`, :class:`~pymc_tempering.Base`), which
# mkdocstrings does not interpret; this Griffe extension, registered with mkdocstrings in
# on_config below, rewrites them to code spans before the docstrings are parsed.

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|attr|data|obj|exc|ref):`(~?)([^`<]+?)(?:\s*<([^>]+)>)?`")


def _role_to_code(match: re.Match) -> str:
    tilde, text, target = match.groups()
    name = (target or text).strip()
    shown = text.strip() if target else (name.rsplit(".", 1)[-1] if tilde else name)
    return f"`{shown}`"


class SphinxRoles(griffe.Extension):
    def on_instance(self, *, obj, **kwargs):
        docstring = getattr(obj, "docstring", None)
        if docstring is not None and ":" in docstring.value:
            docstring.value = _ROLE.sub(_role_to_code, docstring.value)
