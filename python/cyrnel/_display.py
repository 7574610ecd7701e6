"""Rich display: turn any object into a MIME bundle, the way Jupyter does.

``cyrnel.display(obj)`` and the value of a program's final expression both
become ``{mime: data}`` bundles: text types as text, binary types (images,
PDF) as base64. The IPython display protocol (``_repr_mimebundle_``,
``_repr_html_``, ``_repr_png_``, …) is honoured, so pandas, matplotlib and
most data-science objects display as they do in a notebook; a matplotlib
figure becomes a PNG even without IPython's formatters.
"""

from __future__ import annotations

import base64
import json
import sys
TYPE_CHECKING = False  # typing costs an import; mypy reads it as True
if TYPE_CHECKING:
    from typing import Any

# The ``_repr_*_`` methods of the IPython display protocol, in the order a
# notebook front end prefers them.
_REPR_METHODS = (
    ("_repr_html_", "text/html"),
    ("_repr_markdown_", "text/markdown"),
    ("_repr_svg_", "image/svg+xml"),
    ("_repr_png_", "image/png"),
    ("_repr_jpeg_", "image/jpeg"),
    ("_repr_latex_", "text/latex"),
    ("_repr_json_", "application/json"),
    ("_repr_javascript_", "application/javascript"),
)

# Binary MIME types travel as base64 (DESIGN §11).
_BINARY = {"image/png", "image/jpeg", "image/gif", "image/webp", "application/pdf"}


def _encode(mime: str, value: Any) -> str | None:
    """One bundle entry as a string, or None when the value is unusable."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value)
        if mime in _BINARY or not _is_text(raw):
            return base64.b64encode(raw).decode("ascii")
        return raw.decode("utf-8")
    if mime == "application/json" and not isinstance(value, str):
        try:
            return json.dumps(value, allow_nan=False, default=str)
        except (TypeError, ValueError):
            return None
    if isinstance(value, str):
        return value
    return str(value)


def _is_text(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _figure_png(obj: Any) -> bytes | None:
    """A matplotlib figure as PNG bytes, without importing matplotlib for
    objects that are not figures."""
    mpl_figure = sys.modules.get("matplotlib.figure")
    if mpl_figure is None or not isinstance(obj, mpl_figure.Figure):
        return None
    import io

    buf = io.BytesIO()
    obj.savefig(buf, format="png", bbox_inches="tight")
    return buf.getvalue()


def bundle(obj: Any) -> dict[str, str]:
    """The MIME bundle of obj: always with text/plain, plus whatever richer
    forms the object offers."""
    data: dict[str, str] = {}
    method = getattr(obj, "_repr_mimebundle_", None)
    if callable(method) and not isinstance(obj, type):
        try:
            got = method(include=None, exclude=None)
        except Exception:  # noqa: BLE001 - a broken repr falls back to the others
            got = None
        if isinstance(got, tuple):
            got = got[0]
        if isinstance(got, dict):
            for mime, value in got.items():
                enc = _encode(str(mime), value)
                if enc is not None:
                    data[str(mime)] = enc
    png = _figure_png(obj)
    if png is not None:
        data.setdefault("image/png", base64.b64encode(png).decode("ascii"))
    for name, mime in _REPR_METHODS:
        if mime in data or isinstance(obj, type):
            continue
        method = getattr(obj, name, None)
        if not callable(method):
            continue
        try:
            value = method()
        except Exception:  # noqa: BLE001 - as above
            continue
        if isinstance(value, tuple):  # (data, metadata)
            value = value[0]
        enc = _encode(mime, value)
        if enc is not None:
            data[mime] = enc
    if "text/plain" not in data:
        try:
            data["text/plain"] = repr(obj)
        except Exception as e:  # noqa: BLE001 - a display never fails the program
            data["text/plain"] = f"<{type(obj).__name__} object: repr failed: {e}>"
    return data


def open_figures() -> list[Any]:
    """Figures a program left open in pyplot, which a notebook would show at
    the end of the cell; they are closed once taken."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return []
    figs = [plt.figure(n) for n in plt.get_fignums()]
    plt.close("all")
    return figs
