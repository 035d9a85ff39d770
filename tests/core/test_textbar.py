"""The shell progress bar (mulosd_core.textbar), used by the demo and the benchmark."""
import io

from mulosd_core.textbar import WIDTH, TextBar


def test_lines_into_a_file_and_the_bar_fills():
    out = io.StringIO()
    bar = TextBar(40, label="ar", stream=out)
    for i in range(40):
        bar.step(f"sample {i}")
    lines = out.getvalue().splitlines()
    assert len(lines) == 20                                  # every twentieth step into a file, the last included
    assert lines[0].startswith("[ar] [" + "#" * (WIDTH // 20) + "-") and " 2/40 sample 1 " in lines[0]
    assert lines[-1].startswith("[ar] [" + "#" * WIDTH + "] 40/40 sample 39 elapsed ")


def test_disabled_writes_nothing_and_a_terminal_redraws_one_line():
    out = io.StringIO()
    bar = TextBar(3, enabled=False, stream=out)
    bar.step("x")
    assert out.getvalue() == "" and bar.done == 1

    class Tty(io.StringIO):
        def isatty(self):
            return True
    tty = Tty()
    bar = TextBar(3, label="mulo", stream=tty)
    for _ in range(3):
        bar.step()
    text = tty.getvalue()
    assert text.count("\r") == 3 and text.endswith("\n") and text.count("\n") == 1
