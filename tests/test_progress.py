"""Long operator commands show progress: a bar on a terminal, plain lines in a log."""

import io

from bot.progress import Progress


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_plain_lines_every_tenth_and_at_the_end():
    out = io.StringIO()
    progress = Progress("importing", out)
    for done in range(0, 1001, 7):
        progress(done, 1000)
    progress(1000, 1000)
    lines = out.getvalue().splitlines()
    assert lines[0] == "importing: 0 of 1,000 (0%)"
    assert lines[-1] == "importing: 1,000 of 1,000 (100%)"
    assert 10 <= len(lines) <= 12 and "\r" not in out.getvalue()


def test_a_terminal_gets_one_line_redrawn_and_ended():
    out = Terminal()
    progress = Progress("re-embedding passages", out)
    progress(0, 50)
    progress(50, 50)
    text = out.getvalue()
    assert text.count("\n") == 1 and text.endswith("50/50 (100%)\n")
    assert text.startswith("\rre-embedding passages ")


def test_nothing_to_do_is_complete_at_once():
    out = io.StringIO()
    Progress("importing", out)(0, 0)
    assert out.getvalue() == "importing: 0 of 0 (100%)\n"
