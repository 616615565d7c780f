"""Exit codes and failure handling at the CLI boundary."""

from __future__ import annotations


def test_a_closed_stdout_pipe_ends_a_command_quietly():
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from shelly_dist.cli.errors import run_async\n"
        "async def main():\n"
        "    for i in range(100000):\n"
        "        print('line', i)\n"
        "run_async(main())\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None and proc.stdout.readline().startswith(b"line 0")
    proc.stdout.close()
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and b"Broken pipe" not in err
