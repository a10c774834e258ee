"""A tiny document model rendered to both Markdown and HTML, so both say exactly the same."""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field

from review.analysis import FLAG


@dataclass
class Document:
    title: str
    blocks: list[tuple[str, object]] = field(default_factory=list)

    def heading(self, text: str, level: int = 2) -> None:
        self.blocks.append(("h", (level, text)))

    def para(self, text: str) -> None:
        self.blocks.append(("p", text))

    def bullets(self, items: Sequence[str]) -> None:
        self.blocks.append(("ul", list(items)))

    def table(self, headers: Sequence[str], rows: Sequence[Sequence[object]], empty: str = "None.") -> None:
        if rows:
            self.blocks.append(("table", (list(headers), [[str(c) for c in r] for r in rows])))
        else:
            self.para(empty)

    def image(self, src: str, alt: str) -> None:
        self.blocks.append(("img", (src, alt)))

    # -----------------------------------------------------------------------------------------

    def markdown(self) -> str:
        out = [f"# {self.title}", ""]
        for kind, data in self.blocks:
            if kind == "h":
                level, text = data  # type: ignore[misc]
                out += [f"{'#' * level} {text}", ""]
            elif kind == "p":
                out += [str(data), ""]
            elif kind == "ul":
                out += [f"- {i}" for i in data] + [""]  # type: ignore[union-attr]
            elif kind == "img":
                src, alt = data  # type: ignore[misc]
                out += [f"![{alt}]({src})", ""]
            elif kind == "table":
                headers, rows = data  # type: ignore[misc]
                out.append("| " + " | ".join(_md_cell(h) for h in headers) + " |")
                out.append("|" + "|".join("---" for _ in headers) + "|")
                out += ["| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows]
                out.append("")
        return "\n".join(out).rstrip() + "\n"

    def html(self) -> str:
        body: list[str] = [f"<h1>{html.escape(self.title)}</h1>"]
        for kind, data in self.blocks:
            if kind == "h":
                level, text = data  # type: ignore[misc]
                body.append(f"<h{level}>{html.escape(text)}</h{level}>")
            elif kind == "p":
                body.append(f"<p>{_html_inline(str(data))}</p>")
            elif kind == "ul":
                body.append("<ul>" + "".join(f"<li>{_html_inline(i)}</li>" for i in data) + "</ul>")  # type: ignore[union-attr]
            elif kind == "img":
                src, alt = data  # type: ignore[misc]
                body.append(f'<p><img src="{html.escape(src)}" alt="{html.escape(alt)}"></p>')
            elif kind == "table":
                headers, rows = data  # type: ignore[misc]
                head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
                trs = []
                for r in rows:
                    flagged = any(FLAG in c for c in r)
                    cells = "".join(f"<td>{_html_inline(c)}</td>" for c in r)
                    trs.append(f'<tr class="flagged">{cells}</tr>' if flagged else f"<tr>{cells}</tr>")
                body.append(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(trs)}</tbody></table>")
        return (
            '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
            f"<title>{html.escape(self.title)}</title><style>{_CSS}</style></head><body>\n"
            + "\n".join(body)
            + "\n</body></html>\n"
        )


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:2em;max-width:110em}"
    "table{border-collapse:collapse;margin:0.5em 0 1.5em}"
    "th,td{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top;font-size:0.9em}"
    "th{background:#eee}tr.flagged{background:#fff3cd}.flag{color:#a00;font-weight:bold}"
    "code{background:#f4f4f4}img{max-width:100%}"
)


def _md_cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _html_inline(text: str) -> str:
    """Escape, then render `code` and **bold** spans and highlight flags."""
    parts = html.escape(text).split("`")
    out = "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts))
    bold = out.split("**")
    if len(bold) % 2 == 1:
        out = "".join(f"<strong>{p}</strong>" if i % 2 else p for i, p in enumerate(bold))
    return out.replace(FLAG, f'<span class="flag">{FLAG}</span>')
