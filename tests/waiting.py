"""How long a test waits for a process, a file or a future before calling it hung.

Never a statement about speed: no test asserts that something finished within a time.
These limits only turn a hang into a failure instead of a stuck suite, so they are
generous enough for a machine at load 10 (two copies of the suite side by side on two
cores) to pass.
"""

from __future__ import annotations

# A process that should end on its own (a lock holder told to let go, a probe, a CLI
# command that refuses at once): seconds before it counts as hung.
HANG_SECONDS = 600
