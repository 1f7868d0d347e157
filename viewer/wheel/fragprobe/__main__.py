"""``python -m fragprobe ARGS``: runs the native ``fragprobe ARGS`` in this process."""

import os
import sys

from . import binary


def main():
    exe = binary()
    # exec, not a child: signals, the exit status and the process id stay the command's own
    os.execv(exe, [exe] + sys.argv[1:])


if __name__ == "__main__":
    main()
