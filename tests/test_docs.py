"""The docs a user reads are checked like code.

Every `omni-cpu` command README.md and docs/ show in a shell block parses with the CLI's
own parser (the options exist, the values have their types and choices); every relative
link points at a file (and a heading) that exists; and none of them, nor the package's
comments, points outside the repository, names an internal issue number or cites a
clock time (benchmarks/RESULTS.md is the dated log; the rest cite its headings).
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
import typer

from omni_cpu.cli import app

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
# Where links are checked too: the pages and the notes beside them.
LINKED = [
    *PAGES,
    *(REPO / name for name in ("ARCHITECTURE.md", "CHANGELOG.md", "benchmarks/README.md")),
]

SHELL_BLOCK = re.compile(r"^```(?:sh|bash|shell)\n(.*?)^```", re.MULTILINE | re.DOTALL)
# $((8000 + n)) and $n stand for a number (1) in the loops a page shows.
SHELL_EXPANSION = re.compile(r"\$\(\([^)]*\)\)|\$[A-Za-z_]\w*")
OPERATORS = {"|", "||", "&", "&&", ";", ">", ">>", "<", "2>", "("}


def shell_lines(markdown: str) -> list[str]:
    """The logical lines of every sh/bash block in `markdown`, continuations joined."""
    lines = []
    for block in SHELL_BLOCK.findall(markdown):
        lines += [line for line in block.replace("\\\n", " ").splitlines() if line.strip()]
    return lines


def omni_cpu_commands(markdown: str) -> list[list[str]]:
    """The arguments of each `omni-cpu` (or `.venv/bin/omni-cpu`) command the blocks run."""
    commands = []
    for line in shell_lines(markdown):
        if "omni-cpu" not in line:  # other tools' lines (a curl's JSON may span lines)
            continue
        lexer = shlex.shlex(SHELL_EXPANSION.sub("1", line), posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        words = list(lexer)
        for at, word in enumerate(words):
            if Path(word).name == "omni-cpu":
                args = []
                for arg in words[at + 1 :]:
                    if arg in OPERATORS:
                        break
                    args.append(arg)
                commands.append(args)
    return commands


def parse(args: list[str]) -> typer.Context:
    """`omni-cpu ARGS` through the CLI's parser, down to the command; nothing runs.

    A refused option or value raises the error the CLI would print (a TyperException).
    """
    command, name, words = typer.main.get_command(app), "omni-cpu", list(args)
    context = None
    while hasattr(command, "get_command"):  # a group: omni-cpu itself, `export`
        context = command.make_context(name, [], parent=context, resilient_parsing=True)
        name, words = (words[0], words[1:]) if words else ("", [])
        command = command.get_command(context, name)
        if command is None:
            raise typer.TyperException(f"No such command {name!r}")
    return command.make_context(name, words, parent=context)


SHOWN = [
    pytest.param(args, id=f"{page.relative_to(REPO)}: omni-cpu {shlex.join(args)}")
    for page in PAGES
    for args in omni_cpu_commands(page.read_text())
]


@pytest.mark.parametrize("args", SHOWN)
def test_every_command_the_docs_show_parses(args: list[str]) -> None:
    try:
        parse(args)
    except typer.TyperException as refused:
        pytest.fail(f"omni-cpu {shlex.join(args)}: {refused}")


def test_the_readme_shows_every_command() -> None:
    shown = {args[0] for args in omni_cpu_commands((REPO / "README.md").read_text())}
    assert shown == set(typer.main.get_command(app).commands)


def test_the_reader_finds_commands_in_loops_pipes_and_continuations() -> None:
    page = (
        "```sh\n"
        "for n in 0 1; do\n"
        "  .venv/bin/omni-cpu serve --model m \\\n      --replica $n --port $((8000 + n)) &\n"
        "done\n"
        "omni-cpu probe --json | jq .facts   # a comment\n"
        "```\n"
        "```python\nomni-cpu not-shell\n```\n"
    )
    assert omni_cpu_commands(page) == [
        ["serve", "--model", "m", "--replica", "1", "--port", "1"],
        ["probe", "--json"],
    ]


def test_a_wrong_option_or_value_is_refused_by_the_parser() -> None:
    parsed = parse(["export", "k8s", "--profile", "p.yaml", "--replicas", "2"])
    assert parsed.params["replicas"] == 2
    with pytest.raises(typer.TyperException, match="No such option"):
        parse(["run", "--model", "m", "--no-such-option"])
    with pytest.raises(typer.BadParameter):
        parse(["serve", "--model", "m", "--port", "eighty"])
    with pytest.raises(typer.TyperException, match="No such command"):
        parse(["synthesize", "--model", "m"])


# --- Links ----------------------------------------------------------------------

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def anchor(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    without_code = re.sub(r"^```.*?^```", "", markdown, flags=re.MULTILINE | re.DOTALL)
    return {anchor(h) for h in re.findall(r"^#+ (.+)$", without_code, re.MULTILINE)}


def broken_links(page: Path) -> list[str]:
    broken = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not this repository's
        path, _, fragment = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (
            fragment and linked.suffix == ".md" and fragment not in anchors(linked.read_text())
        ):
            broken.append(target)
    return broken


@pytest.mark.parametrize("page", LINKED, ids=lambda page: str(page.relative_to(REPO)))
def test_every_relative_link_points_at_a_file_and_heading_that_exist(page: Path) -> None:
    assert broken_links(page) == []


def test_the_link_check_sees_a_missing_file_and_a_missing_heading(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# A heading, with `code`\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md#a-heading-with-code) [web](https://example.com) ![img](x.png)\n"
        "[gone](missing.md) [no heading](other.md#nowhere) [here](#top)\n# Top\n"
    )
    assert broken_links(page) == ["missing.md", "other.md#nowhere"]


# --- Nothing points outside the repository --------------------------------------

# ../shared is this project's workbench, not part of a user's clone; issue numbers are
# internal; a clock time cites a moment of the dated log instead of its heading.
OUTSIDE = {
    "a path outside the repository": re.compile(r"\.\./shared"),
    "an internal issue number": re.compile(r"\bissues? #?\d+", re.IGNORECASE),
    "a clock time": re.compile(r"\b[0-2][0-9]:[0-5][0-9]\b"),
}
READ_BY_USERS = [
    *sorted(
        path
        for path in (REPO / "omni_cpu").rglob("*")
        if path.suffix in {".py", ".md", ".cpp", ".h"}
    ),
    *PAGES,
    REPO / "CHANGELOG.md",
]


def outside_references(text: str) -> list[str]:
    return [
        f"line {number}: {what}: {line.strip()}"
        for number, line in enumerate(text.splitlines(), 1)
        for what, pattern in OUTSIDE.items()
        if pattern.search(line)
    ]


def test_the_package_and_its_docs_stand_on_their_own() -> None:
    found = [
        f"{path.relative_to(REPO)} {reference}"
        for path in READ_BY_USERS
        for reference in outside_references(path.read_text())
    ]
    assert found == []


def test_the_check_sees_each_kind_of_outside_reference() -> None:
    text = "see ../shared/DESIGN.md\nas issue 21 said\nmeasured at 21:05\nport 127.0.0.1:8000\n"
    assert [line.split(":")[1].strip() for line in outside_references(text)] == [
        "a path outside the repository",
        "an internal issue number",
        "a clock time",
    ]


# The dated log and the notes beside it: the same rules, plus no "session" of this project's
# making, on every line but a section's heading, whose date and minute date the runs under it.
BENCHMARK_NOTES = [REPO / "benchmarks" / "RESULTS.md", REPO / "benchmarks" / "README.md"]
IN_THE_LOG = {
    **OUTSIDE,
    "a branch named for an issue": re.compile(r"\bissue-\d+", re.IGNORECASE),
    "a session": re.compile(r"\bsessions?\b", re.IGNORECASE),
}


def log_references(text: str) -> list[str]:
    """What `outside_references` finds, for the dated log: a heading may carry its time."""
    found = []
    in_code = False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("```"):
            in_code = not in_code
        heading = not in_code and re.match(r"#{1,6} ", line) is not None
        found += [
            f"line {number}: {what}: {line.strip()}"
            for what, pattern in IN_THE_LOG.items()
            if pattern.search(line) and not (heading and what == "a clock time")
        ]
    return found


@pytest.mark.parametrize("notes", BENCHMARK_NOTES, ids=lambda path: path.name)
def test_the_dated_log_and_its_notes_stand_on_their_own(notes: Path) -> None:
    assert log_references(notes.read_text()) == []


def test_the_log_check_lets_a_heading_carry_its_time_and_nothing_else() -> None:
    text = (
        "## 2026-12-01 21:05 UTC: the kernels\n"
        "measured at 21:05\n"
        "## 2026-12-02: issue 7's targets\n"
        "on branch issue-11, this session\n"
        "```sh\n# 21:06: not a heading\n```\n"
    )
    assert [line.split(":")[1].strip() for line in log_references(text)] == [
        "a clock time",
        "an internal issue number",
        "a branch named for an issue",
        "a session",
        "a clock time",
    ]


# --- Citations of the dated log --------------------------------------------------

RESULTS = REPO / "benchmarks" / "RESULTS.md"
# `RESULTS.md, "title words"` (or `RESULTS.md ("...`, `RESULTS.md, the sections "...`).
CITATION = re.compile(r'RESULTS(?:\.md)?[,:]?\s+(?:the sections?\s+)?\(?"([^"]+)"')


def words(text: str) -> str:
    """Lower-case words only: a citation wrapped over comment lines still reads the same."""
    text = re.sub(r"\n\s*#", " ", text)
    return " ".join(re.sub(r"[^\w\s-]", " ", text.lower()).split())


def uncited(text: str, headings: list[str]) -> list[str]:
    """The titles `text` cites that no heading of the dated log contains."""
    return [
        title
        for title in CITATION.findall(text)
        if not any(words(title) in heading for heading in headings)
    ]


def test_every_cited_results_heading_exists() -> None:
    headings = [words(line) for line in RESULTS.read_text().splitlines() if line.startswith("#")]
    found = [
        f"{path.relative_to(REPO)}: {title}"
        for path in READ_BY_USERS
        for title in uncited(path.read_text(), headings)
    ]
    assert found == []


def test_a_citation_wrapped_over_comment_lines_is_read_whole() -> None:
    text = '# see RESULTS.md, "Limits with the\n# arithmetic" and RESULTS.md, "Gone"\n'
    assert uncited(text, [words("### Limits with the arithmetic")]) == ["Gone"]


# --- What the README claims about the CLI and the machine ------------------------------------

README = REPO / "README.md"


def _click(command: list[str]):
    click_command = typer.main.get_command(app)
    for name in command:
        click_command = click_command.commands[name]  # type: ignore[attr-defined]
    return click_command


def _leaf_commands(group=None, prefix=()) -> list[list[str]]:
    group = group or typer.main.get_command(app)
    found = []
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        if hasattr(command, "commands"):
            found.extend(_leaf_commands(command, (*prefix, name)))
        else:
            found.append([*prefix, name])
    return found


def test_every_command_without_json_is_the_one_the_readme_excuses() -> None:
    text = README.read_text()
    claim = text[text.index("Every command has `--help` with examples") :].split("\n\n")[0]
    for command in _leaf_commands():
        options = {opt for param in _click(command).params for opt in param.opts}
        if "--json" not in options:
            assert f"`{' '.join(command)}` prints YAML" in claim, command


def test_the_memory_table_is_the_planners() -> None:
    from omni_cpu.plan import costs
    from omni_cpu.plan.footprint import footprint_for_model
    from omni_cpu.plan.placement import replica_need_bytes, safety_margin

    columns = [("float32", "model"), ("bfloat16", "model"), ("bfloat16", "int8"),
               ("bfloat16", "int4")]  # fmt: skip
    rows = {
        cells[0]: cells[1:]
        for line in README.read_text().splitlines()
        if (cells := [cell.strip() for cell in line.strip("|").split("|")])[0] in ("0.6B", "1.7B")
    }
    assert set(rows) == {"0.6B", "1.7B"}
    for size, cells in rows.items():
        footprint = footprint_for_model(size.lower())
        for (dtype, weights), cell in zip(columns, cells, strict=True):
            need = replica_need_bytes(footprint, dtype, weights)
            assert cell == f"{(need + safety_margin(need)) / costs.GIB:.1f} GiB", (size, dtype)


def test_the_knobs_the_readme_names_are_user_knobs() -> None:
    from omni_cpu import envs

    named = set(re.findall(r"\bOMNI_CPU_[A-Z_]+\b", README.read_text()))
    assert named
    for name in named:
        assert envs.KNOBS[name].audience == "user", name


def test_the_docs_name_the_server_vllm_omni_s_cli_starts() -> None:
    """`serve` runs vLLM-Omni's CLI main (`vllm-omni serve`), not vLLM's own `vllm serve`."""
    from omni_cpu.cli.serve_cmd import SERVE_HELP

    assert "vllm-omni serve" in SERVE_HELP
    for page in PAGES:
        assert not re.search(r"(?<![\w-])vllm serve\b", page.read_text()), page.name


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_commands_on_random_checkpoints_are_bounded(page: Path) -> None:
    """A random checkpoint never stops by itself: each run/serve on one names a frame count."""
    for args in omni_cpu_commands(page.read_text()):
        model = args[args.index("--model") + 1] if "--model" in args else ""
        if args[0] in ("run", "serve") and model.startswith("checkpoints/"):
            assert "--max-frames" in args or "--dry-run" in args, args
