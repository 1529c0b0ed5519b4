"""Help texts that rich wraps once: paragraph lines joined, example blocks kept as written.

typer (0.29, rich markup mode) keeps every line break of a command's help below
its first paragraph, and rich then wraps each of those lines again at the
terminal's width: ragged lines where a docstring's 80-column break and rich's
meet. Here a help text is read the way reST or Markdown read one: lines that
start at the margin are joined into one line per paragraph (rich fills it to
any width), and indented lines (examples, aligned lists) stay one line each.
"""

from __future__ import annotations

import inspect

import typer


def reflow(text: str) -> str:
    """`text` with each paragraph's margin lines joined; indented lines left as they are."""
    paragraphs = []
    for paragraph in inspect.cleandoc(text).split("\n\n"):
        lines: list[str] = []
        for line in paragraph.splitlines():
            if lines and line[:1] not in ("", " ", "\t") and lines[-1][:1] not in (" ", "\t"):
                lines[-1] = f"{lines[-1]} {line.strip()}"
            else:
                lines.append(line.rstrip())
        paragraphs.append("\n".join(lines))
    return "\n\n".join(paragraphs)


def reflow_app(app: typer.Typer) -> None:
    """Reflow the help of `app`, its commands and its sub-apps (before click builds them)."""
    if isinstance(app.info.help, str):
        app.info.help = reflow(app.info.help)
    for command in app.registered_commands:
        text = command.help or (inspect.getdoc(command.callback) if command.callback else None)
        if text:
            command.help = reflow(text)
    for group in app.registered_groups:
        if isinstance(group.help, str):
            group.help = reflow(group.help)
        if group.typer_instance is not None:
            reflow_app(group.typer_instance)


def plain_flags() -> None:
    """An on/off flag's help without a type, where typer (0.29) shows `<bool>` beside it as
    if it took a value; a typer without the hook is left as it is."""
    from typer.core import TyperOption

    shown = getattr(TyperOption, "display_type_rich", None)
    if shown is None or getattr(shown, "plain_flags", False):
        return

    def display_type_rich(self: TyperOption, ctx: typer.Context) -> str | None:
        return None if self.is_flag else shown(self, ctx)

    display_type_rich.plain_flags = True  # type: ignore[attr-defined]
    TyperOption.display_type_rich = display_type_rich  # type: ignore[method-assign]
